"""The runoff's library baselines over several input sets (evo.gpu.session.Session.handle_baselines), with the GPU faked:
cuBLAS, the cuBLASLt heuristic and every algorithm of the autotune's pool run on the sets in turn, the autotune's pick is
the fastest over all sets (not fitted to one), and the candidates' repetitions are whole rotations."""
from __future__ import annotations

import importlib
import sys
import types
from unittest import mock

import pytest

from evo.config import load_config
from evo.problem import parse_shape


@pytest.fixture
def session_module():
    """evo.gpu.session imported against a mock cupy; every evo module imported here is dropped afterwards, so no other
    test sees one bound to the mock."""
    before = dict(sys.modules)
    for name in [n for n in sys.modules if n == "cupy" or n.startswith(("cupy.", "evo"))]:
        del sys.modules[name]
    sys.modules["cupy"] = mock.MagicMock()
    try:
        yield importlib.import_module("evo.gpu.session")
    finally:
        for name in [n for n in sys.modules if n == "cupy" or n.startswith(("cupy.", "evo"))]:
            del sys.modules[name]
        sys.modules.update({n: m for n, m in before.items() if n == "cupy" or n.startswith(("cupy.", "evo"))})


class Alg:
    def __init__(self, i):
        self.i = i


class Plan:
    """A fake LtPlan on one input set: algorithms by id; `find` by id (the real one matches the configuration)."""

    def __init__(self, a, b, cfg, ids, log):
        self.set = a  # the set's index, as the fake input_sets hands it out
        self.mm = types.SimpleNamespace(algorithms=[Alg(i) for i in ids[a]])
        self.heuristic = self.mm.algorithms[0]
        self.n_algorithms = len(self.mm.algorithms)
        self.log = log

    def find(self, alg):
        return next((x for x in self.mm.algorithms if x.i == alg.i), None)

    def call(self, alg):
        assert alg in self.mm.algorithms  # each plan runs its own copy
        return lambda: self.log.append(("lt", self.set, alg.i))

    def close(self):
        pass


class Timer:
    """Runs every contender warm-up + reps times; each call's time is us(what the call logged)."""

    def __init__(self, log, us):
        self.log, self.us, self.reps = log, us, None

    def measure(self, contenders, reps, warmup):
        from evo.timing import summarize

        self.reps = reps
        out = {}
        for name, c in contenders.items():
            run = c.run if hasattr(c, "run") else c
            for _ in range(warmup):
                run()
            samples = []
            for _ in range(reps):
                run()
                samples.append(self.us(self.log[-1]))
            out[name] = summarize(name, samples)
        return out


def make_session(mod, monkeypatch, placements, ids, us):
    """A Session whose GPU side is fakes; input set i is the token i."""
    log: list = []
    cfg = load_config(overrides={"baselines": {"placements": placements}})
    monkeypatch.setattr(mod, "input_sets", lambda p, seeds: ([(i, i, i) for i in range(len(seeds))], []))
    monkeypatch.setattr(mod, "LtPlan", lambda a, b, bc: Plan(a, b, bc, ids, log))
    monkeypatch.setattr(mod, "algorithm_note", lambda alg: "")
    s = mod.Session.__new__(mod.Session)
    s.cfg, s.seed, s.off = cfg, 1, set()
    s.timer = Timer(log, us)
    s.cublas = lambda a, b, c: log.append(("cublas", a, 0))
    s._placements = lambda problem: placements
    return s, log


@pytest.mark.parametrize("placements", [2, 4])
def test_libraries_run_on_every_set_in_turn_and_the_autotune_is_chosen_over_all(session_module, monkeypatch, placements):
    # algorithm 7 is the fastest on the odd sets (the ones the even repetitions land on after 5 warm-up calls, where
    # pick_fastest would choose), algorithm 9 over all sets; set 1 did not plan algorithm 5
    ids = {s: [3, 7, 9, 5] if s != 1 else [3, 9, 7] for s in range(placements)}

    def us(entry):
        kind, s, i = entry
        if kind == "cublas":
            return 20.0
        return {3: 15.0, 9: 12.0, 5: 11.0}.get(i, 10.0 if s % 2 == 1 else 16.0)

    session, log = make_session(session_module, monkeypatch, placements, ids, us)
    assert session.cfg.timing.warmup == 5
    res = session.handle_baselines(parse_shape("512x2048x4096"), reps=30)
    assert session.timer.reps == 32  # two halves of whole rotations
    assert {(k, s) for k, s, _ in log} == {(k, s) for k in ("cublas", "lt") for s in range(placements)}
    assert not any(i == 5 for _, _, i in log)  # not planned for every set: not in the pool
    for key in [("cublas", None), ("lt", 3), ("lt", 7), ("lt", 9)]:
        sets = [s for k, s, i in log if k == key[0] and (key[1] is None or i == key[1])][-32:]
        assert sets == [sets[j % placements] for j in range(32)] and len(set(sets)) == placements, key
    t = res["results"]
    assert t["cublaslt_autotune"].time_us == pytest.approx(12.0)  # algorithm 9, reported on the second half
    assert "over %d input sets" % placements in res["notes"]["cublaslt_autotune"]
    assert t["cublaslt_heuristic"].time_us == pytest.approx(15.0) and t["cublas"].time_us == pytest.approx(20.0)
    assert not any(n.startswith("cublaslt_algorithm_") for n in t)


