"""When a shape's search has converged: its best has not improved beyond its measured noise for a while.

Time is GPU-seconds: a search holds its GPU for its whole run, so the wall time since the search started. An
improvement counts when the new best is faster than the best at the last counted improvement by more than the
noise (the best measurement's relative spread, halved, clamped to [min_noise, max_noise]). The shape stops when no
improvement has counted for ``patience_s`` and it has run at least ``min_s``. ``curve`` keeps best-so-far against
GPU-seconds for the log and the report.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class Convergence:
    REASON: ClassVar[str] = "converged"  # how reason() begins: a search's stop line names it
    patience_s: float  # 0 = never stop on a plateau
    min_s: float = 0.0
    min_noise: float = 0.01
    max_noise: float = 0.05
    best_us: float = 0.0
    anchor_us: float = 0.0  # best at the last counted improvement
    anchor_s: float = 0.0
    noise: float = 0.01
    curve: list[tuple[float, float]] = field(default_factory=list)

    def observe(self, seconds: float, time_us: float, spread: float = 0.0) -> bool:
        """A correct measurement at ``seconds`` into the search; True when it is a counted improvement."""
        if time_us <= 0:
            return False
        if self.best_us and time_us >= self.best_us:
            return False
        self.best_us = time_us
        self.curve.append((round(seconds, 3), time_us))
        if not self.anchor_us or time_us < self.anchor_us * (1.0 - self.noise):
            self.anchor_us, self.anchor_s = time_us, seconds
            self.noise = min(self.max_noise, max(self.min_noise, spread / 2.0))
            return True
        return False

    def converged(self, seconds: float) -> bool:
        if self.patience_s <= 0 or not self.best_us or seconds < self.min_s:
            return False
        return seconds - self.anchor_s >= self.patience_s

    def reason(self, seconds: float) -> str:
        return (f"{self.REASON}: best {self.best_us:.2f} us has not improved beyond its noise ({self.noise:.1%}) "
                f"for {seconds - self.anchor_s:.0f} GPU-seconds")

    def curve_line(self, points: int = 8) -> str:
        """Best-so-far against GPU-seconds, at most ``points`` points (first, last, evenly between)."""
        c = self.curve
        if not c:
            return "best so far: none"
        if len(c) > points:
            idx = sorted({round(i * (len(c) - 1) / (points - 1)) for i in range(points)})
            c = [c[i] for i in idx]
        return "best so far vs GPU-seconds: " + ", ".join(f"{s:.0f}s {us:.2f}us" for s, us in c)
