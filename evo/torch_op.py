"""``evo::matmul``: the kernel table as a PyTorch operator (``torch.library``), on torch's current stream.

    import torch, evo.torch_op
    c = torch.ops.evo.matmul(a, b)     # a [M, K], b [N, K]: fp16, contiguous, CUDA tensors; C = a @ b.T, fp16
    c = evo.torch_op.matmul(a, b)      # the same

What serves a shape is evo.dispatch's choice (the table's winner beyond noise, else the library that won; shapes
not in the table decided once by measurement). The kernels run on ``torch.cuda.current_stream()``, so the op orders
with the rest of the model, works inside CUDA graph capture and under ``torch.compile(fullgraph=True)`` (a fake
implementation gives the output's shape and dtype, so the compiler keeps it in the graph as one opaque call).

CUDA graphs: call the op once per shape before capturing (as torch asks of every warm-up): the first call of a shape
chooses its kernel, compiles, checks and may time it, which cannot happen inside a capture; a shape first seen inside
a capture raises a RuntimeError that says so. The output is allocated by torch (its caching allocator, graph pools).
Library-served shapes are capture-safe too: cuBLAS and cuBLASLt are called through nvmath's thin bindings on
handles of evo's own (evo.ltgemm), not through CuPy's wrappers, which refuse a capturing stream.

Several GPUs: each GPU is served by a dispatcher of its own, created on that GPU's first call (``dispatcher(device)``),
so a model spread over GPUs in one process gets each GPU's kernels and library handles.

Autograd: the backward pass uses torch's own matmuls (dA = dC·B, dB = dCᵀ·A); evo serves the forward product.
torch is not a dependency of evo: ``pip install 'evo[torch]'``.
"""
from __future__ import annotations

from typing import Any

try:
    import torch
except ImportError as e:  # pragma: no cover - exercised where torch is absent
    raise ImportError("evo.torch_op needs PyTorch: pip install 'evo[torch]'") from e


class _State:
    """CuPy views of torch's streams, one per stream pointer (the dispatchers live in evo.dispatch, one per GPU,
    shared with evo.dispatch.matmul)."""

    streams: dict[tuple[int, int], Any] = {}


def use(dispatcher: Any, device: int | None = None) -> None:
    """Serve evo::matmul on GPU `device` (the dispatcher's own GPU by default) from this evo.dispatch.Dispatcher
    (e.g. another table folder); evo.dispatch.matmul uses it too."""
    from .dispatch import use as use_dispatcher

    use_dispatcher(dispatcher, device)


def dispatcher(device: int | None = None) -> Any:
    """The dispatcher of GPU `device` (torch's current GPU by default), evo.dispatch.default's: a model spread over
    several GPUs in one process is served on each by that GPU's table, kernels and library handles."""
    from .dispatch import default

    return default(torch.cuda.current_device() if device is None else device)


def check_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    """One-line errors for what the op does not take (the same rules as evo.dispatch.validate)."""
    for name, x, dims in (("a", a, "[M, K]"), ("b", b, "[N, K]")):
        if x.dim() != 2:
            raise ValueError(f"evo::matmul: {name} must be 2-D {dims}, got shape {tuple(x.shape)}")
        if x.dtype != torch.float16:
            raise TypeError(f"evo::matmul: {name} must be float16, got {x.dtype}")
        if not x.is_contiguous():
            raise ValueError(f"evo::matmul: {name} must be contiguous (row-major {dims}); pass {name}.contiguous()")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"evo::matmul: K differs: a is {list(a.shape)}, b is {list(b.shape)} (C = a @ b.T)")
    for name, x in (("a", a), ("b", b)):
        if x.device.type != "cuda":
            raise ValueError(f"evo::matmul: {name} must be a CUDA tensor, got device {x.device}")
    if a.device != b.device:
        raise ValueError(f"evo::matmul: a is on {a.device}, b on {b.device}")
    if min(a.shape[0], b.shape[0], a.shape[1]) < 1:
        raise ValueError(f"evo::matmul: empty dimension in a {list(a.shape)} or b {list(b.shape)}")


def _view(cupy: Any, t: torch.Tensor) -> Any:
    """A CuPy array over a torch tensor's memory: no copy and no stream synchronisation (DLPack would add one)."""
    mem = cupy.cuda.UnownedMemory(t.data_ptr(), t.numel() * t.element_size(), t, t.device.index or 0)
    return cupy.ndarray(tuple(t.shape), dtype=cupy.float16, memptr=cupy.cuda.MemoryPointer(mem, 0))


def _stream(cupy: Any, ptr: int, device: int) -> Any:
    """torch's stream as CuPy's current stream: evo kernels, cuBLAS and cuBLASLt all launch on
    ``cupy.cuda.get_current_stream()`` (evo.gpu.launch, evo.ltgemm), so everything lands on torch's stream."""
    s = _State.streams.get((ptr, device))
    if s is None:
        import warnings

        with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream for Stream.from_external (not in 13)
            warnings.simplefilter("ignore", DeprecationWarning)
            s = _State.streams[(ptr, device)] = cupy.cuda.ExternalStream(ptr, device)
    return s


@torch.library.custom_op("evo::matmul", mutates_args=(), device_types="cuda")
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = a @ b.T with evo's kernel table (fp16 in and out, fp32 accumulation)."""
    check_inputs(a, b)
    from .dispatch import device_of

    device = device_of(a)  # the tensor's GPU (the current one for a bare "cuda" device), as evo.dispatch.matmul routes
    d = dispatcher(device)
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.float16, device=a.device)
    plan = d.cached(m, n, k)
    if plan is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"evo::matmul: shape {m}x{n}x{k} is first seen inside a CUDA graph capture; call the op "
                               "once on this shape before capturing (its kernel is chosen, compiled and checked then)")
        plan = d.plan(m, n, k)  # on the dispatcher's GPU (Dispatcher.plan switches to it)
    cupy = d.backend.cupy
    with cupy.cuda.Device(device), _stream(cupy, torch.cuda.current_stream(a.device).cuda_stream, device):
        plan.fn(_view(cupy, a), _view(cupy, b), _view(cupy, c))
    return c


@matmul.register_fake
def _matmul_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "evo::matmul: a and b must be 2-D")
    torch._check(a.shape[1] == b.shape[1], lambda: f"evo::matmul: K differs: {list(a.shape)} vs {list(b.shape)}")
    torch._check(a.dtype == torch.float16 and b.dtype == torch.float16, lambda: "evo::matmul: float16 only")
    return a.new_empty((a.shape[0], b.shape[0]))


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    a, b = inputs
    ctx.save_for_backward(a, b)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    a, b = ctx.saved_tensors
    da = grad @ b if ctx.needs_input_grad[0] else None  # [M, N] x [N, K]
    db = grad.t() @ a if ctx.needs_input_grad[1] else None  # [N, M] x [M, K]
    return da, db


torch.library.register_autograd("evo::matmul", _backward, setup_context=_setup_context)
