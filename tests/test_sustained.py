"""evo.sustained: the back-to-back loop, the medians over rounds, and the order the runoff publishes by."""
import pytest

from evo.sustained import Sustained, fewest_cycles_first, per_contender, sustain, tied_cold


def sampler(log: list, summary):
    """A stand-in for evo.gpu.state_sampler.sample_states: logs ("window",) as a window opens and reports `summary`
    once it closes."""

    class Sampled:
        def __init__(self, bus, field):
            self.summary = None

        def __enter__(self):
            log.append(("window",))
            return self

        def __exit__(self, *exc):
            self.summary = summary

    return Sampled


class Clock:
    def __init__(self, per_call_s):
        self.t, self.per_call_s, self.pending = 0.0, per_call_s, 0

    def call(self):
        self.pending += 1

    def sync(self):  # the queued calls finish: device time passes
        self.t += self.pending * self.per_call_s
        self.pending = 0

    def now(self):
        return self.t


def test_a_window_queues_50_ms_batches_until_the_seconds_are_up():
    clk = Clock(0.003)  # a 3 ms call: 16 a batch
    syncs = []
    n, secs = sustain(clk.call, 0.2, 3000.0, lambda: (syncs.append(clk.pending), clk.sync()), clk.now)
    assert syncs == [16, 16, 16, 16, 16] and n == 80 and secs == pytest.approx(0.24)
    assert Sustained("x", n, secs).us_per_call == pytest.approx(3000.0)
    clk = Clock(0.2)  # a call longer than a batch: one at a time
    assert sustain(clk.call, 0.3, 2e5, clk.sync, clk.now) == (2, pytest.approx(0.4))


def test_per_contender_medians_and_cycles():
    rows = per_contender([Sustained("a", 100, 0.30, 1400, 680.0), Sustained("a", 100, 0.32, 1500, 690.0),
                          Sustained("b", 10, 0.02, -1, -1.0)])
    a, b = rows
    assert (a.contender, a.rounds) == ("a", 2) and a.us == pytest.approx(3100.0) and a.sm_mhz == 1450
    assert a.kcycles == pytest.approx(3100.0 * 1450 * 1e-3) and a.mj == pytest.approx(685.0 * 3100.0 * 1e-3)
    assert b.kcycles == -1.0 and b.mj == -1.0  # no reading: no cycles, no energy


def test_tied_cold_is_the_noise_band_of_the_fastest():
    ranked = ["x", "y", "z"]
    cold = {"x": 2776.0, "y": 2803.0, "z": 2850.0}
    assert tied_cold(ranked, cold, {}, floor=0.02) == ["x", "y"]  # 2850 / 2776 = 1.027: outside 2 %
    assert tied_cold(ranked, cold, {"x": 0.06, "z": 0.06}, floor=0.02) == ["x", "y", "z"]  # a 3 % band from the spreads
    assert tied_cold([], {}, {}, floor=0.02) == []


def test_fewest_cycles_first_reorders_only_the_ties_and_only_beyond_the_margin():
    ranked = ["x", "y", "z", "w"]
    kc = {"x": 4756.0, "y": 4677.0, "z": 4700.0}  # y takes 1.7 % fewer cycles than the cold fastest
    assert fewest_cycles_first(ranked, ["x", "y", "z"], kc, margin=0.01) == ["y", "z", "x", "w"]
    assert fewest_cycles_first(ranked, ["x", "y", "z"], kc, margin=0.02) == ranked  # inside the margin: cold order
    # a tie without a reading keeps its cold place after those with one; the rest follows unchanged
    assert fewest_cycles_first(ranked, ["x", "y", "z"], {"x": 4756.0, "y": 4740.0}) == ["y", "x", "z", "w"]
    assert fewest_cycles_first(ranked, ["x", "y", "z"], {"x": 4756.0, "y": 4740.0}, margin=0.01) == ranked
    # no reading of the cold fastest, or none at all: nothing to weigh it against
    assert fewest_cycles_first(ranked, ["x", "y", "z"], {"y": 4677.0, "x": -1.0}) == ranked
    assert fewest_cycles_first(ranked, ["x", "y"], {}) == ranked


def test_windows_run_each_contender_alone_every_round_after_its_rest():
    import random
    import types

    from evo.sustained import windows

    t, log = [0.0], []

    def call_of(name, us):
        def call():
            log.append(name)
            t[0] += us * 1e-6
        return call

    class Sampled:
        def __enter__(self):
            log.append("window")
            return self

        def __exit__(self, *exc):
            self.summary = types.SimpleNamespace(sm_mhz_median=1500, power_w_median=690.0)

    told = []
    got = windows({"a": call_of("a", 1000.0), "b": call_of("b", 2000.0)}, 0.1, 2, 0.5, lambda: None, random.Random(0),
                  Sampled, sleep=lambda s: log.append(("rest", s)), clock=lambda: t[0],
                  on_window=lambda rnd, w, s: told.append((rnd, w.contender)))
    assert [w.contender for w in got] == [c for _, c in told] and sorted(c for _, c in told) == ["a", "a", "b", "b"]
    assert [r for r, _ in told] == [0, 0, 1, 1]  # every contender once a round
    assert log.count(("rest", 0.5)) == 4 and log.count("window") == 4
    # inside a window only that contender's calls; each window fills its seconds in whole batches
    chunks, cur = [], None
    for e in log:
        if e == "window":
            cur = []
            chunks.append(cur)
        elif isinstance(e, str) and cur is not None:
            cur.append(e)
    assert all(len(set(c)) == 1 for c in chunks)
    assert {w.contender: round(w.us_per_call) for w in got} == {"a": 1000, "b": 2000}
    assert all(w.sm_mhz == 1500 and w.power_w == 690.0 for w in got)
