"""evo::matmul on a GPU with torch, against the committed kernel table of this GPU (kernels_out/<GPU>, or
$EVO_KERNELS/<GPU>): right results on table shapes (an evo row and library rows) and shapes not in it, on a side
stream, inside CUDA graph capture (replayed on new data), under torch.compile(fullgraph=True), and its backward.

    python -m pytest -m gpu -q tests/test_torch_op_gpu.py
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

OFF_TABLE = ["257x14336x4096", "100x18944x3584", "77x200x72"]


@pytest.fixture(scope="module")
def op(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    os.environ["EVO_DISPATCH_DECISIONS"] = str(tmp_path_factory.mktemp("dec") / "dispatch.json")
    import evo.torch_op as top
    from evo.dispatch import CupyBackend, Dispatcher

    be = CupyBackend()
    table = Path(os.environ.get("EVO_KERNELS", "kernels_out")) / be.gpu_key
    if not (table / "table.json").is_file():
        pytest.skip(f"no kernel table at {table}")
    top.use(Dispatcher.load(table, backend=be))
    return top


def shapes(top):
    rows = list(top.dispatcher().rows.values())
    evo = [r["shape"] for r in rows if r["winner"] == "evo"][:1]
    libs = [r["shape"] for r in rows if r["winner"] != "evo" and r["m"] * r["n"] * r["k"] <= 2 ** 33][:3]
    return evo + libs + OFF_TABLE


def inputs(shape, seed=0):
    m, n, k = (int(x) for x in shape.split("x"))
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g),
            torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g))


def rel_err(c, a, b):
    want = a.float() @ b.float().T
    return float((c.float() - want).norm() / want.norm())


def test_results_on_a_side_stream(op):
    s = torch.cuda.Stream()
    for shape in shapes(op):
        a, b = inputs(shape)
        op.matmul(a, b)  # first call: chosen, compiled, checked, maybe timed (default stream)
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            a2, b2 = a * 0.5, b * 2.0  # produced on the side stream: the op must run after them, on it
            c = torch.ops.evo.matmul(a2, b2)
        s.synchronize()
        assert c.shape == (a.shape[0], b.shape[0]) and c.dtype == torch.float16
        m, n, k = (int(x) for x in shape.split("x"))
        assert rel_err(c, a2, b2) < 1e-2, op.dispatcher().explain(m, n, k)
        print(op.dispatcher().explain(m, n, k))


@pytest.mark.filterwarnings("error:The CUDA Graph is empty")  # work launched off torch's stream is not captured
def test_cuda_graph_capture_and_replay(op):
    """Every kind of plan (evo row, cuBLAS and cuBLASLt rows, shapes not in the table) is recorded into the graph:
    a replay on new data gives the new product (a launch on another stream would have run once, at capture)."""
    for shape in shapes(op):
        a, b = inputs(shape, 1)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                op.matmul(a, b)  # warm-up outside the capture, as torch asks
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            c = torch.ops.evo.matmul(a, b)
        a2, b2 = inputs(shape, 2)
        a.copy_(a2)
        b.copy_(b2)
        g.replay()
        torch.cuda.synchronize()
        assert rel_err(c, a2, b2) < 1e-2, shape


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty")  # the op refuses before launching anything
def test_first_use_inside_a_capture_is_a_clear_error(op):
    a, b = inputs("96x80x64")
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="first seen inside a CUDA graph capture"):
        with torch.cuda.graph(g):
            torch.ops.evo.matmul(a, b)


def test_torch_compile_fullgraph(op):
    def f(a, b):
        return torch.ops.evo.matmul(a, b).float().relu()

    cf = torch.compile(f, fullgraph=True)
    for shape in shapes(op)[:3]:
        a, b = inputs(shape, 3)
        out = cf(a, b)
        want = (a.float() @ b.float().T).relu()
        assert float((out - want).norm() / want.norm()) < 1e-2, shape


def test_backward_matches_torch(op):
    a, b = inputs(shapes(op)[0], 4)
    a.requires_grad_()
    b.requires_grad_()
    g = torch.randn(a.shape[0], b.shape[0], device="cuda", dtype=torch.float16)
    torch.ops.evo.matmul(a, b).backward(g)
    a2, b2 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    (a2 @ b2.T).backward(g.float())
    for x, y in ((a.grad, a2.grad), (b.grad, b2.grad)):
        assert float((x.float() - y).norm() / y.norm()) < 1e-2


def test_each_gpu_is_served_by_its_own_dispatcher(op):
    """A model spread over two GPUs in one process: the op on cuda:1 is chosen, loaded and launched on GPU 1 (its own
    dispatcher), and cuda:0 keeps the one it had. Needs two GPUs (the nvidia-h200-x2 kind)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    first = op.dispatcher(0)
    for dev in (1, 0, 1):
        g = torch.Generator(device=f"cuda:{dev}").manual_seed(dev)
        for shape in shapes(op)[:2]:
            m, n, k = (int(x) for x in shape.split("x"))
            a = torch.randn(m, k, device=f"cuda:{dev}", dtype=torch.float16, generator=g)
            b = torch.randn(n, k, device=f"cuda:{dev}", dtype=torch.float16, generator=g)
            c = torch.ops.evo.matmul(a, b)
            torch.cuda.synchronize(dev)
            assert c.device == a.device and rel_err(c, a, b) < 1e-2, op.dispatcher(dev).explain(m, n, k)
    assert op.dispatcher(0) is first and op.dispatcher(1).backend.device_id == 1
