"""Selection: elitism plus tournaments over the evaluated population."""
from __future__ import annotations

import random
from dataclasses import dataclass

from .records import Individual


@dataclass(frozen=True)
class Selector:
    population: int
    elites: int
    tournament: int

    def survivors(self, individuals: list[Individual]) -> list[Individual]:
        """The next parent pool: the `elites` best always, the rest by tournament among the correct ones."""
        correct = sorted((i for i in individuals if i.correct and i.time_us > 0), key=lambda i: (i.time_us, i.hash))
        if len(correct) <= self.population:
            return correct
        keep = correct[: self.elites]
        rest = correct[self.elites:]
        rng = random.Random(len(individuals))  # deterministic for a given archive
        while len(keep) < self.population and rest:
            pick = self._tournament(rest, rng)
            keep.append(pick)
            rest.remove(pick)
        return sorted(keep, key=lambda i: (i.time_us, i.hash))

    def parent(self, pool: list[Individual], rng: random.Random) -> Individual:
        return self._tournament(pool, rng)

    def _tournament(self, pool: list[Individual], rng: random.Random) -> Individual:
        entrants = rng.sample(pool, min(self.tournament, len(pool)))
        return min(entrants, key=lambda i: (i.time_us, i.hash))
