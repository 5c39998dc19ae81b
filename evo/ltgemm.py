"""cuBLAS and cuBLASLt for the dispatcher, called directly: C[M,N] = A[M,K]·B[N,K]ᵀ on the caller's stream.

Both go through nvmath-python's thin bindings (``nvmath.bindings.cublas`` / ``cublasLt``), never through CuPy's
cuBLAS wrappers: CuPy refuses ``cublasSetStream`` while the stream is capturing ("calling cuBLAS API during stream
capture is currently unsupported"), so a library-served shape could not be recorded into a CUDA graph. cuBLAS
itself supports capture (its docs: every routine that writes no host buffer): ``CublasGemm`` owns its handle and
uses cuBLAS's default workspace pool, which since CUDA 12.2 is stream-ordered (cudaMallocAsync, recorded into a
graph like any allocation on the capturing stream; PyTorch dropped its own cuBLAS workspaces for that reason) and
is kept per stream, so two streams never share one. cuBLASLt calls pass a workspace of the plan's own, allocated
when the plan is bound (never during a capture); the dispatcher binds it again, with a workspace of its own, for each
further stream that calls the shape (evo.stream_local). Nothing here synchronises or reads back per call, and every call
runs on ``cupy.cuda.get_current_stream()`` (torch's current stream under evo.torch_op).

The problem is planned once per shape through nvmath-python exactly as the baselines plan it
(``Matmul(a, b.T)``, fp32 compute, the same preference limit), so the algorithm list is the one the table's
cuBLASLt times came from. An algorithm is picked by its configuration (``algorithm_config``, what the table
stores), as the heuristic's top-1, or by nvmath's autotune on this GPU; then every call goes straight to
``cublasLtMatmul`` with the caller's pointers, nvmath's descriptors and a workspace of our own: no allocation
and no nvmath bookkeeping per call.
"""
from __future__ import annotations

from typing import Any, Callable

ALGO_FIELDS = ("algorithm_id", "tile", "stages", "split_k", "reduction_scheme", "cta_swizzling", "custom_option",
               "inner_shape", "cluster_shape")

Fn = Callable[[Any, Any, Any], None]


def _plain(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, bool):
        return v
    if hasattr(v, "value") and not isinstance(v, (int, float, str)):  # an enum
        v = v.value
    if isinstance(v, (int, float, str)):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return str(v)


def algorithm_config(alg: Any) -> dict[str, Any]:
    """The configuration of an nvmath ``Algorithm`` as plain JSON values (fields it cannot report are left out)."""
    out: dict[str, Any] = {}
    for f in ALGO_FIELDS:
        try:
            out[f] = _plain(getattr(alg, f))
        except Exception:  # noqa: BLE001 - not every field exists in every cuBLASLt version
            pass
    return out


