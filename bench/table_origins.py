"""Where the evo kernel of each kernel-table row comes from: how far its parameters are from its family's default and
known-good starts, how long its lineage is, and (with the archive) how many candidates were measured on the shape.

    python -m bench.table_origins kernels_out/NVIDIA_H200 [--db .evo/evo.db]

A row is an **unsearched default** when its kernel is a family default or start (0 parameters differ), or at most
two parameters from one with a lineage of at most three, and (with --db) fewer than ``--searched`` (30)
candidates were measured on its shape.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from evo.cli import _Parser
from evo.errors import EvoError, cli_entry
from evo.families import load_families


def distance_to_starts(fam, params: dict) -> int:
    """Parameters that differ from the nearest of the family's default and starts."""
    full = fam.complete({k: v for k, v in params.items() if k in fam.space})
    return min(sum(full[k] != s.get(k) for k in full) for s in fam.start_instances())


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.table_origins", description=__doc__.split("\n\n")[0])
    ap.add_argument("table_dir", help="e.g. kernels_out/NVIDIA_H200")
    ap.add_argument("--db", help="the archive: candidates measured per shape")
    ap.add_argument("--searched", type=int, default=30, help="candidates on a shape that make it searched (default 30)")
    args = ap.parse_args(argv)
    from evo.export import read_table

    doc, rows = read_table(args.table_dir)
    fams = {f.name: f for f in load_families()}
    counts: dict[str, int] = {}
    if args.db:
        if not Path(args.db).is_file():
            raise EvoError(f"no archive at {args.db}")
        from evo.store import Store

        store = Store(args.db)
        try:
            counts = {r[0]: r[1] for r in store.rows("SELECT shape, COUNT(*) FROM evaluations WHERE gpu=? GROUP BY shape",
                                                     (doc.get("gpu", ""),))}
        finally:
            store.close()
    root = Path(args.table_dir).parent
    print("| shape | winner | evo family | params from nearest default/start | lineage | measured on shape | unsearched default |")
    print("|---|---|---|---|---|---|---|")
    bad = total = 0
    for r in rows:
        if not r.family or r.family not in fams or not r.kernel_path:  # rows without an evo kernel
            continue
        meta = json.loads((root / r.kernel_path).with_suffix(".json").read_text()) if r.kernel_path else {}
        d = distance_to_starts(fams[r.family], meta.get("params", {}))
        depth = len([x for x in (r.lineage or "").split("<-") if x.strip()])
        n = counts.get(r.shape)
        unsearched = (d == 0 or (d <= 2 and depth <= 3)) and (n is None or n < args.searched)
        total += 1
        bad += unsearched
        print(f"| {r.shape} | {r.winner} | {r.family} | {d} | {depth} | {'-' if n is None else n} | {'YES' if unsearched else 'no'} |")
    print(f"\n{bad} of {total} rows with an evo kernel hold an unsearched default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
