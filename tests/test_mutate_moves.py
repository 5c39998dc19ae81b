"""Moves of the mutate proposer: constraint repair, coordinated moves, cross-family proposals, the prior's generation 0."""
import random

import pytest

from evo.families import load_families
from evo.kernel import KernelSource
from evo.prior import GpuSpec, Prior
from evo.problem import Problem
from evo.proposers.base import ProposalContext
from evo.proposers.mutate import MutateProposer, coordinated, deepest_ring, nearest_instance, repair, ring_neighbours
from evo.records import Individual
from evo.select import Selector


@pytest.fixture(scope="module")
def fams():
    return {f.name: f for f in load_families() if "sm_90a" in f.archs}


def test_repair_keeps_the_moved_parameters(fams):
    fam = fams["wgmma_sm90"]
    bad = fam.complete({"BM": 64, "CONSUMERS": 2, "BN": 256})  # 64 rows cannot feed two consumer warpgroups
    assert not fam.valid(bad)
    fixed, moved = repair(fam, bad, random.Random(0), fixed=("BM",))
    assert fixed is not None and fam.valid(fixed) and fixed["BM"] == 64
    assert moved and all(not m.startswith("BM ") for m in moved)
    assert repair(fam, fam.default_params(), random.Random(0)) == (fam.default_params(), [])


def test_coordinated_moves_change_several_parameters(fams):
    fam = fams["wgmma_sm90"]
    base = fam.complete({"BM": 128, "BN": 128, "CONSUMERS": 1, "SPLIT_K": 2, "STAGES": 5})
    rng = random.Random(1)
    kinds = set()
    for _ in range(60):
        r = coordinated(fam, base, rng)
        if r is None:
            continue
        child, names, desc = r
        kinds.add(desc.split(" ")[0] if "transposed" not in desc else "transpose")
        assert len(names) == 2 and sum(child[k] != base[k] for k in fam.space) >= 1
    assert {"tile", "STAGES", "SPLIT_K"} & kinds and len(kinds) >= 3
    assert coordinated(fams["gemv_sm80"], fams["gemv_sm80"].default_params(), rng) is None



def pair_moves(fam, base, tries=200):
    rng = random.Random(3)
    out = []
    for _ in range(tries):
        r = coordinated(fam, base, rng)
        if r is not None and r[2].startswith("pair"):
            out.append(r)
    return out


def test_a_new_pair_takes_the_deepest_ring_that_fits(fams):
    """CTA pairs pay only with a deep ring (docs/perf-hopper.md Run 29): pairing moves the ring to the deepest valid
    depth, unpairing keeps it."""
    fam = fams["wgmma_sm90"]
    single = fam.complete({"BM": 64, "BN": 64, "CONSUMERS": 1, "SWAP_AB": 1, "STAGES": 8})
    (child, names, desc), *_ = pair_moves(fam, single)
    assert (child["CLUSTER"], child["STAGES"]) == (2, 13) and names == ["CLUSTER", "STAGES"] and fam.valid(child)
    assert not fam.valid({**child, "STAGES": 14}) and desc == "pair CLUSTER 1->2 with STAGES 8->13"
    # a 128 x 128 tile's ring holds fewer stages
    wide = fam.complete({"BM": 128, "BN": 128, "STAGES": 4})
    assert deepest_ring(fam, {**wide, "CLUSTER": 2}) == 6
    (back, _, desc), *_ = pair_moves(fam, child)
    assert (back["CLUSTER"], back["STAGES"]) == (1, 13) and desc == "pair CLUSTER 2->1"
    # CUTLASS: STAGES 0 fills shared memory
    cut = fams["cutlass_sm90"]
    base = cut.complete({"TILE_M": 64, "TILE_N": 64, "SCHEDULE": 0, "CLUSTER_M": 1, "CLUSTER_N": 1, "STAGES": 6})
    moved = {names[0]: child for child, names, _ in pair_moves(cut, base)}
    assert set(moved) == {"CLUSTER_M", "CLUSTER_N"} and all(c["STAGES"] == 0 and c[k] == 2 for k, c in moved.items())
    # a family without a pair switch has no such move
    assert not pair_moves(fams["mma_sm80"], fams["mma_sm80"].default_params(), tries=50)

