"""Libraries timed beside candidates get the device work of a candidate's fresh inputs around each call
(evo.fresh.like_candidates, timing.library_fresh_work): one shadow FreshInputs, no full comparisons, the call itself
untouched. The GPU side runs it around cuBLAS for real."""
from __future__ import annotations

import importlib

import pytest

from evo.config import load_config
from evo.problem import parse_shape

from test_runoff_placements import session_module  # noqa: F401  (the fixture: evo against a mock cupy where none is)


class FakeFresh:
    """Records how it was made and every hook call."""

    made: list = []

    def __init__(self, problem, cfg, seed, warmup, reps, off=frozenset(), sms=132, full_checks=True):
        self.args = dict(problem=problem, warmup=warmup, reps=reps, sms=sms, full_checks=full_checks)
        self.log: list = []
        FakeFresh.made.append(self)

    def before(self):
        self.log.append("before")

    def after(self):
        self.log.append("after")


def test_every_library_call_gets_one_shadows_hooks(session_module, monkeypatch):  # noqa: F811
    fresh = importlib.import_module("evo.fresh")
    Contender = importlib.import_module("evo.timing").Contender
    FakeFresh.made = []
    monkeypatch.setattr(fresh, "FreshInputs", FakeFresh)
    ran: list = []
    p = parse_shape("512x2048x4096")
    got = fresh.like_candidates({"cublas": lambda: ran.append("cublas"),
                                 "lt": Contender(run=lambda: ran.append("lt"))},
                                p, load_config().check, 7, warmup=5, reps=30, sms=132)
    (shadow,) = FakeFresh.made
    assert shadow.args == dict(problem=p, warmup=10, reps=60, sms=132, full_checks=False)  # both libraries' calls
    assert set(got) == {"cublas", "lt"}
    for name, c in got.items():
        assert c.before == shadow.before and c.after == shadow.after
        c.before()
        c.run()
        c.after()
    assert ran == ["cublas", "lt"] and shadow.log == ["before", "after"] * 2
    assert fresh.like_candidates({}, p, load_config().check, 7, 5, 30) == {}
    with pytest.raises(ValueError, match="already has work around it"):
        fresh.like_candidates({"x": Contender(run=lambda: None, before=lambda: None)}, p, load_config().check, 7, 5, 30)


@pytest.mark.parametrize("on", [True, False])
def test_the_session_shadows_libraries_only_when_configured(session_module, monkeypatch, on):  # noqa: F811
    mod = session_module
    made: list = []
    monkeypatch.setattr(mod, "like_candidates", lambda calls, *a, **k: made.append(calls) or {n: "wrapped" for n in calls})
    s = mod.Session.__new__(mod.Session)
    s.cfg = load_config(overrides={"timing": {"library_fresh_work": on}})
    s.seed, s.info = 1, type("Info", (), {"sm_count": 132})()
    calls = {"cublas": lambda: None}
    got = s._like_candidates(calls, parse_shape("256x256x256"), 30)
    assert got == ({"cublas": "wrapped"} if on else calls) and len(made) == int(on)


def test_the_default_is_off():
    assert load_config().timing.library_fresh_work is False


@pytest.mark.gpu
def test_the_shadow_runs_around_cublas_and_leaves_its_output_right():
    cupy = pytest.importorskip("cupy")
    import evo.fresh as fresh
    from evo.baselines import cublas_gemm
    from evo.check import random_inputs, reference
    from evo.gpu.device import gpu_info
    from evo.timing import Timer

    info = gpu_info(0)
    p = parse_shape("256x384x128")
    a, b = random_inputs(p, cupy.random.RandomState(3))
    c = cupy.full((p.m, p.n), cupy.nan, dtype=cupy.float16)
    gemm = cublas_gemm()
    made: list = []
    real = fresh.FreshInputs

    def recording(*args, **kw):
        made.append(real(*args, **kw))
        return made[-1]

    fresh.FreshInputs = recording
    try:
        calls = fresh.like_candidates({"cublas": lambda: gemm(a, b, c)}, p, load_config().check, 11, 2, 5, info.sm_count)
    finally:
        fresh.FreshInputs = real
    t = Timer(info.l2_bytes, True, seed=1, sms=info.sm_count).measure(calls, 5, 2)
    (shadow,) = made
    assert len(shadow.log) == 7 and len(shadow.verdicts) == 7 and shadow.checked == []
    assert t["cublas"].reps == 5 and t["cublas"].median_us > 0
    ref = reference(a, b)
    assert float(cupy.max(cupy.abs(c.astype(cupy.float32) - ref))) < 0.1  # the library wrote its own C, not the shadow's


