"""The mutate proposer times every family's default and known-good starts on every problem, even where
seeds (winners of other shapes) already brought that family into the population."""
import random

from evo.families import load_families
from evo.problem import Problem
from evo.proposers.base import ProposalContext
from evo.proposers.mutate import MutateProposer
from evo.records import Individual
from evo.select import Selector


def _ctx(population, families):
    return ProposalContext(Problem(4096, 4096, 1024), "sm_90a", None, families, population, [], random.Random(0))


def test_seeded_family_still_gets_its_default_and_starts():
    (fam,) = load_families(names=["wgmma_sm90"])
    seed = fam.render(fam.complete({"BM": 128, "BN": 96, "CONSUMERS": 1, "STAGES": 6}))
    population = [Individual(seed.hash, fam.name, {}, seed.text, proposer="seed", correct=True, time_us=80.0)]
    out = MutateProposer(Selector(16, 4, 3), 0.0, 8).propose(_ctx(population, [fam]), 12)
    ideas = [p.idea for p in out]
    assert "wgmma_sm90 default instance" in ideas
    # the starts this shape accepts (a one-wave split-K start does not take 4096x4096x1024)
    fitting = [p for p in fam.start_instances() if fam.render(p).accepts(Problem(4096, 4096, 1024))]
    assert len(fitting) < len(fam.start_instances())
    assert sum("start instance" in i for i in ideas) == len(fitting) - 1 >= 2
    assert not any("random instance" in i for i in ideas[: len(fitting)])


def test_starts_are_not_repeated_once_known():
    (fam,) = load_families(names=["wgmma_sm90"])
    starts = [fam.render(p) for p in fam.start_instances()]
    population = [Individual(k.hash, fam.name, {}, k.text, correct=True, time_us=60.0 + i) for i, k in enumerate(starts)]
    out = MutateProposer(Selector(16, 4, 3), 0.0, 8).propose(_ctx(population, [fam]), 12)
    assert not any("default instance" in p.idea or "start instance" in p.idea for p in out)
