"""LlmProposer: ask language models for better kernels, given a parent and what the GPU said about it."""
from __future__ import annotations

import dataclasses
import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ...config import Config, LlmConfig
from ...errors import EvoError
from ...records import Individual
from ..base import Proposal, ProposalContext, known_hashes
from . import parse, prompt
from .sections import CHARS_PER_TOKEN, tokens_est
from .accounting import Ledger, ModelStats, fmt_tokens
from .client import ChatClient, Endpoint, Reply, RequestFailed, resolve_endpoints
from .evidence import Evidence
from .preflight import PreflightResult, preflight

EDIT_MODES = ("diff", "full")
MAX_LOGGED = 1000  # rejected_detail entries kept


@dataclass
class _Job:
    kind: str  # "improve" or "fix"
    parent: Individual
    mode: str
    endpoint: Endpoint
    messages: list[dict]
    depth: int = 0  # fix attempts so far in this lineage
    sections: dict = dataclasses.field(default_factory=dict)  # prompt section -> characters (what the budget kept)


@dataclass
class _Sent:
    """A proposal handed to the search, awaiting its evaluation."""

    model: str
    parent: str
    parent_us: float
    kind: str
    depth: int


class _BudgetSkip(Exception):
    pass


class LlmProposer:
    """The ``llm`` proposer.

    The search builds it with ``from_config(cfg, store=..., profiler=...)``, calls ``check_endpoints()`` (the
    preflight) once, then ``propose(ctx, n)`` each generation and ``observe(individuals)`` after evaluation;
    ``summary_lines()`` at the end. ``propose`` never raises for a bad reply or a failed request: it records them
    (``stats()``, ``rejected``, the archive's conversations) and returns the usable children only. A request goes
    out only while the request limit allows it and its estimate fits the token and dollar caps; when a cap would
    be passed, or the endpoint keeps failing, ``exhausted`` turns True (``stop_reason`` says why) and ``propose``
    returns [].
    """

    name = "llm"

    def __init__(self, cfg: LlmConfig, rng_seed: int = 0, *, sleep: Any = None, max_requests: int = 0,
                 store: Any = None, profiler: Any = None, say: Any = None):
        """max_requests: the most chat requests this proposer sends in its life, fixes included (0 = no limit;
        from_config passes search.max_candidates). store: the archive (evo.store.Store) where every conversation is
        kept and the parents' ptxas reports, profiles and lineage are read. profiler: an evo.profile.Profiler
        run on a parent before its children are asked for. say: where one-time notes go (print)."""
        self.cfg = cfg
        self.max_requests = max(0, int(max_requests or 0))
        self.sent = 0  # chat requests sent (or about to be) in this proposer's life
        self.store = store
        self.evidence = Evidence(store, profiler, cfg, say=say)
        self._failed_streak = 0
        self.failing = ""  # set when requests keep failing: the proposer stops and the search says why
        self.rng = random.Random(rng_seed)
        if not cfg.endpoints:
            raise EvoError("the llm proposer needs at least one entry in llm.endpoints "
                           "({name, base_url, model, api_key_env, weight}); see docs/llm.md")
        self.endpoints = [Endpoint.from_config(d, i) for i, d in enumerate(cfg.endpoints)]
        names = [e.name for e in self.endpoints]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise EvoError(f"config llm.endpoints: name {', '.join(dup)} is used twice; give each endpoint its own name")
        if sum(e.weight for e in self.endpoints) <= 0:
            raise EvoError("config llm.endpoints: at least one weight must be positive")
        modes = [m for m in cfg.edit_modes]
        bad = [m for m in modes if m not in EDIT_MODES]
        if bad or not modes:
            raise EvoError(f"config llm.edit_modes must be a non-empty subset of {list(EDIT_MODES)}, not {modes}")
        self.edit_modes = modes
        if cfg.concurrency < 1:
            raise EvoError("config llm.concurrency must be at least 1")
        kw = {"sleep": sleep} if sleep else {}
        self.clients = {e.name: ChatClient(e, timeout_s=cfg.timeout_s, retries=cfg.retries, backoff_s=cfg.backoff_s, **kw)
                        for e in self.endpoints}
        self.templates = prompt.Templates(cfg.prompts_dir)
        self.ledger = Ledger(cfg.budget_tokens, cfg.budget_usd, cfg.prices)
        self.ledger.require_prices([(e.name, e.model) for e in self.endpoints])
        self.models: dict[str, ModelStats] = {e.name: ModelStats(model=e.model) for e in self.endpoints}
        self.rejected: list[tuple[str, str]] = []  # (reason, model) of every unusable reply
        self.rejected_detail: list[tuple[str, str, str]] = []  # (reason, model, one-line detail), last MAX_LOGGED
        self.last_error = ""
        self._pending: dict[str, _Sent] = {}
        self._proposed: set[str] = set()  # hashes handed out in this run
        self._fix_queue: list[tuple[Individual, int]] = []
        self._fix_asked: set[str] = set()

    @classmethod
    def from_config(cls, cfg: Config, **kw: Any) -> "LlmProposer":
        """The proposer of a run: endpoints from --llm-url/--llm-model/--llm-key-env (llm.url, llm.model,
        llm.key_env), llm.endpoints or $OPENAI_BASE_URL; the candidate limit (search.max_candidates) bounds
        the requests it sends, fixes included."""
        llm = cfg.llm
        eps = resolve_endpoints(llm.url, llm.model, llm.key_env, llm.endpoints)
        return cls(dataclasses.replace(llm, endpoints=eps), cfg.search.seed,
                   max_requests=cfg.search.max_candidates, **kw)

    # ------------------------------------------------------------------ protocol
    FAILING_STREAK = 6  # this many requests in a row failing (after their retries) stop the proposer

    @property
    def exhausted(self) -> bool:
        """Stop the search: a token/dollar cap would be passed, or the endpoint keeps failing."""
        return self.ledger.exhausted or bool(self.failing)

    @property
    def stop_reason(self) -> str:
        if self.failing:
            return self.failing
        if self.ledger.exhausted:
            return "LLM token/cost budget spent"
        if self.max_requests and self.sent >= self.max_requests:
            return f"LLM request limit reached ({self.sent} requests = the candidate limit)"
        return ""

    def check_endpoints(self) -> list[PreflightResult]:
        """One tiny chat completion per endpoint (evo.proposers.llm.preflight): raise EvoError (one line) on a
        wrong path, a rejected key, a model the server does not serve, an unreachable host."""
        return [preflight(self.clients[ep.name]) for ep in self.endpoints]

    def propose(self, ctx: ProposalContext, n: int) -> list[Proposal]:
        if n <= 0 or self.exhausted:
            return []
        jobs = self._plan(ctx, n)
        if not jobs:
            return []
        results = self._run(jobs)
        seen = self._seen_keys(ctx)
        sms = ctx.gpu.sm_count if ctx.gpu else 132
        out: list[Proposal] = []
        for job, res in zip(jobs, results):
            label = job.endpoint.name
            st = self.models[label]
            if isinstance(res, _BudgetSkip):
                st.requests -= 1
                st.fix_requests -= job.kind == "fix"
                self.sent -= 1
                continue
            if isinstance(res, RequestFailed):
                st.failed_requests += 1
                st.retries += max(0, res.attempts - 1)
                self.last_error = str(res)
                self._reject(parse.REQUEST_FAILED, label, str(res))
                self._record(ctx, job, None, parse.REQUEST_FAILED, "", str(res), attempts=res.attempts)
                self._failed_streak += 1
                if self._failed_streak >= self.FAILING_STREAK and not self.failing:
                    self.failing = f"LLM endpoint failing: {self._failed_streak} requests in a row failed; last: {res}"
                continue
            self._failed_streak = 0
            reply: Reply = res
            st.replies += 1
            st.retries += max(0, reply.attempts - 1)
            parsed = parse.parse_reply(reply.content, job.parent.source, problem=ctx.problem, arch=ctx.arch,
                                       num_sms=sms, finish_reason=reply.finish_reason)
            if parsed.ok and parsed.kernel is not None and parsed.kernel.hash in seen:
                parsed.reason, parsed.detail = parse.DUPLICATE, f"same kernel as {parsed.kernel.hash} (already proposed or evaluated)"
            if not parsed.ok:
                self._reject(parsed.reason, label, parsed.detail)
                self._record(ctx, job, reply, parsed.reason, "", parsed.detail)
                continue
            ks = parsed.kernel
            assert ks is not None
            self._record(ctx, job, reply, "proposed", ks.hash, parsed.idea)
            seen.add(ks.hash)
            self._proposed.add(ks.hash)
            parent_us = job.parent.time_us if job.parent.correct and job.parent.time_us > 0 else 0.0
            self._pending[ks.hash] = _Sent(label, job.parent.hash, parent_us, job.kind, job.depth)
            st.proposals += 1
            out.append(Proposal(source=parsed.source, proposer=self.name, parents=(job.parent.hash,) if job.parent.hash else (),
                                idea=parsed.idea, model=label, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out))
        return out

    def observe(self, results: list[Individual]) -> None:
        for ind in results:
            sent = self._pending.get(ind.hash)
            if sent is None or ind.compiled is None:
                continue  # not ours, or not evaluated yet
            del self._pending[ind.hash]
            st = self.models[sent.model]
            st.evaluated += 1
            if ind.compiled:
                st.compiled += 1
            if ind.correct:
                st.correct += 1
                if sent.kind == "fix":
                    st.fixed += 1
                if ind.time_us > 0:
                    st.best_us = min(st.best_us, ind.time_us) if st.best_us else ind.time_us
                    if sent.parent_us and ind.time_us < sent.parent_us:
                        st.improved += 1
                        st.best_speedup = max(st.best_speedup, sent.parent_us / ind.time_us)
            elif (ind.compiled is False or ind.correct is False) and sent.depth < self.cfg.fix_attempts:
                self._fix_queue.append((ind, sent.depth + 1))

    def drop_pending(self) -> None:
        """Forget proposals that will not be evaluated in this run (the search is stopping)."""
        self._pending.clear()
        self._fix_queue.clear()

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        tot = self._totals()
        return {
            **tot,
            **self.ledger.to_dict(),
            "last_error": self.last_error,
            "models": {k: v.to_dict() for k, v in self.models.items()},
        }

    def _totals(self) -> dict[str, Any]:
        keys = ("requests", "retries", "failed_requests", "replies", "proposals", "fix_requests", "evaluated",
                "compiled", "correct", "improved", "fixed")
        tot: dict[str, Any] = {k: sum(getattr(s, k) for s in self.models.values()) for k in keys}
        unusable: dict[str, int] = {}
        for s in self.models.values():
            for r, c in s.unusable.items():
                unusable[r] = unusable.get(r, 0) + c
        tot["unusable"] = unusable
        return tot

    def summary_lines(self) -> list[str]:
        t = self._totals()
        led = self.ledger
        cost = f", ${led.cost_usd:.2f}" if led.prices else ""
        lines = [f"llm: {t['requests']} requests, {t['proposals']} proposals, {t['compiled']} compiled, "
                 f"{t['correct']} correct, {t['improved']} improved their parent, {t['fixed']} fixes worked; "
                 f"tokens {fmt_tokens(led.tokens_in)} in / {fmt_tokens(led.tokens_out)} out{cost}"]
        if led.exhausted:
            cap = f"{fmt_tokens(led.budget_tokens)} tokens" if led.budget_tokens else f"${led.budget_usd:.2f}"
            held = f" ({led.refused} requests not sent: their estimate would have passed it)" if led.refused else ""
            lines.append(f"llm: budget of {cap} spent{held}; the llm proposer stopped")
        elif self.stop_reason:
            lines.append(f"llm: stopped: {self.stop_reason}")
        if self.store is not None:
            lines.append("llm: prompts and replies are in the archive: python -m evo.conversations list")
        for name, s in self.models.items():
            label = name if name == s.model else f"{name} ({s.model})"
            bad = ", ".join(f"{r} {c}" for r, c in s.unusable.most_common())
            cost = f", ${s.cost_usd:.2f}" if led.price(name, s.model) else ""
            est = " (estimated)" if s.tokens_estimated else ""
            best = f", best {s.best_speedup:.2f}x over parent" if s.best_speedup else ""
            lines.append(f"  {label}: {s.requests} req ({s.failed_requests} failed, {s.retries} retries), "
                         f"{s.proposals} proposals -> {s.compiled} compiled, {s.correct} correct, {s.improved} improved{best}; "
                         f"tokens {fmt_tokens(s.tokens_in)}/{fmt_tokens(s.tokens_out)}{est}{cost}"
                         + (f"; unusable: {bad}" if bad else ""))
        if self.last_error:
            lines.append(f"  last request error: {self.last_error}")
        return lines

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

    # ------------------------------------------------------------------ internals
    def _record(self, ctx: ProposalContext, job: _Job, reply: Reply | None, outcome: str, candidate: str,
                detail: str, attempts: int = 0) -> None:
        """Keep the conversation in the archive (prompt, reply, model, tokens, latency, the candidate it became)."""
        if self.store is None:
            return
        try:
            self.store.add_conversation(
                shape=ctx.problem.key, layout=ctx.problem.layout, gpu=ctx.gpu.key if ctx.gpu else "", kind=job.kind,
                endpoint=job.endpoint.name, model=job.endpoint.model, parent=job.parent.hash, candidate=candidate,
                outcome=outcome, detail=(detail or "")[:2000], messages=job.messages,
                reply=reply.content if reply else "", tokens_in=reply.tokens_in if reply else 0,
                tokens_out=reply.tokens_out if reply else 0, estimated=int(reply.estimated) if reply else 0,
                latency_s=reply.seconds if reply else 0.0, attempts=reply.attempts if reply else attempts,
                prompt_chars=sum(len(str(m.get("content", ""))) for m in job.messages), sections=job.sections)
        except Exception as e:  # noqa: BLE001 - losing a log line must not stop the search
            self.last_error = f"could not store a conversation: {e}"

    def _reject(self, reason: str, model: str, detail: str) -> None:
        self.models[model].unusable[reason] += 1
        self.rejected.append((reason, model))
        self.rejected_detail.append((reason, model, detail))
        del self.rejected_detail[:-MAX_LOGGED]

    def _user_budget(self) -> int:
        """llm.prompt_tokens less the system message: the budget of the user message (0 = none)."""
        if not self.cfg.prompt_tokens:
            return 0
        return max(1, self.cfg.prompt_tokens - len(self.templates.render("system")) // CHARS_PER_TOKEN)

    def _pick_endpoint(self) -> Endpoint:
        return self.rng.choices(self.endpoints, weights=[e.weight for e in self.endpoints])[0]

    def _pick_parent(self, ranked: list[Individual]) -> Individual:
        top = ranked[:16]
        return self.rng.choices(top, weights=[1.0 / (r + 1) for r in range(len(top))])[0]

    def _plan(self, ctx: ProposalContext, n: int) -> list[_Job]:
        fixes: list[tuple[Individual, int]] = []
        while self._fix_queue and len(fixes) < math.ceil(n / 2):
            ind, depth = self._fix_queue.pop(0)
            if ind.hash not in self._fix_asked:
                fixes.append((ind, depth))
        ranked = sorted((i for i in ctx.population if i.correct and i.time_us > 0), key=lambda i: i.time_us)
        if not ranked and not fixes:
            # nothing measured yet: fix what failed, else start from each family's default instance
            failed = [i for i in list(ctx.failures) + list(ctx.population)
                      if (i.compiled is False or i.correct is False) and i.hash not in self._fix_asked]
            fixes = [(i, 1) for i in failed[:n]]
            if not fixes:
                ranked = self._family_defaults(ctx)
        jobs: list[_Job] = []
        for ind, depth in fixes:
            self._fix_asked.add(ind.hash)
            mode = "diff" if "diff" in self.edit_modes else self.edit_modes[0]
            user = prompt.fix_prompt(self.templates, ind, ctx, mode=mode, log_chars=self.cfg.log_chars)
            msgs = prompt.messages(self.templates, user)
            jobs.append(_Job("fix", ind, mode, self._pick_endpoint(), msgs, depth,
                             sections={"total": len(user), "tokens_est": tokens_est(user)}))
        limit = n if not self.max_requests else min(n, max(0, self.max_requests - self.sent))
        evidence: dict[str, Any] = {}
        while ranked and len(jobs) < limit:
            parent = self._pick_parent(ranked)
            mode = self.rng.choice(self.edit_modes)
            if parent.hash not in evidence:
                evidence[parent.hash] = self.evidence.for_parent(parent, ctx)
            user, sizes = prompt.improve_prompt_sections(self.templates, parent, ctx, mode=mode,
                                                         inspirations=self.cfg.inspirations, ev=evidence[parent.hash],
                                                         budget_tokens=self._user_budget())
            jobs.append(_Job("improve", parent, mode, self._pick_endpoint(), prompt.messages(self.templates, user),
                             sections=sizes))
        if self.max_requests:
            jobs = jobs[: max(0, self.max_requests - self.sent)]
        self.sent += len(jobs)
        for job in jobs:
            st = self.models[job.endpoint.name]
            st.requests += 1
            st.fix_requests += job.kind == "fix"
        return jobs

    def _family_defaults(self, ctx: ProposalContext) -> list[Individual]:
        out = []
        for fam in ctx.families:
            try:
                ks = fam.render(fam.default_params(), ctx.problem)
            except Exception:  # noqa: BLE001
                continue
            out.append(Individual(hash=ks.hash, family=fam.name, params=dict(ks.meta.params), source=ks.text))
        return out

    def _run(self, jobs: list[_Job]) -> list[Any]:
        def one(job: _Job) -> Any:
            if self.exhausted:
                return _BudgetSkip()
            ep = job.endpoint
            held = self.ledger.reserve(sum(len(str(m.get("content", ""))) for m in job.messages), self.cfg.max_tokens,
                                       ep.name, ep.model)
            if held is None:  # its estimate would pass the token or dollar cap: not sent
                return _BudgetSkip()
            client = self.clients[job.endpoint.name]
            try:
                reply = client.chat(job.messages, temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens)
            except RequestFailed as e:
                return e
            except Exception as e:  # noqa: BLE001 - a request must never crash the search
                return RequestFailed(f"{job.endpoint.base_url}: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
            finally:
                self.ledger.release(held)
            cost = self.ledger.charge(reply.tokens_in, reply.tokens_out, ep.name, ep.model)
            st = self.models[ep.name]
            with self.ledger._lock:
                st.tokens_in += reply.tokens_in
                st.tokens_out += reply.tokens_out
                st.cost_usd += cost
                st.seconds += reply.seconds
                st.tokens_estimated |= reply.estimated
            return reply

        workers = min(self.cfg.concurrency, len(jobs))
        if workers <= 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evo-llm") as pool:
            return list(pool.map(one, jobs))

    def _seen_keys(self, ctx: ProposalContext) -> set[str]:
        """Hashes (normalized text + launch rules) of everything evaluated or proposed so far."""
        return known_hashes(ctx) | set(self._proposed)
