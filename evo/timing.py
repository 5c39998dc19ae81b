"""Device timing: CUDA events, warm-up, L2 flushed before each repetition, contenders interleaved.

Runs inside the GPU worker. Each repetition runs every contender once, in a freshly
shuffled order; before each timed call the L2 is flushed with a buffer of 4x its size,
then a spin kernel gives the host time to queue the call, so the event window holds
device work only (no launch or Python overhead): the spin lasts at least 4x the longest
host-side call seen in warm-up.

Flush modes: "write" fills the buffer (L2 is left full of dirty lines, whose write-back
to HBM then lands inside the next timed call); "read" reads it (L2 is left full of clean
lines: the timed call starts cold and pays only for its own traffic).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Union

import cupy
import numpy as np

from .config import FLUSH_MODES
from .records import Timing

_SPIN = r"""
extern "C" __global__ void evo_spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}

// Reads n int4 of p, then m int4 of q; the (never true) test keeps the loads alive.
extern "C" __global__ void evo_flush_read(const int4* __restrict__ p, long long n, const int4* __restrict__ q,
                                          long long m, int* sink) {
    int acc = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n + m; i += stride) {
        const int4 v = i < n ? p[i] : q[i - n];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x13572468) sink[0] = acc;
}
"""


@dataclass
class Contender:
    """A timed call with work around it that stays outside the event window:
    ``before`` (e.g. generate new inputs, poison C) runs before the L2 flush, ``after``
    (e.g. a checksum of C) is queued after the stop event."""

    run: Callable[[], None]
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None


Call = Union[Callable[[], None], Contender]


def _as_contender(c: Call) -> Contender:
    return c if isinstance(c, Contender) else Contender(c)


class Timer:
    def __init__(self, l2_bytes: int, flush: bool = True, flush_bytes: int = 0, spin_us: float = 20.0, seed: int = 0,
                 flush_mode: str = "read", sms: int = 132):
        if flush_mode not in FLUSH_MODES:
            raise ValueError(f"flush_mode must be one of {FLUSH_MODES}, not {flush_mode!r}")
        self.flush = flush
        self.flush_mode = flush_mode
        self.sms = sms
        nbytes = (flush_bytes or 4 * max(l2_bytes, 1 << 20)) // 16 * 16
        self.flush_buf = cupy.zeros(nbytes // 4, dtype=cupy.int32) if flush else None
        self.spin = cupy.RawKernel(_SPIN, "evo_spin")
        self.flush_read = cupy.RawKernel(_SPIN, "evo_flush_read")
        self.sink = cupy.zeros(1, dtype=cupy.int32)
        self.spin_ns = np.int64(spin_us * 1000)
        self.rng = random.Random(seed)
        self._flips = 0

    def read(self, p: cupy.ndarray, q: cupy.ndarray | None) -> None:
        """Read every byte of p (and q): a memory-traffic floor for a kernel whose inputs are p and q."""
        q = p if q is None else q
        m = 0 if q is p else q.nbytes // 16
        self.flush_read((4 * self.sms,), (512,), (p, np.int64(p.nbytes // 16), q, np.int64(m), self.sink))

    def _prepare(self, spin_ns: np.int64) -> None:
        if self.flush_buf is not None:
            if self.flush_mode == "read":  # a read pass over 4x L2 evicts every line of A, B, C, leaves clean lines
                self.read(self.flush_buf, None)
            else:
                self._flips += 1
                self.flush_buf.fill(self._flips)  # a write pass over 4x L2 evicts every line of A, B, C
        self.spin((1,), (1,), (spin_ns,))

    def warm_up(self, contenders: dict[str, Call], warmup: int) -> np.int64:
        """Run every call `warmup` times; return a spin length (ns) that outlasts the host side of every
        call (4x the longest seen), so that host time never leaks into a timed window. A call's first run is
        left out of that when it runs more than once: it carries one-off setup (module load, library handle,
        heuristic query) that the timed runs do not, and a spin sized on it would idle the GPU for seconds."""
        host_s = 0.0
        for c in (_as_contender(x) for x in contenders.values()):
            for i in range(warmup):
                if c.before:
                    c.before()
                cupy.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                c.run()
                if i > 0 or warmup == 1:
                    host_s = max(host_s, time.perf_counter() - t0)
                if c.after:
                    c.after()
        cupy.cuda.runtime.deviceSynchronize()
        return np.int64(max(int(self.spin_ns), int(4 * host_s * 1e9)))

    def measure(self, contenders: dict[str, Call], reps: int, warmup: int = 3) -> dict[str, Timing]:
        names = list(contenders)
        calls = {n: _as_contender(c) for n, c in contenders.items()}
        spin_ns = self.warm_up(calls, warmup)
        samples: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(reps):
            order = names[:]
            self.rng.shuffle(order)
            events = []
            for name in order:
                c = calls[name]
                if c.before:
                    c.before()
                self._prepare(spin_ns)
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
