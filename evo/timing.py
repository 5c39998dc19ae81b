"""Device timing: CUDA events, warm-up, L2 flushed before each repetition, contenders interleaved.

Runs inside the GPU worker. Each repetition runs every contender once, in a freshly
shuffled order; before each timed call the L2 is flushed by writing a buffer of 4x
its size, then a short spin kernel gives the host time to queue the call, so the
event window holds device work only (no launch or Python overhead).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Union

import cupy
import numpy as np

from .records import Timing

_SPIN = r"""
extern "C" __global__ void evo_spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
"""


@dataclass
class Contender:
    """A timed call with work around it that stays outside the event window:
    ``before`` (e.g. rotate the inputs, poison C) runs before the L2 flush, ``after``
    (e.g. a checksum of C) is queued after the stop event."""

    run: Callable[[], None]
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None


Call = Union[Callable[[], None], Contender]


def _as_contender(c: Call) -> Contender:
    return c if isinstance(c, Contender) else Contender(c)


class Timer:
    def __init__(self, l2_bytes: int, flush: bool = True, flush_bytes: int = 0, spin_us: float = 20.0, seed: int = 0):
        self.flush = flush
        nbytes = flush_bytes or 4 * max(l2_bytes, 1 << 20)
        self.flush_buf = cupy.empty(nbytes // 4, dtype=cupy.int32) if flush else None
        self.spin = cupy.RawKernel(_SPIN, "evo_spin")
        self.spin_ns = np.int64(spin_us * 1000)
        self.rng = random.Random(seed)
        self._flips = 0

    def _prepare(self) -> None:
        if self.flush_buf is not None:
            self._flips += 1
            self.flush_buf.fill(self._flips)  # a write pass over 4x L2 evicts every line of A, B, C
        self.spin((1,), (1,), (self.spin_ns,))

    def measure(self, contenders: dict[str, Call], reps: int, warmup: int = 3) -> dict[str, Timing]:
        names = list(contenders)
        calls = {n: _as_contender(c) for n, c in contenders.items()}
        for name in names:
            c = calls[name]
            for _ in range(warmup):
                if c.before:
                    c.before()
                c.run()
                if c.after:
                    c.after()
        cupy.cuda.runtime.deviceSynchronize()
        samples: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(reps):
            order = names[:]
            self.rng.shuffle(order)
            events = []
            for name in order:
                c = calls[name]
                if c.before:
                    c.before()
                self._prepare()
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                c.run()
                end.record()
                if c.after:
                    c.after()
                events.append((name, start, end))
            # the whole device, not one stream: work queued anywhere is finished before a time is read
            cupy.cuda.runtime.deviceSynchronize()
            for name, start, end in events:
                samples[name].append(cupy.cuda.get_elapsed_time(start, end) * 1000.0)  # ms -> µs
        return {n: summarize(n, s) for n, s in samples.items()}


def summarize(name: str, samples: list[float]) -> Timing:
    arr = np.asarray(samples, dtype=np.float64)
    return Timing(name=name, median_us=float(np.median(arr)), min_us=float(arr.min()),
                  p90_us=float(np.percentile(arr, 90)), reps=len(samples), samples=[round(x, 3) for x in samples])
