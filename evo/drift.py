"""Timing drift: a candidate timed while the whole GPU ran slow is re-timed, and if it stays slow, its time is scaled.

Every candidate is timed interleaved with cuBLAS on the same inputs (evo.gpu.session), so cuBLAS's median in that
window says how fast the GPU ran while the candidate was timed. Something outside the kernel (another process on
the GPU, a clock or power state, the host starving the launch queue) slows both alike: measured on an H100, one
shape's search saw cuBLAS at 363 to 1595 us between windows, and a kernel timed in a slow window lost its place to
slower kernels timed in quiet ones (docs/evaluator.md, "Timing drift").

`DriftReference` keeps the lowest cuBLAS median seen beside a candidate of this run (the GPU's quiet speed;
something slowing the GPU makes cuBLAS slower, never faster). A window whose cuBLAS ran more than `tol` slower than
that is drifted: the worker times the candidate again, and if the second window drifted too, reports the candidate's
median scaled by reference / cuBLAS (its raw median kept as `measured_us`). The default tolerance (20 %) is above
what a quiet GPU's windows scatter (0.9 % of the H100 archive's windows exceed it, on 4-6 us shapes; a second
window is then quiet and the raw time is kept): docs/evaluator.md, "Timing drift".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def drifted(cublas_us: float, ref_us: float, tol: float) -> bool:
    """cuBLAS, timed beside a candidate, ran more than `tol` slower than the reference (0 = no reference, or off)."""
    return tol > 0 and ref_us > 0 and cublas_us > ref_us * (1.0 + tol)


def corrected_us(time_us: float, cublas_us: float, ref_us: float, tol: float) -> float:
    """The candidate's time as if the GPU had run at the reference speed: scaled by ref / cuBLAS in a drifted window,
    unchanged otherwise."""
    if time_us <= 0 or not drifted(cublas_us, ref_us, tol):
        return time_us
    return time_us * ref_us / cublas_us


@dataclass
class DriftReference:
    """The quiet speed of the GPU for one shape in one run: the lowest cuBLAS median timed beside a candidate."""

    tol: float
    ref_us: float = 0.0
    corrected: int = 0  # candidates whose time was scaled (both windows drifted)

    def observe(self, cublas_us: float) -> None:
        if cublas_us > 0 and (self.ref_us <= 0 or cublas_us < self.ref_us):
            self.ref_us = cublas_us


@dataclass
class Settled:
    """A candidate's time after drift: `time_us` (scaled where both windows drifted), the raw median where it was
    scaled (`measured_us`, else 0), the cuBLAS median of the window kept, and how many windows were timed."""

    time_us: float
    measured_us: float
    cublas_us: float
    windows: int


def settle(window: Callable[[], tuple[float, float]], ref_us: float, tol: float, windows: int = 2) -> Settled:
    """Time `window()` (-> the candidate's median, cuBLAS's median beside it) until a window does not drift, at most
    `windows` times; the last window is kept, scaled to the reference where it drifted."""
    n, (t, cublas) = 1, window()
    while n < windows and drifted(cublas, ref_us, tol):
        n, (t, cublas) = n + 1, window()
    scaled = corrected_us(t, cublas, ref_us, tol)
    return Settled(scaled, t if scaled != t else 0.0, cublas, n)
