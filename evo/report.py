"""A report people can read: one HTML page with plots, from the kernel table alone (the archive adds lineage and
GPU-minutes where it is present).

    python -m evo.report [--out kernels_out] [--gpu NAME] [--db .evo/evo.db] [--shape MxNxK]

Writes kernels_out/<GPU>/report/index.html and its PNGs (matplotlib, Agg; evo/report_plots.py): the speedup
distribution against each baseline, every shape's speedup over the best library with its noise band (a lead inside
the band is a tie, not a win), a roofline (the compute and memory roof from the GPU's datasheet, the measured cuBLAS
8192³ rate and copy bandwidth beside it, the launch floor), wins per family, GPU-minutes per shape and the lineage
of one shape's winner (those two from the archive). With an archive for the GPU it first re-exports the table, so
page and table agree; without one (a fresh clone) it reads the committed table.json. Needs ``pip install 'evo[report]'``.
"""
from __future__ import annotations

import html
import json
import sys
import time
from pathlib import Path

from .cli import _Parser
from .datasheet import datasheet
from .errors import EvoError, cli_entry
from .export import LIBRARIES, TableRow, export_table, read_table
from .problem import parse_shape
from .report_plots import (LIB_LABEL, Bounds, best_lib_us, geomean, plot_lineage, plot_minutes, plot_noise,
                           plot_roofline, plot_speedups, plot_wins, plt_module)
from .store import Store


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


# --- the page ---------------------------------------------------------------------------------------------

def _fmt_params(p: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in p.items())


def bounds_for(gpu: str, doc: dict) -> Bounds | None:
    """The roof from the datasheet (else the measured ceilings, said so), the measured rates beside it, and the
    launch floor measured with the table's ceilings (else the one measured on this model, docs/perf-flush.md)."""
    ds = datasheet(gpu)
    ceil = doc.get("ceilings") or {}
    lib_peak, lib_bw = float(ceil.get("peak_tflops") or 0.0), float(ceil.get("bw_gbs") or 0.0)
    launch, launch_src = float(ceil.get("launch_us") or 0.0), "measured with the table's ceilings"
    if not launch and ds is not None and ds.launch_floor_measured:
        launch, launch_src = ds.launch_floor_us, f"measured on {ds.model}, docs/perf-flush.md"
    if ds is not None:
        return Bounds(ds.peak_tflops_fp16_dense, ds.dram_gbs, f"datasheet {ds.model}", lib_peak, lib_bw, launch, launch_src)
    if lib_peak and lib_bw:
        return Bounds(lib_peak, lib_bw, "measured; no datasheet for this GPU", lib_peak, lib_bw, launch, launch_src)
    return None


