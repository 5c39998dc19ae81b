"""Contenders over several placements of their buffers.

A GEMM's time can depend on where its buffers lie (cuBLAS on 512x2048x4096: 17.6 to 20.1 us over six input sets of
one process, each set's time repeatable; docs/perf-flush.md), so a time taken on one input set is one draw. A contender
built with `rotating` runs call i on input set i mod P, so its median is over all P sets.
"""
from __future__ import annotations

from typing import Callable


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
