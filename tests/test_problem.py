import pytest

from evo.errors import EvoError
from evo.problem import parse_shape, wave_efficiency


@pytest.mark.parametrize("text,dims", [("4096x4096x1024", (4096, 4096, 1024)), ("128,128,16384", (128, 128, 16384)),
                                       (" 64 x 64 x 64 ", (64, 64, 64)), ("1x1x1", (1, 1, 1))])
def test_parse_good(text, dims):
    p = parse_shape(text)
    assert (p.m, p.n, p.k) == dims
    assert p.layout == "TN"
    assert p.key == "x".join(map(str, dims))


@pytest.mark.parametrize("text", ["4096x4096", "0x1x1", "-1x2x3", "1e9x1x1", "axbxc", "", "1x2x3x4", "4096x4096x1024.5",
                                  "2000000x1x1", "1048576x1048576x1024"])
def test_parse_bad(text):
    with pytest.raises(EvoError) as e:
        parse_shape(text)
    assert "\n" not in str(e.value)


def test_roofline_and_flops():
    p = parse_shape("4096x4096x1024")
    assert p.flops == 2 * 4096 * 4096 * 1024
    # compute bound at 800 TFLOP/s: 34.36 GFLOP -> 42.9 us, memory 2*(4M+4M+16M)=50 MB at 4300 GB/s = 11.7 us
    assert p.roofline_us(800, 4300) == pytest.approx(42.95, rel=1e-3)
    small = parse_shape("128x128x16384")
    assert small.roofline_us(800, 4300) == pytest.approx(2 * (128 * 16384 * 2 + 128 * 128) / 4300e9 * 1e6, rel=1e-6)


def test_wave_efficiency():
    assert wave_efficiency(132, 132) == 1.0
    assert wave_efficiency(133, 132) == pytest.approx(133 / 264)