@pytest.mark.parametrize("with_candidate", [True, False])
def test_the_runoff_shadows_every_library_only_beside_candidates(session_module, monkeypatch, with_candidate):  # noqa: F811
    # handle_baselines: with candidates (extra) every library contender carries the shadow's hooks, the candidate its
    # own fresh inputs; libraries timed alone stay as they were
    from test_runoff_placements import make_session

    mod = session_module
    session, log = make_session(mod, monkeypatch, 1, {0: [3, 7]}, lambda e: 10.0)
    session.cfg = load_config(overrides={"baselines": {"placements": 1}, "timing": {"library_fresh_work": True}})
    seen: dict = {}
    measure = session.timer.measure

    def capture(contenders, reps, warmup):
        seen.update(contenders)
        return measure(contenders, reps, warmup)

    session.timer.measure = capture
    session.info = type("Info", (), {"sm_count": 132})()
    shadows: list = []
    monkeypatch.setattr(mod, "like_candidates", lambda calls, *a, **k: shadows.append(set(calls)) or {
        n: mod.Contender(run=getattr(c, "run", c), before=lambda: None, after=lambda: None) for n, c in calls.items()})

    class Rot:
        def __init__(self, *a, **k):
            pass

        def before(self):
            pass

        def after(self):
            pass

        def args(self):
            return (0, 0, 0)

        def verify(self, what=""):
            return ""

    class Kernel:
        def __call__(self, *args):
            log.append(("evo", 0, 0))

        def close(self):
            pass

    monkeypatch.setattr(mod, "FreshInputs", Rot)
    monkeypatch.setattr(mod, "KernelSource", type("KS", (), {"parse": staticmethod(lambda s: s)}))
    monkeypatch.setattr(mod, "compare", lambda *a, **k: type("R", (), {"error": ""})())
    monkeypatch.setattr(mod, "reference", lambda a, b: None)
    session._launcher = lambda ks, cubin, p: Kernel()
    extra = {"evo": ("src", "cubin")} if with_candidate else None
    res = session.handle_baselines(parse_shape("512x2048x4096"), extra=extra, reps=30)
    libs = {n for n in seen if n != "evo"}
    assert libs and "cublas" in libs
    if with_candidate:
        assert shadows == [libs] and all(seen[n].before is not None for n in libs)
        assert isinstance(seen["evo"], mod.Contender) and res["results"]["evo"].detail == ""
    else:
        assert shadows == [] and all(getattr(seen[n], "before", None) is None for n in libs)


@pytest.fixture
def evo_np(monkeypatch):
    """evo.check and evo.fresh on the numpy stand-in for CuPy (tests/numpy_cupy.py), put back after the test."""
    import numpy_cupy

    yield from numpy_cupy.installed(monkeypatch)


def test_the_shadow_is_a_real_fresh_inputs_that_checks_nothing_in_full(evo_np, monkeypatch):
    # the real FreshInputs on the numpy stand-in for CuPy (tests/numpy_cupy.py): every library call gets its refill,
    # poison and checksums, no call is compared in full (one scratch snapshot), and the library's own output is left
    # alone
    import dataclasses
    import sys
    import types

    import numpy as np

    _, fresh_np = evo_np

    @dataclasses.dataclass
    class Contender:
        run: object
        before: object = None
        after: object = None

    stub = types.ModuleType("evo.timing")  # evo.timing imports CuPy's RawKernel; only its Contender is needed here
    stub.Contender, stub.as_contender = Contender, lambda c: c if isinstance(c, Contender) else Contender(c)
    monkeypatch.setitem(sys.modules, "evo.timing", stub)
    p = parse_shape("64x48x96")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((p.m, p.k)).astype(np.float16)
    b = rng.standard_normal((p.n, p.k)).astype(np.float16)
    outs = {n: np.full((p.m, p.n), np.nan, dtype=np.float16) for n in ("cublas", "lt")}

    def library(name):
        def call():
            outs[name][...] = (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)
        return call

    made: list = []
    real = fresh_np.FreshInputs
    monkeypatch.setattr(fresh_np, "FreshInputs", lambda *x, **k: made.append(real(*x, **k)) or made[-1])
    calls = fresh_np.like_candidates({n: library(n) for n in outs}, p, load_config().check, 9, warmup=2, reps=5)
    for _ in range(7):
        for c in calls.values():
            c.before()
            c.run()
            c.after()
    (shadow,) = made
    assert shadow.checked == [] and len(shadow.snaps) == 1
    assert len(shadow.log) == len(shadow.verdicts) == 14 and shadow.calls_max == 14
    assert all(np.isnan(v.got) for v in shadow.verdicts)  # its C stays poisoned: no library writes it
    assert len({(lg.seed_a, lg.seed_b) for lg in shadow.log}) == 14  # new inputs every call, as a candidate's
    ref = (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)
    assert all(np.array_equal(o, ref) for o in outs.values())
