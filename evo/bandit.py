"""A UCB bandit over arms (family, proposer), paid in improvement per GPU-second.

An arm's reward is the improvement its children brought to the shape's best time (log of best-before over the
child's time, 0 when it is not faster), divided by the GPU-seconds its children took. ``allocate`` fills a
generation's compile slots: each slot goes to the arm with the highest upper confidence bound (normalized rate +
c * sqrt(2 ln T / n)); a slot given in this round counts as a pull, so one round spreads over the arms; arms never
pulled come first. Within an arm the candidates are taken in the order given (the cost model's).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, TypeVar

T = TypeVar("T")


@dataclass
class ArmStats:
    pulls: int = 0
    gain: float = 0.0  # sum of log improvements
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.gain / self.seconds if self.seconds > 0 else 0.0


class Bandit:
    def __init__(self, c: float = 1.0):
        self.c = c
        self.arms: dict[Hashable, ArmStats] = {}

    def update(self, arm: Hashable, gain: float, seconds: float) -> None:
        s = self.arms.setdefault(arm, ArmStats())
        s.pulls += 1
        s.gain += max(0.0, gain)
        s.seconds += max(0.0, seconds)

    def values(self, arms: list[Hashable], pending: dict[Hashable, int] | None = None) -> dict[Hashable, float]:
        pending = pending or {}
        top = max((self.arms[a].rate for a in self.arms), default=0.0) or 1.0
        total = sum(s.pulls for s in self.arms.values()) + sum(pending.values()) + 1
        out = {}
        for a in arms:
            s = self.arms.get(a, ArmStats())
            n = s.pulls + pending.get(a, 0)
            out[a] = math.inf if n == 0 else s.rate / top + self.c * math.sqrt(2.0 * math.log(total) / n)
        return out

    def allocate(self, candidates: dict[Hashable, list[T]], slots: int) -> list[tuple[Hashable, T]]:
        """Up to ``slots`` (arm, candidate) picks, by upper confidence bound, each arm's list in its order."""
        queues = {a: list(v) for a, v in candidates.items() if v}
        pending: dict[Hashable, int] = {}
        out: list[tuple[Hashable, T]] = []
        while len(out) < slots and queues:
            vals = self.values(list(queues), pending)
            arm = max(queues, key=lambda a: (vals[a], -pending.get(a, 0), str(a)))
            out.append((arm, queues[arm].pop(0)))
            pending[arm] = pending.get(arm, 0) + 1
            if not queues[arm]:
                del queues[arm]
        return out

    def lines(self) -> list[str]:
        if not self.arms:
            return []
        ranked = sorted(self.arms.items(), key=lambda kv: -kv[1].rate)
        parts = [f"{'/'.join(map(str, a)) if isinstance(a, tuple) else a}: {s.pulls} children, "
                 f"{s.gain:.3f} log-gain in {s.seconds:.0f} s" for a, s in ranked]
        return ["bandit (improvement per GPU-second, best first): " + "; ".join(parts)]
