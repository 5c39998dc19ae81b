"""A fresh CUDA module per phase: a kernel's ``__device__`` globals never outlive the phase that loaded it.

``cupy.RawModule(path=...)`` memoizes the loaded module by path for the whole process, so a
cubin's ``__device__`` globals (a launch counter, a results cache) survived check, timing,
baselines, other shapes and the re-check. :class:`FreshModule` calls ``cuModuleLoad`` itself
every time and ``cuModuleUnload`` on :meth:`close`, so each phase starts from the cubin's initial
image. :class:`FreshKernel` gives a phase-scoped launcher built by any loader (the worker's
``LoadedKernel``, or a host-launched library's own loader) and closes it when the phase ends.

Runs inside the GPU worker (imports cupy).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Generic, Iterator, TypeVar

import cupy

from ..errors import EvoError

from .host_launch import CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES
from .host_launch import CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK as ATTR_MAX_THREADS_PER_BLOCK
from .host_launch import CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED as ATTR_NON_PORTABLE_CLUSTER
from .host_launch import CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH as ATTR_CLUSTER_WIDTH
from .host_launch import CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES as ATTR_SHARED_SIZE_BYTES


class FreshModule:
    """One ``cuModuleLoad`` of a cubin, owned by this object: its own copy of every ``__device__`` global."""

    def __init__(self, cubin_path: str):
        self.path = cubin_path
        self._module: cupy.cuda.function.Module | None = cupy.cuda.function.Module()
        try:
            self._module.load_file(cubin_path)
        except cupy.cuda.driver.CUDADriverError as e:
            self._module = None
            raise EvoError(f"cannot load the cubin {cubin_path}: {e}") from None

    def function(self, name: str) -> "ModuleFunction":
        if self._module is None:
            raise EvoError(f"module {self.path} was unloaded")
        try:
            return ModuleFunction(self._module.get_function(name))
        except cupy.cuda.driver.CUDADriverError as e:
            raise EvoError(f"cannot load {name} from the cubin: {e}") from None

    def close(self) -> None:
        """Unload the module (the driver frees its globals). Functions taken from it keep a reference to the
        cupy Module object, so the unload happens when the last of them is dropped too."""
        self._module = None

    @property
    def closed(self) -> bool:
        return self._module is None


def required_cluster_size(fn_ptr: int) -> int:
    """CTAs per cluster a kernel fixed at compile time (``__cluster_dims__``); 1 without (or before sm_90)."""
    size = 1
    for attr in range(ATTR_CLUSTER_WIDTH, ATTR_CLUSTER_WIDTH + 3):
        try:
            size *= max(int(cupy.cuda.driver.funcGetAttribute(attr, fn_ptr)), 1)
        except cupy.cuda.driver.CUDADriverError:
            return 1
    return size


def allow_large_cluster(fn_ptr: int) -> None:
    """Opt a kernel whose cluster has more than 8 CTAs (non-portable; Hopper runs 16 where a GPC has the SMs
    free) in to launching; raises EvoError if the driver refuses."""
    size = required_cluster_size(fn_ptr)
    if size <= 8:
        return
    try:
        cupy.cuda.driver.funcSetAttribute(fn_ptr, ATTR_NON_PORTABLE_CLUSTER, 1)
    except cupy.cuda.driver.CUDADriverError as e:
        raise EvoError(f"cannot allow a cluster of {size} CTAs: {e}") from None


class ModuleFunction:
    """A kernel of a FreshModule, with the attributes the launcher needs (RawKernel-like)."""

    def __init__(self, fn: cupy.cuda.function.Function):
        self.fn = fn

    def _get(self, attr: int) -> int:
        return int(cupy.cuda.driver.funcGetAttribute(attr, self.fn.ptr))

    @property
    def shared_size_bytes(self) -> int:
        return self._get(ATTR_SHARED_SIZE_BYTES)

    @property
    def max_threads_per_block(self) -> int:
        return self._get(ATTR_MAX_THREADS_PER_BLOCK)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._get(ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        cupy.cuda.driver.funcSetAttribute(self.fn.ptr, ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(value))


K = TypeVar("K")


class FreshKernel(Generic[K]):
    """A kernel that is loaded anew for every phase (check, timing, re-check, ...).

    ``load`` builds a launcher from scratch (a new module and a new zeroed workspace); the launcher may have a
    ``close()``. ``with fk.phase("timing") as k: ...`` yields a fresh launcher and closes it afterwards, so
    nothing a kernel stores in its module or workspace during one phase is visible in the next."""

    def __init__(self, load: Callable[[], K], shared: bool = False):
        """shared: load once and hand the same launcher to every phase, never closed (the behaviour before
        fresh modules; only for showing that a test fails without them)."""
        self.load = load
        self.shared = shared
        self._one: K | None = None
        self.phases: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[K]:
        self.phases.append(name)
        if self.shared:
            if self._one is None:
                self._one = self.load()
            yield self._one
            return
        k = self.load()
        try:
            yield k
        finally:
            close = getattr(k, "close", None)
            if close is not None:
                close()
