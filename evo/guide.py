"""What a search compiles and times, and when it stops: the prior, the cost model, the bandit and the convergence rule
behind one small interface for evo.search.

* ``choose``: the proposers over-propose (``search.propose_factor`` x their share of a generation's children, the
  LLM excepted); the cost
  model (or, while it has too little data, the prior) predicts each proposal's time; the bandit gives the
  generation's compile slots to (family, proposer) arms, each arm's proposals taken fastest-predicted first; a few
  slots (``search.explore``) go to proposals picked at random, so the model's blind spots still get measured.
  Generation-0 seeds (defaults, starts, the prior's picks) and LLM proposals are always kept. The chosen are
  ordered defaults and starts first, then fastest-predicted first: they are compiled and timed in that order.
* ``observe``: pays the arms (improvement of the shape's best per GPU-second) and feeds the convergence rule.
* ``stop_reason``: the convergence rule's verdict (evo.convergence).
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

from .bandit import Bandit
from .config import Config
from .convergence import Convergence
from .cost_model import MIN_ROWS, MIN_SHAPES, CostModel, SharedModel, measurement_count, train_from_store
from .errors import EvoError
from .families import Family
from .kernel import KernelSource
from .measurements import load as load_measurements, shipped_path
from .prior import INFEASIBLE, GpuSpec, Prior, competitive_families
from .problem import GpuInfo, Problem
from .proposers.base import Proposal, is_start
from .records import Individual
from .space import Enumerations

def is_seed(p: Proposal) -> bool:
    return p.proposer == "seed" or p.idea.startswith("prior ") or is_start(p)


class Guide:
    def __init__(self, cfg: Config, families: list[Family], info: GpuInfo, store: Any, problem: Problem, seed: int = 0,
                 enumerations: Enumerations | None = None, shared: SharedModel | None = None):
        """shared: a sweep's cost model, reused across its shapes until the measurements grew (evo.cost_model)."""
        s = cfg.search
        self.problem = problem
        self.spec = GpuSpec.from_info(info)
        self.prior = Prior(families, self.spec, sample=s.prior_sample, seed=seed, enumerations=enumerations)
        self.use_model = s.cost_model
        shipped, self.shipped_error = [], ""
        if s.cost_model:
            try:
                shipped = load_measurements(shipped_path(cfg.paths.out, info.key))
            except EvoError as e:  # they only rank: a search goes on without them, and says so
                self.shipped_error = str(e)
        def train() -> CostModel:
            return train_from_store(store, info.key, families, self.spec, seed, prior=self.prior, shipped=shipped)

        if not s.cost_model:
            self.model = CostModel(families, self.spec, seed, prior=self.prior)
        elif shared is None:
            self.model = train()
        else:
            key = (info.key, info.arch, tuple(f.name for f in families), seed, s.prior_sample, len(shipped))
            self.model = shared.get(key, measurement_count(store, info.key) + len(shipped), train)
        self.factor = max(1, s.propose_factor)
        self.explore = s.explore
        self.start_slack = s.start_slack
        self.bandit = Bandit(s.bandit_c)
        self.conv = Convergence(s.patience_seconds, s.min_seconds)
        self.rng = random.Random(seed * 7 + 11)
        self.proposed = self.chosen = 0
        self.unpredicted_starts = 0  # starts kept although the model predicted they cannot run

    # --- before the loop ---------------------------------------------------------------------------------
    def intro(self) -> str:
        if self.model.ready:
            what = f"cost model trained on {self.model.rows} measurements of {self.model.shapes} shapes on this GPU"
            if self.model.shipped_rows:
                what += f" ({self.model.shipped_rows} of them shipped beside the table)"
            if self.model.failure_model is not None:
                what += f", success classifier on {self.model.failures} failures"
        elif self.use_model:
            what = (f"cost model not trained ({self.model.rows} measurements of {self.model.shapes} shapes on this GPU; "
                    f"it needs {MIN_ROWS} of {MIN_SHAPES} or more): the prior ranks proposals")
        else:
            what = "cost model off: the prior ranks proposals"
        if self.shipped_error:
            what += f" ({self.shipped_error}: not used)"
        return f"guide: {what}; {self.factor}x proposals per compile slot, bandit over (family, proposer)"

    def tie_order(self):
        """What orders the prior's ties in generation 0 (evo.prior.order_ties): the trained cost model's
        predict_us, else None (the prior's own order)."""
        return self.model.predict_us if self.use_model and self.model.ready else None

    def ranked(self) -> list:
        return self.prior.rank(self.problem)  # ranked once per problem (Prior.rank remembers it)

    def viable_families(self, factor: float = 2.0) -> list[str]:
        """Families whose best prior estimate is within ``factor`` x the best: where Optuna spends its trials."""
        return competitive_families(self.ranked(), factor)

    def propose_counts(self, proposers: list, counts: list[int]) -> list[int]:
        """Over-proposal: each cheap proposer makes ``propose_factor`` x its share; an LLM's proposals cost tokens and
        are all compiled, so it makes its share only."""
        return [n if getattr(p, "name", "") == "llm" else n * self.factor for p, n in zip(proposers, counts)]

    # --- what is compiled ----------------------------------------------------------------------------------
    def choose(self, proposals: list[Proposal], n: int) -> list[Proposal]:
        keep: list[tuple[float, Proposal]] = []
        rest: list[tuple[float, str, Proposal]] = []
        parsed = []
        for p in proposals:
            try:
                ks = KernelSource.parse(p.source)
            except EvoError:
                keep.append((INFEASIBLE, p))  # rejected with its reason when admitted
                continue
            parsed.append((p, ks))
        preds = self.model.predict_us([(ks.meta.family, ks.meta.params) for _, ks in parsed], self.problem)
        best = min(list(preds) + [INFEASIBLE])
        for (p, ks), us in zip(parsed, preds):
            if is_start(p) and us >= INFEASIBLE:
                # a known-good start the model says cannot run here although its kernel takes the shape: the model is
                # wrong more often than the start (a register guess that ignored setmaxnreg once hid cooperative
                # 256 x 192 on every shape, docs/perf-hopper.md Run 25); compiled and timed, and said so
                p = dataclasses.replace(p, idea=f"{p.idea} (the cost model predicts it cannot run here)")
                self.unpredicted_starts += 1
            elif self.start_slack and is_start(p) and best < INFEASIBLE and us > self.start_slack * best:
                # a start vetted on other shapes that this one does not suit (a skinny split-K start on a large square):
                # ranked with the rest instead of compiled first and timed past the budget
                p = dataclasses.replace(p, demoted=True,
                                        idea=f"{p.idea} (predicted slow here: {us:.1f} us, the best {best:.1f} us)")
            if is_seed(p) or p.proposer in ("llm", "table"):  # table: the table's kernels of the nearest shapes (search)
                keep.append((us, p))
            else:
                rest.append((us, ks.meta.family, p))
        slots = max(0, n - len(keep))
        n_explore = min(len(rest), int(math.ceil(slots * self.explore))) if slots else 0
        arms: dict[tuple[str, str], list[tuple[float, Proposal]]] = {}
        for us, fam, p in sorted(rest, key=lambda x: x[0]):
            if us < INFEASIBLE:
                arms.setdefault((fam, p.proposer), []).append((us, p))
        picked = [item for _, item in self.bandit.allocate(arms, slots - n_explore)]
        taken = {id(p) for _, p in picked}
        others = [(us, p) for us, _, p in rest if id(p) not in taken and us < INFEASIBLE]  # never what cannot launch
        picked += self.rng.sample(others, min(n_explore, len(others)))
        # defaults and known-good starts first (a candidate limit or the budget may cut the list), then fastest predicted
        chosen = sorted(keep + picked, key=lambda x: (not is_start(x[1]), x[0]))
        self.proposed += len(proposals)
        self.chosen += len(chosen)
        return [p for _, p in chosen]

    # --- what came of it -----------------------------------------------------------------------------------
    def observe(self, children: list[Individual], seconds: float, best_before_us: float, elapsed_s: float) -> None:
        if not children:
            return
        each = seconds / len(children)
        best = best_before_us
        for c in children:
            gain = 0.0
            if c.correct and c.time_us > 0:
                if best and c.time_us < best:
                    gain = math.log(best / c.time_us)
                best = c.time_us if not best else min(best, c.time_us)
                self.conv.observe(elapsed_s, c.time_us)
            self.bandit.update((c.family, c.proposer), gain, each)

    def note_best(self, elapsed_s: float, time_us: float, spread: float = 0.0) -> None:
        """A correct measurement outside the generations (seeds, resume): the convergence rule starts from it."""
        self.conv.observe(elapsed_s, time_us, spread)

    def stop_reason(self, elapsed_s: float) -> str:
        return self.conv.reason(elapsed_s) if self.conv.converged(elapsed_s) else ""

    def lines(self) -> list[str]:
        out = []
        if self.proposed:
            out.append(f"guide: {self.chosen} of {self.proposed} proposals compiled "
                       f"({self.proposed - self.chosen} left out by the {'cost model' if self.model.ready else 'prior'} and the bandit)"
                       + (f"; {self.unpredicted_starts} family starts compiled although the model predicted they cannot "
                          "run here" if self.unpredicted_starts else ""))
        out += self.bandit.lines()
        out.append(self.conv.curve_line())
        return out
