"""The embedded default proposer: mutate and cross over template parameters.

Works with no endpoint at all. Generation 0 (any family with no candidate yet on this problem) takes each
family's default and known-good starts, a few random instances, and, with a prior (evo.prior), the top of the
prior's ranking for this shape kept diverse across families, and the starts refitted to the shape (the prior moves
a start's tile and K split to this shape's waves and edges: a start measured on one shape carries to its class).
Later generations take tournament-selected parents and make one of:

* a mutation: one or two parameters moved to a neighbouring (sometimes any) allowed value;
* a coordinated move: several parameters at once (tile M and N together or transposed, the ring depth against
  the tile size, the K split against the tile size, CTA pairs on or off: a new pair takes the deepest ring that fits,
  since a pair's stage lands and frees only when both CTAs are done with it, docs/perf-hopper.md Run 29);
* a crossover of two parents of one family;
* a cross-family proposal: the parent's tile and K split mapped to the nearest instance of another family.

Before those, every generation flips the switches of the problem's fastest instances (``switch_best`` of them):
each parameter of at most three values other than the tile and the K split (an on/off feature, an epilogue or
split mode) moved to each of its other values, where the family's constraints allow it, once per instance. A
feature a family gained after the instance was found reaches it in one generation instead of waiting for a random
mutation to pick that parameter. The same instances' ring depth (STAGES) is moved one step each way and to the
deepest ring that fits (``ring_neighbours``).

A child that breaks a family constraint is repaired (the nearest valid instance, moving the parameters the move
did not touch first) instead of being dropped; ``summary_lines`` counts repairs and drops.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from ..families import Family
from ..select import Selector
from .base import FITTED, Proposal, ProposalContext, is_start, known_hashes

TILE_PAIRS = (("BM", "BN"), ("TILE_M", "TILE_N"))
SPLITS = ("SPLIT_K", "G", "KS", "CLK", "SPLITS")
CLUSTERS = ("CLUSTER", "CLUSTER_M", "CLUSTER_N")  # CTA-pair switches (1: single CTAs, 2: pairs sharing a tile)
TILE_NAMES = {n for pair in TILE_PAIRS for n in pair}
TIE_HEAD = 1500  # the prior's ranking is reordered within its ties this far (generation 0's prior_top reads its head)
SWITCH_VALUES = 3  # a parameter with at most this many values is a switch (flipped on the fastest instances)


class MutateProposer:
    name = "mutate"

    def __init__(self, selector: Selector, crossover_rate: float = 0.3, initial_random: int = 8, prior: Any = None,
                 prior_top: int = 0, coordinated_rate: float = 0.35, cross_family_rate: float = 0.15,
                 fit_starts: int = 0, switch_best: int = 0, predict: Any = None, prior_ties: float = 0.0):
        self.selector = selector
        self.switch_best = switch_best  # the fastest instances whose switches are flipped every generation
        self.crossover_rate = crossover_rate
        self.initial_random = initial_random
        self.prior = prior  # evo.prior.Prior or None
        self.prior_top = prior_top
        self.fit_starts = fit_starts  # starts refitted to the shape by the prior (generation 0)
        # generation 0's ties of the prior (estimates within prior_ties of each other) go in the order of predict
        # ([(family, params)], problem) -> times: the search's trained cost model; None: the prior alone
        self.predict = predict
        self.prior_ties = prior_ties
        self.coordinated_rate = coordinated_rate
        self.cross_family_rate = cross_family_rate
        self.repairs = 0
        self.dropped = 0
        self.moves: dict[str, int] = {}
        self._prior_done: set[str] = set()
        self._fit_done: set[str] = set()
        self._hashes: dict[tuple, str] = {}

    def _ties(self, us: list[float], items: list[tuple[str, dict[str, Any]]], ctx: ProposalContext) -> list[int]:
        """The order of generation 0's prior picks: the estimates' order, each run within prior_ties by the model."""
        from ..prior import order_ties

        asked = self._model_orders() and len(us) > 1
        return order_ties(us, list(self.predict(items, ctx.problem)) if asked else None, self.prior_ties)

    def _model_orders(self) -> bool:
        return self.predict is not None and self.prior_ties > 0

    def _fit_ties(self, family: str, ctx: ProposalContext) -> dict[str, Any]:
        """Prior.fit's tie breaker: among a start's refits within prior_ties, the model's fastest (not the fewest moves)."""
        if not self._model_orders():
            return {}
        return {"order": lambda ps: self.predict([(family, q) for q in ps], ctx.problem), "ties": self.prior_ties}

    def starts(self, ctx: ProposalContext) -> list[Proposal]:
        """The family starts the first generation on ctx.problem brings (defaults, known-good starts and the
        `fit_starts` refitted to the shape), as this proposer would make them, without using up its once-per-shape
        refits: nothing measured on the GPU decides them, so they can compile ahead (evo.compile_ahead)."""
        twin = MutateProposer(self.selector, 0.0, 0, prior=self.prior, fit_starts=self.fit_starts,
                              predict=self.predict, prior_ties=self.prior_ties)
        return [p for p in twin.propose(dataclasses.replace(ctx, population=[], failures=[]), 0) if is_start(p)]

    def propose(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        fams = {f.name: f for f in ctx.families}
        seen = known_hashes(ctx)
        out: list[Proposal] = []

        def key_of(family: str, params: dict[str, Any]) -> tuple:  # an instance rendered before, by its parameters
            return family, ctx.problem.key, tuple(sorted(params.items()))

        def add(fam: Family, params: dict[str, Any], parents: tuple[str, ...], idea: str, fixed: tuple = ()) -> bool:
            if not fam.valid(params):
                fixed_params, moved = repair(fam, params, ctx.rng, fixed)
                if fixed_params is None:
                    self.dropped += 1
                    return False
                self.repairs += 1
                params = fixed_params
                idea += " (repaired: " + ", ".join(moved) + ")"
            key = key_of(fam.name, params)
            if self._hashes.get(key) in seen:  # rendering costs ~1 ms: an instance proposed before is known by its parameters
                return False
            ks = fam.render(params, ctx.problem)
            self._hashes[key] = ks.hash
            if ks.hash in seen:
                return False
            if not ks.accepts(ctx.problem, ctx.gpu.sm_count if ctx.gpu else 132):
                return False
            seen.add(ks.hash)
            out.append(Proposal(ks.text, self.name, parents, idea))
            kind = idea.split(" ")[0]
            self.moves[kind] = self.moves.get(kind, 0) + 1
            return True

        known_families = {i.family for i in ctx.population} | {i.family for i in ctx.failures}
        # every family's default and known-good starts are tried on every problem (once: known hashes are
        # skipped), even where seeds from other shapes already brought the family in; families not tried
        # yet on this problem also get random instances
        fitted = []  # (estimate, start index, family, params, start): the starts refitted to this shape
        fit_now = self.prior is not None and self.fit_starts and ctx.problem.key not in self._fit_done
        for fam in ctx.families:
            for i, p in enumerate(fam.start_instances()):
                add(fam, p, (), f"{fam.name} default instance" if i == 0 else f"{fam.name} start instance {i}")
                r = self.prior.fit(fam.name, p, ctx.problem, **self._fit_ties(fam.name, ctx)) if fit_now else None
                if r is not None:
                    fitted.append((r.est.us, i, fam, r.params, p))
            if fam.name in known_families:
                continue
            before = len(out)
            for _ in range(self.initial_random * 16):  # draws the shape does not take (its `requires`) are skipped
                if len(out) - before >= self.initial_random:
                    break
                p = fam.random_params(ctx.rng)
                if p:
                    add(fam, p, (), f"{fam.name} random instance")
        if fit_now:  # the best refitted starts, at most 2 per family
            self._fit_done.add(ctx.problem.key)
            per_family: dict[str, int] = {}
            fitted.sort(key=lambda x: (x[0], x[2].name, x[1]))
            # the model's order of the ties, kept per shape like the fits: a later model must not pick other starts
            # than those compiled ahead for this shape (evo.prior.Prior.kept)
            ties = self.prior.kept(("fitted starts", ctx.problem.key, ctx.problem.layout, self.prior_ties,
                                    self._model_orders(), tuple((x[2].name, x[1]) for x in fitted)),
                                   lambda: self._ties([x[0] for x in fitted], [(x[2].name, x[3]) for x in fitted], ctx))
            for us, i, fam, p, start in (fitted[j] for j in ties):
                if sum(per_family.values()) >= self.fit_starts:
                    break
                if per_family.get(fam.name, 0) >= 2:
                    continue
                moved = ", ".join(f"{k} {start.get(k)}->{v}" for k, v in p.items() if start.get(k) != v)
                if add(fam, p, (), f"{fam.name} start instance {i} {FITTED} ({moved}; estimate {us:.1f} us)"):
                    per_family[fam.name] = per_family.get(fam.name, 0) + 1
        if self.prior is not None and self.prior_top and ctx.problem.key not in self._prior_done:
            from ..prior import diverse_top

            self._prior_done.add(ctx.problem.key)  # once per problem and run: a resumed run skips what it knows
            # the top of the ranking among instances not proposed yet (a start the prior ranks high takes no slot)
            ranked = [r for r in self.prior.rank(ctx.problem) if self._hashes.get(key_of(r.family, r.params)) not in seen]
            head = ranked[:TIE_HEAD]  # (the prior's ranking holds thousands; its top is what diverse_top reads)
            ranked = [head[j] for j in self._ties([r.est.us for r in head], [(r.family, r.params) for r in head], ctx)] + ranked[TIE_HEAD:]
            for r in diverse_top(ranked, self.prior_top):
                if r.family in fams:
                    add(fams[r.family], r.params, (), f"prior {r.family} instance (estimate {r.est.us:.1f} us, "
                                                      f"{r.est.waves:.2f} waves, padding {1 - r.est.pad_eff:.0%})")
        best = [i for i in ctx.population if i.family in fams and i.correct and i.time_us > 0]
        for a in sorted(best, key=lambda i: i.time_us)[: self.switch_best]:
            fam = fams[a.family]
            base = _complete(fam, a.params)
            for name, values in fam.space.items():
                if len(values) > SWITCH_VALUES or name in TILE_NAMES or name in SPLITS:  # (the tile's and split's own moves)
                    continue
                for v in values:
                    child = {**base, name: v}
                    if v != base[name] and fam.valid(child):  # no repair: the switch alone is the question
                        add(fam, child, (a.hash,), f"switch {name} {base[name]}->{v} of the fastest {a.hash[:8]}")
            for v in ring_neighbours(fam, base):  # the ring depth: too many values for a switch, rarely the one mutated
                add(fam, {**base, "STAGES": v}, (a.hash,), f"ring STAGES {base['STAGES']}->{v} of the fastest {a.hash[:8]}")
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
            base = _complete(fam, a.params)
            r = ctx.rng.random()
            if same and r < self.crossover_rate:
                b = self.selector.parent(same, ctx.rng)
                child = {k: ctx.rng.choice((a.params.get(k, v), b.params.get(k, v))) for k, v in fam.default_params().items()}
                add(fam, child, (a.hash, b.hash), f"crossover of {a.hash[:8]} and {b.hash[:8]}")
            elif r < self.crossover_rate + self.cross_family_rate and len(ctx.families) > 1:
                other = ctx.rng.choice([f for f in ctx.families if f.name != fam.name])
                child = nearest_instance(fam, base, other, ctx, self.prior)
                if child is not None:
                    add(other, child, (a.hash,), f"cross-family {fam.name} -> {other.name} (nearest tile/split)")
            elif r < self.crossover_rate + self.cross_family_rate + self.coordinated_rate:
                moved = coordinated(fam, base, ctx.rng)
                if moved is not None:
                    child, names, what = moved
                    add(fam, child, (a.hash,), f"coordinated {what}", fixed=tuple(names))
            else:
                child, changed = mutate(fam, a.params, ctx.rng)
                add(fam, child, (a.hash,), "mutate " + ", ".join(changed), fixed=tuple(c.split(" ")[0] for c in changed))
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

    def summary_lines(self) -> list[str]:
        moves = ", ".join(f"{k} {v}" for k, v in sorted(self.moves.items()))
        return [f"mutate: {self.repairs} children repaired to satisfy their family's constraints, {self.dropped} dropped "
                f"(no valid instance nearby); proposals by kind: {moves or 'none'}"]


def _complete(fam: Family, params: dict[str, Any]) -> dict[str, Any]:
    child = dict(fam.default_params())
    child.update({k: v for k, v in params.items() if k in fam.space})
    return child


def _ordered(fam: Family, name: str) -> list:
    return sorted(fam.space[name], key=lambda x: (isinstance(x, str), x))


def _step(fam: Family, name: str, value: Any, d: int) -> Any:
    vals = _ordered(fam, name)
    i = vals.index(value) if value in vals else 0
    return vals[max(0, min(len(vals) - 1, i + d))]


def mutate(fam: Family, params: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], list[str]]:
    """Move one or two parameters to a neighbouring (sometimes any) allowed value."""
    child = _complete(fam, params)
    names = [k for k, v in fam.space.items() if len(v) > 1]
    changed = []
    for name in rng.sample(names, min(len(names), rng.choice((1, 1, 2)))):
        values = _ordered(fam, name)
        idx = values.index(child[name]) if child[name] in values else 0
        if rng.random() < 0.8:
            idx = max(0, min(len(values) - 1, idx + rng.choice((-1, 1))))
        else:
            idx = rng.randrange(len(values))
        if values[idx] != child[name]:
            changed.append(f"{name} {child[name]}->{values[idx]}")
        child[name] = values[idx]
    return child, changed


