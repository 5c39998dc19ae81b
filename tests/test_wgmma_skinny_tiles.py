"""wgmma_skinny_sm90's tile mapping (the prologue's `cid` -> tile lines of kernel.cu), read from the template and
evaluated here with its float division (`div_small`) emulated as the GPU computes it: every cluster of the grid lands
on its own tile of the padded tile grid, and the family's `requires` keeps the division inside its exact range."""
import re
from pathlib import Path

import numpy as np
import pytest

from test_wgmma_split_order import _run, _statements

KERNEL = Path(__file__).resolve().parent.parent / "templates" / "wgmma_skinny_sm90" / "kernel.cu"


def _div_small_f32(a: int, b: int) -> int:
    est = int(np.trunc(np.float32(a) * (np.float32(1) / np.float32(b))))  # __fdividef: a * rcp(b), truncated
    rem = a - est * b
    return est + (rem >= b) - (rem < 0)


def _mapping_from_template():
    body = re.search(r"cid /= G;(.*?)const int kblocks", KERNEL.read_text(), re.S)
    assert body, "the prologue's tile mapping not found in the template"
    code = _statements(body.group(1), "prologue")

    def f(cid: int, nr: int, nc: int, consts: dict) -> tuple[int, int]:
        env = _run(code, {"cid": cid, "nr": nr, "nc": nc, "div_small": _div_small_f32, **consts})
        return env["tm"], env["tn"]

    return f


@pytest.mark.parametrize("tiles_m,tiles_n,mc,nc", [(1, 192, 1, 1), (2, 96, 2, 1), (3, 7, 1, 2), (8, 8, 2, 2),
                                                   (5, 1, 4, 1), (1, 3, 1, 4), (129, 2, 1, 1)])
def test_every_cluster_takes_its_own_tile(tiles_m, tiles_n, mc, nc):
    f = _mapping_from_template()
    tmg_count, tng_count = -(-tiles_m // mc), -(-tiles_n // nc)
    consts = {"MC": mc, "NC": nc, "tmg_count": tmg_count, "BM": 64, "BN": 64, "tng_count": tng_count}
    got = [f(cid, r, c, consts) for cid in range(tmg_count * tng_count) for r in range(mc) for c in range(nc)]
    assert len(set(got)) == len(got) == tmg_count * mc * tng_count * nc
    assert all(0 <= tm < tmg_count * mc and 0 <= tn < tng_count * nc for tm, tn in got)


def test_div_small_is_exact_over_the_range_requires_allows():
    rng = np.random.default_rng(3)
    for a, b in [(4194303, 1), (4194303, 3), (4194302, 4194303), (0, 7)] + \
            [(int(x), int(y)) for x, y in zip(rng.integers(0, 4194304, 20000), rng.integers(1, 70000, 20000))]:
        assert _div_small_f32(a, b) == a // b, (a, b)


def test_requires_bounds_the_tile_groups_below_2_22():
    req = re.search(r'^requires: "(.*)"', KERNEL.read_text(), re.M).group(1)
    assert "< 4194304" in req and "div_small(cid, tmg_count)" in KERNEL.read_text()