def test_one_set_is_the_runoff_as_before(session_module, monkeypatch):
    ids = {0: [3, 7, 9]}
    us = {3: 15.0, 7: 10.0, 9: 12.0}
    session, log = make_session(session_module, monkeypatch, 1, ids, lambda e: 20.0 if e[0] == "cublas" else us[e[2]])
    res = session.handle_baselines(parse_shape("512x2048x4096"), reps=30)
    assert session.timer.reps == 30
    assert {s for _, s, _ in log} == {0}
    assert res["results"]["cublaslt_autotune"].time_us == pytest.approx(10.0)
    assert "even repetitions" in res["notes"]["cublaslt_autotune"]


def test_placements_fall_back_where_memory_is_short(session_module, monkeypatch):
    mod = session_module
    s = mod.Session.__new__(mod.Session)
    s.cfg = load_config(overrides={"baselines": {"placements": 4}})
    p = parse_shape("16384x16384x4096")
    need = 8 * p.min_bytes + 40.0 * p.m * p.n
    for free, want in [(need + 10 * (p.min_bytes + mod.MAX_PAD), 4), (need + 1.5 * (p.min_bytes + mod.MAX_PAD), 2),
                       (need / 2, 1)]:
        monkeypatch.setattr(mod.cupy.cuda.runtime, "memGetInfo", lambda free=free: (free, 2 * free))
        assert s._placements(p) == want
    s.cfg = load_config(overrides={"baselines": {"placements": 1}})
    assert s._placements(p) == 1


def test_a_missing_cublaslt_is_an_error_not_a_smaller_best_library(session_module, monkeypatch):
    # nvmath-python missing: every "best library" would be cuBLAS alone, so timing the baselines fails in one line
    # (evo.errors.LibraryMissing); a plan that fails for another reason is a note beside cuBLAS's time, as before;
    # with cuBLASLt switched off in the configuration nothing is planned and cuBLAS is the baseline
    mod = session_module
    real_plan = mod.LtPlan
    for name in ("nvmath", "nvmath.linalg", "nvmath.linalg.advanced"):
        monkeypatch.setitem(sys.modules, name, None)  # what an import finds on a machine without nvmath-python
    with pytest.raises(mod.LibraryMissing, match="nvmath-python is not installed.*cublaslt_autotune to false"):
        real_plan(None, None, load_config().baselines)
    session, log = make_session(mod, monkeypatch, 1, {0: [3]}, lambda e: 20.0)

    def missing(a, b, bc):
        raise mod.LibraryMissing("cuBLASLt cannot be timed here: nvmath-python is not installed")

    monkeypatch.setattr(mod, "LtPlan", missing)
    with pytest.raises(mod.LibraryMissing, match="nvmath-python is not installed"):
        session.handle_baselines(parse_shape("512x2048x4096"), reps=30)

    def unplanned(a, b, bc):
        raise mod.EvoError("no algorithm")

    monkeypatch.setattr(mod, "LtPlan", unplanned)
    res = session.handle_baselines(parse_shape("512x2048x4096"), reps=30)
    assert set(res["results"]) == {"cublas"} and res["notes"]["cublaslt"] == "no algorithm"
    session.cfg = load_config(overrides={"baselines": {"placements": 1, "cublaslt_heuristic": False,
                                                       "cublaslt_autotune": False}})
    monkeypatch.setattr(mod, "LtPlan", missing)
    assert set(session.handle_baselines(parse_shape("512x2048x4096"), reps=30)["results"]) == {"cublas"}
