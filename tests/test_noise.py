"""Noise bands: a win counts only beyond them."""
import pytest

from evo import noise


def test_band_is_half_the_mean_spread_with_a_floor():
    assert noise.band(0.02, 0.10) == pytest.approx(0.03)
    assert noise.band(0.01, 0.01) == pytest.approx(noise.DEFAULT_FLOOR)
    assert noise.band() == noise.DEFAULT_FLOOR
    assert noise.band(0.0, None, floor=0.005) == 0.005


@pytest.mark.parametrize("lib, evo, band, verdict", [
    (10.09, 10.0, 0.02, "tie"),   # the table's 1.009x is no win
    (10.5, 10.0, 0.02, "win"), (9.5, 10.0, 0.02, "loss"), (10.0, 0.0, 0.02, "")])
def test_verdicts(lib, evo, band, verdict):
    assert noise.verdict(lib, evo, band) == verdict
    assert noise.wins(lib, evo, band) == (verdict == "win")
