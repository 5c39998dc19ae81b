"""evo.ltgemm without a GPU: algorithm configs as plain JSON, matching a stored config among the planned ones, the
detail text that carries it, and what bind() hands to cublasLtMatmul (fake nvmath and cupy modules whose
attributes mirror nvmath-python 1.0's Matmul)."""
from __future__ import annotations

import enum
import sys
import types

import numpy as np
import pytest

from evo.ltgemm import ALGO_MARK, algorithm_config, algorithm_from_detail, algorithm_note, same_config


class Tile(enum.Enum):
    T64x128 = 7


class FakeAlg:
    def __init__(self, i, tile=(64, 128)):
        self.algorithm_id, self.tile, self.stages, self.split_k = i, tile, "64x4", 1
        self.reduction_scheme, self.cta_swizzling, self.custom_option, self.inner_shape = 0, True, 0, Tile.T64x128

    @property
    def cluster_shape(self):
        raise RuntimeError("not reported by this cuBLASLt")


def test_config_is_plain_json_and_matches():
    cfg = algorithm_config(FakeAlg(21))
    assert cfg == {"algorithm_id": 21, "tile": [64, 128], "stages": "64x4", "split_k": 1, "reduction_scheme": 0,
                   "cta_swizzling": True, "custom_option": 0, "inner_shape": 7}
    assert same_config(cfg, algorithm_config(FakeAlg(21))) and not same_config(cfg, algorithm_config(FakeAlg(22)))
    assert not same_config({"tile": [64, 128]}, {"tile": [64, 128]})  # no id: never a match
    note = algorithm_note(FakeAlg(21))
    assert note.startswith(ALGO_MARK) and algorithm_from_detail("best of 8 by nvmath autotune" + note) == cfg
    assert algorithm_from_detail("top-1 of 8 planned") == {} and algorithm_from_detail("x; algorithm={bad") == {}


@pytest.fixture
def fakes(monkeypatch):
    calls = []

    class Arr:
        def __init__(self, shape, dtype=None):
            self.shape, self.dtype = shape, dtype
            self.data = types.SimpleNamespace(ptr=id(self))
            self.T = self

        def __setitem__(self, k, v):
            pass

    cupy = types.ModuleType("cupy")
    cupy.float16, cupy.uint8 = "float16", "uint8"
    cupy.empty = lambda shape, dtype=None: Arr(shape, dtype)
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=777))

    algos = [FakeAlg(3), FakeAlg(21)]

    class Matmul:
        def __init__(self, a, b, options=None):
            self.handle, self.mm_desc = 11, 12
            self.alpha, self.beta = np.ones(1, np.float32), np.zeros(1, np.float32)
            self.a_layout_ptr, self.b_layout_ptr, self.c_layout_ptr, self.d_layout_ptr = 21, 22, 23, 24

        def plan(self, preferences=None):
            self.algorithms = list(algos)
            buf = np.zeros(2, dtype=[("algo", np.uint64, (8,)), ("workspace_size", np.uint64)])
            buf["workspace_size"] = [1024, 4096]
            self.algorithms_buffer = buf
            self.algorithm_object_to_buffer = dict(zip(self.algorithms, buf))
            return self.algorithms

        def autotune(self, iterations=5):
            self.algorithms = self.algorithms[::-1]

    adv = types.SimpleNamespace(Matmul=Matmul, MatmulComputeType=types.SimpleNamespace(COMPUTE_32F=68),
                                MatmulPlanPreferences=lambda limit: limit)
    lt = types.SimpleNamespace(matmul=lambda *args: calls.append(args))
    nvmath = types.ModuleType("nvmath")
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "nvmath", nvmath)
    monkeypatch.setitem(sys.modules, "nvmath.linalg", types.SimpleNamespace(advanced=adv))
    monkeypatch.setitem(sys.modules, "nvmath.linalg.advanced", adv)
    monkeypatch.setitem(sys.modules, "nvmath.bindings", types.SimpleNamespace(cublasLt=lt))
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublasLt", lt)
    return calls, Arr