def coordinated(fam: Family, params: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], list[str], str] | None:
    """Several parameters moved together; None when the family has none of the parameters such a move needs."""
    moves = []
    tiles = [pair for pair in TILE_PAIRS if all(k in fam.space for k in pair)]
    splits = [k for k in SPLITS if k in fam.space and len(fam.space[k]) > 1]
    clusters = [k for k in CLUSTERS if k in fam.space and {1, 2} <= set(fam.space[k])]
    if clusters and "STAGES" in fam.space:
        moves.append("pair")
    if tiles:
        moves += ["tile", "transpose"]
        if "STAGES" in fam.space:
            moves.append("stages")
        if splits:
            moves.append("split")
    if not moves:
        return None
    what = rng.choice(moves)
    child = dict(params)
    if what == "tile":
        d = rng.choice((-1, 1))
        bm, bn = tiles[0]
        child[bm], child[bn] = _step(fam, bm, child[bm], d), _step(fam, bn, child[bn], d)
        names = [bm, bn]
        desc = f"tile {params[bm]}x{params[bn]}->{child[bm]}x{child[bn]}"
    elif what == "transpose":
        bm, bn = tiles[0]
        if child[bn] not in fam.space[bm] or child[bm] not in fam.space[bn] or child[bm] == child[bn]:
            return None
        child[bm], child[bn] = params[bn], params[bm]
        names = [bm, bn]
        desc = f"tile {params[bm]}x{params[bn]}->{child[bm]}x{child[bn]} (transposed)"
    elif what == "stages":  # a larger tile with a shallower ring (same shared memory), or the reverse
        d = rng.choice((-1, 1))
        k = rng.choice(tiles[0])
        child[k] = _step(fam, k, child[k], d)
        child["STAGES"] = _step(fam, "STAGES", child["STAGES"], -d)
        names = [k, "STAGES"]
        desc = f"{k} {params[k]}->{child[k]} with STAGES {params['STAGES']}->{child['STAGES']}"
    elif what == "pair":  # CTA pairs on, with the deepest ring that fits; or back to single CTAs, ring kept
        k = rng.choice(clusters)
        child[k] = 2 if params[k] == 1 else 1
        if child[k] == 2:
            child["STAGES"] = deepest_ring(fam, child)
        names = [k, "STAGES"]
        desc = f"pair {k} {params[k]}->{child[k]}" + (f" with STAGES {params['STAGES']}->{child['STAGES']}"
                                                      if child["STAGES"] != params["STAGES"] else "")
    else:  # more K splits with a smaller tile (more CTAs, each shorter), or the reverse
        d = rng.choice((-1, 1))
        s = rng.choice(splits)
        k = rng.choice(tiles[0])
        child[s] = _step(fam, s, child[s], d)
        child[k] = _step(fam, k, child[k], -d)
        names = [s, k]
        desc = f"{s} {params[s]}->{child[s]} with {k} {params[k]}->{child[k]}"
    if child == params:
        return None
    return child, names, desc


