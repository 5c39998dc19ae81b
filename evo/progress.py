"""Progress lines for long work: short, one per event, fit for a terminal and a log file."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from .drift import DriftReference


@dataclass
class Progress:
    budget_s: float = 0.0
    stream: object = field(default=sys.stdout)
    started: float = field(default_factory=time.monotonic)
    compiled: int = 0
    compile_failed: int = 0
    correct: int = 0
    failed: int = 0
    best_us: float = 0.0
    best_lib_us: float = 0.0
    generation: int = 0
    drift: DriftReference = field(default_factory=lambda: DriftReference(tol=0.0))  # this run's quiet cuBLAS time

    def line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def elapsed(self) -> str:
        s = int(time.monotonic() - self.started)
        return f"{s // 60}:{s % 60:02d}"

    def left(self) -> str:
        if not self.budget_s:
            return ""
        s = max(0, int(self.budget_s - (time.monotonic() - self.started)))
        return f", {s // 60}:{s % 60:02d} left"

    def status(self) -> str:
        best = f"best {self.best_us:.2f} us" if self.best_us else "no correct kernel yet"
        if self.best_us and self.best_lib_us:
            best += f" ({self.best_lib_us / self.best_us:.2f}x best library)"
        return (f"[gen {self.generation} {self.elapsed()}{self.left()}] compiled {self.compiled} "
                f"(+{self.compile_failed} failed), correct {self.correct}, rejected {self.failed} | {best}")

    def event(self, what: str) -> None:
        self.line(f"  {what}")
