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
python3 -c "import cupy, nvmath, optuna, openai; print('cupy', cupy.__version__, 'nvmath', nvmath.__version__)"
"$@"
