"""The sweep's shape order: where the GPU's table says evo wins first, longest first without a table."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.export import TableRow, read_table
from evo.problem import parse_shape
from evo.sweep_order import likely_wins_first, longest_first, neighbour_gain, order_pending

ROOT = Path(__file__).resolve().parent.parent


def row(shape: str, speedup: float) -> TableRow:
    p = parse_shape(shape)
    blank = {f.name: (0.0 if f.type in ("float", float) else "") for f in dataclasses.fields(TableRow)}
    return dataclasses.replace(TableRow(**blank), shape=shape, layout="TN", m=p.m, n=p.n, k=p.k,
                               speedup_best_library=speedup)


def test_shapes_near_the_tables_wins_come_first():
    rows = [row("64x64x64", 1.3), row("128x64x128", 1.25), row("64x128x256", 1.2),
            row("8192x8192x8192", 0.97), row("4096x4096x4096", 1.0), row("8192x4096x8192", 0.98)]
    small, large = parse_shape("128x128x128"), parse_shape("16384x16384x8192")
    assert neighbour_gain(small, rows) > 0.15 > 0 > neighbour_gain(large, rows)
    assert [p.key for p in likely_wins_first([large, small], rows)] == [small.key, large.key]
    assert [p.key for p in longest_first([small, large])] == [large.key, small.key]
    # a row without an evo kernel counts as a loss, not as nothing
    assert neighbour_gain(small, [row("128x128x128", 0.0)]) < 0
    # equal gains (here: no rows) fall back to longest first
    assert likely_wins_first([small, large], []) == longest_first([small, large])


def test_without_a_table_the_order_is_longest_first(tmp_path):
    shapes = [parse_shape(s) for s in ("64x64x64", "8192x8192x8192", "1024x1024x1024")]
    got, words = order_pending(shapes, "likely-wins", tmp_path, "Fake_GPU")
    assert got == longest_first(shapes) and words.startswith("longest first (no table")
    assert order_pending(shapes, "longest", tmp_path, "Fake_GPU") == (longest_first(shapes), "longest first")
    with pytest.raises(EvoError):
        order_pending(shapes, "shortest", tmp_path, "Fake_GPU")


def test_the_committed_table_replayed_finds_wins_first():
    """Each row of the committed H200 table ranked by its neighbours without itself: the first 20 shapes hold
    at least twice the wins of longest first and of a random order's expectation."""
    _, rows = read_table(ROOT / "kernels_out" / "NVIDIA_H200")
    wins = {r.shape for r in rows if r.verdict == "win"}
    assert len(rows) >= 60 and len(wins) >= 20

    def first(order: list[str], n: int = 20) -> int:
        return sum(s in wins for s in order[:n])

    problems = {r.shape: parse_shape(r.shape) for r in rows}
    gain = {r.shape: neighbour_gain(problems[r.shape], [o for o in rows if o.shape != r.shape]) for r in rows}
    longest = [p.key for p in longest_first(list(problems.values()))]
    likely = sorted(gain, key=lambda s: (-round(gain[s], 6), longest.index(s)))
    expected_random = 20 * len(wins) / len(rows)
    assert first(likely) >= 2 * max(first(longest), expected_random)