def test_cross_family_maps_to_the_nearest_tile(fams):
    p = Problem(4096, 4096, 1024)
    ctx = ProposalContext(p, "sm_90a", None, list(fams.values()), [], [], random.Random(0))
    src = fams["wgmma_sm90"].complete({"BM": 128, "BN": 128, "CONSUMERS": 1})
    prior = Prior(list(fams.values()), GpuSpec(), sample=800)
    child = nearest_instance(fams["wgmma_sm90"], src, fams["mma_sm80"], ctx, prior)
    assert child is not None and fams["mma_sm80"].valid(child)
    assert child["BM"] == 128 and child["BN"] == 128 and child["SPLIT_K"] == 1
    # swap-AB in the source: its tile rows run over N, the nearest non-swapped tile is transposed
    swapped = fams["wgmma_sm90"].complete({"BM": 128, "BN": 64, "CONSUMERS": 1, "SWAP_AB": 1})
    child = nearest_instance(fams["wgmma_sm90"], swapped, fams["mma_sm80"], ctx, prior)
    assert (child["BM"], child["BN"]) == (64, 128)


def _ctx(population, families, rng, problem=Problem(512, 2048, 4096)):
    return ProposalContext(problem, "sm_90a", None, families, population, [], rng,
                           known={i.hash for i in population})


def test_generation_zero_from_the_prior_is_diverse(fams):
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 2, prior=Prior(list(fams.values()), GpuSpec(), sample=300), prior_top=10)
    out = prop.propose(_ctx([], list(fams.values()), random.Random(0)), 12)
    from_prior = [p for p in out if p.idea.startswith("prior ")]
    assert len(from_prior) >= 8
    assert len({KernelSource.parse(p.source).meta.family for p in from_prior}) >= 3
    random_ = [p for p in out if "random instance" in p.idea]
    assert len(random_) <= 2 * len(fams)
    # the prior's picks are made once per problem
    again = prop.propose(_ctx([], list(fams.values()), random.Random(1)), 12)
    assert not any(p.idea.startswith("prior ") for p in again)


def test_prior_picks_that_are_starts_take_no_slot(fams):
    # on 512x2048x4096 the prior ranks three of the family starts among its top ten: the ten prior picks are new
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 2, prior=Prior(list(fams.values()), GpuSpec(), sample=300), prior_top=10)
    out = prop.propose(_ctx([], list(fams.values()), random.Random(0)), 12)
    starts = {KernelSource.parse(p.source).hash for p in out if " start instance" in p.idea or " default instance" in p.idea}
    prior = [KernelSource.parse(p.source).hash for p in out if p.idea.startswith("prior ")]
    assert len(prior) == 10 and not set(prior) & starts


def test_later_generations_use_every_move_and_stay_valid(fams):
    fl = [fams["wgmma_sm90"], fams["mma_sm80"]]
    rng = random.Random(4)
    pop = []
    for i, (f, params) in enumerate([(fl[0], {"BM": 128, "BN": 128, "CONSUMERS": 1}), (fl[0], {"BM": 64, "BN": 256, "PINGPONG": 1, "STAGES": 5}),
                                     (fl[1], {"BM": 128, "BN": 64}), (fl[1], {"BM": 64, "BN": 64, "SPLIT_K": 4})]):
        ks = f.render(f.complete(params))
        pop.append(Individual(ks.hash, f.name, ks.meta.params, ks.text, correct=True, time_us=50.0 + i))
    prop = MutateProposer(Selector(16, 4, 2), 0.2, 0, coordinated_rate=0.4, cross_family_rate=0.2)
    kinds = set()
    tried: set[str] = set()  # what earlier generations proposed counts as evaluated (the search's archive does that)
    for g in range(6):
        ctx = _ctx(pop, fl, rng)
        ctx.known.update(tried)
        for p in prop.propose(ctx, 12):
            ks = KernelSource.parse(p.source)
            fam = fams[ks.meta.family]
            assert fam.valid(ks.meta.params)
            kinds.add(p.idea.split(" ")[0])
            tried.add(ks.hash)
    assert {"coordinated", "cross-family", "mutate"} <= kinds
    line = prop.summary_lines()[0]
    assert "repaired" in line and "coordinated" in line
    assert prop.repairs > 0