def test_bind_calls_cublaslt_with_the_callers_pointers_and_stream(fakes):
    """bind takes the algo field of the algorithm's buffer record (as nvmath's execute does) and the plan's largest workspace."""
    from evo.ltgemm import LtGemm

    calls, Arr = fakes
    g = LtGemm(128, 256, 64)
    assert algorithm_config(g.heuristic)["algorithm_id"] == 3
    alg = g.find({"algorithm_id": 21, "tile": [64, 128]})
    assert alg is not None and g.find({"algorithm_id": 99}) is None
    assert algorithm_config(g.autotune())["algorithm_id"] == 21
    fn = g.bind(alg)
    a, b, c = Arr((128, 64)), Arr((256, 64)), Arr((128, 256))
    fn(a, b, c)
    (args,) = calls
    handle, desc, alpha, pa, la, pb, lb, beta, pc, lc, pd, ld, algo, ws, ws_size, stream = args
    assert (handle, desc, la, lb, lc, ld) == (11, 12, 21, 22, 23, 24)
    assert (pa, pb, pc, pd) == (a.data.ptr, b.data.ptr, 0, c.data.ptr) and stream == 777 and ws_size == 4096


def test_cublas_gemm_is_capture_safe_on_the_current_stream(fakes, monkeypatch):
    """CublasGemm never touches CuPy's cuBLAS wrappers (they refuse a capturing stream): its own handle, the stream
    set only when it changes, gemm_ex on the current stream; a user workspace, where asked for, is set again after
    every stream change (cublasSetStream resets it), else cuBLAS's stream-ordered pool is used."""
    from evo import ltgemm

    _, Arr = fakes
    log = []
    cb = types.SimpleNamespace(create=lambda: 55, destroy=lambda h: log.append(("destroy", h)),
                               set_stream=lambda h, s: log.append(("stream", h, s)),
                               set_workspace=lambda h, p, n: log.append(("ws", h, p, n)),
                               gemm_ex=lambda *args: log.append(("gemm",) + args))
    monkeypatch.setitem(sys.modules, "nvmath.bindings", types.SimpleNamespace(cublas=cb))
    monkeypatch.setitem(sys.modules, "nvmath.bindings.cublas", cb)
    cupy = sys.modules["cupy"]
    stream = types.SimpleNamespace(ptr=777)

    class Dev:
        def __init__(self, i):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class WsArr(Arr):
        nbytes = 1 << 20

    cupy.empty = lambda shape, dtype=None: WsArr(shape, dtype)
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: stream, Device=Dev,
                                      runtime=types.SimpleNamespace(getDevice=lambda: 0))
    g = ltgemm.CublasGemm(0, workspace=1 << 20)
    a, b, c = Arr((128, 64)), Arr((256, 64)), Arr((128, 256))
    g(a, b, c)
    g(a, b, c)
    stream.ptr = 888  # another stream (e.g. torch's side stream or a capturing one)
    g(a, b, c)
    kinds = [e[0] for e in log]
    assert kinds == ["stream", "ws", "gemm", "gemm", "stream", "ws", "gemm"]
    assert log[0] == ("stream", 55, 777) and log[4] == ("stream", 55, 888)
    assert log[1] == ("ws", 55, g.ws.data.ptr, 1 << 20)
    gemm = log[2]
    # (handle, transa, transb, m, n, k, alpha, B, type, ldb, A, type, lda, beta, C, type, ldc, compute, algo)
    assert gemm[1:7] == (55, ltgemm.CUBLAS_OP_T, ltgemm.CUBLAS_OP_N, 256, 128, 64)
    assert (gemm[8], gemm[11], gemm[15]) == (b.data.ptr, a.data.ptr, c.data.ptr)
    assert (gemm[10], gemm[13], gemm[17]) == (64, 64, 256) and gemm[18:] == (ltgemm.CUBLAS_COMPUTE_32F, -1)
    g.close()
    assert log[-1] == ("destroy", 55) and g.handle == 0
    log.clear()
    g = ltgemm.CublasGemm(0)  # default: cuBLAS's own workspace pool, never set
    g(a, b, c)
    assert [e[0] for e in log] == ["stream", "gemm"] and g.ws is None


def test_lt_plan_finds_the_same_algorithm_planned_for_another_input_set(monkeypatch):
    """bench.compare --placements plans cuBLASLt once per input set and times the autotune's pick on each: LtPlan.find
    names it among another plan's algorithms by configuration (distinct objects, same fields), None where absent."""
    baselines = _baselines_without_cupy(monkeypatch)
    plan = baselines.LtPlan.__new__(baselines.LtPlan)
    plan.mm = types.SimpleNamespace(algorithms=[FakeAlg(3), FakeAlg(21, tile=(128, 256)), FakeAlg(21)])
    picked = FakeAlg(21)  # from the first set's plan
    assert plan.find(picked) is plan.mm.algorithms[2]
    assert plan.find(FakeAlg(5)) is None


