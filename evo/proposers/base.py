"""What every proposer takes and returns."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from ..families import Family
from ..problem import GpuInfo, Problem
from ..records import BaselineResult, Individual


@dataclass
class Proposal:
    """A child candidate: full .cu text (front matter included) and where it came from."""

    source: str
    proposer: str
    parents: tuple[str, ...] = ()
    idea: str = ""
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    demoted: bool = False  # a start the guide predicted far slower than the generation's best (evo.guide.Guide.choose)


# what the mutate proposer calls a family's default and known-good starts (family.yaml `starts`), and a start whose
# tile or K split the prior moved to fit the shape
START_IDEAS = ("default instance", "start instance")
FITTED = "fitted to the shape"


def is_start(p: Proposal) -> bool:
    """A family's default or known-good start: tried on every problem, and timed in generation 0 even past the
    budget, unless the guide demoted it (predicted far slower than the best proposal on this shape: it then competes
    for a compile slot like any proposal)."""
    return not p.demoted and any(s in p.idea for s in START_IDEAS)


def is_fitted_start(p: Proposal) -> bool:
    """A start refitted to the shape by the prior: a start, but its instance was never measured anywhere (a guess, as a
    child is)."""
    return is_start(p) and FITTED in p.idea


@dataclass
class ProposalContext:
    problem: Problem
    arch: str
    gpu: GpuInfo | None
    families: list[Family]
    population: list[Individual]  # everything evaluated on this problem so far, best first
    baselines: list[BaselineResult]
    rng: random.Random
    generation: int = 0
    failures: list[Individual] = field(default_factory=list)  # recent failed candidates
    known: set[str] = field(default_factory=set)  # hashes of every candidate already evaluated on this problem
    island: int = 0


def known_hashes(ctx: ProposalContext) -> set[str]:
    """Every candidate already evaluated on this problem. A hash is KernelSource.hash: the normalised code plus
    the launch rules, so two texts that differ only in comments or spacing share one."""
    return set(ctx.known) | {i.hash for i in ctx.population} | {i.hash for i in ctx.failures}


class Proposer(Protocol):
    name: str

    def propose(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        """Return up to n new proposals (may be fewer; never raises for a bad reply)."""
        ...

    def observe(self, results: list[Individual]) -> None:
        """Learn from evaluated children (optional)."""
        ...
