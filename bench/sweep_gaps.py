"""Where the GPU waited in a search or sweep: per run of an archive, seconds from the run's start to its first
evaluation, the seeds' end (those timed before the first child: a slow seed compiling in the background is timed
later, and counted in "seeds later"), the wait from there to the first child, and every pause between two
evaluations longer than a threshold. An evaluation's window is [created - seconds, created] (the worker's own time),
so a pause is GPU time spent on nothing: compiles, Python, the check's host side. A seed is a kernel the archive
first stored as one (a candidate keeps its first proposer: a kernel another shape's search proposed and this one timed
as a seed counts as a child here, and a run whose seeds all came so shows none). Each pause names the kernel timed
after it (its family and the proposer's idea): what the GPU waited for, as a rule its compile.

Below it, where the GPU's evaluation time went by family: evaluations, the median and 90th percentile of one
evaluation's own seconds (loading the candidate, the check, the timing), and the family's share of the total (a
launch: host family paid its host-code sandbox's start in every phase: 0.75 s against 0.04 s, docs/perf-search.md).

    python -m bench.sweep_gaps DB [--gap-s 5] [--md out.md]

For the next engineer measuring the sweep's throughput (docs/perf-search.md).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from evo.cli import _Parser
from evo.errors import EvoError, cli_entry
from evo.store import Store


@dataclass
class RunGaps:
    run_id: int
    shape: str
    evaluations: int
    span_s: float                      # run start to its last evaluation's end
    first_eval_s: float                # run start to the first evaluation's start
    seeds_end_s: float | None          # run start to the end of the last seed timed before the first child (None: none)
    child_wait_s: float | None         # the seeds' end to the first non-seed evaluation's start
    seeds_later: int = 0               # seeds timed after the first child (deferred: compiled in the background)
    # (at s after start, length s, the kernel timed after it: its family and idea), longer than the threshold
    pauses: list[tuple[float, float, str]] = field(default_factory=list)

    @property
    def longest_pause_s(self) -> float:
        return max((p for _, p, _ in self.pauses), default=0.0)


def run_gaps(store: Store, gap_s: float = 5.0) -> list[RunGaps]:
    out = []
    for run in store.rows("SELECT id, shape, started FROM runs ORDER BY id"):
        evs = list(store.rows(
            "SELECT e.created, e.seconds, COALESCE(c.proposer, '') AS proposer, COALESCE(c.family, '') AS family, "
            "COALESCE(c.idea, '') AS idea FROM evaluations e "
            "LEFT JOIN candidates c ON c.hash = e.hash WHERE e.run_id=? ORDER BY e.created", (run["id"],)))
        if not evs:
            continue
        t0 = float(run["started"])
        windows = [(float(e["created"]) - float(e["seconds"] or 0.0), float(e["created"]), e["proposer"]) for e in evs]
        what = [" ".join((e["idea"] if e["idea"].startswith(e["family"]) else f"{e['family']} {e['idea']}")[:72].split())
                for e in evs]  # an idea names its family as a rule
        first_child = min((start for start, _, who in windows if who != "seed"), default=None)
        seed_ends = [end for start, end, who in windows if who == "seed" and (first_child is None or start < first_child)]
        later = sum(who == "seed" and first_child is not None and start >= first_child for start, _, who in windows)
        seeds_end = max(seed_ends) if seed_ends else None
        child_starts = [start for start, _, who in windows if who != "seed" and (seeds_end is None or start >= seeds_end)]
        pauses, last_end = [], windows[0][1]
        for (start, end, _), kernel in zip(windows[1:], what[1:]):
            if start - last_end > gap_s:
                pauses.append((round(last_end - t0, 1), round(start - last_end, 1), kernel))
            last_end = max(last_end, end)
        out.append(RunGaps(
            run_id=int(run["id"]), shape=run["shape"], evaluations=len(evs), span_s=round(last_end - t0, 1),
            first_eval_s=round(windows[0][0] - t0, 1),
            seeds_end_s=None if seeds_end is None else round(seeds_end - t0, 1),
            child_wait_s=(round(min(child_starts) - seeds_end, 1) if seeds_end is not None and child_starts else None),
            seeds_later=later, pauses=pauses))
    return out


@dataclass
class FamilySeconds:
    family: str
    evaluations: int
    median_s: float
    p90_s: float
    total_s: float
    share: float                       # of every family's evaluation seconds


def family_seconds(store: Store) -> list[FamilySeconds]:
    """Evaluation seconds per family over the archive's runs, the costliest family first."""
    per: dict[str, list[float]] = {}
    for e in store.rows("SELECT COALESCE(c.family, '') AS family, e.seconds FROM evaluations e "
                        "LEFT JOIN candidates c ON c.hash = e.hash WHERE e.run_id IS NOT NULL"):
        per.setdefault(e["family"] or "?", []).append(float(e["seconds"] or 0.0))
    total = sum(sum(v) for v in per.values()) or 1.0
    out = []
    for fam, secs in per.items():
        secs.sort()
        out.append(FamilySeconds(fam, len(secs), secs[len(secs) // 2], secs[min(len(secs) - 1, int(0.9 * len(secs)))],
                                 sum(secs), sum(secs) / total))
    return sorted(out, key=lambda f: -f.total_s)


def family_markdown(rows: list[FamilySeconds]) -> str:
    lines = ["| family | evaluations | median s | p90 s | evaluation s | share |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.family} | {r.evaluations} | {r.median_s:.3f} | {r.p90_s:.3f} | {r.total_s:.1f} | {r.share:.0%} |"
              for r in rows]
    return "\n".join(lines)


def markdown(rows: list[RunGaps], gap_s: float) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"
    lines = [f"| run | shape | evaluations | span s | first evaluation s | seeds end s | seeds -> first child s | "
             f"seeds later | pauses > {gap_s:g} s (at: length, the kernel timed next) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pauses = ", ".join(f"{at:.0f}: {n:.1f}" + (f" ({k})" if k else "") for at, n, k in r.pauses) or "none"
        lines.append(f"| {r.run_id} | {r.shape} | {r.evaluations} | {r.span_s:.1f} | {r.first_eval_s:.1f} | "
                     f"{f(r.seeds_end_s)} | {f(r.child_wait_s)} | {r.seeds_later} | {pauses} |")
    return "\n".join(lines)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.sweep_gaps", description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="the sweep's or search's SQLite archive")
    ap.add_argument("--gap-s", type=float, default=5.0, help="report pauses between evaluations longer than this")
    ap.add_argument("--md", help="also write the table to this Markdown file")
    args = ap.parse_args(argv)
    if not Path(args.db).is_file():
        raise EvoError(f"no archive at {args.db}")
    store = Store(args.db)
    try:
        rows = run_gaps(store, args.gap_s)
        families = family_seconds(store)
    finally:
        store.close()
    if not rows:
        raise EvoError(f"{args.db} holds no run with an evaluation")
    text = markdown(rows, args.gap_s) + "\n\n" + family_markdown(families)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
