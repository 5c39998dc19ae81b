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


def cell_of(ind: Individual) -> tuple:
    """MAP-Elites features: family, tile area (log2 of BM*BN, when the family has tiles) and split-K or not."""
    p = ind.params
    area = int(p.get("BM", 0)) * int(p.get("BN", 0))
    return (ind.family, area.bit_length() if area else 0, int(p.get("SPLIT_K", 1)) > 1)


@dataclass(frozen=True)
class Diversity:
    """Islands with ring migration, plus MAP-Elites cells, so the search does not collapse onto one design.

    Each individual lives on its root ancestor's island (roots are spread by hash). A generation
    works on one island (round robin); its parent pool is that island's members, the best of the
    previous island every `migrate_every` generations (migration), the champion of every MAP-Elites
    cell, and the global elites.
    """

    islands: int = 4
    migrate_every: int = 3
    elites: int = 4

    def island_of(self, ind: Individual, by_hash: dict[str, Individual]) -> int:
        seen = set()
        while ind.parent and ind.hash not in seen:
            seen.add(ind.hash)
            parent = by_hash.get(ind.parent.split(",")[0])
            if parent is None:
                break
            ind = parent
        return int(ind.hash[:8], 16) % self.islands if self.islands > 1 else 0

    def champions(self, population: list[Individual]) -> list[Individual]:
        best: dict[tuple, Individual] = {}
        for ind in population:
            if ind.correct and ind.time_us > 0:
                c = cell_of(ind)
                if c not in best or ind.time_us < best[c].time_us:
                    best[c] = ind
        return sorted(best.values(), key=lambda i: (i.time_us, i.hash))

    def pool(self, population: list[Individual], generation: int) -> tuple[int, list[Individual]]:
        """(island, parent pool best first) for this generation."""
        correct = sorted((i for i in population if i.correct and i.time_us > 0), key=lambda i: (i.time_us, i.hash))
        if self.islands <= 1 or not correct:
            return 0, correct
        by_hash = {i.hash: i for i in population}
        island = generation % self.islands
        members = [i for i in correct if self.island_of(i, by_hash) == island]
        chosen = {i.hash: i for i in members}
        if generation % max(1, self.migrate_every) == 0:
            prev = (island - 1) % self.islands
            migrants = [i for i in correct if self.island_of(i, by_hash) == prev][:2]
            chosen.update({i.hash: i for i in migrants})
        chosen.update({i.hash: i for i in self.champions(correct)})
        chosen.update({i.hash: i for i in correct[: self.elites]})
        return island, sorted(chosen.values(), key=lambda i: (i.time_us, i.hash))
