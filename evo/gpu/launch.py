"""Load a compiled candidate and launch it by the ABI (runs inside the worker)."""
from __future__ import annotations

import ctypes

import cupy

from ..errors import EvoError
from ..kernel import ENTRY, KernelSource, LaunchSpec
from ..problem import Problem
from .host_launch import HostGeometry, abi_parameters, driver, error_name, launch_config
from .module import FreshModule, ModuleFunction, allow_large_cluster


# driver errors of a launch that was refused before it ran; the context stays usable
_LAUNCH_REFUSED = ("CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_RESOURCES", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                   "CUDA_ERROR_INVALID_CONFIGURATION", "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_INVALID_IMAGE",
                   "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
                   "CUDA_ERROR_INVALID_CLUSTER_SIZE", "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")


MAP_CACHE = 8  # tensor-map sets kept per kernel: encoding them is host work that must stay out of timed windows


class LoadedKernel:
    """A candidate's cubin loaded for one problem, with its workspace."""

    def __init__(self, ks: KernelSource, cubin_path: str, problem: Problem, num_sms: int, smem_limit: int,
                 fresh: bool = True):
        """fresh: load the cubin into a module of its own (evo.gpu.module.FreshModule: new ``__device__``
        globals, unloaded by close()); False shares cupy's per-process module cache (the old behaviour)."""
        self.ks = ks
        self.problem = problem
        self.spec: LaunchSpec = ks.launch(problem, num_sms)
        if self.spec.smem > smem_limit:
            raise EvoError(f"needs {self.spec.smem} bytes of shared memory; the GPU allows {smem_limit}")
        threads = self.spec.block[0] * self.spec.block[1] * self.spec.block[2]
        if threads > 1024:
            raise EvoError(f"block of {threads} threads exceeds 1024")
        if fresh:
            self.module = FreshModule(cubin_path)
            self.fn = self.module.function(ENTRY)
        else:
            self.module = cupy.RawModule(path=cubin_path)
        try:
            if not fresh:  # the RawKernel's driver function, launched like a fresh module's
                self.fn = ModuleFunction(self.module.get_function(ENTRY).kernel)
            static = int(self.fn.shared_size_bytes)
            max_threads = int(self.fn.max_threads_per_block)
        except cupy.cuda.driver.CUDADriverError as e:
            raise EvoError(f"cannot load {ENTRY} from the cubin: {e}") from None
        if static + self.spec.smem > smem_limit:
            raise EvoError(f"needs {static} bytes of static + {self.spec.smem} bytes of dynamic shared memory; "
                           f"the GPU allows {smem_limit} per block")
        if threads > max_threads:
            raise EvoError(f"block of {threads} threads; with its registers the kernel can launch at most {max_threads}")
        if self.spec.smem > 48 * 1024 or static + self.spec.smem > 48 * 1024:  # opt-in past 48 KB in total
            try:
                self.fn.max_dynamic_shared_size_bytes = self.spec.smem
            except cupy.cuda.driver.CUDADriverError as e:
                raise EvoError(f"cannot grant {self.spec.smem} bytes of dynamic shared memory: {e}") from None
        allow_large_cluster(int(self.fn.fn.ptr))
        # the workspace is zeroed once; kernels must leave their counters at zero
        self.workspace = cupy.zeros(max(self.spec.workspace, 16) // 4 + 1, dtype=cupy.float32)
        self._maps: dict[tuple, list] = {}
        self._launches: dict[tuple, tuple] = {}  # launch configs and parameter blocks, by buffers and stream

    def _tensor_maps(self, a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray) -> list:
        if not self.spec.tensor_maps:
            return []
        key = (a.data.ptr, b.data.ptr, c.data.ptr)
        if key not in self._maps:
            from .tensormap import encode_maps

            p = self.problem
            maps = encode_maps(self.spec.tensor_maps, a, b, c, p.m, p.n, p.k)
            if len(self._maps) >= MAP_CACHE:  # callers pass a few buffer sets (check, timing, dispatch); stale maps must not pile up
                self._maps.pop(next(iter(self._maps)))
            self._maps[key] = maps
        return self._maps[key]

    def __call__(self, a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray) -> None:
        """Every launch goes through cuLaunchKernelEx, the parameter block and the launch config built once per
        (A, B, C, stream) and reused: cupy's launch converts its arguments on every call (host microseconds in
        front of small kernels). A cooperative kernel (KernelSource.cooperative) gets the cooperative attribute:
        the driver makes the whole grid resident at once or refuses the launch
        (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE). Not cupy's cooperative launch, which queries the occupancy on
        every call and silently shrinks a one-dimensional grid that does not fit."""
        stream = cupy.cuda.get_current_stream().ptr
        key = (a.data.ptr, b.data.ptr, c.data.ptr, stream)
        hit = self._launches.get(key)
        if hit is None:
            p = self.problem
            ptrs, held = abi_parameters(a.data.ptr, b.data.ptr, c.data.ptr, p, self.workspace.data.ptr,
                                        self._tensor_maps(a, b, c))
            g = HostGeometry(0, self.spec.grid, self.spec.block, (1, 1, 1), self.spec.smem, False, 0, ())
            cfg, attrs = launch_config(g, stream, cooperative=self.spec.cooperative)  # a compile-time cluster needs no attribute
            if len(self._launches) >= MAP_CACHE:
                self._launches.pop(next(iter(self._launches)))
            hit = self._launches[key] = (cfg, ptrs, (attrs, held))  # the last: kept alive with the config
        rc = driver().cuLaunchKernelEx(ctypes.byref(hit[0]), int(self.fn.fn.ptr), hit[1], None)
        if rc:
            name = error_name(rc)
            if name in _LAUNCH_REFUSED:
                kind = "cooperative grid" if self.spec.cooperative else "grid"
                raise EvoError(f"launch refused: {name} ({kind} {self.spec.grid}, block {self.spec.block}, "
                               f"smem {self.spec.smem})")
            raise cupy.cuda.driver.CUDADriverError(rc)

    def close(self) -> None:
        """Drop the module (unloaded when fresh) and the workspace: the next phase loads its own."""
        close = getattr(self.module, "close", None)
        if close is not None:
            close()
        self.fn = None
        self.workspace = None
        self._maps.clear()
        self._launches.clear()
