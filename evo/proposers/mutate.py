"""The embedded default proposer: mutate and cross over template parameters.

Works with no endpoint at all. Generation 0 (or any generation with no correct
parent of a family) samples each family's default and random valid instances; later
generations take tournament-selected parents and move one or two parameters to a
neighbouring allowed value, or mix the parameters of two parents of one family.
"""
from __future__ import annotations

import random
from typing import Any

from ..families import Family
from ..select import Selector
from .base import Proposal, ProposalContext, known_hashes


class MutateProposer:
    name = "mutate"

    def __init__(self, selector: Selector, crossover_rate: float = 0.3, initial_random: int = 8):
        self.selector = selector
        self.crossover_rate = crossover_rate
        self.initial_random = initial_random

    def propose(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        fams = {f.name: f for f in ctx.families}
        seen = known_hashes(ctx)
        out: list[Proposal] = []

        def add(fam: Family, params: dict[str, Any], parents: tuple[str, ...], idea: str) -> None:
            if not fam.valid(params):
                return
            ks = fam.render(params, ctx.problem)
            if ks.hash in seen:
                return
            if not ks.accepts(ctx.problem, ctx.gpu.sm_count if ctx.gpu else 132):
                return
            seen.add(ks.hash)
            out.append(Proposal(ks.text, self.name, parents, idea))

        known_families = {i.family for i in ctx.population} | {i.family for i in ctx.failures}
        # every family's default and known-good starts are tried on every problem (once: known hashes are
        # skipped), even where seeds from other shapes already brought the family in; families not tried
        # yet on this problem also get random instances
        for fam in ctx.families:
            for i, p in enumerate(fam.start_instances()):
                add(fam, p, (), f"{fam.name} default instance" if i == 0 else f"{fam.name} start instance {i}")
            if fam.name in known_families:
                continue
            before = len(out)
            for _ in range(self.initial_random * 4):
                if len(out) - before > self.initial_random:
                    break
                p = fam.random_params(ctx.rng)
                if p:
                    add(fam, p, (), f"{fam.name} random instance")
        pool = self.selector.survivors([i for i in ctx.population if i.family in fams])
        attempts = 0
        while len(out) < n and attempts < n * 30:
            attempts += 1
            if not pool:  # no correct parent yet: keep sampling
                fam = ctx.rng.choice(ctx.families)
                p = fam.random_params(ctx.rng)
                if p:
                    add(fam, p, (), f"{fam.name} random instance")
                continue
            a = self.selector.parent(pool, ctx.rng)
            fam = fams[a.family]
            same = [i for i in pool if i.family == a.family and i.hash != a.hash]
            if same and ctx.rng.random() < self.crossover_rate:
                b = self.selector.parent(same, ctx.rng)
                child = {k: ctx.rng.choice((a.params.get(k, v), b.params.get(k, v))) for k, v in fam.default_params().items()}
                add(fam, child, (a.hash, b.hash), f"crossover of {a.hash[:8]} and {b.hash[:8]}")
            else:
                child, changed = mutate(fam, a.params, ctx.rng)
                add(fam, child, (a.hash,), "mutate " + ", ".join(changed))
        # mutation found nothing new near the parents: explore unvisited instances at random
        attempts = 0
        while len(out) < n and attempts < n * 50:
            attempts += 1
            fam = ctx.rng.choice(ctx.families)
            p = fam.random_params(ctx.rng)
            if p:
                add(fam, p, (), f"{fam.name} random instance (exploration)")
        return out  # generation 0 may exceed n: every family gets its seeds

    def observe(self, results) -> None:  # parameter mutation learns only through selection
        return None


def mutate(fam: Family, params: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    """Move one or two parameters to a neighbouring (sometimes any) allowed value."""
    child = dict(fam.default_params())
    child.update({k: v for k, v in params.items() if k in fam.space})
    names = [k for k, v in fam.space.items() if len(v) > 1]
    changed = []
    for name in rng.sample(names, min(len(names), rng.choice((1, 1, 2)))):
        values = sorted(fam.space[name], key=lambda x: (isinstance(x, str), x))
        idx = values.index(child[name]) if child[name] in values else 0
        if rng.random() < 0.8:
            idx = max(0, min(len(values) - 1, idx + rng.choice((-1, 1))))
        else:
            idx = rng.randrange(len(values))
        if values[idx] != child[name]:
            changed.append(f"{name} {child[name]}->{values[idx]}")
        child[name] = values[idx]
    return child, changed