def test_move_rates_come_from_the_config():
    from evo.config import load_config
    from evo.search import build_proposers

    cfg = load_config(overrides={"search": {"coordinated_rate": 0.5, "cross_family_rate": 0.05}})
    (prop,) = build_proposers(cfg, Selector(16, 4, 2))
    assert (prop.coordinated_rate, prop.cross_family_rate) == (0.5, 0.05)


def test_generation_zero_refits_starts_to_the_shape(fams):
    from evo.proposers.base import is_start

    prior = Prior(list(fams.values()), GpuSpec(), sample=50)
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, prior=prior, prior_top=0, fit_starts=3)
    out = prop.propose(_ctx([], list(fams.values()), random.Random(0), Problem(384, 1536, 6144)), 12)
    fitted = [p for p in out if "fitted to the shape" in p.idea]
    assert 1 <= len(fitted) <= 3 and all(is_start(p) for p in fitted)  # timed in generation 0 like the starts
    per_family = [KernelSource.parse(p.source).meta.family for p in fitted]
    assert all(per_family.count(f) <= 2 for f in per_family)
    # once per problem; none without the option
    assert not any("fitted" in p.idea for p in prop.propose(_ctx([], list(fams.values()), random.Random(1), Problem(384, 1536, 6144)), 12))
    off = MutateProposer(Selector(16, 4, 3), 0.3, 0, prior=prior, prior_top=0, fit_starts=0)
    assert not any("fitted" in p.idea for p in off.propose(_ctx([], list(fams.values()), random.Random(0), Problem(384, 1536, 6144)), 12))


@pytest.mark.parametrize("fit", [0, 3])
def test_generation_zero_random_instances_do_not_depend_on_refitting(fams, fit):
    # every family not tried on the problem gets its random instances, with or without refitted starts
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 1, prior=Prior(list(fams.values()), GpuSpec(), sample=50),
                          prior_top=0, fit_starts=fit)
    out = prop.propose(_ctx([], list(fams.values()), random.Random(0), Problem(384, 1536, 6144)), 12)
    with_random = {KernelSource.parse(p.source).meta.family for p in out if "random instance" in p.idea}
    assert with_random == set(fams) - {"gemv_sm80"}  # gemv takes only decode shapes (small M), not this one


