#!/usr/bin/env bash
# Issue 3 on a GPU machine (through bench/gpu_smoke.sh): unpack a carried archive (.evo/evo.db.gz), search (or
# resume) the large shapes of shapes/bench.yaml, BUDGET minutes each, then the side-by-side benchmark of the set.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
[ -f .evo/evo.db.gz ] && gunzip -c .evo/evo.db.gz > .evo/evo.db
for s in 4096x4096x1024 4096x4096x4096 8192x8192x8192; do
  timeout 200 python3 -m evo.search --shape $s --budget-minutes "${BUDGET:-1.5}" > "$OUT/search_$s.log" 2>&1
  echo "== $s (rc $?)"; grep -v "^  [0-9a-f]\{10\} \|^\[gen" "$OUT/search_$s.log" | tail -8
  gzip -c .evo/evo.db > "$OUT/evo.db.gz"
done
timeout 170 python3 -m bench.compare --shapes shapes/bench.yaml --out-dir "$OUT" 2>&1 | tail -40