def deepest_ring(fam: Family, params: dict[str, Any]) -> Any:
    """The deepest STAGES value with which `params` is a valid instance (0, where the family has it, means as many
    stages as fit); the current value where none is."""
    values = fam.space["STAGES"]
    if 0 in values:
        return 0
    for v in sorted((v for v in values if isinstance(v, int)), reverse=True):
        if fam.valid(_complete(fam, {**params, "STAGES": v})):
            return v
    return params["STAGES"]


def ring_neighbours(fam: Family, params: dict[str, Any]) -> list:
    """The ring depths tried on a fastest instance: one step deeper, one step shallower and the deepest that fits
    (0, where the family has it: as many stages as fit), each valid with nothing else moved; from 0, the deepest
    explicit depth that fits and the one below it. A one-wave kernel with one consumer warpgroup gained 4 % from
    7 stages to the full ring after 93 instances of its shape never tried it (docs/perf-hopper.md Run 54)."""
    if "STAGES" not in fam.space:
        return []
    cur = params["STAGES"]
    fits = [v for v in sorted(v for v in fam.space["STAGES"] if isinstance(v, int) and v > 0)
            if fam.valid({**params, "STAGES": v})]
    if cur == 0:
        return fits[-1:-3:-1]
    out = [v for v in fits if v > cur][:1] + [v for v in fits if v < cur][-1:]
    deepest = deepest_ring(fam, params)
    if deepest != cur and deepest not in out and fam.valid({**params, "STAGES": deepest}):
        out.append(deepest)
    return out


