#!/usr/bin/env bash
# The evaluator's defences on a GPU: every cheat test with all defences on (must pass), then each test with its
# defence switched off (must fail: the cheat gets through). Logs under ${OUT:-/tmp}. docs/evaluator.md.
#   bash bench/gpu_smoke.sh bash bench/eval_defences.sh
set -u
OUT=${OUT:-/tmp}
P="python -m pytest -q --tb=line -rfE -p no:cacheprovider tests/test_cheats_gpu.py"
bad=0
$P > "$OUT/defences_on.txt" 2>&1 || { echo "FAIL: a cheat test failed with every defence on"; bad=1; }
tail -1 "$OUT/defences_on.txt"
grep -E "^FAILED" "$OUT/defences_on.txt" | cut -c1-300
for pair in "fresh_inputs:class1" "random_checks:class2" "tight_bound:class3 or class4" "roofline:class5" \
            "fresh_module:class6" "ptx_checks:class7" "sanitizer_padding:class8_memcheck"; do
  d=${pair%%:*}; k=${pair#*:}
  if EVO_TEST_DEFENCES_OFF=$d $P -k "$k" > "$OUT/off_$d.txt" 2>&1; then
    echo "FAIL: with $d off, '$k' still passed (the defence is not what rejects its cheat)"; bad=1
  else
    echo "ok: with $d off, '$k' fails: $(grep -E -m1 '^E ' "$OUT/off_$d.txt" | cut -c1-240)"
  fi
done
exit $bad