def render(rows: list[TableRow], doc: dict, gpu: str, table_dir: Path, store: Store | None = None,
           shape: str | None = None, archive_note: str = "") -> Path:
    plt = plt_module()
    if not rows:
        raise EvoError(f"the kernel table of {gpu} has no rows")
    rep = Path(table_dir) / "report"
    rep.mkdir(parents=True, exist_ok=True)
    bounds = bounds_for(gpu, doc)
    minutes = gpu_minutes(store, gpu) if store is not None else {}
    notes: dict[str, str] = {}
    gms, notes["speedups"] = plot_speedups(plt, rows, rep / "speedups.png")
    notes["noise"] = plot_noise(plt, rows, rep / "noise.png")
    notes["roofline"] = plot_roofline(plt, rows, bounds, rep / "roofline.png")
    wins = plot_wins(plt, rows, rep / "wins.png")
    e = html.escape
    chosen, tree = None, []
    if store is not None:
        notes["minutes"] = plot_minutes(plt, rows, minutes, rep / "gpu_minutes.png")
        notes["curves"] = plot_best_so_far(plt, store, gpu, rows, rep / "best_so_far.png")
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
    else:
        for stale in ("gpu_minutes.png", "lineage.png", "best_so_far.png"):
            (rep / stale).unlink(missing_ok=True)
    verdicts = {v: sum(r.verdict == v for r in rows) for v in ("win", "tie", "loss")}
    n_evo = sum(r.winner == "evo" for r in rows)
    gm_lines = "".join(f"<li>vs {e(LIB_LABEL[l])}: <b>{g:.3f}x</b></li>" for l, g in gms.items())
    served = geomean([r.speedup_best_library if r.winner == "evo" else 1.0 for r in rows if best_lib_us(r)])
    if bounds:
        roof = (f"roof {bounds.peak_tflops:.0f} TFLOP/s and {bounds.bw_gbs:.0f} GB/s ({bounds.roof_source})"
                + (f"; measured beside it: cuBLAS 8192³ {bounds.lib_peak_tflops:.0f} TFLOP/s, copy {bounds.lib_bw_gbs:.0f} GB/s"
                   if bounds.lib_peak_tflops else "")
                + (f"; launch floor {bounds.launch_us:.2f} µs ({bounds.launch_source})" if bounds.launch_us
                   else "; launch floor not measured"))
    else:
        roof = "no roof: no datasheet and no measured ceilings for this GPU"
    trs = []
    for r in sorted(rows, key=lambda r: -r.speedup_best_library):
        lib_us = best_lib_us(r)
        bound = bounds.bound_us(r.shape) if bounds else 0.0
        shown = r.time_us if r.winner == "evo" else lib_us
        trs.append("<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in (
            r.shape, r.winner, r.verdict or "-", r.family or "-", f"{r.time_us:.2f}" if r.time_us else "-",
            f"{lib_us:.2f}" if lib_us else "-",
            f"{r.speedup_best_library:.3f}x ± {100 * r.noise_band:.1f}%" if r.speedup_best_library else "-",
            *(f"{getattr(r, f'speedup_{l}'):.3f}x" if getattr(r, f"speedup_{l}") else "-" for l in LIBRARIES),
            f"{100 * bound / shown:.0f}%" if bound and shown else "-",
            f"{minutes[r.shape]:.1f}" if r.shape in minutes else "-", r.timing_source or "-")) + "</tr>")
    lin = []
    for d, n in tree:
        t = f"{n['time_us']:.2f} µs" if n["time_us"] else (f"rejected at {n['stage']}" if n["stage"] else "not run on this shape")
        lin.append(f"{'&nbsp;' * 4 * d}{'└─ ' if d else ''}<code>{e(n['hash'][:10])}</code> {e(n['family'])} "
                   f"[{e(n['proposer'])}] {e(_fmt_params(n['params']))} — {e(t)}"
                   + (f" <i>{e(n['idea'][:120])}</i>" if n["idea"] else "") + (" (seen above)" if n["repeat"] else ""))
    note = lambda k: f"<p class=note>{e(notes[k])}</p>" if notes.get(k) else ""  # noqa: E731
    if store is not None:
        archive_html = (f"<h2>GPU time</h2><img src=\"gpu_minutes.png\" alt=\"GPU-minutes per shape\">{note('minutes')}"
                        f"<h2>Best so far against GPU-seconds</h2><img src=\"best_so_far.png\" alt=\"best so far\">{note('curves')}"
                        f"<h2>Lineage of the winner on {e(chosen.shape) if chosen else '-'}</h2>"
                        + ('<img src="lineage.png" alt="lineage">' if chosen else '')
                        + (("<p>" + "<br>\n".join(lin) + "</p>") if lin else "<p>no evo kernel</p>"))
    else:
        archive_html = f"<h2>GPU time and lineage</h2><p class=note>{e(archive_note)}</p>"
    floor = doc.get("noise_floor")
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>evo report: {e(gpu)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}}
img{{max-width:100%;border:1px solid #ddd;margin:.5em 0}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}} td:first-child,td:nth-child(2),td:nth-child(3),td:nth-child(4){{text-align:left}}
code{{background:#f3f3f3}} .note{{color:#666;font-size:12px}}</style></head><body>
<h1>evo kernel report — {e(gpu)}</h1>
<p>{len(rows)} shapes in the table; <b>evo wins {n_evo}</b> beyond the noise band ({verdicts['tie']} ties inside it,
{verdicts['loss']} losses), a library wins {len(rows) - n_evo}. Bounds: {e(roof)}.
Noise band per shape: half the mean spread of evo's and the best library's timings, at least {e(str(floor))}
(<code>dispatch.noise_floor</code>).
Table <code>{e(str(Path(table_dir) / 'table.json'))}</code>{'' if store is None else f', archive <code>{e(str(store.path))}</code>'},
generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.</p>
<p>Geomean speedup of evo's best kernel per shape (baseline µs / evo µs), before noise bands:</p><ul>{gm_lines}</ul>
<p>What the table serves (evo where it wins beyond noise, the best library elsewhere) against the best library:
<b>{served:.3f}x</b>. Wins: {e(', '.join(f'{k} {v}' for k, v in wins.items()))}.</p>
<h2>Per shape, with noise bands</h2><img src="noise.png" alt="speedup per shape with noise bands">{note('noise')}
<h2>Speedups</h2><img src="speedups.png" alt="speedup histograms">{note('speedups')}
<h2>Roofline</h2><img src="roofline.png" alt="roofline scatter">{note('roofline')}
<h2>Wins per family</h2><img src="wins.png" alt="wins per family">
{archive_html}
<h2>Every shape</h2>
<table><tr><th>shape</th><th>winner</th><th>verdict</th><th>family</th><th>evo µs</th><th>best lib µs</th>
<th>vs best ± noise</th>{''.join(f'<th>vs {e(LIB_LABEL[l])}</th>' for l in LIBRARIES)}<th>% of bound</th><th>GPU-min</th><th>timing</th></tr>
{''.join(trs)}</table>
<p class=note>% of bound: the bound is max(roof, launch floor) for the shape, over the time of what serves it.</p>
<p>Kernel table: <a href="../table.csv">table.csv</a>, <a href="../table.json">table.json</a>.</p>
</body></html>
"""
    (rep / "index.html").write_text(page)
    return rep / "index.html"


def plot_best_so_far(plt, store: Store, gpu: str, rows: list[TableRow], path: Path) -> str:
    """Each shape's best time (relative to its final best) against GPU-seconds of evaluation: how fast searches converge."""
    fig, ax = plt.subplots(figsize=(8, 4))
    n, reach = 0, []
    for r in rows:
        c = store.best_so_far(r.shape, r.layout, gpu)
        if not c:
            continue
        final = c[-1][1]
        xs = [max(s, 0.1) for s, _ in c] + [max(c[-1][0], 0.1)]
        ys = [t / final for _, t in c] + [1.0]
        ax.step(xs, ys, where="post", alpha=0.5, lw=1)
        n += 1
        reach.append(next(s for s, t in c if t <= final * 1.02))
    ax.set_xscale("log")
    ax.set_xlabel("GPU-seconds of evaluation on the shape")
    ax.set_ylabel("best so far / final best")
    ax.set_ylim(0.95, 2.0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    if not reach:
        return "no evaluations in the archive"
    reach.sort()
    return (f"{n} of {len(rows)} shapes (the others have no evaluations in the archive); GPU-seconds of evaluation until the best was within 2% of the final best: "
            f"median {reach[len(reach) // 2]:.0f} s, max {reach[-1]:.0f} s")


def table_gpus(out: Path) -> list[str]:
    return sorted(p.parent.name for p in Path(out).glob("*/table.json"))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m evo.report", description="Write an HTML report with plots from the kernel table "
                 "(and the archive, where present: lineage, GPU-minutes).")
    ap.add_argument("--config", help="YAML file overriding evo/defaults.yaml (its paths.db and paths.out)")
    ap.add_argument("--db", default="", help="SQLite archive (default: the config's paths.db, .evo/evo.db; optional)")
    ap.add_argument("--gpu", help="GPU name as stored (spaces as _); needed when there are several")
    ap.add_argument("--out", default="", help="kernel table folder (default: the config's paths.out, kernels_out)")
    ap.add_argument("--shape", help="MxNxK whose winner's lineage is drawn (default: evo's largest lead; needs the archive)")
    args = ap.parse_args(argv)
    if not args.db or not args.out:
        from .config import load_config

        paths = load_config(args.config).paths
        args.db, args.out = args.db or paths.db, args.out or paths.out
    want = args.gpu.replace(" ", "_") if args.gpu else ""
    if Path(args.db).is_file():
        store = Store(args.db)
        try:
            gpus = gpus_in(store)
            gpu = want or (gpus[0] if len(gpus) == 1 else "")
            if not gpu:
                raise EvoError(f"the archive holds {len(gpus)} GPUs; pick one with --gpu: {', '.join(gpus) or 'none'}")
            if gpu not in gpus:
                raise EvoError(f"no results for {gpu} in {args.db}; it holds: {', '.join(gpus) or 'nothing'}")
            table_dir, _ = export_table(store, gpu, args.out)
            doc, rows = read_table(table_dir)
            path = render(rows, doc, gpu, table_dir, store, args.shape)
        finally:
            store.close()
    else:
        gpus = table_gpus(Path(args.out))
        gpu = want or (gpus[0] if len(gpus) == 1 else "")
        if not gpu:
            raise EvoError(f"no archive at {args.db}, and {args.out} holds {len(gpus)} kernel tables"
                           + (f"; pick one with --gpu: {', '.join(gpus)}" if gpus else ""))
        if args.shape:
            raise EvoError(f"--shape draws a lineage, which needs the archive; there is none at {args.db}")
        table_dir = Path(args.out) / gpu
        doc, rows = read_table(table_dir)
        path = render(rows, doc, gpu, table_dir, None, None,
                      archive_note=f"no archive at {args.db}: GPU-minutes and lineage come from the archive the table "
                                   "was exported from, and are left out")
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
