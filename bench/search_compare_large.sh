#!/usr/bin/env bash
# On a GPU machine (through bench/gpu_smoke.sh): search (or resume) the large shapes of shapes/bench.yaml,
# BUDGET minutes each (1.5), then the side-by-side benchmark of the whole set (bench/search_compare.sh).
set -u
ONLY="4096x4096x1024 4096x4096x4096 8192x8192x8192" BUDGET=${BUDGET:-1.5} SEARCH_TIMEOUT=200 COMPARE_TIMEOUT=170 \
  bash "$(dirname "$0")/search_compare.sh" shapes/bench.yaml