def _baselines_without_cupy(monkeypatch):
    import importlib

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(ndarray=object))  # (annotations only)
    monkeypatch.delitem(sys.modules, "evo.baselines", raising=False)
    baselines = importlib.import_module("evo.baselines")
    monkeypatch.delitem(sys.modules, "evo.baselines", raising=False)  # the next import sees the real cupy again
    return baselines


def _plans(baselines, per_set: list[list[int]], ran: list):
    """One fake plan per input set; set s plans algorithms per_set[s] (ids), and executing one logs (set, id)."""
    plans = []
    for s, ids in enumerate(per_set):
        plan = baselines.LtPlan.__new__(baselines.LtPlan)
        plan.mm = types.SimpleNamespace(algorithms=[FakeAlg(i) for i in ids],
                                        execute=lambda algorithm, s=s: ran.append((s, algorithm.algorithm_id)))
        plan.tuned = None
        plans.append(plan)
    return plans


class SetTimer:
    """Runs every contender warm-up + reps times, one after another, and times each call by what it ran:
    us[(set, algorithm id)]."""

    def __init__(self, us: dict, ran: list):
        self.us, self.ran = us, ran

    def measure(self, contenders, reps, warmup):
        out = {}
        for name, run in contenders.items():
            for _ in range(warmup):
                run()
            samples = []
            for _ in range(reps):
                run()
                samples.append(self.us[self.ran[-1]])
            out[name] = types.SimpleNamespace(samples=samples)
        return out


@pytest.mark.parametrize("sets", [2, 4])
@pytest.mark.parametrize("fast_on", [{0}, {1, 3}])
def test_autotune_pick_is_the_fastest_over_every_input_set_not_on_one(monkeypatch, sets, fast_on):
    """Algorithm 7 is the fastest on some sets (the first; or the odd ones, which after 3 warm-ups are the ones the
    even repetitions run on), algorithm 9 over all of them: chosen across the sets, 9 wins, and every plan's `tuned` is
    its own copy; an algorithm one set did not plan (5) is never timed; each half of the repetitions (choice, report)
    sees every set equally often."""
    baselines = _baselines_without_cupy(monkeypatch)
    ran: list = []
    plans = _plans(baselines, [[7, 9, 5]] + [[9, 7]] * (sets - 1), ran)
    us = {(s, 7): (10.0 if s in fast_on else 20.0) for s in range(sets)}
    us.update({(s, 9): 12.0 for s in range(sets)})
    first, pick = baselines.select_across(plans, SetTimer(us, ran), reps=6, warmup=3)
    assert pick.name == "algorithm_1" and first is plans[0].mm.algorithms[1]
    assert [pl.tuned.algorithm_id for pl in plans] == [9] * sets
    assert all(pl.tuned is pl.mm.algorithms[[a.algorithm_id for a in pl.mm.algorithms].index(9)] for pl in plans)
    assert {a for _, a in ran} == {7, 9}
    timed = [s for s, a in ran if a == 7][3:]  # algorithm 7's timed calls, after its 3 warm-ups
    half = len(timed) // 2
    assert len(timed) % (2 * sets) == 0
    for part in (timed[:half], timed[half:]):
        assert sorted(part) == sorted(list(range(sets)) * (half // sets))
    # one set alone: the set's own fastest, as LtPlan.select always chose
    ran.clear()
    alone = _plans(baselines, [[7, 9, 5]], ran)
    us1 = {(0, 7): 10.0, (0, 9): 12.0, (0, 5): 30.0}
    alg, _ = alone[0].select(SetTimer(us1, ran), reps=6)
    assert alg.algorithm_id == 7


def test_autotune_pick_needs_an_algorithm_every_set_planned(monkeypatch):
    baselines = _baselines_without_cupy(monkeypatch)
    ran: list = []
    plans = _plans(baselines, [[7], [9]], ran)
    with pytest.raises(baselines.EvoError, match="every input set"):
        baselines.select_across(plans, SetTimer({}, ran), reps=4)
