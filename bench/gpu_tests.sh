#!/usr/bin/env bash
# Every GPU-marked test, in two halves that each fit one 10-minute device call (through bench/gpu_smoke.sh):
#   bench/gpu_smoke.sh bash bench/gpu_tests.sh 1    # pipeline + timing; dispatch + GPU state (~5 min on an H200 host)
#   bench/gpu_smoke.sh bash bench/gpu_tests.sh 2    # every other file marked gpu (~5.5 min)
#   bench/gpu_smoke.sh bash bench/gpu_tests.sh      # both
# Half 1 compiles the kernel table's kernels (Dispatcher.precompile: the evo rows' and the measured ties', ~300 on the
# H200 table, 131 s on 16 cores) in the background under nice while the pipeline tests run, so the dispatch tests'
# fixture finds them cached (alone, that precompile outlasted 160 s of a call). Logs under $OUT (default /tmp); one
# summary line per group; the exit status is the first failing group's.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
PART=${1:-all}
rc=0
group() {  # name, timeout seconds, test files...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" python3 -m pytest -q -m gpu -rs -p no:cacheprovider --durations=5 "$@" > "$OUT/gpu_tests_$name.log" 2>&1
  local r=$?
  echo "gpu tests $name: rc $r in $(( $(date +%s) - t0 )) s, $(tail -1 "$OUT/gpu_tests_$name.log")"
  [ "$rc" = 0 ] && rc=$r
}
FIRST="tests/test_gpu_pipeline.py tests/test_timing_gpu.py tests/test_dispatch_gpu.py tests/test_gpu_state.py"
if [ "$PART" = 1 ] || [ "$PART" = all ]; then
  nice -n 15 python3 -c "
import time
from pathlib import Path
from evo.dispatch import CupyBackend, Dispatcher
t = time.monotonic(); be = CupyBackend()
table = Path('kernels_out') / be.gpu_key
if (table / 'table.json').is_file():
    e = Dispatcher.load(table, backend=be).precompile()
    print(f'precompiled the table kernels in {time.monotonic() - t:.0f} s, {len(e)} did not compile', *e, sep='\n')
" > "$OUT/gpu_tests_precompile.log" 2>&1 &
  pc=$!
  group pipeline 330 tests/test_gpu_pipeline.py tests/test_timing_gpu.py
  wait $pc; tail -1 "$OUT/gpu_tests_precompile.log"
  group dispatch 200 tests/test_dispatch_gpu.py tests/test_gpu_state.py
fi
if [ "$PART" = 2 ] || [ "$PART" = all ]; then
  rest=$(grep -l "mark.gpu" tests/test_*.py | grep -v -F -x -f <(tr ' ' '\n' <<< "$FIRST"))
  group rest 500 $rest
fi
exit $rc
