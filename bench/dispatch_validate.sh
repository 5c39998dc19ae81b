#!/usr/bin/env bash
# One device call (through bench/gpu_smoke.sh): evo.dispatch and the evo::matmul torch op on the committed kernel
# table of this GPU. First the side-by-side comparison of what dispatch serves against cuBLAS / cuBLASLt over
# shapes/llm.yaml and five shapes not in the table (two from real models that a borrowed kernel once served at
# 0.49x and 0.76x, two next to the table's GEMV winners, one large), then the GPU tests of dispatch and the torch op.
# Logs and dispatch-<GPU>.md under $OUT; the decisions file too. The comparison adds rounds (100 at a time, at most
# 400) until the same call timed twice agrees within 0.5 %; budget: comparison <= 5 min, tests <= 2.5 min.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
export EVO_DISPATCH_DECISIONS="$OUT/dispatch-decisions.json"
timeout "${COMPARE_TIMEOUT:-300}" python3 -m bench.dispatch_compare --shapes shapes/llm.yaml \
  --shape 257x14336x4096 --shape 100x18944x3584 --shape 24x4096x4096 --shape 8x11008x4096 --shape 3000x5000x2048 \
  --reps 100 --max-reps 400 --target-noise 0.005 --out-dir "$OUT" 2>&1 | tee "$OUT/dispatch_compare.log"
echo "dispatch_compare rc=${PIPESTATUS[0]}"
timeout "${TESTS_TIMEOUT:-150}" python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/test_torch_op_gpu.py \
  tests/test_dispatch_gpu.py 2>&1 | tee "$OUT/dispatch_gpu_tests.log"
echo "gpu tests rc=${PIPESTATUS[0]}"
