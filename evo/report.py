"""A report people can read: one HTML page with plots, from the archive.

    python -m evo.report [--db .evo/evo.db] [--gpu NAME] [--out kernels_out] [--shape MxNxK]

Writes kernels_out/<GPU>/report/index.html and its PNGs (matplotlib, Agg): the speedup distribution against
each baseline, a roofline scatter (TFLOP/s against arithmetic intensity under the ceilings measured on that
GPU), wins per kernel family, GPU-minutes per shape, and the lineage of one shape's winner (--shape; default:
the shape where evo's lead over the best library is largest). It refreshes the kernel table (table.csv/json)
first, so the page and the table show the same numbers. Needs ``pip install -e .[report]``.
"""
from __future__ import annotations

import html
import json
import math
import sys
import time
from pathlib import Path

from .cli import _Parser
from .errors import EvoError, cli_entry
from .export import LIBRARIES, TableRow, export_table
from .problem import parse_shape
from .store import Store

LIB_LABEL = {"cublas": "cuBLAS", "cublaslt_heuristic": "cuBLASLt heuristic", "cublaslt_autotune": "cuBLASLt autotuned"}
EVO_COLOR, LIB_COLOR, GREY = "#1f77b4", "#d62728", "#7f7f7f"


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise EvoError("the report needs matplotlib: pip install -e '.[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0


def gpus_in(store: Store) -> list[str]:
    return sorted({r[0] for r in store.rows("SELECT gpu FROM evaluations UNION SELECT gpu FROM baselines")})


def gpu_minutes(store: Store, gpu: str) -> dict[str, float]:
    """Minutes the GPU spent per shape: the sweep's record where there is one, else the runs' wall time."""
    out: dict[str, float] = {}
    for r in store.rows("SELECT shape, SUM(COALESCE(finished, started) - started) FROM runs WHERE gpu=? GROUP BY shape", (gpu,)):
        out[r[0]] = (r[1] or 0.0) / 60
    try:
        for r in store.rows("SELECT shape, seconds FROM sweep_shapes WHERE gpu=? AND status='done'", (gpu,)):
            out[r[0]] = max(out.get(r[0], 0.0), (r[1] or 0.0) / 60)
    except Exception:  # noqa: BLE001 - no sweep in this archive
        pass
    return out


# --- plots ------------------------------------------------------------------------------------------------

def plot_speedups(plt, rows: list[TableRow], path: Path) -> dict[str, float]:
    libs = [l for l in LIBRARIES if any(getattr(r, f"speedup_{l}") for r in rows)]
    fig, axes = plt.subplots(len(libs) or 1, 1, figsize=(8, 2.2 * max(1, len(libs)) + 0.6), sharex=True, squeeze=False)
    from matplotlib.ticker import MaxNLocator

    gms = {}
    allv = [getattr(r, f"speedup_{l}") for r in rows for l in libs if getattr(r, f"speedup_{l}")]
    lo, hi = (min(allv), max(allv)) if allv else (0.5, 2.0)
    lo, hi = min(lo, 0.9) * 0.95, max(hi, 1.1) * 1.05
    bins = [lo * (hi / lo) ** (i / 30) for i in range(31)]
    for ax, lib in zip(axes[:, 0], libs):
        v = [getattr(r, f"speedup_{lib}") for r in rows if getattr(r, f"speedup_{lib}")]
        gms[lib] = gm = geomean(v)
        faster = sum(x > 1 for x in v)
        ax.hist([x for x in v if x > 1], bins=bins, color=EVO_COLOR, label="evo faster")
        ax.hist([x for x in v if x <= 1], bins=bins, color=LIB_COLOR, label=f"{LIB_LABEL[lib]} faster")
        ax.axvline(1.0, color="black", lw=1)
        ax.axvline(gm, color="black", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_ylabel("shapes")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"vs {LIB_LABEL[lib]}: geomean {gm:.3f}x (dashed), evo faster on {faster} of {len(v)} shapes",
                     loc="left", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    ax = axes[-1, 0]
    ax.set_xlabel("speedup of evo's best kernel (baseline time / evo time; > 1 means evo is faster)")
    ticks = [t for t in (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4) if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    fig.suptitle("Speedup distribution per baseline", x=0.01, ha="left", fontweight="bold")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return gms


def plot_roofline(plt, rows: list[TableRow], ceilings: tuple[float, float] | None, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 5.2))
    ai = lambda r: parse_shape(r.shape).flops / parse_shape(r.shape).min_bytes  # noqa: E731
    xs = [ai(r) for r in rows]
    if ceilings and xs:
        peak, bw = ceilings
        lo, hi = min(xs) / 1.5, max(xs) * 1.5
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(grid, [min(peak, x * bw / 1000) for x in grid], color="black", lw=1.5,
                label=f"roofline: {peak:.0f} TFLOP/s, {bw:.0f} GB/s (measured)")
        ax.axvline(peak * 1000 / bw, color=GREY, ls=":", lw=1)
    lib_t = [(ai(r), parse_shape(r.shape).tflops(min(v for v in (r.cublas_us, r.cublaslt_heuristic_us, r.cublaslt_autotune_us) if v)))
             for r in rows if any((r.cublas_us, r.cublaslt_heuristic_us, r.cublaslt_autotune_us))]
    if lib_t:
        ax.scatter(*zip(*lib_t), marker="x", s=22, color=GREY, label="best library")
    for win, color, label in ((True, EVO_COLOR, "evo (wins)"), (False, LIB_COLOR, "evo (loses)")):
        pts = [(ai(r), r.tflops) for r in rows if r.tflops and (r.winner == "evo") == win]
        if pts:
            ax.scatter(*zip(*pts), s=26, color=color, label=label, alpha=0.85, edgecolor="white", lw=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of A, B and C moved once)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("Roofline: every shape, evo's best kernel and the best library", loc="left", fontweight="bold")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_wins(plt, rows: list[TableRow], path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        key = f"evo: {r.family}" if r.winner == "evo" else LIB_LABEL.get(r.winner, r.winner or "none")
        counts[key] = counts.get(key, 0) + 1
    items = sorted(counts.items(), key=lambda kv: (not kv[0].startswith("evo"), -kv[1]))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(items) + 1.4))
    names = [k for k, _ in items][::-1]
    vals = [v for _, v in items][::-1]
    colors = [EVO_COLOR if n.startswith("evo") else LIB_COLOR for n in names]
    ax.barh(names, vals, color=colors)
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v}", va="center", fontsize=9)
    ax.set_xlabel("shapes won")
    ax.set_title(f"Wins per kernel family ({sum(vals)} shapes; blue: an evo family, red: a library)", loc="left",
                 fontweight="bold", fontsize=10)
    ax.grid(axis="y", visible=False)
    ax.set_xlim(0, max(vals) * 1.15 if vals else 1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return counts


def plot_minutes(plt, rows: list[TableRow], minutes: dict[str, float], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for win, color, label in ((True, EVO_COLOR, "evo wins"), (False, LIB_COLOR, "library wins")):
        pts = [(parse_shape(r.shape).flops / 1e9, minutes[r.shape]) for r in rows if r.shape in minutes and (r.winner == "evo") == win]
        if pts:
            ax.scatter(*zip(*pts), s=24, color=color, label=label, alpha=0.85)
    total = sum(minutes.get(r.shape, 0.0) for r in rows)
    n = sum(r.shape in minutes for r in rows)
    ax.set_xscale("log")
    ax.set_xlabel("shape size (GFLOP per call)")
    ax.set_ylabel("GPU-minutes")
    ax.set_ylim(bottom=0)
    ax.set_title(f"GPU-minutes per shape: {total:.1f} in all, {total / max(1, n):.2f} per shape", loc="left", fontweight="bold")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def lineage_tree(store: Store, h: str, shape: str, gpu: str, depth: int = 12) -> list[tuple[int, dict]]:
    """(depth, node) pairs, pre-order, following every parent; each node has what is known of it on `shape`."""
    out: list[tuple[int, dict]] = []
    seen: set[str] = set()

    def walk(x: str, d: int) -> None:
        row = store.candidate(x)
        if row is None or d > depth:
            return
        ev = store.rows("SELECT ok, time_us, stage FROM evaluations WHERE hash=? AND shape=? AND gpu=?", (x, shape, gpu))
        e = next(ev, None)
        node = {"hash": x, "family": row["family"], "proposer": row["proposer"] or "?", "idea": row["idea"] or "",
                "params": json.loads(row["params"] or "{}"), "time_us": e["time_us"] if e and e["ok"] else 0.0,
                "stage": ("" if e is None else ("ok" if e["ok"] else e["stage"])), "repeat": x in seen,
                "conversation": store.conversation_ids([x]).get(x, 0)}  # the LLM conversation that wrote it
        out.append((d, node))
        if x in seen:
            return
        seen.add(x)
        for p in [p for p in (row["parent"] or "").split(",") if p]:
            walk(p, d + 1)

    walk(h, 0)
    return out


def plot_lineage(plt, tree: list[tuple[int, dict]], shape: str, path: Path) -> None:
    """The first-parent chain of the winner: time on this shape per ancestor, oldest on the left."""
    chain = []
    for d, node in tree:
        if d == len(chain):
            chain.append(node)
    chain = chain[::-1]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    xs = list(range(len(chain)))
    ys = [n["time_us"] or float("nan") for n in chain]
    ax.plot(xs, ys, "-o", color=EVO_COLOR)
    for x, n in zip(xs, chain):
        y = n["time_us"]
        label = f"{n['hash'][:8]}\n{n['proposer']}"
        ax.annotate(label, (x, y if y else 0), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{'winner' if i == len(chain) - 1 else f'-{len(chain) - 1 - i}'}" for i in xs])
    ax.set_xlabel("ancestor (first parent), oldest left")
    ax.set_ylabel(f"µs on {shape}")
    ax.margins(y=0.25)
    ax.set_title(f"Lineage of the winner on {shape}", loc="left", fontweight="bold")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- the page ---------------------------------------------------------------------------------------------

def _fmt_params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def render(store: Store, gpu: str, out_dir: str | Path, shape: str | None = None) -> Path:
    plt = _plt()
    table_dir, rows = export_table(store, gpu, out_dir)
    if not rows:
        raise EvoError(f"the archive {store.path} has no results for {gpu}")
    rep = table_dir / "report"
    rep.mkdir(parents=True, exist_ok=True)
    ceilings = store.ceilings(gpu)
    minutes = gpu_minutes(store, gpu)
    gms = plot_speedups(plt, rows, rep / "speedups.png")
    plot_roofline(plt, rows, ceilings, rep / "roofline.png")
    wins = plot_wins(plt, rows, rep / "wins.png")
    plot_minutes(plt, rows, minutes, rep / "gpu_minutes.png")
    evo_rows = [r for r in rows if r.hash]
    if shape:
        chosen = next((r for r in rows if r.shape == parse_shape(shape).key), None)
        if chosen is None:
            raise EvoError(f"{shape} is not in the table of {gpu}")
        if not chosen.hash:
            raise EvoError(f"{shape} has no evo kernel to trace")
    else:
        chosen = max(evo_rows, key=lambda r: r.speedup_best_library, default=None)
    tree = lineage_tree(store, chosen.hash, chosen.shape, gpu) if chosen else []
    if chosen:
        plot_lineage(plt, tree, chosen.shape, rep / "lineage.png")
    e = html.escape
    n_evo = sum(r.winner == "evo" for r in rows)
    gm_lines = "".join(f"<li>vs {e(LIB_LABEL[l])}: <b>{g:.3f}x</b></li>" for l, g in gms.items())
    table_gm = geomean([max(r.speedup_best_library, 1.0) if r.time_us else 1.0 for r in rows if r.best_library])
    ceil = f"{ceilings[0]:.0f} TFLOP/s fp16 matmul, {ceilings[1]:.0f} GB/s copy (measured)" if ceilings else "not measured"
    trs = []
    for r in sorted(rows, key=lambda r: -r.speedup_best_library):
        trs.append("<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in (
            r.shape, r.winner, r.family or "-", f"{r.time_us:.2f}" if r.time_us else "-", f"{r.tflops:.1f}" if r.tflops else "-",
            *(f"{getattr(r, f'speedup_{l}'):.3f}x" if getattr(r, f"speedup_{l}") else "-" for l in LIBRARIES),
            f"{r.pct_of_roofline:.0f}%" if r.pct_of_roofline else "-", f"{minutes.get(r.shape, 0):.1f}", r.timing_source)) + "</tr>")
    lin = []
    for d, n in tree:
        t = f"{n['time_us']:.2f} µs" if n["time_us"] else (f"rejected at {n['stage']}" if n["stage"] else "not run on this shape")
        lin.append(f"{'&nbsp;' * 4 * d}{'└─ ' if d else ''}<code>{e(n['hash'][:10])}</code> {e(n['family'])} "
                   f"[{e(n['proposer'])}] {e(_fmt_params(n['params']))} — {e(t)}"
                   + (f" <i>{e(n['idea'][:120])}</i>" if n["idea"] else "") + (" (seen above)" if n["repeat"] else "")
                   + (f" — conversation {n['conversation']}: <code>python -m evo.conversations show {n['conversation']}</code>"
                      if n.get("conversation") else ""))
    lineage_html = ("<p>" + "<br>\n".join(lin) + "</p>") if lin else "<p>no evo kernel</p>"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>evo report: {e(gpu)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}}
