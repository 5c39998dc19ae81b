"""wgmma_sm90's raster (`get_work` in kernel.cu): the lines that turn a tile pair index into the tile's corner, read
from the template and evaluated here, and the float division (`div_small`) they use.

Every pair index below tiles_m * tiles_n must land on its own tile, inside the grid, in groups of GROUP tile rows
(column tiles advancing once a group's rows are done). `div_small` divides through a float reciprocal and one
correction step; its claim (exact for 0 <= a < 2^22, the family's `requires` bound on the unit count) is checked
here with reciprocals up to two ulps off, as MUFU.RCP's may be. On a GPU the instances are checked against an fp32
reference (tests/test_gpu_pipeline.py).
"""
import re

import numpy as np
import pytest

from test_wgmma_split_order import KERNEL, _run, _statements


def _raster_from_template():
    src = KERNEL.read_text()
    body = re.search(r"(const int tiles_m = cdiv\(Mk, BM\).*?)const int kblocks", src, re.S)
    assert body, "get_work's raster not found in the template"
    code = _statements(body.group(1), "get_work")

    def f(pair: int, r: int, mk: int, nk: int, consts: dict) -> tuple[int, int]:
        env = _run(code, {"pair": pair, "r": r, "Mk": mk, "Nk": nk, "cdiv": lambda a, b: -(-a // b), "min": min,
                          "div_small": lambda a, b: a // b, **consts})
        return env["w_m0"], env["w_n0"]

    return f


@pytest.mark.parametrize("group", [1, 4, 8, 16, 32])
@pytest.mark.parametrize("mk,nk,bm,bn,cluster", [(128, 12288, 128, 96, 1), (4096, 4096, 128, 128, 1),
                                                 (1030, 4104, 128, 64, 1), (200, 136, 64, 64, 2),
                                                 (12288, 12288, 128, 160, 1), (64, 64, 64, 16, 2)])
def test_raster_takes_every_tile_once(group, mk, nk, bm, bn, cluster):
    f = _raster_from_template()
    consts = {"BM": bm, "BN": bn, "CLUSTER": cluster, "GROUP": group}
    tiles_m, pairs_n = -(-mk // bm), -(-(-(-nk // bn)) // cluster)
    got = [f(p, r, mk, nk, consts) for p in range(tiles_m * pairs_n) for r in range(cluster)]
    assert len(set(got)) == len(got) == tiles_m * pairs_n * cluster
    assert all(m0 % bm == 0 and 0 <= m0 < tiles_m * bm and n0 % bn == 0 and 0 <= n0 < pairs_n * cluster * bn
               for m0, n0 in got)
    if group > 1 and tiles_m >= group:  # the first group's rows before its next column
        assert [m0 // bm for m0, _ in got[: group * cluster : cluster]] == list(range(group))


def div_small_f32(a, b, ulps: int = 0):
    """The kernel's `div_small` as the GPU computes it (`__fdividef`: a times the fp32 reciprocal of b, truncated;
    the reciprocal `ulps` off), then the remainder's correction; numpy arrays or ints."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    r = (np.float32(1) / b.astype(np.float32)).astype(np.float32)
    for _ in range(abs(ulps)):
        r = np.nextafter(r, np.float32(np.inf) if ulps > 0 else np.float32(0))
    est = np.trunc(a.astype(np.float32) * r).astype(np.int64)
    rem = a - est * b
    return est + (rem >= b) - (rem < 0)


def test_div_small_is_exact_below_its_bound():
    """The kernel's float division with reciprocals off by up to two ulps, over random and near-multiple operands."""
    rng = np.random.default_rng(20261127)
    n = 400_000
    b = np.concatenate([rng.integers(1, 1 << 22, n), rng.integers(1, 64, n), rng.integers(1, 1 << 22, n)])
    q = np.concatenate([rng.integers(0, 1 << 22, n) // b[:n], rng.integers(0, 1 << 16, n), np.zeros(n, np.int64)])
    a = np.concatenate([np.clip(q[:2 * n] * b[:2 * n] + rng.integers(-1, 2, 2 * n), 0, (1 << 22) - 1),
                        rng.integers(0, 1 << 22, n)])
    for ulps in (-2, -1, 0, 1, 2):
        assert np.array_equal(div_small_f32(a, b, ulps), a // b), ulps


def test_the_template_keeps_the_unit_bound_div_small_needs():
    src = KERNEL.read_text()
    assert "* SPLIT_K < 4194304 and" in re.search(r'^requires: "(.*)"', src, re.M).group(1)
    assert "div_small(" in src and "a / b" not in re.search(r"int div_small\(int a, int b\) \{(.*?)\n\}", src, re.S).group(1)
