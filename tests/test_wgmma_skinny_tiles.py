"""wgmma_skinny_sm90's tile mapping (the prologue's `cid` -> tile lines of kernel.cu), read from the template and
evaluated here with its float division (`div_small`) emulated as the GPU computes it: every cluster of the grid lands
on its own tile of the padded tile grid, and the family's `requires` keeps the division inside its exact range (the
helper is wgmma_sm90's, whose exactness tests/test_wgmma_raster.py checks)."""
import re
from pathlib import Path

import pytest

from test_wgmma_raster import KERNEL as SM90_KERNEL
from test_wgmma_raster import div_small_f32
from test_wgmma_split_order import _run, _statements

KERNEL = Path(__file__).resolve().parent.parent / "templates" / "wgmma_skinny_sm90" / "kernel.cu"
DIV_SMALL = re.compile(r"__device__ __forceinline__ int div_small\(int a, int b\) \{.*?\n\}", re.S)


def _mapping_from_template():
    body = re.search(r"cid /= G;(.*?)const int kblocks", KERNEL.read_text(), re.S)
    assert body, "the prologue's tile mapping not found in the template"
    code = _statements(body.group(1), "prologue")

    def f(cid: int, nr: int, nc: int, consts: dict) -> tuple[int, int]:
        env = _run(code, {"cid": cid, "nr": nr, "nc": nc, "div_small": lambda a, b: int(div_small_f32(a, b)), **consts})
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


def test_div_small_is_wgmma_sm90s_and_requires_bounds_its_operand_below_2_22():
    src = KERNEL.read_text()
    assert DIV_SMALL.search(src).group(0) == DIV_SMALL.search(SM90_KERNEL.read_text()).group(0)
    req = re.search(r'^requires: "(.*)"', src, re.M).group(1)
    assert "< 4194304" in req and "div_small(cid, tmg_count)" in src
