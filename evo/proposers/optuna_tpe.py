"""Optuna drives the parameter search: one TPE study per family, minimising device time.

Only viable families get trials: the search sets ``only_families`` to the families whose best prior estimate
is competitive on the shape (evo.guide.Guide.viable_families), so no trial is spent on `simt` for a 4096^3."""
from __future__ import annotations

from typing import Any

from .base import Proposal, ProposalContext, known_hashes


class OptunaProposer:
    name = "optuna"

    def __init__(self, seed: int = 0):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.seed = seed
        self.studies: dict[str, Any] = {}
        self.pending: dict[str, tuple[str, Any]] = {}  # candidate hash -> (family, trial)
        self.told: set[str] = set()
        self.only_families: set[str] = set()  # set by the search: families whose prior is competitive (empty = all)

    def _study(self, family: str):
        if family not in self.studies:
            sampler = self.optuna.samplers.TPESampler(seed=self.seed + len(self.studies), n_startup_trials=6)
            self.studies[family] = self.optuna.create_study(direction="minimize", sampler=sampler)
        return self.studies[family]

    def _warm(self, ctx: ProposalContext) -> None:
        """Teach each study what the archive already knows (resume, or other proposers' children)."""
        dists = {}
        for fam in ctx.families:
            dists[fam.name] = {k: self.optuna.distributions.CategoricalDistribution(list(v)) for k, v in fam.space.items()}
        for ind in ctx.population + ctx.failures:
            if ind.hash in self.told or ind.family not in dists or ind.hash in self.pending:
                continue
            d = dists[ind.family]
            params = {k: ind.params.get(k) for k in d}
            if any(v not in d[k].choices for k, v in params.items()):
                continue
            value = ind.time_us if ind.correct and ind.time_us > 0 else None
            trial = self.optuna.trial.create_trial(
                params=params, distributions=d, value=value,
                state=self.optuna.trial.TrialState.COMPLETE if value else self.optuna.trial.TrialState.FAIL)
            self._study(ind.family).add_trial(trial)
            self.told.add(ind.hash)

    def propose(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        self._warm(ctx)
        seen = known_hashes(ctx)
        out: list[Proposal] = []
        fams = [f for f in ctx.families if f.name in self.only_families] or ctx.families
        for attempt in range(n * 4):
            if len(out) >= n:
                break
            fam = fams[attempt % len(fams)]
            study = self._study(fam.name)
            trial = study.ask()
            params = {k: trial.suggest_categorical(k, list(v)) for k, v in fam.space.items()}
            if not fam.valid(params):
                study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
                continue
            ks = fam.render(params, ctx.problem)
            if ks.hash in seen or not ks.accepts(ctx.problem):
                study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
                continue
            seen.add(ks.hash)
            self.pending[ks.hash] = (fam.name, trial)
            out.append(Proposal(ks.text, self.name, (), f"TPE trial {trial.number} of {fam.name}"))
        return out

    def observe(self, results) -> None:
        for ind in results:
            if ind.hash not in self.pending:
                continue
            fam, trial = self.pending.pop(ind.hash)
            study = self._study(fam)
            if ind.correct and ind.time_us > 0:
                study.tell(trial, ind.time_us)
            else:
                study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
            self.told.add(ind.hash)

    def drop_pending(self) -> None:
        """Proposals that were never evaluated (duplicates, compile failures counted by observe)."""
        for fam, trial in self.pending.values():
            try:
                self._study(fam).tell(trial, state=self.optuna.trial.TrialState.FAIL)
            except Exception:
                pass
        self.pending.clear()