def repair(fam: Family, params: dict[str, Any], rng: random.Random, fixed: tuple = ()) -> tuple[dict[str, Any] | None, list[str]]:
    """The nearest valid instance: one parameter the move did not touch changed by the fewest steps, else two,
    else any parameter. Returns (params, what was moved) or (None, []) when nothing nearby is valid."""
    if fam.valid(params):
        return params, []
    names = [k for k, v in fam.space.items() if len(v) > 1]
    free = [k for k in names if k not in fixed]
    for pool in (free, names):
        best = None
        for k in pool:
            vals = _ordered(fam, k)
            i = vals.index(params[k]) if params[k] in vals else 0
            for j, v in enumerate(vals):
                if v == params[k]:
                    continue
                cand = dict(params)
                cand[k] = v
                if fam.valid(cand):
                    d = abs(j - i) + rng.random() * 0.1
                    if best is None or d < best[0]:
                        best = (d, cand, [f"{k} {params[k]}->{v}"])
        if best is not None:
            return best[1], best[2]
        if len(pool) >= 2:
            for _ in range(300):
                k1, k2 = rng.sample(pool, 2)
                cand = dict(params)
                cand[k1] = _step(fam, k1, params[k1], rng.choice((-2, -1, 1, 2)))
                cand[k2] = _step(fam, k2, params[k2], rng.choice((-2, -1, 1, 2)))
                if cand != params and fam.valid(cand):
                    return cand, [f"{k} {params[k]}->{cand[k]}" for k in (k1, k2) if cand[k] != params[k]]
    return None, []


