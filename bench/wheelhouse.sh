#!/usr/bin/env bash
# Build a folder of wheels for an offline GPU host that runs CPython 3.12 on x86-64 and
# already has numpy, cupy, torch, pyyaml, httpx and friends installed.
#   usage: bench/wheelhouse.sh [DEST=.whl] [PACKAGE ...]
# Default packages: what evo needs beyond that host's own (openai only for the LLM proposer: name the others to
# leave its 6 MB chain out). Wheels the host already has are dropped,
# so its numpy/cupy stay in charge. Install there with:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site DEST/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
dest=${1:-.whl}; shift || true
pkgs=("$@"); [ ${#pkgs[@]} -gt 0 ] || pkgs=(openai optuna nvidia-cutlass nvmath-python)
# what the GPU host ships (lower-case, '-' separated); never carry these
have=" absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
 certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
 cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
 flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
 huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
 jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
 linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
 mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
 numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
 nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
 nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
 onnx-ir onnxruntime onnxscript opencv-python-headless opt-einsum opt-einsum-fx optax optimistix
 orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
 propcache protobuf psutil py-cpuinfo pyarrow pybind11 pygments pyparsing pyproject-hooks pyre-extensions
 pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
 pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
 sentence-transformers sentencepiece setuptools shellingham simplejson six sortedcontainers statsmodels sympy
 tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
 toolz torch torch-geometric torchaudio torchdiffeq torchmetrics torchvision tqdm transformers treescope
 triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash
 yarl zipp "
have=$(echo $have | tr -s '[:space:]' ' '); have=" $have "
mkdir -p "$dest"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plat=(); for n in 17 24 27 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  "${plat[@]}" --platform manylinux2014_x86_64 --platform any -d "$tmp" "${pkgs[@]}"
for w in "$tmp"/*.whl; do
  name=$(basename "$w" | cut -d- -f1 | tr '[:upper:]_.' '[:lower:]--')
  case "$have" in *" $name "*) continue ;; esac
  cp "$w" "$dest"/
done
ls "$dest" | sed 's/^/  /'; du -sh "$dest"
