"""A kernel table's rows grouped by shape class: where evo wins, ties and loses, for the generated README.

A class is the best library's time (under 10 µs: launch and prologue bound; 10-50 µs; 50 µs and more) by K (up to
256: bound by writing C; up to 2048; longer). Per class: the rows, evo's wins beyond the noise band,
ties inside it and the library's wins beyond it, the geomean of evo's best kernel against the best library, the
geomean of what the table serves (evo where it wins, the library elsewhere, so 1.0 there) and the lowest row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .stats import geomean

if TYPE_CHECKING:
    from .export import TableRow  # (export builds its README with this module)

TIME_BUCKETS = ((10.0, "< 10 µs"), (50.0, "10-50 µs"), (math.inf, ">= 50 µs"))
K_BUCKETS = ((256, "K <= 256"), (2048, "256 < K <= 2048"), (math.inf, "K > 2048"))


@dataclass
class ClassSummary:
    time_class: str
    k_class: str
    rows: int
    wins: int
    ties: int
    losses: int
    evo_geomean: float  # evo's best against the best library
    served_geomean: float  # what the table serves against the best library
    lowest_shape: str
    lowest: float


def best_lib_us(r: TableRow) -> float:
    """The fastest library's time of a table row (0 where none was timed)."""
    v = [x for x in (r.cublas_us, r.cublaslt_heuristic_us, r.cublaslt_autotune_us) if x]
    return min(v) if v else 0.0


def class_of(r: TableRow) -> tuple[int, int] | None:
    """(time bucket, K bucket) indexes of a row; None without a library time or a K."""
    t, k = best_lib_us(r), r.k
    if t <= 0 or k <= 0:
        return None
    return (next(i for i, (hi, _) in enumerate(TIME_BUCKETS) if t < hi),
            next(i for i, (hi, _) in enumerate(K_BUCKETS) if k <= hi))


def summarize(rows: list[TableRow]) -> list[ClassSummary]:
    """One summary per class that holds a row with evo's ratio, in bucket order."""
    groups: dict[tuple[int, int], list[TableRow]] = {}
    for r in rows:
        c = class_of(r)
        if c is not None and r.speedup_best_library > 0:
            groups.setdefault(c, []).append(r)
    out = []
    for (ti, ki), rs in sorted(groups.items()):
        low = min(rs, key=lambda r: r.speedup_best_library)
        out.append(ClassSummary(TIME_BUCKETS[ti][1], K_BUCKETS[ki][1], len(rs),
                                sum(r.verdict == "win" for r in rs), sum(r.verdict == "tie" for r in rs),
                                sum(r.verdict == "loss" for r in rs), geomean([r.speedup_best_library for r in rs]),
                                geomean([r.speedup_best_library if r.winner == "evo" else 1.0 for r in rs]),
                                low.shape, low.speedup_best_library))
    return out


def markdown(rows: list[TableRow]) -> list[str]:
    """The classes as a Markdown table (no lines where no row has a class)."""
    sums = summarize(rows)
    if not sums:
        return []
    lines = ["| best library | K | shapes | evo wins | ties | library wins | evo's best vs best library (geomean) "
             "| the table (evo where it wins) vs best library | lowest |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {s.time_class} | {s.k_class} | {s.rows} | {s.wins} | {s.ties} | {s.losses} | {s.evo_geomean:.3f}x "
              f"| {s.served_geomean:.3f}x | {s.lowest_shape} {s.lowest:.3f}x |" for s in sums]
    return lines
