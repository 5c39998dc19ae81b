"""The cuBLASLt autotune baseline: the fastest planned algorithm, chosen and timed without a winner's curse.

Every planned cuBLASLt algorithm runs as its own contender in the baselines' interleaved, L2-flushed measurement.
The fastest is chosen by the medians of the even-numbered repetitions and reported by the median of the odd-numbered
ones, so the reported time is not the minimum of several noisy medians (which would be biased low, by about one
median's noise where algorithms tie). nvmath-python's own autotune (5 unflushed iterations) picked different
algorithms from run to run on one shape, and its pick was up to 10 % slower than the fastest planned algorithm
(docs/evaluator.md, docs/perf-hopper.md Run 24).
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median


@dataclass(frozen=True)
class AutotunePick:
    name: str                       # the contender chosen (one of the planned algorithms' names)
    samples: list[float]            # its odd-numbered repetitions: the reported time's samples
    choice_us: dict[str, float]     # every contender's median over the even-numbered repetitions (the choice)


def pick_fastest(samples: dict[str, list[float]]) -> AutotunePick:
    """The contender with the lowest median over repetitions 0, 2, 4, ..., and its repetitions 1, 3, 5, ...
    With fewer than two repetitions each, the one repetition both chooses and reports."""
    if not samples:
        raise ValueError("no cuBLASLt algorithm was timed")
    choice = {n: median(s[0::2]) for n, s in samples.items() if s}
    if not choice:
        raise ValueError("no cuBLASLt algorithm has a timed repetition")
    name = min(choice, key=lambda n: (choice[n], n))
    odd = samples[name][1::2]
    return AutotunePick(name, list(odd) if odd else list(samples[name]), choice)
