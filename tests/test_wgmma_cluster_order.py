"""wgmma_sm90's CTA pairs (CLUSTER = 2) take their units in a GPC-spread order (`cluster_spread` in kernel.cu).

The formula is read from the template itself and evaluated here: it must be a bijection of the grid's CTAs onto
units [0, grid) for every pair count (a unit no CTA takes would leave its tile of C unwritten), keep the two CTAs of
a pair on the two units of one raster pair, and put the pairs one GPC holds (consecutive pair indices) 8 raster
positions apart. That the kernel computes with it correctly is proven on a GPU (tests/test_gpu_pipeline.py checks
the family's instances on off-tile shapes).
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "templates" / "wgmma_sm90" / "kernel.cu"


def _spread_from_template():
    src = KERNEL.read_text()
    body = re.search(r"int cluster_spread\(int b\) \{(.*?)\n\}", src, re.S)
    assert body, "cluster_spread not found in the template"
    spread = int(re.search(r"constexpr int GPC_SPREAD = (\d+);", src).group(1))
    lines = [ln.strip() for ln in body.group(1).strip().splitlines()]

    def to_py(expr: str) -> str:  # the body's integer C++ (non-negative operands): / is floor division here
        expr = expr.replace("static_cast<int>(gridDim.x)", "grid").replace("/", "//")
        return expr.replace("GPC_SPREAD", str(spread)).replace("CLUSTER", "2")

    def f(b: int, grid: int) -> int:
        env = {"b": b, "grid": grid, "min": min}
        for ln in lines:
            ln = ln.rstrip(";")
            if ln.startswith("return "):
                return eval(to_py(ln[len("return "):]), env)  # noqa: S307 - our own template's arithmetic
            assert ln.startswith("const int "), ln
            for part in re.split(r",\s*(?=\w+ =)", ln[len("const int "):]):
                name, expr = part.split(" = ", 1)
                env[name.strip()] = eval(to_py(expr), env)  # noqa: S307
        raise AssertionError("no return in cluster_spread")

    return f, spread


@pytest.mark.parametrize("pairs", [1, 2, 7, 8, 9, 15, 16, 17, 33, 64, 66, 100, 257])
def test_pairs_cover_every_unit_once(pairs):
    f, _ = _spread_from_template()
    grid = 2 * pairs
    units = [f(b, grid) for b in range(grid)]
    assert sorted(units) == list(range(grid))
    for k in range(pairs):  # the two CTAs of a pair take the two units of one raster pair, rank 0 first
        assert units[2 * k] % 2 == 0 and units[2 * k + 1] == units[2 * k] + 1


def test_one_gpcs_pairs_are_spread():
    f, spread = _spread_from_template()
    grid = 132  # an H100's persistent grid of 66 pairs
    first = [f(2 * k, grid) // 2 for k in range(spread)]  # the pairs a cluster launch puts in one GPC
    gaps = {b - a for a, b in zip(first, first[1:])}
    assert min(gaps) >= 66 // spread  # consecutive pairs of one GPC are >= 8 raster pairs apart, not adjacent
