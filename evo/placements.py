"""Contenders over several placements of their buffers.

A GEMM's time can depend on where its buffers lie (cuBLAS on 512x2048x4096: 17.6 to 20.1 us over six input sets of
one process, each set's time repeatable; docs/perf-flush.md), so a time taken on one input set is one draw. A contender
built with `rotating` runs call i on input set i mod P, so its median is over all P sets; `input_sets` allocates the P
sets at different addresses; a choice among contenders timed so (the cuBLASLt autotune's) is made on whole rotations
(`whole_rotations` here, `evo.autotune_pick.pick_fastest(..., sets=P)`).
"""
from __future__ import annotations

from typing import Callable

MAX_PLACEMENTS = 11  # pad_bytes gives this many sets gaps of distinct sizes
MAX_PAD = MAX_PLACEMENTS << 20  # the largest gap pad_bytes allocates before a set


def rotating(calls: list[Callable[[], None]]) -> Callable[[], None]:
    """One contender over several placements: call i runs calls[i % len(calls)]."""
    if not calls:
        raise ValueError("rotating() needs at least one call")
    state = {"i": 0}

    def run() -> None:
        i = state["i"]
        state["i"] = i + 1
        calls[i % len(calls)]()

    return run


def pad_bytes(i: int) -> int:
    """The gap allocated before input set i: 1 to 11 MiB, a different size for each of the first MAX_PLACEMENTS sets
    (the gaps bench.placement_probe measured with), so the sets' buffers do not repeat one pattern of addresses."""
    return ((i * 37) % MAX_PLACEMENTS + 1) << 20


def input_sets(p, seeds: list[int]) -> tuple[list, list]:
    """One input set (A, B, C) per seed; with several, each allocated after a gap of its own size (pad_bytes), so
    their buffers lie at different addresses. Returns the sets and the gaps (kept alive while the sets are used)."""
    import cupy

    from .check import random_inputs

    sets, gaps = [], []
    for i, seed in enumerate(seeds):
        if len(seeds) > 1:  # (one set: allocated as it always was)
            gaps.append(cupy.empty(pad_bytes(i), dtype=cupy.uint8))
        a, b = random_inputs(p, cupy.random.RandomState(seed))
        sets.append((a, b, cupy.empty((p.m, p.n), dtype=cupy.float16)))
    return sets, gaps


def whole_rotations(reps: int, p: int) -> int:
    """At least `reps` (and 2) repetitions; with several sets, two halves of whole rotations, so that each half of a
    rotating contender's samples covers every set equally often."""
    n = max(2, reps)
    return n if p == 1 else 2 * p * -(-n // (2 * p))
