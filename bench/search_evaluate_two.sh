#!/usr/bin/env bash
# On a GPU machine: two searches (4096x4096x1024, 128x128x16384), each winner re-checked independently with evo.evaluate.
# Leaves the archive and the kernel table in $OUT (when set) so a later call can carry them.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m evo.search --shape 4096x4096x1024 --budget-minutes "${BUDGET1:-5}" 2>&1 | tee ${OUT:-/tmp}/search_4096x4096x1024.log | grep -v "^  [0-9a-f]\{10\} " 
python3 -m evo.evaluate kernels_out/*/TN/4096x4096x1024.cu --shape 4096x4096x1024 --reps 50
t1=$(date +%s)
python3 -m evo.search --shape 128x128x16384 --budget-minutes "${BUDGET2:-5}" 2>&1 | tee ${OUT:-/tmp}/search_128x128x16384.log | grep -v "^  [0-9a-f]\{10\} "
python3 -m evo.evaluate kernels_out/*/TN/128x128x16384.cu --shape 128x128x16384 --reps 50
t2=$(date +%s)
echo "GPU wall minutes: 4096x4096x1024 $(( (t1 - t0) / 60 )).$(( (t1 - t0) % 60 * 10 / 60 )), 128x128x16384 $(( (t2 - t1) / 60 )).$(( (t2 - t1) % 60 * 10 / 60 ))"
if [ -n "${OUT:-}" ]; then
  cp .evo/evo.db "$OUT/evo.db" && tar czf "$OUT/kernels_out.tgz" kernels_out
fi
