"""evo.sustained: the back-to-back loop, the medians over rounds, and the order the runoff publishes by."""
import pytest

from evo.sustained import Sustained, fewest_cycles_first, per_contender, sustain, tied_cold


def test_sustain_runs_whole_batches_until_the_window_is_full():
    t = [0.0]
    calls = []

    def call():
        calls.append(1)
        t[0] += 0.001  # 1 ms a call

    n, secs = sustain(call, 0.12, 1000.0, lambda: None, lambda: t[0])
    assert n == len(calls) and n % 50 == 0 and secs >= 0.12 and n == 150  # batches of 50 ms of calls


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