img{{max-width:100%;border:1px solid #ddd;margin:.5em 0}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}} td:first-child,td:nth-child(2),td:nth-child(3){{text-align:left}}
code{{background:#f3f3f3}}</style></head><body>
<h1>evo kernel report — {e(gpu)}</h1>
<p>{len(rows)} shapes in the table; <b>evo wins {n_evo}</b>, a library wins {len(rows) - n_evo}. Ceilings: {e(ceil)}.
Archive <code>{e(str(store.path))}</code>, generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>
<p>Geomean speedup of evo's best kernel per shape (baseline µs / evo µs):</p><ul>{gm_lines}</ul>
<p>The table (evo where it wins, the library elsewhere) vs the best library: <b>{table_gm:.3f}x</b>.
Wins: {e(', '.join(f'{k} {v}' for k, v in wins.items()))}.</p>
<h2>Speedups</h2><img src="speedups.png" alt="speedup histograms">
<h2>Roofline</h2><img src="roofline.png" alt="roofline scatter">
<h2>Wins per family</h2><img src="wins.png" alt="wins per family">
<h2>GPU time</h2><img src="gpu_minutes.png" alt="GPU-minutes per shape">
<h2>Lineage of the winner on {e(chosen.shape) if chosen else '-'}</h2>
{'<img src="lineage.png" alt="lineage">' if chosen else ''}
{lineage_html}
<h2>Every shape</h2>
<table><tr><th>shape</th><th>winner</th><th>family</th><th>evo µs</th><th>TFLOP/s</th>
{''.join(f'<th>vs {e(LIB_LABEL[l])}</th>' for l in LIBRARIES)}<th>roofline</th><th>GPU-min</th><th>timing</th></tr>
{''.join(trs)}</table>
<p>Kernel table: <a href="../table.csv">table.csv</a>, <a href="../table.json">table.json</a>.</p>
</body></html>
"""
    (rep / "index.html").write_text(page)
    return rep / "index.html"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m evo.report", description="Write an HTML report with plots from the archive.")
    ap.add_argument("--db", default=".evo/evo.db", help="SQLite archive (default .evo/evo.db)")
    ap.add_argument("--gpu", help="GPU name as stored (spaces as _); needed when the archive holds several")
    ap.add_argument("--out", default="kernels_out", help="kernel table folder (default kernels_out)")
    ap.add_argument("--shape", help="MxNxK whose winner's lineage is drawn (default: evo's largest lead)")
    args = ap.parse_args(argv)
    if not Path(args.db).is_file():
        raise EvoError(f"no archive at {args.db}")
    store = Store(args.db)
    try:
        gpus = gpus_in(store)
        gpu = args.gpu.replace(" ", "_") if args.gpu else (gpus[0] if len(gpus) == 1 else "")
        if not gpu:
            raise EvoError(f"the archive holds {len(gpus)} GPUs; pick one with --gpu: {', '.join(gpus) or 'none'}")
        if gpu not in gpus:
            raise EvoError(f"no results for {gpu} in {args.db}; it holds: {', '.join(gpus) or 'nothing'}")
        path = render(store, gpu, args.out, args.shape)
    finally:
        store.close()
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
