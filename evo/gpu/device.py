"""Describe the visible GPU (runs inside the worker)."""
from __future__ import annotations

from ..errors import NoGpuError
from ..problem import GpuInfo, arch_for_cc


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


def gpu_info(device_id: int = 0) -> GpuInfo:
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # ImportError, CUDARuntimeError (no driver), ...
        raise NoGpuError(f"no CUDA GPU is visible ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}); "
                         "use --compile-only to build kernels without one") from None
    if n == 0:
        raise NoGpuError("no CUDA GPU is visible; use --compile-only to build kernels without one")
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
        extra={"cupy": cupy.__version__, "clock_khz": p.get("clockRate", 0)},
    )
