#!/usr/bin/env bash
# One device call (about 4 minutes on an H200): the host-launch GPU tests, then every cutlass_sm90 smoke instance
# and its runtime variants checked and timed side by side with cuBLAS / cuBLASLt on 4096x4096x1024, 512x2048x4096,
# 256x1024x8192, 64x4096x4096 and two off-tile shapes. Logs under $OUT (default: the current folder).
#   bash bench/gpu_smoke.sh bash bench/cutlass_validate.sh
set -u
OUT=${OUT:-.}
mkdir -p "$OUT"
timeout 90 python3 -m pytest -q -m gpu tests/test_host_launch.py > "$OUT/pytest_host.log" 2>&1
echo "host-launch GPU tests: $(tail -1 "$OUT/pytest_host.log")"
timeout 300 python3 -m bench.cutlass_smoke --jobs 16 --reps 30 --out "$OUT" \
  --shapes 4096x4096x1024,512x2048x4096,256x1024x8192,64x4096x4096,77x200x72,1000x1000x1000 > "$OUT/smoke.log" 2>&1
echo "smoke exit code $?"
grep -v '^  [a-z0-9]*\.\(rN\|sw4\|dp\|sk\|split8\) ' "$OUT/smoke.log"
