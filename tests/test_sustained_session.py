"""The worker's sustained windows (evo.gpu.session.Session.handle_sustained), with the GPU faked: each kernel alone in
its windows, its calls alternating between two input sets, its output of both checked afterwards."""
from __future__ import annotations

import types

from test_runoff_placements import session_module  # noqa: F401  (the fixture: evo.gpu.session against a mock cupy)
from test_sustained import sampler

from evo.config import load_config
from evo.problem import parse_shape


def test_each_kernel_alone_alternating_two_input_sets_then_checked(session_module, monkeypatch):  # noqa: F811
    sm = session_module
    import evo.gpu.state_sampler as st

    log = []
    sets = iter([("a0", "b0"), ("a1", "b1")])
    monkeypatch.setattr(sm, "random_inputs", lambda p, rs: next(sets))
    monkeypatch.setattr(sm, "poisoned_output", lambda p: "poisoned")
    monkeypatch.setattr(sm, "reference", lambda a, b: ("ref", a))
    monkeypatch.setattr(sm, "sync", lambda: None)
    wrong = {"bad"}
    checked = []

    def compare(c, ref, cfg, what):
        name = what.split()[0]
        checked.append((name, ref[1], len(log)))
        return types.SimpleNamespace(error="relative error 1e+00" if name in wrong else "")

    monkeypatch.setattr(sm, "compare", compare)
    monkeypatch.setattr(sm.KernelSource, "parse", staticmethod(lambda src: src))

    class Kernel:
        def __init__(self, name):
            self.name, self.closed = name, False

        def __call__(self, a, b, c):
            log.append((self.name, a))

        def close(self):
            self.closed = True

    kernels = {}

    def launcher(self, ks, cubin, problem):
        kernels[ks] = Kernel(ks)
        return kernels[ks]

    monkeypatch.setattr(sm.Session, "_launcher", launcher)

    monkeypatch.setattr(st, "reasons_field", lambda: "f")
    monkeypatch.setattr(st, "sample_states", sampler(log, types.SimpleNamespace(sm_mhz_median=1400, power_w_median=680.0)))
    session = object.__new__(sm.Session)
    session.cfg, session.seed = load_config(), 1
    session.info = types.SimpleNamespace(extra={"pci_bus_id": "0000:19:00.0"})
    got = session.handle_sustained(parse_shape("256x256x256"), {"good": ("good", "g.cubin"), "bad": ("bad", "b.cubin")},
                                   seconds=0.01, rounds=2, rest=0.0)
    assert set(got) == {"good", "bad"}
    assert got["good"]["detail"] == "" and got["bad"]["detail"].startswith("WRONG: relative error")
    assert got["good"]["sm_mhz"] == 1400 and got["good"]["kcycles"] == got["good"]["us"] * 1400 * 1e-3
    # four windows (two kernels, two rounds), each holding one kernel's calls, alternating between the two sets
    timed = log[:min(n for *_, n in checked) - 1]  # before the first check's call
    chunks, cur = [], None
    for e in timed:
        if e == ("window",):
            cur = []
            chunks.append(cur)
        elif cur is not None:
            cur.append(e)
    assert len(chunks) == 4 and all(len({n for n, _ in c}) == 1 for c in chunks)
    calls = [e[1] for e in timed if e[0] == "good"]
    assert set(calls) == {"a0", "a1"} and all(x != y for x, y in zip(calls, calls[1:]))
    # afterwards each kernel's outputs of both sets checked against the reference (a wrong one: up to its first
    # failure), and every kernel closed
    assert sorted((n, a) for n, a, _ in checked) == [("bad", "a0"), ("good", "a0"), ("good", "a1")]
    assert all(k.closed for k in kernels.values())
