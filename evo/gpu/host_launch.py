"""Launch a candidate that brings its own host code (front matter ``launch: host``).

Such a candidate is compiled by one nvcc run into ``<key>.so`` (its host functions) beside ``<key>.cubin``
(its device code) in the compile cache. The shared object exports (README, "Host-launched kernels"):

    int evo_host_query(int M, int N, int K, int num_sms, const long long* args, int nargs, EvoHostLaunch* out);
    int evo_host_params(int M, int N, int K, int num_sms, const long long* args, int nargs,
                        const void* A, const void* B, void* C, void* workspace,
                        EvoHostLaunch* out, void* params, int params_cap);

``evo_host_query`` reports the launch geometry and the workspace size; ``evo_host_params`` fills the kernel's
parameter block for concrete pointers (a CUTLASS kernel's ``to_underlying_arguments``: TMA descriptors,
scheduler state) and the workspace ranges to set before every call (stream-K / split-K locks). ``args`` are the
front matter's ``host_args`` evaluated for the problem (runtime choices such as raster order or split count:
instances that differ only there share one compile). Non-zero return: the shape is not supported; ``message``
says why.

The kernel ``evo_gemm`` takes the block by value as its only argument and is launched with the driver's
``cuLaunchKernelEx`` (cluster dimensions, non-portable cluster sizes, optional programmatic dependent launch),
called through ctypes on ``libcuda.so.1`` (no Python dependency beyond cupy). Runs inside the GPU worker;
HostLibrary (the ctypes side of the ABI) needs no GPU and no cupy.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..compile import host_library
from ..errors import EvoError
from ..kernel import ENTRY, KernelSource
from ..problem import Problem

if TYPE_CHECKING:  # (host_sandbox imports this module)
    from .host_sandbox import SandboxSpares

ABI_VERSION = 1
MAX_FILLS = 4
PARAMS_CAP = 64 * 1024  # bytes; the driver limits kernel parameters to 32 KB on Hopper
PARAM_CACHE = 8  # parameter blocks kept per kernel, by (A, B, C) pointers: building them is host work
FAKE_PTR = 1 << 20  # 1 MiB: an aligned, never dereferenced address for the geometry query

# cuda.h
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0  # CUfunction_attribute values (cuda.h), also evo.gpu.module's
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11  # compile-time __cluster_dims__ (0: none); 12, 13: height, depth
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
# driver errors of a launch refused before it ran (the context stays usable)
_REFUSED = (1, 200, 209, 500, 701, 720, 912)  # INVALID_VALUE, INVALID_IMAGE, NO_BINARY_FOR_GPU, NOT_FOUND,
#                                          LAUNCH_OUT_OF_RESOURCES, COOPERATIVE_LAUNCH_TOO_LARGE, INVALID_CLUSTER_SIZE


class EvoHostLaunch(ctypes.Structure):
    """Mirror of the C struct every host-launched candidate fills (tests/data/naive_host.cu)."""

    _fields_ = [
        ("abi", ctypes.c_int),
        ("params_bytes", ctypes.c_int),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("cluster", ctypes.c_uint * 3),
        ("smem", ctypes.c_int),
        ("pdl", ctypes.c_int),
        ("workspace", ctypes.c_longlong),
        ("n_fills", ctypes.c_int),
        ("fill_elem", ctypes.c_int * MAX_FILLS),
        ("fill_offset", ctypes.c_longlong * MAX_FILLS),
        ("fill_count", ctypes.c_longlong * MAX_FILLS),
        ("fill_value", ctypes.c_uint * MAX_FILLS),
        ("message", ctypes.c_char * 160),
    ]


@dataclass(frozen=True)
class Fill:
    """A workspace range set before every call: ``count`` elements of ``elem`` bytes to ``value``."""

    offset: int
    elem: int
    count: int
    value: int


@dataclass(frozen=True)
class HostGeometry:
    params_bytes: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    smem: int
    pdl: bool
    workspace: int
    fills: tuple[Fill, ...]

    @staticmethod
    def from_struct(s: EvoHostLaunch) -> "HostGeometry":
        if s.abi != ABI_VERSION:
            raise EvoError(f"host code reports ABI version {s.abi}; this evo speaks {ABI_VERSION}")
        if not 0 <= s.n_fills <= MAX_FILLS:
            raise EvoError(f"host code reports {s.n_fills} workspace fills (at most {MAX_FILLS})")
        fills = tuple(Fill(int(s.fill_offset[i]), int(s.fill_elem[i]), int(s.fill_count[i]), int(s.fill_value[i]))
                      for i in range(s.n_fills))
        g = HostGeometry(int(s.params_bytes), tuple(s.grid), tuple(s.block), tuple(max(1, c) for c in s.cluster),
                         int(s.smem), bool(s.pdl), int(s.workspace), fills)  # type: ignore[arg-type]
        g.validate()
        return g

    def validate(self) -> None:
        if not 0 < self.params_bytes <= PARAMS_CAP:
            raise EvoError(f"host code reports a parameter block of {self.params_bytes} bytes")
        if min(self.grid) < 1 or min(self.block) < 1:
            raise EvoError(f"host code reports an empty launch: grid={self.grid} block={self.block}")
        for c, g in zip(self.cluster, self.grid):
            if g % c:
                raise EvoError(f"grid {self.grid} is not a multiple of the cluster {self.cluster}")
        for f in self.fills:
            if f.elem not in (1, 2, 4) or f.offset < 0 or f.count < 0 or f.offset + f.elem * f.count > self.workspace:
                raise EvoError(f"host code reports a workspace fill {f} outside its {self.workspace}-byte workspace")


class HostLibrary:
    """The candidate's host shared object, loaded with ctypes (RTLD_LOCAL: its symbols stay its own)."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise EvoError(f"cannot load the host library {path}: {e}") from None
        try:
            self._query = self.lib.evo_host_query
            self._params = self.lib.evo_host_params
        except AttributeError as e:
            raise EvoError(f"host library {path} lacks {e}") from None
        i, ll_p, out_p = ctypes.c_int, ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(EvoHostLaunch)
        self._query.argtypes = [i, i, i, i, ll_p, i, out_p]
        self._query.restype = i
        vp = ctypes.c_void_p
        self._params.argtypes = [i, i, i, i, ll_p, i, vp, vp, vp, vp, out_p, vp, i]
        self._params.restype = i

    @staticmethod
    def _args(args: tuple[int, ...]):
        return (ctypes.c_longlong * max(1, len(args)))(*args)

    def raw_query(self, problem: Problem, num_sms: int, args: tuple[int, ...] = ()) -> tuple[int, EvoHostLaunch]:
        """evo_host_query's return code and struct, unchecked (the sandbox sends them back as they are)."""
        out = EvoHostLaunch()
        rc = self._query(problem.m, problem.n, problem.k, num_sms, self._args(args), len(args), ctypes.byref(out))
        return int(rc), out

    def raw_params(self, problem: Problem, num_sms: int, args: tuple[int, ...], a: int, b: int, c: int,
                   workspace: int) -> tuple[int, EvoHostLaunch, bytes]:
        """evo_host_params's return code, struct and the first params_bytes bytes of its block (at most
        PARAMS_CAP), unchecked."""
        out = EvoHostLaunch()
        buf = ctypes.create_string_buffer(PARAMS_CAP)
        rc = self._params(problem.m, problem.n, problem.k, num_sms, self._args(args), len(args), a, b, c, workspace,
                          ctypes.byref(out), buf, PARAMS_CAP)
        return int(rc), out, buf.raw[:min(max(0, int(out.params_bytes)), PARAMS_CAP)]

    def query(self, problem: Problem, num_sms: int, args: tuple[int, ...] = ()) -> HostGeometry:
        return queried(problem, *self.raw_query(problem, num_sms, args))

    def params(self, problem: Problem, num_sms: int, args: tuple[int, ...], a: int, b: int, c: int,
               workspace: int) -> tuple[HostGeometry, ctypes.Array]:
        """The parameter block (a ctypes buffer of exactly params_bytes) and the geometry for these pointers."""
        return built(problem, *self.raw_params(problem, num_sms, args, a, b, c, workspace))


