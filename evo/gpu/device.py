"""Describe the visible GPU (runs inside the worker)."""
from __future__ import annotations

from ..errors import NoGpuError
from ..problem import GpuInfo, arch_for_cc
from .gpu_state import bus_id_of


def _driver_version() -> str:
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        import cupy

        v = cupy.cuda.runtime.driverGetVersion()
        return f"cuda-driver-api {v // 1000}.{v % 1000 // 10}"


COMPILE_ONLY_HINT = "use --compile-only to build kernels without one"  # only where the command has that flag


def _no_gpu(why: str, hint: str = "") -> NoGpuError:
    return NoGpuError(f"no CUDA GPU is visible ({why})" + (f"; {hint}" if hint else ""))


def require_gpu(hint: str = "") -> None:
    """Fail fast, in the calling process, when no CUDA GPU can be used: asks the driver library
    directly (no CUDA context is created, cupy is not imported), so a machine without a GPU or a
    driver gets one clear line before any worker is started."""
    import ctypes
    import os

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1", "none", "NoDevFiles"):
        raise _no_gpu(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}", hint)
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise _no_gpu("no NVIDIA driver: libcuda.so.1 is not installed", hint) from None
    rc = lib.cuInit(0)
    if rc != 0:
        raise _no_gpu(f"the driver refused to start: cuInit error {rc}" + (", no CUDA-capable device" if rc == 100 else ""),
                      hint)
    n = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        raise _no_gpu("the driver reports 0 devices", hint)


def gpu_info(device_id: int = 0, hint: str = "") -> GpuInfo:
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, CUDARuntimeError (no driver), ...
        raise _no_gpu(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}", hint) from None
    if n == 0:
        raise _no_gpu("the runtime reports 0 devices", hint)
    cupy.cuda.Device(device_id).use()
    p = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    rt = cupy.cuda.runtime.runtimeGetVersion()
    return GpuInfo(
        name=name,
        arch=arch_for_cc(p["major"], p["minor"]),
        cc=(p["major"], p["minor"]),
        sm_count=p["multiProcessorCount"],
        l2_bytes=p["l2CacheSize"],
        smem_per_block_optin=p.get("sharedMemPerBlockOptin", 48 * 1024),
        driver=_driver_version(),
        cuda_runtime=f"{rt // 1000}.{rt % 1000 // 10}",
        extra={"cupy": cupy.__version__, "clock_khz": p.get("clockRate", 0), "pci_bus_id": bus_id_of(p)},
    )
