"""Two sweeps of the same shapes side by side (e.g. 0.5 against 5 GPU-minutes per shape): per shape each sweep's best
evo kernel (its side-by-side re-timed figure where the search confirmed one, else its best measurement), the ratio,
and the share of shapes where the cheap sweep's best is within a tolerance of the expensive one's.

    python -m bench.sweep_compare CHEAP.db EXPENSIVE.db [--tol 0.02] [--gpu NVIDIA_H200] [--md out.md]
"""
from __future__ import annotations

import sys
from pathlib import Path

from evo.cli import _Parser
from evo.errors import EvoError, cli_entry
from evo.store import Store


def bests(db: str, gpu: str | None) -> tuple[str, dict[str, tuple[float, str, float]]]:
    """(gpu, {shape: (best us, source, GPU-seconds of evaluation)})."""
    if not Path(db).is_file():
        raise EvoError(f"no archive at {db}")
    store = Store(db)
    try:
        gpus = [r[0] for r in store.rows("SELECT gpu, COUNT(*) FROM evaluations GROUP BY gpu ORDER BY 2 DESC")]
        if not gpus:
            raise EvoError(f"{db} holds no evaluation")
        gpu = gpu or gpus[0]
        out = {}
        for shape, layout in store.rows("SELECT DISTINCT shape, layout FROM evaluations WHERE gpu=?", (gpu,)):
            conf = store.confirm(shape, layout, gpu)
            best = store.best(shape, layout, gpu)
            spent = next(store.rows("SELECT COALESCE(SUM(seconds), 0) FROM evaluations WHERE shape=? AND layout=? AND gpu=?",
                                    (shape, layout, gpu)))[0]
            if conf is not None and conf["time_us"]:
                out[shape] = (float(conf["time_us"]), "confirm", float(spent))
            elif best is not None:
                out[shape] = (float(best["time_us"]), "search", float(spent))
        return gpu, out
    finally:
        store.close()


def compare(cheap: dict, expensive: dict, tol: float) -> tuple[list[str], float, int]:
    shapes = sorted(set(cheap) & set(expensive), key=lambda s: tuple(int(x) for x in s.split("x")))
    lines = ["| shape | cheap µs | expensive µs | cheap / expensive | within | eval GPU-s cheap | eval GPU-s expensive |",
             "|---|---|---|---|---|---|---|"]
    ok = 0
    for s in shapes:
        c, e = cheap[s], expensive[s]
        r = c[0] / e[0]
        good = r <= 1 + tol
        ok += good
        lines.append(f"| {s} | {c[0]:.2f} | {e[0]:.2f} | {r:.3f} | {'yes' if good else 'NO'} | {c[2]:.0f} | {e[2]:.0f} |")
    return lines, (ok / len(shapes) if shapes else 0.0), len(shapes)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.sweep_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("cheap")
    ap.add_argument("expensive")
    ap.add_argument("--tol", type=float, default=0.02, help="within this relative margin counts (default 0.02)")
    ap.add_argument("--gpu", help="GPU key (default: the one with the most evaluations)")
    ap.add_argument("--md", help="also write the table to this markdown file")
    args = ap.parse_args(argv)
    g1, cheap = bests(args.cheap, args.gpu)
    g2, expensive = bests(args.expensive, args.gpu)
    if g1 != g2:
        raise EvoError(f"the archives are of different GPUs ({g1}, {g2}); pass --gpu")
    lines, share, n = compare(cheap, expensive, args.tol)
    if not n:
        raise EvoError("the two archives have no shape in common")
    text = "\n".join(lines) + (f"\n\n{g1}: on {share:.0%} of {n} shapes the cheap sweep's best is within "
                               f"{args.tol:.0%} of the expensive sweep's best.")
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
