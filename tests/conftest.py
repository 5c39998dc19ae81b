import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def _gpu_visible() -> bool:
    code = "import cupy; import sys; sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)"
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    except Exception:
        return False


HAVE_GPU = _gpu_visible()
HAVE_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU visible")
    skip_nvcc = pytest.mark.skip(reason="nvcc not found")
    for item in items:
        if "gpu" in item.keywords and not HAVE_GPU:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAVE_NVCC:
            item.add_marker(skip_nvcc)


@pytest.fixture
def cfg(tmp_path):
    from evo.config import load_config

    return load_config(overrides={"paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out")},
                                  "compile": {"cache_dir": str(tmp_path / "cache")}})


@pytest.fixture
def naive_source():
    return (DATA / "naive.cu").read_text()


def gpu_worker_session(tmp, reps: int):
    """A started GPU worker, the compiler and the config, for the module-scoped `gpu` fixtures of the GPU tests."""
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.worker import GpuWorker

    cfg = load_config(overrides={"paths": {"db": str(tmp / "evo.db"), "out": str(tmp / "out")},
                                 "compile": {"cache_dir": str(tmp / "cache")}, "timing": {"timeout_s": 60, "reps": reps}})
    w = GpuWorker(cfg)
    w.start()
    try:
        yield w, Compiler.from_config(cfg.compile), cfg
    finally:
        w.stop()