def test_the_fastest_instance_switches_are_flipped_once(fams):
    """Every generation flips the switches (parameters of <= 3 values) of the fastest instances: a feature the family
    gained after the table's kernel was found (here EARLY_STORE) is tried on that kernel in the next generation,
    where a random mutation of one of its 19 parameters would rarely pick it; once per instance."""
    fam = fams["wgmma_sm90"]
    params = fam.complete({"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 8})
    fast = Individual(fam.render(params).hash, fam.name, params, "", correct=True, time_us=10.0)
    slow_params = fam.complete({"BM": 128, "BN": 64, "STAGES": 6})
    slow = Individual(fam.render(slow_params).hash, fam.name, slow_params, "", correct=True, time_us=20.0)
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, switch_best=1)
    ctx = _ctx([fast, slow], [fam], random.Random(0), Problem(4096, 4096, 1024))
    out = prop.propose(ctx, 4)
    flips = [p for p in out if p.idea.startswith("switch ")]
    moved = {p.idea.split(" ")[1] for p in flips}
    assert {"EARLY_STORE", "EPI_HINT", "PINGPONG"} <= moved, moved
    assert all(p.parents == (fast.hash,) for p in flips)  # the fastest one's, not the slower one's
    for p in flips:  # exactly one parameter moved, to a valid instance
        child = KernelSource.parse(p.source).meta.params
        assert fam.valid(child) and sum(child[k] != params[k] for k in params) == 1
    assert "BM" not in moved and "SPLIT_K" not in moved  # the tile and the split have their own moves
    # the same instance's switches are not proposed again once evaluated
    later = _ctx([fast, slow], [fam], random.Random(1), Problem(4096, 4096, 1024))
    later.known |= {KernelSource.parse(p.source).hash for p in out}
    again = prop.propose(later, 4)
    assert not [p for p in again if p.idea.startswith("switch ")]
    # off: no flips
    none = MutateProposer(Selector(16, 4, 3), 0.3, 0).propose(ctx, 4)
    assert not [p for p in none if p.idea.startswith("switch ")]


def test_the_fastest_instance_ring_is_moved_each_way_and_to_the_deepest(fams):
    """The ring depth has too many values to be a switch and is one of many parameters a mutation picks from: on
    512x2048x4096 the table's one-wave 64 x 128 kernel ran 7 stages for 93 instances until the full ring, 4 % faster,
    was tried by hand (docs/perf-hopper.md Run 54). Every generation moves the fastest instances' STAGES one step
    deeper, one shallower and to the deepest that fits, nothing else moved, once per instance."""
    fam = fams["cutlass_sm90"]
    params = fam.complete({"TILE_M": 64, "TILE_N": 128, "SCHEDULE": 0, "CLUSTER_M": 1, "CLUSTER_N": 1, "STAGES": 7,
                           "SWIZZLE": 2})  # (not a start of the family: generation 0 proposes those first)
    fast = Individual(fam.render(params).hash, fam.name, params, "", correct=True, time_us=17.7)
    slow_params = fam.complete({"TILE_M": 128, "TILE_N": 64, "SCHEDULE": 1, "CLUSTER_M": 1, "STAGES": 5})
    slow = Individual(fam.render(slow_params).hash, fam.name, slow_params, "", correct=True, time_us=19.0)
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, switch_best=1)
    ctx = _ctx([fast, slow], [fam], random.Random(0))
    out = prop.propose(ctx, 4)
    rings = [p for p in out if p.idea.startswith("ring ")]
    assert sorted(KernelSource.parse(p.source).meta.params["STAGES"] for p in rings) == [0, 6, 8]
    for p in rings:  # the fastest one's, the ring alone moved
        child = KernelSource.parse(p.source).meta.params
        assert p.parents == (fast.hash,) and fam.valid(child)
        assert [k for k in params if child[k] != params[k]] == ["STAGES"]
    later = _ctx([fast, slow], [fam], random.Random(1))
    later.known |= {KernelSource.parse(p.source).hash for p in out}
    assert not [p for p in prop.propose(later, 4) if p.idea.startswith("ring ")]  # once per instance
    none = MutateProposer(Selector(16, 4, 3), 0.3, 0).propose(ctx, 4)
    assert not [p for p in none if p.idea.startswith("ring ")]


