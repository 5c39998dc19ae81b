"""Where a kernel's warps wait, instruction by instruction: Nsight Compute's source page (SASS) with warp-stall
sampling, reduced to the hot spots.

    ncu --clock-control none --profile-from-start off --section SourceCounters --section WarpStateStats \\
        --page source --print-source sass --csv python -m evo.gpu.profile_target --shape ... --source ... --cubin ...

Each SASS line carries the warp-state samples taken on it and their reasons (long scoreboard: waiting on
memory or an mbarrier poll; barrier: bar.sync or wgmma.wait_group; wait: a fixed-latency dependency; ...). The hot
spots are the lines with the most samples, each with its share of all samples, its top reasons, how often it
ran and the instructions just before it (what it waits for). ``evo.profile.Profiler.sass`` runs ncu;
``python -m evo.profile --sass N`` prints the hot spots.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

SAMPLES = "Warp Stall Sampling (All Samples)"
SECTIONS = ["--section", "SourceCounters", "--section", "WarpStateStats", "--page", "source", "--print-source", "sass"]


@dataclass
class SassLine:
    address: str
    sass: str
    samples: int
    executed: int
    stalls: dict[str, int] = field(default_factory=dict)  # reason -> samples (issued and not)


def _int(text: str) -> int:
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def parse_source_csv(text: str) -> list[SassLine]:
    """The SASS lines of the first kernel on ncu's source page (--page source --csv); [] if there is none."""
    rows = list(csv.reader(io.StringIO(text)))
    head = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if head is None:
        return []
    names = rows[head]
    ix = {k: i for i, k in enumerate(names)}
    reasons = [k for k in names if k.startswith("stall_") and "(Not Issued)" not in k]
    out = []
    for r in rows[head + 1:]:
        if len(r) != len(names):
            if r[:2] == ["Address", "Source"] or (r and r[0] == "Kernel Name"):
                break  # the next kernel's table
            continue
        out.append(SassLine(r[ix["Address"]], r[ix["Source"]].strip(), _int(r[ix.get(SAMPLES, 2)]),
                            _int(r[ix["Instructions Executed"]]) if "Instructions Executed" in ix else 0,
                            {k[len("stall_"):]: _int(r[ix[k]]) for k in reasons if _int(r[ix[k]])}))
    return out


def hotspots(lines: list[SassLine], top: int = 15, context: int = 2) -> list[str]:
    """Readable lines: the `top` SASS instructions by samples, with share, reasons, count and predecessors."""
    total = sum(ln.samples for ln in lines)
    if not total:
        return ["no warp-state samples on this kernel"]
    reasons: dict[str, int] = {}
    for ln in lines:
        for k, v in ln.stalls.items():
            reasons[k] = reasons.get(k, 0) + v
    summary = ", ".join(f"{k.replace('_', ' ')} {100 * v / total:.0f}%" for k, v in
                        sorted(reasons.items(), key=lambda kv: -kv[1])[:6])
    out = [f"{total} samples over {len(lines)} SASS instructions; by reason: {summary}"]
    order = sorted(range(len(lines)), key=lambda i: -lines[i].samples)[:top]
    for i in order:
        ln = lines[i]
        why = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(ln.stalls.items(), key=lambda kv: -kv[1])[:2])
        before = " | ".join(lines[j].sass[:40] for j in range(max(0, i - context), i))
        out.append(f"{100 * ln.samples / total:5.1f}%  {ln.sass[:60]:60s}  [{why}] x{ln.executed}"
                   + (f"  after: {before}" if before else ""))
    return out


@dataclass
class SassProfile:
    ok: bool
    lines: list[SassLine] = field(default_factory=list)
    detail: str = ""
    command: str = ""
    seconds: float = 0.0
