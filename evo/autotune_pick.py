"""The cuBLASLt autotune baseline: the fastest planned algorithm, chosen and timed without a winner's curse.

Every planned cuBLASLt algorithm runs as its own contender in the baselines' interleaved, L2-flushed measurement. The
fastest is chosen by the medians of the even-numbered repetitions and reported by the median of the odd-numbered ones,
so the reported time is not the minimum of several noisy medians (which would be biased low, by about one median's
noise where algorithms tie). Where each contender ran on several input sets in turn (evo.placements), the choice is
made on the first half of the repetitions and reported by the second, each half whole rotations, so both see every set
(even / odd repetitions would each see half of the sets when their number is even). nvmath-python's own autotune (5
unflushed iterations) picked different algorithms from run to run on one shape, and its pick was up to 10 % slower
than the fastest planned algorithm (docs/evaluator.md, docs/perf-hopper.md Run 24).
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import median


@dataclass(frozen=True)
class AutotunePick:
    name: str                       # the contender chosen (one of the planned algorithms' names)
    samples: list[float]            # its held-out repetitions (odd-numbered; the second half over sets): the reported time's
    choice_us: dict[str, float]     # every contender's median over the choosing repetitions


def pick_fastest(samples: dict[str, list[float]], sets: int = 1) -> AutotunePick:
    """The contender with the lowest median over repetitions 0, 2, 4, ..., and its repetitions 1, 3, 5, ...; with
    `sets` > 1 input sets run in turn (repetition r on set r mod sets, whole rotations in each half), over the first
    half of the repetitions, and its second half. With fewer than two repetitions each, the one repetition both
    chooses and reports."""
    if not samples:
        raise ValueError("no cuBLASLt algorithm was timed")
    choice: dict[str, float] = {}
    held: dict[str, list[float]] = {}
    for n, s in samples.items():
        if not s:
            continue
        c, r = (s[0::2], s[1::2]) if sets == 1 else (s[:len(s) // 2], s[len(s) // 2:])
        choice[n], held[n] = median(c or s), list(r or s)
    if not choice:
        raise ValueError("no cuBLASLt algorithm has a timed repetition")
    name = min(choice, key=lambda n: (choice[n], n))
    return AutotunePick(name, held[name], choice)
