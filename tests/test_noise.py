"""Noise bands: a win counts only beyond them."""
import pytest

from evo import noise


def test_band_is_half_the_mean_spread_with_a_floor():
    assert noise.band(0.02, 0.10, floor=0.02) == pytest.approx(0.03)
    assert noise.band(0.01, 0.01, floor=0.02) == pytest.approx(0.02)
    assert noise.band(floor=0.02) == 0.02
    assert noise.band(0.0, None, floor=0.005) == 0.005


@pytest.mark.parametrize("lib, evo, band, verdict", [
    (10.09, 10.0, 0.02, "tie"),   # the table's 1.009x is no win
    (10.5, 10.0, 0.02, "win"), (9.5, 10.0, 0.02, "loss"), (10.0, 0.0, 0.02, "")])
def test_verdicts(lib, evo, band, verdict):
    assert noise.verdict(lib, evo, band) == verdict
    assert noise.wins(lib, evo, band) == (verdict == "win")


def test_paired_ratio_cancels_drift_between_rounds():
    """Rounds drift by ±10 %; within each round num is 1 % slower than den: the paired median is 1.01 with a tight
    interval, and an empty measurement gives (0, 0)."""
    import numpy as np

    drift = 1 + 0.1 * np.sin(np.arange(120) / 5.0)
    r, ci = noise.paired_ratio(list(10.1 * drift), list(10.0 * drift))
    assert r == pytest.approx(1.01) and ci < 1e-9
    rs = np.random.default_rng(0)
    r, ci = noise.paired_ratio(list(10.1 * drift * (1 + 0.05 * rs.standard_normal(120))), list(10.0 * drift))
    assert 0.003 < ci < 0.05
    assert noise.paired_ratio([], []) == (0.0, 0.0)
