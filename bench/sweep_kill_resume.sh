#!/usr/bin/env bash
# One device call: a 24-shape sweep killed midway and resumed, an idempotent rerun, dispatch
# checked against fp32 on the table's shapes and 5 others, and the report. Small per-shape budgets.
set -u
export PYTHONUNBUFFERED=1
printf 'check: {sanitize: false}\nsearch: {initial_random: 1}\n' > /tmp/sweep.yaml
args=(--shapes shapes/sample24.yaml --config /tmp/sweep.yaml --db .evo/sweep.db --out kernels_out_sweep
      --families mma_sm80,wgmma_sm90,wgmma_skinny_sm90 --max-candidates-per-shape ${NCAND:-3} --budget-minutes-per-shape 0.5)
t0=$(date +%s)
timeout -s KILL ${KILL_AFTER:-90} python3 -m evo.sweep "${args[@]}"; echo "first run rc=$? (killed with SIGKILL after ${KILL_AFTER:-90} s)"
python3 -m evo.sweep "${args[@]}"; echo "resumed run rc=$?"
echo "sweep GPU wall seconds: $(( $(date +%s) - t0 ))"
python3 -m evo.sweep "${args[@]}" | tail -3; echo "rerun rc=$?"
EVO_KERNELS=kernels_out_sweep timeout 120 python3 -m pytest -m gpu -s -q tests/test_dispatch_gpu.py 2>&1 | tail -12
timeout 60 python3 -m evo.report --db .evo/sweep.db --out kernels_out_sweep 2>&1 | tail -3
if [ -n "${OUT:-}" ]; then gzip -c .evo/sweep.db > "$OUT/sweep.db.gz"; tar czf "$OUT/kernels_out_sweep.tgz" kernels_out_sweep; fi