def _problem_view(params: dict[str, Any], problem) -> tuple[float, float, float]:
    from ..prior import split_of, tile_of

    tm, tn, _, _, swap = tile_of(params, problem)
    rows, cols = (tn, tm) if swap else (tm, tn)
    split = split_of(params)
    return math.log2(max(1, rows)), math.log2(max(1, cols)), math.log2(split)


def nearest_instance(src: Family, params: dict[str, Any], dst: Family, ctx: ProposalContext, prior: Any = None,
                     sample: int = 600) -> dict[str, Any] | None:
    """The instance of ``dst`` whose tile (rows over M, columns over N) and K split are nearest to ``params`` of
    ``src`` on this problem; among the five nearest, the one the prior estimates fastest (random without a prior)."""
    target = _problem_view(params, ctx.problem)
    if prior is not None and prior.space(dst.name) is not None:
        pool = prior.space(dst.name).sample(ctx.rng, sample)
    else:
        pool = [p for p in (dst.random_params(ctx.rng) for _ in range(min(sample, 200))) if p]
    if not pool:
        return None
    scored = []
    for p in pool:
        v = _problem_view(p, ctx.problem)
        scored.append((abs(v[0] - target[0]) + abs(v[1] - target[1]) + 0.5 * abs(v[2] - target[2]), p))
    scored.sort(key=lambda x: x[0])
    near = [p for _, p in scored[:5]]
    if prior is not None:
        ests = [(prior.estimate(dst.name, p, ctx.problem), p) for p in near]
        ests = [(e.us, p) for e, p in ests if e is not None]
        if ests:
            return min(ests, key=lambda x: x[0])[1]
    return ctx.rng.choice(near)