def queried(problem: Problem, rc: int, out: EvoHostLaunch) -> HostGeometry:
    """The geometry evo_host_query reported, checked; EvoError where it refused the shape or reported nonsense."""
    if rc:
        raise EvoError(f"host code refuses {problem.key}: {out.message.decode(errors='replace') or f'code {rc}'}")
    return HostGeometry.from_struct(out)


def built(problem: Problem, rc: int, out: EvoHostLaunch, raw: bytes) -> tuple[HostGeometry, ctypes.Array]:
    """The geometry and parameter block evo_host_params reported, checked."""
    if rc:
        raise EvoError(f"host code cannot build parameters for {problem.key}: "
                       f"{out.message.decode(errors='replace') or f'code {rc}'}")
    g = HostGeometry.from_struct(out)
    if len(raw) < g.params_bytes:
        raise EvoError(f"host code reports a {g.params_bytes}-byte parameter block but sent {len(raw)} bytes")
    return g, ctypes.create_string_buffer(raw[:g.params_bytes], g.params_bytes)


# ---- the driver, through ctypes -------------------------------------------------------------------------------
class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", _ClusterDim), ("programmaticStreamSerializationAllowed", ctypes.c_int),
                ("cooperative", ctypes.c_int)]


class _LaunchAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttr)), ("numAttrs", ctypes.c_uint)]