def same_config(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two configurations name the same algorithm: every field both report is equal (and the id is among them)."""
    common = set(a) & set(b)
    return "algorithm_id" in common and all(a[f] == b[f] for f in common)


def find_algorithm(algorithms: Any, config: dict[str, Any]) -> Any | None:
    """The first of `algorithms` with this configuration, or None."""
    return next((alg for alg in algorithms if same_config(algorithm_config(alg), config)), None)


class LtGemm:
    """One shape's cuBLASLt plan; ``bind(alg)`` gives a call ``fn(a, b, c)``."""

    def __init__(self, m: int, n: int, k: int, limit: int = 8):
        import cupy
        from nvmath.linalg import advanced as adv

        self.cupy = cupy
        self.shape = (m, n, k)
        a = cupy.empty((m, k), dtype=cupy.float16)
        b = cupy.empty((n, k), dtype=cupy.float16)
        self._operands = (a, b)
        self.mm = adv.Matmul(a, b.T, options={"compute_type": adv.MatmulComputeType.COMPUTE_32F})
        self.mm.plan(preferences=adv.MatmulPlanPreferences(limit=limit))
        self.heuristic = self.mm.algorithms[0]
        self._ws: Any = None

    @property
    def algorithms(self) -> list:
        return list(self.mm.algorithms)

    def find(self, config: dict[str, Any]) -> Any | None:
        """The planned algorithm with this configuration, or None."""
        return find_algorithm(self.mm.algorithms, config)

    def autotune(self, iterations: int = 5) -> Any:
        """nvmath's autotune over the planned algorithms (as the baselines run it); the winner."""
        a, b = self._operands
        a[...] = 0.5
        b[...] = 0.25
        self.mm.autotune(iterations=iterations)
        return self.mm.algorithms[0]

    def bind(self, alg: Any, own_workspace: bool = False) -> Fn:
        """A call of this plan with algorithm `alg`. Every call bound without `own_workspace` shares the plan's one
        workspace (calls on one stream run in turn); with it, the call gets a workspace of its own (another stream's
        instance: evo.stream_local)."""
        import numpy as np
        from nvmath.bindings import cublasLt as lt

        cupy, mm = self.cupy, self.mm
        algo = mm.algorithm_object_to_buffer[alg]["algo"]
        ws_size = int(np.max(mm.algorithms_buffer["workspace_size"]))
        ws = self._ws if self._ws is not None and not own_workspace else cupy.empty(max(ws_size, 256), dtype=cupy.uint8)
        if not own_workspace:
            self._ws = ws
        handle, desc = mm.handle, mm.mm_desc
        alpha, beta = mm.alpha.ctypes.data, mm.beta.ctypes.data
        la, lb, lc, ld = mm.a_layout_ptr, mm.b_layout_ptr, mm.c_layout_ptr, mm.d_layout_ptr
        algo_ptr, ws_ptr = algo.ctypes.data, ws.data.ptr
        keep = (self, algo, ws)  # everything the pointers point into lives as long as the call

        def call(a: Any, b: Any, c: Any) -> None:
            lt.matmul(handle, desc, alpha, a.data.ptr, la, b.data.ptr, lb, beta, 0, lc, c.data.ptr, ld,
                      algo_ptr, ws_ptr, ws_size, cupy.cuda.get_current_stream().ptr)

        call.keep = keep  # type: ignore[attr-defined]
        return call


CUDA_R_16F, CUBLAS_COMPUTE_32F, CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_GEMM_DEFAULT = 2, 68, 0, 1, -1


class CublasGemm:
    """``cublasGemmEx`` (fp16 in and out, fp32 compute, default algorithm: what the cuBLAS baseline runs) on a
    handle of our own, on the caller's current CuPy stream; capture-safe (see the module doc). ``workspace`` > 0
    binds a user workspace of that many bytes instead of cuBLAS's pool (set again after every stream change, as
    ``cublasSetStream`` resets it; then calls on two streams at once share it: keep them in one stream's order)."""

    def __init__(self, device_id: int | None = None, workspace: int = 0):
        import cupy
        import numpy as np
        from nvmath.bindings import cublas as cb

        self.cupy, self.cb = cupy, cb
        with cupy.cuda.Device(device_id if device_id is not None else cupy.cuda.runtime.getDevice()):
            self.handle = cb.create()
            self.ws = cupy.empty(workspace, dtype=cupy.uint8) if workspace > 0 else None
        self._stream: int | None = None
        self._one, self._zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        self._scalars = (self._one.ctypes.data, self._zero.ctypes.data)

    def __call__(self, a: Any, b: Any, c: Any) -> None:
        s = self.cupy.cuda.get_current_stream().ptr
        if s != self._stream:
            self.cb.set_stream(self.handle, s)
            if self.ws is not None:
                self.cb.set_workspace(self.handle, self.ws.data.ptr, self.ws.nbytes)  # set_stream reset it
            self._stream = s
        m, k = a.shape
        n = b.shape[0]
        one, zero = self._scalars
        # row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ: op(B) = T on the [K, N] column-major view of B
        self.cb.gemm_ex(self.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, one, b.data.ptr, CUDA_R_16F, k,
                        a.data.ptr, CUDA_R_16F, k, zero, c.data.ptr, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT)

    def close(self) -> None:
        if self.handle:
            try:
                self.cb.destroy(self.handle)
            finally:
                self.handle = 0


ALGO_MARK = "; algorithm="  # how a baseline's detail text carries its cuBLASLt algorithm (JSON) into the archive


def algorithm_note(alg: Any) -> str:
    """Appended to a cuBLASLt baseline's detail: the algorithm's configuration, for the table and the dispatcher."""
    import json

    try:
        return ALGO_MARK + json.dumps(algorithm_config(alg), separators=(",", ":"))
    except Exception:  # noqa: BLE001 - a detail without the algorithm is still a valid detail
        return ""


def algorithm_from_detail(detail: str) -> dict[str, Any]:
    """The algorithm a baseline's detail carries ({} where it carries none)."""
    import json

    if ALGO_MARK not in (detail or ""):
        return {}
    try:
        v = json.loads(detail.split(ALGO_MARK, 1)[1])
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}
