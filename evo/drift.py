"""Timing drift: a candidate timed while the whole GPU ran slow is re-timed, and if it stays slow, its time is scaled.

Every candidate is timed interleaved with cuBLAS on the same inputs (evo.gpu.session), so cuBLAS's median in that
window says how fast the GPU ran while the candidate was timed. Something outside the kernel (another process on
the GPU, a clock or power state, the host starving the launch queue) slows both alike: measured on an H100, one
shape's search saw cuBLAS at 363 to 1595 us between windows, and a kernel timed in a slow window lost its place to
slower kernels timed in quiet ones (docs/evaluator.md, "Timing drift").

`DriftReference` keeps the lowest cuBLAS median seen beside a candidate of this run (the GPU's quiet speed;
something slowing the GPU makes cuBLAS slower, never faster). A window whose cuBLAS ran more than `tol` slower than
that is drifted: the worker times the candidate again (`retimed`) and keeps the less drifted window; if that one
drifted too, it reports the candidate's median scaled by reference / cuBLAS (its raw median kept as `measured_us`).
The search's final runoff is timed again by the same rule. On a shape where one window's own repetitions of cuBLAS
scatter wider than `tol` (24-31 % measured on 5-8 us shapes), the tolerance is that spread (`tolerance`): there
window medians 20 % apart are that noise, not a slow GPU. After a slow window the worker also asks what the GPU
reports (clocks, power, clock limits, other processes: evo/gpu/gpu_state.py); the search's log shows it. The default tolerance (20 %) is above what a quiet GPU's
windows scatter (0.9 % of the H100 archive's windows exceed it, on 4-8 us shapes; a second window is then likely
quiet and the raw time kept): docs/evaluator.md, "Timing drift".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, TypeVar

W = TypeVar("W")  # one timing window's result


def drifted(cublas_us: float, ref_us: float, tol: float) -> bool:
    """cuBLAS, timed beside a candidate, ran more than `tol` slower than the reference (0 = no reference, or off)."""
    return tol > 0 and ref_us > 0 and cublas_us > ref_us * (1.0 + tol)


def tolerance(tol: float, cublas_spread: float) -> float:
    """The drift tolerance of one shape: `tol` (timing.drift_tol), or cuBLAS's own spread on the shape ((p90 - min) /
    median of its baseline's repetitions) where that is wider; 0 (off) stays off."""
    return max(tol, cublas_spread) if tol > 0 else 0.0


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
    states: list[str] = field(default_factory=list)  # what the GPU reported after slow windows (distinct, first few)

    def observe(self, cublas_us: float) -> None:
        if cublas_us > 0 and (self.ref_us <= 0 or cublas_us < self.ref_us):
            self.ref_us = cublas_us

    def note_state(self, state: str, most: int = 3) -> None:
        if state and state not in self.states and len(self.states) < most:
            self.states.append(state)


def retimed(first: W, window: Callable[[], W], cublas_us: Callable[[W], float], ref_us: float, tol: float,
            most: int = 2) -> list[W]:
    """`first` and, while the last window drifted, more windows (`window()`), at most `most` in all; returned least
    drifted first (lowest cuBLAS). The candidate's timing and the search's runoff share this rule."""
    got = [first]
    while len(got) < most and drifted(cublas_us(got[-1]), ref_us, tol):
        got.append(window())
    return sorted(got, key=cublas_us)