_DRIVER: ctypes.CDLL | None = None
_MEMSET = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}  # by element bytes


def driver() -> ctypes.CDLL:
    """libcuda.so.1 (already loaded by cupy in the worker), with the entry points the launcher calls."""
    global _DRIVER  # a process-wide handle on a library the process has loaded anyway
    if _DRIVER is None:
        try:
            d = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise EvoError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from None
        d.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_void_p]
        for name, val in (("cuMemsetD8Async", ctypes.c_ubyte), ("cuMemsetD16Async", ctypes.c_ushort),
                          ("cuMemsetD32Async", ctypes.c_uint)):
            getattr(d, name).argtypes = [ctypes.c_uint64, val, ctypes.c_size_t, ctypes.c_void_p]
        d.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _DRIVER = d
    return _DRIVER


def error_name(code: int) -> str:
    s = ctypes.c_char_p()
    if driver().cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
        return s.value.decode()
    return f"CUresult {code}"


def abi_parameters(a: int, b: int, c: int, problem: Problem, workspace: int,
                   maps: list) -> tuple[ctypes.Array, tuple]:
    """The kernel ABI's parameters as cuLaunchKernelEx takes them: an array of pointers to (A, B, C as 64-bit
    addresses, M, N, K as 32-bit ints, the workspace address, then each 128-byte tensor map by value). The second
    value holds what those pointers point at; it must live as long as the array is launched with."""
    vals = [ctypes.c_uint64(x) for x in (a, b, c)] + [ctypes.c_int32(v) for v in (problem.m, problem.n, problem.k)]
    vals.append(ctypes.c_uint64(workspace))
    ptrs = (ctypes.c_void_p * (len(vals) + len(maps)))(*[ctypes.addressof(v) for v in vals],
                                                          *[t.ctypes.data for t in maps])
    return ptrs, (vals, maps)


def launch_config(g: HostGeometry, stream: int, cooperative: bool = False) -> tuple[_LaunchConfig, ctypes.Array]:
    """cooperative: the whole grid resident at once, or the launch is refused (KernelSource.cooperative)."""
    attrs = (_LaunchAttr * 3)()
    n = 0
    if cooperative:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attrs[n].value.cooperative = 1
        n += 1
    if g.cluster != (1, 1, 1):
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attrs[n].value.clusterDim = _ClusterDim(*g.cluster)
        n += 1
    if g.pdl:
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attrs[n].value.programmaticStreamSerializationAllowed = 1
        n += 1
    cfg = _LaunchConfig(*g.grid, *g.block, g.smem, stream, ctypes.cast(attrs, ctypes.POINTER(_LaunchAttr)), n)
    return cfg, attrs


