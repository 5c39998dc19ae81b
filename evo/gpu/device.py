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


_NO_GPU = "no CUDA GPU is visible ({}); use --compile-only to build kernels without one"


def require_gpu() -> None:
    """Fail fast, in the calling process, when no CUDA GPU can be used: asks the driver library
    directly (no CUDA context is created, cupy is not imported), so a machine without a GPU or a
    driver gets one clear line before any worker is started."""
    import ctypes
    import os

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1", "none", "NoDevFiles"):
        raise NoGpuError(_NO_GPU.format(f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"))
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise NoGpuError(_NO_GPU.format("no NVIDIA driver: libcuda.so.1 is not installed")) from None
    rc = lib.cuInit(0)
    if rc != 0:
        raise NoGpuError(_NO_GPU.format(f"the driver refused to start: cuInit error {rc}"
                                        + (", no CUDA-capable device" if rc == 100 else "")))
    n = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        raise NoGpuError(_NO_GPU.format("the driver reports 0 devices"))


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
