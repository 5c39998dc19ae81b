#!/usr/bin/env bash
# One device call: finish (or resume) the 128x128x16384 search, re-check its winner with evo.evaluate, run the
# LLM path against the scripted server, then the GPU test suites. Archive and table end up in $OUT.
set -u
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 -m evo.search --shape 128x128x16384 --budget-minutes 2 2>&1 | tee ${OUT:-/tmp}/search_128.log | grep -v "^  [0-9a-f]\{10\} \|^\[gen"
timeout 60 python3 -m evo.evaluate kernels_out/*/TN/128x128x16384.cu --shape 128x128x16384 --reps 50
echo "GPU wall seconds (128x128x16384 search + evaluate): $(( $(date +%s) - t0 ))"
python3 -m evo.testing.fake_llm --demo --port 8011 > ${OUT:-/tmp}/fake_llm.log 2>&1 &
srv=$!
export EVO_LLM_API_KEY=EMPTY
printf 'llm:\n  endpoints: [{base_url: "http://127.0.0.1:8011/v1", model: fake}]\n  backoff_s: 0.1\n' > /tmp/fake-llm.yaml
sleep 2
timeout 120 python3 -m evo.search --shape 4096x4096x1024 --config /tmp/fake-llm.yaml --proposer llm,mutate --max-candidates 16 --budget-minutes 1.5 2>&1 | tee ${OUT:-/tmp}/search_llm.log | tail -25
kill $srv
timeout 230 python3 -m pytest -q -m gpu -x tests/test_gpu_pipeline.py tests/test_cheats_gpu.py 2>&1 | tail -15
[ -n "${OUT:-}" ] && cp .evo/evo.db "$OUT/evo.db" && tar czf "$OUT/kernels_out.tgz" kernels_out
echo done
