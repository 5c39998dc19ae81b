"""What the archive knows about a parent, gathered for its children's prompt.

The ptxas report of its compile, Nsight Compute metrics of one launch (profiled here on first use,
at most ``llm.profile_max`` parents a run, then stored), the kernel the library ran for the shape,
what the shape's lineage tried and how each try went, the best kernel of the parent's family, and
its measured time where the population handed to the proposer did not carry it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ...records import Individual
from ..base import ProposalContext

PARAMETER_PROPOSERS = ("mutate", "optuna", "seed")  # their ideas are parameter moves, not written changes
RECENT = 8  # latest tries on the shape listed besides the parent's own line
LIBRARY_HASH = "library:cublas"  # the profiles-table key of the library's kernel on a problem
_PTXAS = re.compile(r"ptxas|registers|spill|stack frame|smem|cmem|C7510|serialized|bytes gmem|Compiling entry", re.I)


@dataclass
class Profile:
    kernel: str
    metrics: dict[str, float]
    detail: str = ""


@dataclass
class LineageEntry:
    hash: str
    family: str
    proposer: str
    idea: str
    outcome: str  # "12.31 µs (1.04x its parent)" or "failed at compile: ..."
    relation: str  # "ancestor", "sibling" (another child of the parent), "tried from an ancestor", "recent"


@dataclass
class ParentEvidence:
    time_us: float = 0.0  # measured on this problem (from the archive when the population lacked it)
    cublas_us: float = 0.0
    ptxas: str = ""
    profile: Profile | None = None
    library: Profile | None = None
    profile_note: str = ""  # why there is no profile (said in the prompt once per prompt, briefly)
    lineage: list[LineageEntry] = field(default_factory=list)
    family_best: Individual | None = None


def ptxas_report(log: str, limit: int = 1500) -> str:
    """The lines of an nvcc -Xptxas -v log that say registers, spills, stack, shared memory, serialization."""
    lines = [ln.rstrip() for ln in (log or "").splitlines() if _PTXAS.search(ln)]
    out, used = [], 0
    for ln in lines:
        if used + len(ln) + 1 > limit:
            out.append(f"[... {len(lines) - len(out)} more ptxas lines]")
            break
        out.append(ln)
        used += len(ln) + 1
    return "\n".join(out)


class Evidence:
    """Reads (and, with a profiler, makes) the evidence of parents. Every part is optional: without a store
    only what the proposal context holds is used."""

    def __init__(self, store: Any, profiler: Any, cfg: Any, say: Callable[[str], None] | None = None):
        self.store = store
        self.profiler = profiler if getattr(cfg, "profile", False) else None
        self.profile_max = int(getattr(cfg, "profile_max", 0) or 0)
        self.profiled = 0  # profiler passes run by this proposer
        self.say = say

    def _keys(self, ctx: ProposalContext) -> tuple[str, str, str]:
        return ctx.problem.key, ctx.problem.layout, ctx.gpu.key if ctx.gpu else ""

    def for_parent(self, parent: Individual, ctx: ProposalContext) -> ParentEvidence:
        ev = ParentEvidence()
        shape, layout, gpu = self._keys(ctx)
        st = self.store
        if st is not None and parent.hash:
            if not (parent.correct and parent.time_us > 0):
                row = st.evaluation(parent.hash, shape, layout, gpu)
                if row is not None and row["ok"] and row["time_us"]:
                    ev.time_us, ev.cublas_us = float(row["time_us"]), float(row["cublas_us"] or 0.0)
            comp = st.compile_result(parent.hash, ctx.arch)
            if comp is not None:
                ev.ptxas = ptxas_report(comp.log)
            ev.profile, ev.profile_note = self._profile(parent, ctx, comp)
            ev.library = self._library(ctx)
            ev.lineage = self._lineage(parent, ctx)
        elif parent.compile_log:
            ev.ptxas = ptxas_report(parent.compile_log)
        ev.family_best = self._family_best(parent, ctx)
        return ev

    # ---- Nsight Compute
    def _profile(self, parent: Individual, ctx: ProposalContext, comp: Any) -> tuple[Profile | None, str]:
        shape, layout, gpu = self._keys(ctx)
        row = self.store.profile(parent.hash, shape, layout, gpu)
        if row is not None:
            if row["ok"]:
                return Profile(row["kernel"] or "", json.loads(row["metrics"] or "{}"), row["detail"] or ""), ""
            return None, row["detail"] or ""
        prof = self.profiler
        if prof is None:
            return None, ""
        if getattr(prof, "disabled", ""):
            return None, prof.disabled
        row = self.store.evaluation(parent.hash, shape, layout, gpu)
        correct = bool(parent.correct) or (row is not None and bool(row["ok"]))
        if not correct or comp is None or not comp.ok or not comp.cubin_path:
            return None, ""
        if self.profile_max and self.profiled >= self.profile_max:
            return None, ""
        self.profiled += 1
        res = prof.profile_kernel(parent.source, comp.cubin_path, ctx.problem)
        if getattr(prof, "disabled", ""):
            return None, prof.disabled  # said once by the profiler; not stored (another machine may have ncu)
        self.store.set_profile(parent.hash, shape, layout, gpu, res.ok, res.kernel, res.metrics, res.detail,
                               res.command, res.seconds)
        return (Profile(res.kernel, res.metrics, res.detail), "") if res.ok else (None, res.detail)

    def _library(self, ctx: ProposalContext) -> Profile | None:
        shape, layout, gpu = self._keys(ctx)
        row = self.store.profile(LIBRARY_HASH, shape, layout, gpu)
        if row is None and self.profiler is not None and not getattr(self.profiler, "disabled", ""):
            res = self.profiler.profile_library(ctx.problem, "cublas")
            if getattr(self.profiler, "disabled", ""):
                return None
            detail = "; ".join(x for x in (res.detail, res.call_summary()) if x)  # (a second, reducing kernel: said)
            self.store.set_profile(LIBRARY_HASH, shape, layout, gpu, res.ok, res.kernel, res.metrics, detail,
                                   res.command, res.seconds)
            row = self.store.profile(LIBRARY_HASH, shape, layout, gpu)
        if row is None or not row["ok"]:
            return None
        return Profile(row["kernel"] or "", json.loads(row["metrics"] or "{}"), row["detail"] or "")

    # ---- lineage
    def _lineage(self, parent: Individual, ctx: ProposalContext, limit: int = 24) -> list[LineageEntry]:
        shape, layout, gpu = self._keys(ctx)
        rows = self.store.lineage_rows(shape, layout, gpu)
        by_hash = {r["hash"]: r for r in rows}

        def first_parent(r: Any) -> str:
            return (r["parent"] or "").split(",")[0]

        chain: list[str] = []
        h = parent.hash
        while h and h not in chain and len(chain) < 8:
            chain.append(h)
            r = by_hash.get(h)
            h = first_parent(r) if r is not None else ""
        out: list[LineageEntry] = []
        seen: set[str] = set()

        def add(r: Any, relation: str) -> None:
            if r["hash"] in seen or r["hash"] == parent.hash or len(out) >= limit:
                return
            seen.add(r["hash"])
            out.append(LineageEntry(r["hash"], r["family"] or "", r["proposer"] or "", r["idea"] or "",
                                    _outcome(r, by_hash.get(first_parent(r))), relation))

        for h in reversed(chain[1:]):  # ancestors, oldest first
            if h in by_hash:
                add(by_hash[h], "ancestor")
        for r in rows:  # what was tried from the parent and from its ancestors
            p = first_parent(r)
            if p == parent.hash and r["hash"] != parent.hash:
                add(r, "child of this parent")
            elif p in chain[1:]:
                add(r, "tried from an ancestor")
        recent = [r for r in reversed(rows) if r["idea"]]  # the latest ideas on this shape, newest first:
        written = [r for r in recent if (r["proposer"] or "") not in PARAMETER_PROPOSERS][:RECENT]  # written ones first
        for r in written + recent[:RECENT]:
            add(r, "recent on this shape")
        return out

    # ---- family best
    def _family_best(self, parent: Individual, ctx: ProposalContext) -> Individual | None:
        cands = [i for i in ctx.population if i.family == parent.family and i.correct and i.time_us > 0]
        if self.store is not None:
            shape, layout, gpu = self._keys(ctx)
            row = self.store.best_of_family(parent.family, shape, layout, gpu)
            if row is not None:
                cands.append(Individual(hash=row["hash"], family=row["family"], params=json.loads(row["params"] or "{}"),
                                        source=row["source"], idea=row["idea"] or "", correct=True, time_us=row["time_us"]))
        cands = [i for i in cands if i.hash != parent.hash]
        return min(cands, key=lambda i: i.time_us, default=None)


def _outcome(r: Any, parent_row: Any) -> str:
    if r["ok"]:
        t = float(r["time_us"] or 0.0)
        rel = ""
        if parent_row is not None and parent_row["ok"] and parent_row["time_us"] and t:
            ratio = float(parent_row["time_us"]) / t
            rel = f" ({ratio:.3f}x its parent: {'faster' if ratio > 1.0 else 'slower' if ratio < 1.0 else 'same'})"
        return f"{t:.2f} µs{rel}"
    err = " ".join(str(r["error"] or "").split())[:140]
    return f"failed at {r['stage'] or 'evaluation'}: {err}"
