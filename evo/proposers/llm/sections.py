"""The optional sections of an improve prompt and the per-prompt token budget.

Each optional section comes as a list of versions, fullest first and "" last; ``fit`` starts from the
fullest and, while the prompt is over ``llm.prompt_tokens`` (estimated at 4 characters a token), steps
the section that is cut first (DROP_ORDER) down to its next version. The problem, the parent's source,
its measurements and the edit instructions are never cut.
"""
from __future__ import annotations

import json

from ...profile import describe
from ...records import Individual
from ..base import ProposalContext
from .prompt import Templates, inspirations_for, techniques_text

CHARS_PER_TOKEN = 4
# cut first -> cut last
DROP_ORDER = ("inspirations", "family_best", "history", "techniques", "library", "evidence")


def tokens_est(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN + 1


def fit(t: Templates, template: str, fixed: dict[str, str], optional: dict[str, list[str]],
        budget_tokens: int) -> tuple[dict[str, str], dict]:
    level = {k: 0 for k in optional}
    cut: list[str] = []

    def values() -> dict[str, str]:
        return {**fixed, **{k: v[level[k]] for k, v in optional.items()}}

    text = t.render(template, **values())
    while budget_tokens and tokens_est(text) > budget_tokens:
        name = next((k for k in DROP_ORDER if k in level and level[k] < len(optional[k]) - 1), None)
        if name is None:
            break  # only the parts that are never cut are left
        level[name] += 1
        cut.append(name)
        text = t.render(template, **values())
    vals = values()
    sizes: dict = {k: len(v) for k, v in vals.items() if k not in ("family", "hash")}
    sizes["total"] = len(text)
    sizes["tokens_est"] = tokens_est(text)
    sizes["budget_tokens"] = budget_tokens
    sizes["cut"] = sorted(set(cut))
    return vals, sizes


def optional_sections(t: Templates, parent: Individual, ctx: ProposalContext, ev, inspirations: int) -> dict[str, list[str]]:
    from .prompt import inspirations_text

    out: dict[str, list[str]] = {}
    full_insp = inspirations_text(t, parent, ctx, inspirations)
    out["inspirations"] = _versions(full_insp, _inspiration_summaries(parent, ctx, inspirations))
    out["techniques"] = _versions("\n" + techniques_text(t, ctx.arch) + "\n", "\n" + techniques_text(t, ctx.arch, short=True) + "\n")
    if ev is None:
        for k in ("evidence", "library", "history", "family_best"):
            out[k] = [""]
        return out
    out["evidence"] = _versions(evidence_text(ev, with_profile=True), evidence_text(ev, with_profile=False))
    out["library"] = _versions(library_text(ev, ctx, metrics=True), library_text(ev, ctx, metrics=False))
    out["history"] = _versions(history_text(ev, 24), history_text(ev, 8))
    out["family_best"] = _versions(family_best_text(ev, parent, ctx, source=True), family_best_text(ev, parent, ctx, source=False))
    return out


def _versions(*texts: str) -> list[str]:
    out: list[str] = []
    for x in texts:
        if x and x not in out:
            out.append(x)
    out.append("")
    return out


def evidence_text(ev, with_profile: bool) -> str:
    parts = []
    if ev.ptxas:
        parts.append("ptxas report of the parent (nvcc -Xptxas -v):\n```text\n" + ev.ptxas + "\n```")
    if with_profile and ev.profile is not None:
        lines = describe(ev.profile.metrics)
        if lines:
            parts.append("Nsight Compute, one launch of the parent (ncu --clock-control none: the GPU's clocks as they are):\n"
                         + "\n".join(f"- {ln}" for ln in lines))
    elif with_profile and ev.profile_note:
        parts.append(f"Nsight Compute: no profile ({ev.profile_note}).")
    if not parts:
        return ""
    return "\n## What the compiler and the profiler said about the parent\n" + "\n\n".join(parts) + "\n"


def library_text(ev, ctx: ProposalContext, metrics: bool) -> str:
    if ev.library is None or not ev.library.kernel:
        return ""
    from ...library_kernel import parse_kernel_name

    text = f"\n## The library's kernel on this shape\ncuBLAS runs {parse_kernel_name(ev.library.kernel).summary()}."
    if ev.library.detail:  # e.g. the call's second kernel (split-K partials summed apart), or metrics not available
        text += f" ({ev.library.detail})"
    if metrics:
        lines = describe(ev.library.metrics)
        if lines:
            text += "\nIts Nsight Compute metrics (same settings as the parent's):\n" + "\n".join(f"- {ln}" for ln in lines)
    return text + "\n"


def history_text(ev, limit: int) -> str:
    if not ev.lineage:
        return ""
    lines = ["", "## What this shape's lineage tried",
             "The parent's ancestors (oldest first), what was tried from them and from the parent, and the latest "
             "ideas on this shape, with how each went. Do not repeat a failed idea without fixing why it failed."]
    for e in ev.lineage[:limit]:
        idea = f" idea: {e.idea}" if e.idea else ""
        lines.append(f"- [{e.relation}] {e.hash[:10]} {e.family} ({e.proposer or '?'}): {e.outcome}.{idea}")
    if len(ev.lineage) > limit:
        lines.append(f"- ... {len(ev.lineage) - limit} more")
    return "\n".join(lines) + "\n"


def family_best_text(ev, parent: Individual, ctx: ProposalContext, source: bool) -> str:
    best = ev.family_best
    if best is None:
        return ""
    p = ctx.problem
    head = (f"\n## Best kernel of the parent's family (`{best.family}`) on this shape\n"
            f"{best.hash[:10]}: {best.time_us:.2f} µs ({p.tflops(best.time_us):.1f} TFLOP/s), "
            f"params {json.dumps(best.params, sort_keys=True)}" + (f"; idea: {best.idea}" if best.idea else ""))
    if source and best.source:
        head += f"\n```cuda\n{best.source.rstrip()}\n```"
    return head + "\n"


def _inspiration_summaries(parent: Individual, ctx: ProposalContext, k: int) -> str:
    insp = inspirations_for(parent, ctx, k)
    if not insp:
        return ""
    lines = ["", "## Inspirations (summaries)"]
    for ind in insp:
        lines.append(f"- family `{ind.family}`: {ind.time_us:.2f} µs, params {json.dumps(ind.params, sort_keys=True)}"
                     + (f"; idea: {ind.idea}" if ind.idea else ""))
    return "\n".join(lines)
