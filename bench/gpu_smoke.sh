#!/usr/bin/env bash
# One device call: install carried wheels, then a quick end-to-end smoke of the GPU path.
set -u
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
python3 -c "import cupy, nvmath, optuna; print('cupy', cupy.__version__, 'nvmath', nvmath.__version__)"
# openai is imported only by the LLM proposer (a search with an endpoint, its tests): a wheelhouse built without it
# (bench/wheelhouse.sh .whl optuna nvidia-cutlass nvmath-python) is 6 MB smaller
python3 -c "import openai" 2>/dev/null || echo "openai not installed: the LLM proposer's runs and tests will fail or skip here"
"$@"
