#!/usr/bin/env bash
# Issue 3 on a GPU machine (through bench/gpu_smoke.sh): search each shape given, one after another,
# BUDGET minutes each (default 1.5), then leave the archive in $OUT/evo.db.gz so a later call can carry it
# back as .evo/evo.db (searches resume from it; bench.compare reads the champions from it).
#   bash bench/gpu_smoke.sh bash bench/issue3_search.sh 64x4096x4096 128x128x16384 ...
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
for s in "$@"; do
  timeout 400 python3 -m evo.search --shape "$s" --budget-minutes "${BUDGET:-1.5}" > "$OUT/search_$s.log" 2>&1
  echo "== $s (rc $?)"
  grep -v "^  [0-9a-f]\{10\} \|^\[gen" "$OUT/search_$s.log" | tail -9
  gzip -c .evo/evo.db > "$OUT/evo.db.gz"  # after every shape: a killed call still leaves what it finished
done
