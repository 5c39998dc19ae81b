#!/usr/bin/env bash
# Issue 3 on a GPU machine (through bench/gpu_smoke.sh): unpack a carried archive (.evo/evo.db.gz), sweep the
# large shapes of shapes/bench.yaml (neighbour winners seed each), then the side-by-side benchmark of all of it.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
[ -f .evo/evo.db.gz ] && gunzip -c .evo/evo.db.gz > .evo/evo.db
timeout 420 python3 -m evo.sweep --shapes shapes/bench.yaml --limit-shapes 3 --budget-minutes-per-shape "${BUDGET:-1.5}" > "$OUT/sweep.log" 2>&1
echo "sweep rc $?"; grep -v "^  [0-9a-f]\{10\} \|^\[gen" "$OUT/sweep.log" | tail -30
gzip -c .evo/evo.db > "$OUT/evo.db.gz"
timeout 170 python3 -m bench.compare --shapes shapes/bench.yaml --out-dir "$OUT" 2>&1 | tail -40