def test_ring_neighbours_stay_inside_shared_memory(fams):
    """Only depths the family's constraints allow: from the full ring (0) the deepest explicit depth that fits and the
    one below; a wgmma_sm90 128 x 64 tile fits 8 stages beside two consumers' staging, not 10; no ring, no move."""
    cut = fams["cutlass_sm90"]
    p = cut.complete({"TILE_M": 64, "TILE_N": 128, "SCHEDULE": 0, "CLUSTER_M": 1, "CLUSTER_N": 1, "STAGES": 0})
    assert ring_neighbours(cut, p) == [8, 7]
    w = fams["wgmma_sm90"]
    q = w.complete({"BM": 128, "BN": 64, "CONSUMERS": 2, "SPLIT_K": 4, "STAGES": 7, "PERSISTENT": 1, "GROUP": 16})
    assert ring_neighbours(w, q) == [8, 6]
    assert ring_neighbours(w, {**q, "STAGES": 8}) == [7]
    assert all(w.valid({**q, "STAGES": v}) for v in ring_neighbours(w, {**q, "STAGES": 3}))
    sk = fams["wgmma_skinny_sm90"]
    r = sk.complete({"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "STAGES": 8, "SWAP_AB": 1})
    assert ring_neighbours(sk, r) == [10, 6, 12]
    gemv = fams["gemv_sm80"]
    assert "STAGES" not in gemv.space and ring_neighbours(gemv, gemv.default_params()) == []


def _picks(out, kind):
    return [KernelSource.parse(p.source).meta for p in out if kind in p.idea]


def test_the_priors_ties_go_in_the_cost_models_order(fams):
    """On a DRAM-bound shape the prior rates every one-wave instance alike (256x12288x256: 8.18 us for most of them);
    generation 0's fitted starts and prior picks among such ties follow the cost model's times when the search has
    one (here a stand-in that prefers ping-pong wgmma kernels and the skinny family), the prior's own order without."""
    problem = Problem(256, 12288, 256)
    prior = Prior(list(fams.values()), GpuSpec(), sample=200)

    def prefers(items, _problem):
        return [1.0 if (f == "wgmma_sm90" and p.get("PINGPONG") == 1) or f == "wgmma_skinny_sm90" else 2.0
                for f, p in items]

    def run(**kw):
        prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, prior=prior, prior_top=8, fit_starts=6, **kw)
        return prop.propose(_ctx([], list(fams.values()), random.Random(0), problem), 12)

    plain, guided = run(), run(predict=prefers, prior_ties=0.02)
    assert run(predict=prefers, prior_ties=0.0)[0].source == plain[0].source  # no tolerance: the prior alone
    fit_plain = [m for m in _picks(plain, "fitted to the shape") if m.family == "wgmma_sm90"]
    fit_guided = [m for m in _picks(guided, "fitted to the shape") if m.family == "wgmma_sm90"]
    assert fit_guided and all(m.params.get("PINGPONG") == 1 for m in fit_guided)
    assert not all(m.params.get("PINGPONG") == 1 for m in fit_plain)
    favoured = lambda out: sum(m.family == "wgmma_skinny_sm90" or (m.family == "wgmma_sm90" and m.params.get("PINGPONG") == 1)
                               for m in _picks(out, "prior "))
    assert favoured(guided) > favoured(plain), (favoured(guided), favoured(plain))


def test_the_refit_of_a_start_follows_the_cost_model_among_its_ties(fams):
    """A start refitted to 256x12288x256 has many one-wave tiles at the same estimate; with a model the proposer
    hands Prior.fit its times, so the refits are the model's fastest (here: 256-row tiles), not the fewest moves."""
    problem = Problem(256, 12288, 256)
    prior = Prior(list(fams.values()), GpuSpec(), sample=200)
    rows_first = lambda items, _p: [1.0 if p.get("BM", p.get("TILE_M")) == 256 else 2.0 for _f, p in items]

    def fitted(**kw):
        prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, prior=prior, fit_starts=6, **kw)
        out = prop.propose(_ctx([], [fams["wgmma_sm90"]], random.Random(0), problem), 12)
        return [(m.params["BM"], m.params["BN"]) for m in _picks(out, "fitted to the shape")]

    plain, guided = fitted(), fitted(predict=rows_first, prior_ties=0.02)
    assert guided and all(bm == 256 for bm, _ in guided)
    assert not all(bm == 256 for bm, _ in plain)
    # a refit that Prior.fit makes only when handed the model (the fewest-moves refits of every start exclude it)
    own = {(r.params["BM"], r.params["BN"]) for r in (prior.fit("wgmma_sm90", s, problem) for s in fams["wgmma_sm90"].starts) if r}
    assert set(guided) - own, (guided, own)


def test_a_sweeps_searches_pick_the_refitted_starts_the_first_model_picked(fams):
    """A sweep's searches share one Enumerations: the refits and the model's order among them are kept per shape, the
    first answer standing, so a shape's own search (a newer model) picks the starts an earlier search compiled ahead
    for it. Apart, the two models pick different starts."""
    from evo.space import Enumerations

    problem = Problem(256, 12288, 256)
    rows_first = lambda items, _p: [1.0 if p.get("BM", p.get("TILE_M")) == 256 else 2.0 for _f, p in items]
    widest = lambda items, _p: [1.0 / p.get("BN", 1) for _f, p in items]  # a later model: another order of the ties

    def fitted(enumerations, predict):
        prior = Prior(list(fams.values()), GpuSpec(), sample=200, enumerations=enumerations)
        prop = MutateProposer(Selector(16, 4, 3), 0.3, 0, prior=prior, fit_starts=6, predict=predict, prior_ties=0.02)
        out = prop.propose(_ctx([], [fams["wgmma_sm90"]], random.Random(0), problem), 12)
        return [(m.params["BM"], m.params["BN"]) for m in _picks(out, "fitted to the shape")]

    shared = Enumerations()
    first = fitted(shared, rows_first)
    assert first and fitted(shared, widest) == first
    assert fitted(Enumerations(), widest) != first
