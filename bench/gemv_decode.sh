#!/usr/bin/env bash
# The gemv_sm80 family on a GPU machine (through bench/gpu_smoke.sh): its GPU tests, then a short search of each
# decode shape (shapes/decode.yaml) against wgmma_sm90 and the side-by-side benchmark of the set.
set -u
timeout 150 python3 -m pytest -q -m gpu tests/test_family_gemv.py 2>&1 | tail -5
bash "$(dirname "$0")/search_compare.sh" shapes/decode.yaml gemv_sm80,wgmma_sm90
