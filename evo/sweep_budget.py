"""What a sweep's shapes cost beyond their search budgets, measured on earlier shapes, and what that leaves a budget.

A shape's search spends its time budget in the search loop; the libraries' baselines, generation 0's seeds and
starts (finished past the budget by design) and the final side-by-side runoff come on top. On an H100 at a
0.5-minute budget that made a shape take 34-128 s (docs/perf-hopper.md, Run 24), so "shapes x budget" under-states a
sweep by up to 4x, and a GPU-hour budget split as if the budget were all a shape costs overruns a night. The
archive's ``sweep_shapes`` rows record each shape's wall time and the budget it was given: their median
difference is the overhead this machine pays per shape, and the estimate and the budget's first round use it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Protocol


class _Row(Protocol):
    status: str
    seconds: float
    budget_s: float


MIN_HISTORY = 3  # earlier shapes needed before their overhead is trusted
MIN_SEARCH_S = 6.0  # a round-1 search budget below this is no search; the budget then covers fewer shapes


@dataclass(frozen=True)
class Overhead:
    """Seconds a shape took beyond its search budget, the median over ``shapes`` earlier shapes of this GPU."""

    seconds: float
    shapes: int


def measured_overhead(rows: Iterable[_Row]) -> Overhead | None:
    """The median of (wall seconds - budget seconds) over done shapes that had a budget; None below MIN_HISTORY.
    A shape that converged before its budget ran out counts with its (negative) difference: the median is what a
    typical shape adds, and a sweep's estimate is never below its budgets alone minus what convergence saves."""
    extra = [r.seconds - r.budget_s for r in rows if r.status == "done" and (r.budget_s or 0) > 0 and r.seconds > 0]
    if len(extra) < MIN_HISTORY:
        return None
    return Overhead(round(statistics.median(extra), 1), len(extra))


def per_shape_seconds(budget_s: float, overhead: Overhead | None) -> float:
    """What one shape is expected to take at a search budget of budget_s (never below a tenth of the budget)."""
    if overhead is None:
        return budget_s
    return max(budget_s + overhead.seconds, 0.1 * budget_s)


def header_estimate(pending: int, budget_minutes: float, workers: int, overhead: Overhead | None, clock) -> str:
    """The sweep header's time estimate, saying what it rests on."""
    if not budget_minutes or not pending:
        return ""
    budget_s = budget_minutes * 60.0
    if overhead is None:
        return (f", {clock(pending * budget_s / workers)} of search budgets at {budget_minutes:g} min per shape (the "
                f"baselines, generation 0 and the runoff come on top, 1-4x the budget on an H100 at 0.5 min; no earlier "
                f"shapes of this GPU in the archive to measure them)")
    total = pending * per_shape_seconds(budget_s, overhead) / workers
    return (f", about {clock(total)} at {budget_minutes:g} min per shape ({overhead.seconds:+.0f} s per shape beyond "
            f"its budget, the median of {overhead.shapes} earlier shapes of this GPU)")


@dataclass(frozen=True)
class FirstRound:
    """Round 1 of a GPU-hour budget: each shape's search minutes, and how many shapes the budget reaches."""

    minutes: float
    reaches: int  # shapes the budget covers at that share (all of them unless the overhead alone exceeds it)
    overhead_s: float


def first_round(budget_s: float, share: float, pending: int, cap_minutes: float, overhead: Overhead | None) -> FirstRound:
    """Every pending shape's round-1 search budget: the round's share of the GPU-hour budget per shape, less the
    overhead a shape pays beyond its search (when measured). Where that leaves less than MIN_SEARCH_S per shape,
    the round reaches only the shapes it can give MIN_SEARCH_S each (the sweep then stops starting shapes when the
    budget is spent; the rest are left for the next run)."""
    over = max(overhead.seconds, 0.0) if overhead is not None else 0.0
    per = budget_s * share / max(1, pending)
    search_s = per - over
    reaches = pending
    if search_s < MIN_SEARCH_S:
        search_s = MIN_SEARCH_S
        reaches = min(pending, max(0, int(budget_s * share // (MIN_SEARCH_S + over))))
    minutes = search_s / 60.0
    if cap_minutes:
        minutes = min(minutes, cap_minutes)
    return FirstRound(minutes, reaches, over)
