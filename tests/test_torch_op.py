"""evo::matmul registration without a GPU (needs the torch CPU wheel; skipped without torch): the op exists, its
fake implementation gives shape and dtype, torch.compile(fullgraph=True) keeps it in one graph, bad input is one line."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import evo.torch_op as top  # noqa: E402


def meta(*shape, dtype=None):
    return torch.empty(*shape, dtype=dtype or torch.float16, device="meta")


def test_registered_with_a_fake():
    assert hasattr(torch.ops.evo, "matmul")
    c = torch.ops.evo.matmul(meta(100, 64), meta(300, 64))
    assert c.shape == (100, 300) and c.dtype == torch.float16 and c.device.type == "meta"


def test_compiles_without_graph_breaks():
    def f(a, b):
        return torch.ops.evo.matmul(a, b) * 2

    from torch._dynamo.testing import CompileCounter

    cnt = CompileCounter()
    out = torch.compile(f, fullgraph=True, backend=cnt)(meta(16, 32), meta(8, 32))
    assert out.shape == (16, 8) and cnt.frame_count == 1
    assert any("evo.matmul" in str(n.target) for n in _graph_nodes(f))


def _graph_nodes(f):
    gm, _ = torch._dynamo.export(f)(meta(4, 8), meta(2, 8))
    return list(gm.graph.nodes)


@pytest.mark.parametrize("a, b, err, match", [
    (torch.zeros(4, 8, dtype=torch.float32), torch.zeros(2, 8, dtype=torch.float16), TypeError, "a must be float16"),
    (torch.zeros(8, dtype=torch.float16), torch.zeros(2, 8, dtype=torch.float16), ValueError, r"a must be 2-D"),
    (torch.zeros(8, 4, dtype=torch.float16).t(), torch.zeros(2, 8, dtype=torch.float16), ValueError, "contiguous"),
    (torch.zeros(4, 8, dtype=torch.float16), torch.zeros(2, 8, dtype=torch.float16), ValueError, "must be a CUDA tensor"),
    (torch.zeros(4, 8, dtype=torch.float16, device="meta"), torch.zeros(2, 6, dtype=torch.float16, device="meta"),
     ValueError, "K differs"),
])
def test_bad_inputs_are_one_line(a, b, err, match):
    with pytest.raises(err, match=match) as e:
        top.check_inputs(a, b)
    assert "\n" not in str(e.value)


def test_backward_shapes():
    a = meta(16, 32).requires_grad_()
    b = meta(8, 32).requires_grad_()
    torch.ops.evo.matmul(a, b).sum().backward()
    assert a.grad.shape == (16, 32) and b.grad.shape == (8, 32)