class HostLaunchedKernel:
    """A launch: host candidate loaded for one problem: its host library, its cubin, its workspace.

    Same interface as evo.gpu.launch.LoadedKernel (call with A, B, C; close())."""

    def __init__(self, ks: KernelSource, cubin_path: str, problem: Problem, num_sms: int, smem_limit: int,
                 fresh: bool = True, pdl: bool = False, isolate: bool = False,
                 spares: SandboxSpares | None = None):
        """isolate: the host code runs in a sandbox process (evo.gpu.host_sandbox), as the evaluator wants for a
        candidate, taken from `spares` (a host_sandbox.SandboxSpares) where given; without it the library is loaded
        here (a published kernel served by evo.dispatch)."""
        self.ks = ks
        self.problem = problem
        self.num_sms = num_sms
        self.args = ks.host_arg_values(problem, num_sms)
        self.pdl = pdl
        self.cooperative = ks.cooperative(problem, num_sms)
        self.module = None
        if isolate:
            from .host_sandbox import SandboxedHostLibrary

            import cupy

            self.lib: HostLibrary | Any = SandboxedHostLibrary(
                host_library(cubin_path), device=cupy.cuda.runtime.getDevice(), spares=spares)
        else:
            self.lib = HostLibrary(host_library(cubin_path))
        try:
            self._set_up(cubin_path, smem_limit, fresh)
        except BaseException:
            self.close()
            raise

    def _set_up(self, cubin_path: str, smem_limit: int, fresh: bool) -> None:
        problem, num_sms = self.problem, self.num_sms
        self.geometry = self.lib.query(problem, num_sms, self.args)
        g = self.geometry
        threads = g.block[0] * g.block[1] * g.block[2]
        if threads > 1024:
            raise EvoError(f"block of {threads} threads exceeds 1024")
        if g.smem > smem_limit:
            raise EvoError(f"needs {g.smem} bytes of shared memory; the GPU allows {smem_limit}")
        import cupy

        if fresh:
            from .module import FreshModule

            self.module = FreshModule(cubin_path)
            self.fn_ptr = int(self.module.function(ENTRY).fn.ptr)
        else:
            self.module = cupy.RawModule(path=cubin_path)
            self.fn_ptr = int(self.module.get_function(ENTRY).kernel.ptr)
        drv = cupy.cuda.driver
        try:
            static = int(drv.funcGetAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.fn_ptr))
            if static + g.smem > smem_limit:
                raise EvoError(f"needs {static} bytes of static + {g.smem} bytes of dynamic shared memory; "
                               f"the GPU allows {smem_limit} per block")
            if g.smem > 48 * 1024:
                drv.funcSetAttribute(self.fn_ptr, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, g.smem)
            if g.cluster[0] * g.cluster[1] * g.cluster[2] > 8:
                drv.funcSetAttribute(self.fn_ptr, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        except drv.CUDADriverError as e:
            raise EvoError(f"cannot set up {ENTRY}: {e}") from None
        # zeroed once like every workspace; the reported fills are set again before every call
        self.workspace = cupy.zeros(max(g.workspace, 16), dtype=cupy.uint8)
        # per (A, B, C) pointers: geometry, parameter block, its pointer array, and the launch configs by stream
        self._blocks: dict[tuple, tuple[HostGeometry, ctypes.Array, ctypes.Array, dict]] = {}

    def _block(self, a: Any, b: Any, c: Any) -> tuple[HostGeometry, ctypes.Array, ctypes.Array, dict]:
        key = (a.data.ptr, b.data.ptr, c.data.ptr)
        hit = self._blocks.get(key)
        if hit is None:
            g, block = self.lib.params(self.problem, self.num_sms, self.args, a.data.ptr, b.data.ptr, c.data.ptr,
                                       self.workspace.data.ptr)
            if g.workspace > self.workspace.nbytes or g.smem != self.geometry.smem:
                raise EvoError(f"host code's parameters need {g.workspace} bytes of workspace and {g.smem} of smem; "
                               f"its query said {self.geometry.workspace} and {self.geometry.smem}")
            g = HostGeometry(g.params_bytes, g.grid, g.block, g.cluster, g.smem, g.pdl and self.pdl, g.workspace, g.fills)
            ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(block))
            if len(self._blocks) >= PARAM_CACHE:  # callers pass a few buffer sets (check, timing, dispatch); stale blocks must not pile up
                self._blocks.pop(next(iter(self._blocks)))
            hit = self._blocks[key] = (g, block, ptrs, {})
        return hit

    def close(self) -> None:
        close = getattr(getattr(self, "module", None), "close", None)
        if close is not None:
            close()
        lib_close = getattr(getattr(self, "lib", None), "close", None)  # the sandbox process, if any
        if lib_close is not None:
            lib_close()
        self.fn_ptr = 0
        self.workspace = None
        getattr(self, "_blocks", {}).clear()

    def __call__(self, a: Any, b: Any, c: Any) -> None:
        import cupy

        g, _block, ptrs, configs = self._block(a, b, c)
        d = driver()
        stream = cupy.cuda.get_current_stream().ptr
        launch = configs.get(stream)
        if launch is None:  # built once per stream: the config and the attributes it points into stay alive here
            if len(configs) >= PARAM_CACHE:
                configs.clear()
            launch = configs[stream] = launch_config(g, stream, self.cooperative)
        base = self.workspace.data.ptr
        for f in g.fills:
            fn = getattr(d, _MEMSET[f.elem])
            rc = fn(base + f.offset, f.value, f.count, stream)
            if rc:
                raise cupy.cuda.driver.CUDADriverError(rc)
        rc = d.cuLaunchKernelEx(ctypes.byref(launch[0]), self.fn_ptr, ptrs, None)
        if rc:
            if rc in _REFUSED:
                raise EvoError(f"launch refused: {error_name(rc)} (grid {g.grid}, block {g.block}, cluster {g.cluster}, "
                               f"smem {g.smem})")
            raise cupy.cuda.driver.CUDADriverError(rc)


def load_kernel(ks: KernelSource, cubin_path: str, problem: Problem, num_sms: int, smem_limit: int,
                isolate_host: bool = False, spares: SandboxSpares | None = None, **kw: Any):
    """The launcher the candidate's ABI asks for: HostLaunchedKernel for ``launch: host`` (its host code in a
    sandbox process with ``isolate_host``, taken from ``spares`` where given), else LoadedKernel (keyword arguments,
    e.g. ``fresh``, go to either)."""
    if ks.meta.launch == "host":
        return HostLaunchedKernel(ks, cubin_path, problem, num_sms, smem_limit, isolate=isolate_host, spares=spares,
                                  **kw)
    from .launch import LoadedKernel

    return LoadedKernel(ks, cubin_path, problem, num_sms, smem_limit, **kw)
