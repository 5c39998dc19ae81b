"""evo.dispatch on a GPU, against the kernel table a sweep exported for it (kernels_out/<GPU>/table.json, or
$EVO_KERNELS/<GPU>): every table shape and five shapes not in it agree with an fp32 reference, and the host
overhead per call is measured against a bare launch of the same kernel.

    python -m evo.sweep --shapes shapes/sample24.yaml --budget-minutes-per-shape 2     # makes the table
    python -m pytest -m gpu -s tests/test_dispatch_gpu.py                             # prints the overhead
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

OFF_TABLE = ["1000x1000x1000", "77x200x72", "129x67x33", "3000x5000x2048", "1x6144x4096"]


@pytest.fixture(scope="module")
def dispatcher(tmp_path_factory):
    os.environ["EVO_DISPATCH_DECISIONS"] = str(tmp_path_factory.mktemp("decisions") / "dispatch.json")
    from evo.dispatch import CupyBackend, Dispatcher

    be = CupyBackend()
    table = Path(os.environ.get("EVO_KERNELS", "kernels_out")) / be.gpu_key / "table.json"
    if not table.is_file():
        pytest.skip(f"no kernel table at {table}: run python -m evo.sweep --shapes shapes/sample24.yaml first")
    d = Dispatcher.load(table.parent, backend=be)
    t0 = time.monotonic()
    errors = d.precompile()  # every evo row's kernel side by side (one after another, on first calls, they ran past 200 s)
    print(f"precompiled the table's evo kernels in {time.monotonic() - t0:.0f} s")
    assert errors == []
    return d


def _check(d, shape: str) -> str:
    import cupy

    m, n, k = (int(x) for x in shape.split("x"))
    rs = cupy.random.RandomState(7)
    a = rs.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    c = d.matmul(a, b)
    want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
    err = float(cupy.linalg.norm(c.astype(cupy.float32) - want) / max(float(cupy.linalg.norm(want)), 1e-30))
    assert c.shape == (m, n) and c.dtype == cupy.float16 and bool(cupy.isfinite(c).all()), d.explain(m, n, k)
    assert err < 1e-2, f"{d.explain(m, n, k)}: relative error {err:.2e}"
    # what cupy itself computes, in fp16, is no closer to the reference than a few ulps of ours
    return f"{d.explain(m, n, k)}  rel err {err:.1e}"


def test_table_shapes_match_reference(dispatcher):
    shapes = [r["shape"] for r in dispatcher.rows.values()]
    assert shapes
    for s in shapes:
        print(_check(dispatcher, s))


@pytest.mark.parametrize("shape", OFF_TABLE)
def test_shapes_not_in_table_match_reference(dispatcher, shape):
    m, n, k = (int(x) for x in shape.split("x"))
    assert (m, n, k) not in dispatcher.rows, f"{shape} is in the table now: pick another shape outside it"
    print(_check(dispatcher, shape))


def test_library_rows_are_served_by_their_library(dispatcher):
    """cuBLASLt rows run cuBLASLt (stored, heuristic or autotuned-here algorithm), cuBLAS rows cuBLAS; a tie whose
    evo kernel led by more than the noise floor is measured here: evo serves only beyond the measured noise."""
    ties = 0
    for r in dispatcher.rows.values():
        if r["winner"] == "evo":
            continue
        plan = dispatcher.plan(r["m"], r["n"], r["k"])
        why = dispatcher.explain(r["m"], r["n"], r["k"])
        if dispatcher.measures_tie(r):
            ties += 1
            assert plan.reason.startswith("a tie in the table"), why
            assert (plan.kind == "evo" and plan.hash == r["hash"] and "beyond" in plan.reason) or \
                (plan.kind == "library" and plan.library in ("cublas", "cublaslt")), why
            print(why)
        else:
            assert plan.kind == "library" and plan.library == r["winner"], why
    print(f"{ties} ties measured here")


def test_torch_tensors_through_dlpack(dispatcher):
    torch = pytest.importorskip("torch")
    # a row with M > 1: a [1, K] tensor is contiguous whatever its strides, so it could not test the layout check
    s = next(r for r in dispatcher.rows.values() if r["m"] > 1 and r["k"] > 1)
    a = torch.randn(s["m"], s["k"], device="cuda", dtype=torch.float16)
    b = torch.randn(s["n"], s["k"], device="cuda", dtype=torch.float16)
    c = dispatcher.matmul(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (s["m"], s["n"])
    want = a.float() @ b.float().T
    assert float((c.float() - want).norm() / want.norm()) < 1e-2
    a_strided = a.t().contiguous().t()  # the same [M, K] values, column-major: shape right, layout not
    assert a_strided.shape == a.shape and not a_strided.is_contiguous()
    with pytest.raises(ValueError, match="C-contiguous"):
        dispatcher.matmul(a_strided, b)


def test_validation_on_gpu(dispatcher):
    import cupy

    a = cupy.zeros((64, 64), cupy.float32)
    with pytest.raises(TypeError, match="float16"):
        dispatcher.matmul(a, a)
    import numpy as np

    with pytest.raises(TypeError, match="must live on the GPU"):
        dispatcher.matmul(np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))


def test_per_call_overhead(dispatcher):
    """Host microseconds per call: dispatch.matmul vs launching the same kernel (or cuBLAS) directly."""
    import cupy

    rows = sorted(dispatcher.rows.values(), key=lambda r: r["m"] * r["n"] * r["k"])
    row = next((r for r in rows if r["winner"] == "evo"), rows[0])
    m, n, k = row["m"], row["n"], row["k"]
    a = cupy.zeros((m, k), cupy.float16)
    b = cupy.zeros((n, k), cupy.float16)
    plan = dispatcher.plan(m, n, k)
    fn = getattr(plan.fn, "first", plan.fn)  # the launch itself, without the per-stream lookup (part of the overhead)

    def bare():
        c = cupy.empty((m, n), cupy.float16)
        fn(a, b, c)

    def dispatched():
        dispatcher.matmul(a, b)

    results = {}
    for name, call in (("bare", bare), ("dispatch", dispatched)):
        for _ in range(50):
            call()
        cupy.cuda.Device().synchronize()
        best = float("inf")
        for _ in range(5):  # host time only; batches small enough not to fill the launch queue
            t0 = time.perf_counter()
            for _ in range(200):
                call()
            best = min(best, (time.perf_counter() - t0) / 200 * 1e6)
            cupy.cuda.Device().synchronize()
        results[name] = best
    over = results["dispatch"] - results["bare"]
    print(f"\nDISPATCH-OVERHEAD {row['shape']} ({plan.kind}): dispatch.matmul {results['dispatch']:.2f} us/call, "
          f"bare launch {results['bare']:.2f} us/call, overhead {over:.2f} us")
    assert over < 30, results


def _workspace_bytes(fn) -> int:
    first = getattr(fn, "first", fn)
    spec = getattr(first, "spec", None) or getattr(first, "geometry", None)
    return int(getattr(spec, "workspace", 0) or 0)


def test_concurrent_streams_get_their_own_workspace(dispatcher):
    """The same split-K kernel called on three streams at once, without synchronising between calls: each stream
    runs an instance with its own workspace (evo.stream_local), so every stream's last result is its own product."""
    import cupy

    from evo.stream_local import StreamLocal

    rows = sorted((r for r in dispatcher.rows.values() if r["winner"] == "evo"), key=lambda r: r["m"] * r["n"] * r["k"])
    picked = []
    for r in rows:
        plan = dispatcher.plan(r["m"], r["n"], r["k"])
        if plan.kind == "evo" and isinstance(plan.fn, StreamLocal) and _workspace_bytes(plan.fn) > 16:
            picked.append((r, plan))
        if len(picked) == 3:
            break
    if not picked:
        pytest.skip("no evo row of this table serves a kernel with a workspace")
    for r, plan in picked:
        m, n, k = r["m"], r["n"], r["k"]
        streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
        rs = cupy.random.RandomState(11)
        ins = [(rs.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16),
                rs.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)) for _ in streams]
        outs = [cupy.full((m, n), cupy.nan, dtype=cupy.float16) for _ in streams]
        cupy.cuda.Device().synchronize()
        for _ in range(30):  # interleaved launches: the streams' kernels overlap on the GPU
            for st, (a, b), c in zip(streams, ins, outs):
                with st:
                    plan.fn(a, b, c)
        cupy.cuda.Device().synchronize()
        # three of its own besides the instance the checks ran on the null stream (when they ran through it)
        assert plan.fn.instances >= 3, f"{r['shape']}: {plan.fn.instances} instances for 3 streams"
        for (a, b), c in zip(ins, outs):
            want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
            err = float(cupy.linalg.norm(c.astype(cupy.float32) - want) / float(cupy.linalg.norm(want)))
            assert err < 1e-2, f"{r['shape']} ({plan.hash}): relative error {err:.2e} with three streams at once"
        print(f"{r['shape']} {plan.hash}: {_workspace_bytes(plan.fn)}-byte workspace, 3 streams, {plan.fn.instances} instances, correct")


def test_module_matmul_serves_each_gpu_from_its_own_dispatcher(dispatcher):
    """evo.dispatch.matmul with arrays on GPU 1 while GPU 0 is current: GPU 1's dispatcher plans, allocates C and
    launches there. Needs two GPUs (the nvidia-h200-x2 kind)."""
    import cupy

    import evo.dispatch as dispatch

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    row = min((r for r in dispatcher.rows.values() if r["winner"] == "evo"), key=lambda r: r["m"] * r["n"] * r["k"])
    m, n, k = row["m"], row["n"], row["k"]
    for dev in (1, 0, 1):
        with cupy.cuda.Device(dev):
            rs = cupy.random.RandomState(dev)
            a = rs.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16)
            b = rs.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
        with cupy.cuda.Device(0):
            c = dispatch.matmul(a, b)
        with cupy.cuda.Device(dev):
            want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
            err = float(cupy.linalg.norm(c.astype(cupy.float32) - want) / float(cupy.linalg.norm(want)))
        assert c.device.id == dev and err < 1e-2, dispatch.default(dev).explain(m, n, k)
    assert dispatch.default(1).backend.device_id == 1 and dispatch.default(0).backend.device_id == 0
