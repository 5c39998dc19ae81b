"""The order in which a sweep searches its pending shapes.

A sweep that a budget or the night cuts short should spend its GPU time where evo is likely to win. The GPU's own
table says where that is: a shape's nearest table rows (in log2 M, N, K) carry evo's measured speedup over the best
library, and wins cluster by class (small outputs, K <= 128 outputs, skinny long-K). `likely_wins_first` orders by
the mean log speedup of the three nearest rows, longest first among equals; without a table it is longest first
(on several GPUs the short shapes then come last and the GPUs finish together).

Replayed on the committed H200 table (81 rows, 27 wins), each row ordered by its neighbours without itself, the
first 10 / 20 shapes hold 10 / 18 wins, against 0 / 3 longest first and 3.3 / 6.7 in a random order (docs/sweep.md).
"""
from __future__ import annotations

import math
from pathlib import Path

from .errors import EvoError
from .export import TableRow, read_table
from .prior import GpuSpec
from .problem import Problem, log_distance

NEIGHBOURS = 3
FLOOR = 0.5  # a row without an evo kernel (speedup 0) counts as this ratio


def longest_first(shapes: list[Problem]) -> list[Problem]:
    """Shapes whose kernels take longest first (roofline time at H100-class rates)."""
    spec = GpuSpec()
    return sorted(shapes, key=lambda p: (-p.roofline_us(spec.peak_tflops, spec.bw_gbs), p.key))


def neighbour_gain(problem: Problem, rows: list[TableRow], k: int = NEIGHBOURS) -> float:
    """Mean log of evo's speedup over the best library on the k rows nearest to the shape (0.0 without rows)."""
    if not rows:
        return 0.0
    x = (problem.m, problem.n, problem.k)
    near = sorted(rows, key=lambda r: (log_distance(x, (r.m, r.n, r.k)), r.shape))[:k]
    return sum(math.log(max(r.speedup_best_library or 0.0, FLOOR)) for r in near) / len(near)


def likely_wins_first(shapes: list[Problem], rows: list[TableRow]) -> list[Problem]:
    """Shapes whose nearest table rows won most first; longest first among equals and without rows (a stable sort
    of the longest-first order)."""
    return sorted(longest_first(shapes), key=lambda p: -round(neighbour_gain(p, rows), 6))


def table_rows(out_dir: str | Path, gpu: str) -> list[TableRow]:
    """The GPU's table rows under the sweep's output folder; none where it has no readable table."""
    try:
        return read_table(Path(out_dir) / gpu)[1]
    except EvoError:
        return []


def order_pending(shapes: list[Problem], order: str, out_dir: str | Path, gpu: str) -> tuple[list[Problem], str]:
    """The pending shapes in the sweep's order and a few words naming it for the header."""
    if order == "longest":
        return longest_first(shapes), "longest first"
    if order != "likely-wins":
        raise EvoError(f"unknown sweep order {order!r} (likely-wins or longest)")
    rows = [r for r in table_rows(out_dir, gpu) if shapes and r.layout == shapes[0].layout]
    if not rows:
        return longest_first(shapes), f"longest first (no table of {gpu} under {out_dir} to rank by)"
    return likely_wins_first(shapes, rows), f"likely wins first (evo's speedup on the {len(rows)}-row table's nearest rows)"
