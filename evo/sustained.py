"""Sustained load: kernels run back to back for seconds, and what one call costs in SM cycles there.

A call of a few milliseconds draws the board to its power cap, and the driver lowers the SM clock. Then a harness
that interleaves its contenders, so that they share one clock (bench.compare's cold judge), sees the ratio of their
**cycles** per call, not of their times at full clock. Two kernels that tie at full clock can differ there by
several per cent: a cooperative kernel that spends less energy per FLOP but more cycles reads 0.967x the autotune
in the judge at 1560 MHz and 0.996x at 1830 (16384^2 x 4096 on an H200; docs/perf-hopper.md Runs 64-66).

    calls, seconds = sustain(call, seconds=1.5, est_us=2800.0, sync=sync)
    rows = per_contender([Sustained("a", calls, seconds, sm_mhz=1455), ...])   # medians over rounds
    order = fewest_cycles_first(ranked, tied_cold(ranked, cold_us, spreads, floor=0.02), kcycles, margin=0.01)

This module holds what needs no GPU: the back-to-back loop and its rounds (given calls, a sync and a clock
sampler), the medians over rounds and the order the search's runoff publishes by (evo/search.py: kernels that tie cold, fewest cycles first).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

BATCH_S = 0.05  # queued work between two synchronizations: long against the sync's gap, short against a window
REST_S = 0.5  # the search's idle seconds before each window, so that one kernel's heat is not the next one's start


@dataclass(frozen=True)
class Sustained:
    """One contender's window: calls made, host seconds from the first launch to the last call's end, and what
    nvidia-smi read meanwhile (median SM clock, median board power; -1 where nothing was read)."""
    contender: str
    calls: int
    seconds: float
    sm_mhz: int = -1
    power_w: float = -1.0

    @property
    def us_per_call(self) -> float:
        return 1e6 * self.seconds / self.calls


@dataclass(frozen=True)
class SustainedRow:
    """A contender's medians over its rounds: µs per call, SM clock, board power; energy (mJ) and k SM cycles of
    one call (-1 without a clock or power reading)."""
    contender: str
    rounds: int
    us: float
    sm_mhz: float
    power_w: float

    @property
    def mj(self) -> float:
        return self.power_w * self.us * 1e-3 if self.power_w >= 0 else -1.0  # W x us = uJ; / 1000 = mJ

    @property
    def kcycles(self) -> float:
        return self.us * self.sm_mhz * 1e-3 if self.sm_mhz >= 0 else -1.0  # us x MHz = cycles


def sustain(call: Callable[[], None], seconds: float, est_us: float, sync: Callable[[], None],
            clock: Callable[[], float] | None = None) -> tuple[int, float]:
    """Run `call` back to back for at least `seconds`: batches of ~BATCH_S of calls (by `est_us` a call), each
    followed by `sync`. Returns (calls, elapsed seconds by `clock`, default time.perf_counter)."""
    clock = clock or time.perf_counter
    batch = max(1, int(BATCH_S * 1e6 / max(est_us, 1e-3)))
    n, t0 = 0, clock()
    while True:
        for _ in range(batch):
            call()
        sync()
        n += batch
        elapsed = clock() - t0
        if elapsed >= seconds:
            return n, elapsed


def windows(calls: dict[str, Callable[[], None]], seconds: float, rounds: int, rest: float, sync: Callable[[], None],
            rng, sampled: Callable, sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.perf_counter, on_window: Callable | None = None) -> list[Sustained]:
    """Every call of `calls` ({contender: call}) warmed up and sized by a few calls, then run back to back alone for
    `seconds`, `rounds` times, in an order `rng` shuffles each round, after `rest` idle seconds, inside `sampled()`
    (a context manager whose .summary after the block is an evo.gpu.state_sampler.StateSummary or None: the clock
    and power read meanwhile). `on_window(round, window, summary)` is told of each window as it ends."""
    est = {}
    for name, f in calls.items():  # a few calls to size the batches (and warm each contender up)
        f()
        sync()
        t0 = clock()
        for _ in range(3):
            f()
        sync()
        est[name] = (clock() - t0) / 3 * 1e6
    out = []
    for rnd in range(rounds):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            sleep(rest)
            with sampled() as st:
                n, secs = sustain(calls[name], seconds, est[name], sync, clock)
            s = st.summary
            out.append(Sustained(name, n, secs, s.sm_mhz_median if s else -1, s.power_w_median if s else -1.0))
            if on_window is not None:
                on_window(rnd, out[-1], s)
    return out


def per_contender(windows: list[Sustained]) -> list[SustainedRow]:
    """Per contender (in order of first appearance), the medians over its rounds; readings of -1 are left out."""
    by: dict[str, list[Sustained]] = {}
    for w in windows:
        by.setdefault(w.contender, []).append(w)

    def med(xs: list[float]) -> float:
        xs = [x for x in xs if x >= 0]
        return float(statistics.median(xs)) if xs else -1.0

    return [SustainedRow(name, len(ws), med([w.us_per_call for w in ws]), med([w.sm_mhz for w in ws]),
                         med([w.power_w for w in ws])) for name, ws in by.items()]


def tied_cold(ranked: list[str], cold_us: dict[str, float], spreads: dict[str, float], floor: float) -> list[str]:
    """The contenders of `ranked` (fastest cold first) whose cold time is inside the noise band of the fastest's
    (evo.noise.band of the two spreads, at least `floor`), the fastest first."""
    from .noise import band

    if not ranked:
        return []
    top = ranked[0]
    return [h for h in ranked
            if h == top or cold_us[h] <= cold_us[top] * (1.0 + band(spreads.get(top, 0.0), spreads.get(h, 0.0), floor=floor))]


def fewest_cycles_first(ranked: list[str], tied: list[str], kcycles: dict[str, float], margin: float = 0.0) -> list[str]:
    """`ranked` with its cold ties (`tied`, some of it, the cold fastest among them) reordered by SM cycles per call under sustained load,
    fewest first, when one takes more than `margin` (a share) fewer than the cold fastest (ranked[0]); else, or
    without a reading of the cold fastest, `ranked` unchanged. In the new order a tie without a reading keeps its
    cold place after those with one; the rest of `ranked` follows unchanged."""
    read = sorted((h for h in tied if kcycles.get(h, -1.0) > 0), key=lambda h: (kcycles[h], ranked.index(h)))
    first = kcycles.get(ranked[0], -1.0) if ranked else -1.0
    if not read or first <= 0 or kcycles[read[0]] >= first * (1.0 - margin):
        return list(ranked)
    unread = [h for h in tied if h not in read]
    return read + unread + [h for h in ranked if h not in tied]
