"""Export the kernel table: the best correct kernel per (GPU, shape, layout), with its launch rules and timings.

Layout under the output folder:
    <gpu>/<layout>/<MxNxK>.cu      the kernel source (front matter = launch rules)
    <gpu>/<layout>/<MxNxK>.json    launch geometry for that shape, family, params, lineage, timings
    <gpu>/table.csv, table.json    one row per shape
    README.md                      what the folder holds, computed from every GPU's table.json
Every file is written to a temporary name and renamed, so a kill never leaves half a table.

A row's winner is evo only where evo's kernel beats the best library beyond the noise band (evo.noise: half the
mean spread of the two timings, at least ``dispatch.noise_floor``); inside the band the row is a tie and names the
library (``verdict``: win, tie or loss). cuBLASLt's winning algorithms (``library_algorithms``) are kept so that
evo.dispatch serves a cuBLASLt row with the algorithm that won.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import sqlite3
import time
from dataclasses import dataclass, asdict
from pathlib import Path

from . import measurements, noise, table_classes
from .atomic_file import atomic_write
from .datasheet import datasheet
from .errors import EvoError, cli_entry
from .kernel import KernelSource
from .ltgemm import algorithm_from_detail
from .problem import Problem, parse_shape
from .records import LIBRARIES
from .store import Store



@dataclass
class TableRow:
    gpu: str
    shape: str
    layout: str
    m: int
    n: int
    k: int
    winner: str  # "evo" or the library that is fastest
    family: str
    hash: str
    kernel_path: str
    time_us: float
    tflops: float
    cublas_us: float
    cublaslt_heuristic_us: float
    cublaslt_autotune_us: float
    speedup_cublas: float
    speedup_cublaslt_heuristic: float
    speedup_cublaslt_autotune: float
    speedup_best_library: float
    best_library: str
    roofline_us: float
    pct_of_roofline: float
    timing_source: str  # "confirm": the vetted champion re-timed side by side with the libraries; "" without one
    lineage: str
    cuda: str
    driver: str
    date: str
    spread: float = 0.0  # (p90 - min) / median of evo's confirm timing
    best_library_spread: float = 0.0  # the same for the best library's baseline timing
    noise_band: float = 0.0  # a speedup must exceed 1 + noise_band to count (evo.noise.band)
    verdict: str = ""  # evo against the best library: win, tie (inside the band) or loss; "" without an evo kernel
    library_algorithms: dict = None  # type: ignore[assignment]  # {cublaslt_*: algorithm config} where recorded
    datasheet_roof_us: float = 0.0  # roofline from the GPU's datasheet peak and bandwidth (evo.datasheet)
    pct_of_datasheet_roof: float = 0.0


def lineage(store: Store, h: str, depth: int = 20) -> list[str]:
    chain = []
    while h and len(chain) < depth:
        row = store.candidate(h)
        if row is None:
            break
        chain.append(f"{h[:10]}({row['proposer'] or '?'})")
        h = (row["parent"] or "").split(",")[0]
    return chain


def noise_floor() -> float:
    from .config import load_config

    return load_config().dispatch.noise_floor


def row_for(store: Store, problem: Problem, gpu: str, out_dir: Path, ceilings: tuple[float, float] | None,
            write: bool = True, floor: float | None = None) -> TableRow | None:
    # Only a vetted champion is published: one that passed the strong re-check (and the sanitizer where
    # enabled) and was then re-timed side by side with every baseline (the confirms table).
    conf = store.confirm(problem.key, problem.layout, gpu)
    best = store.champion(problem.key, problem.layout, gpu)
    stored = store.baselines(problem.key, problem.layout, gpu)
    base = {b.library: b.time_us for b in stored}
    spreads = {b.library: b.spread for b in stored}
    algos = {b.library: algorithm_from_detail(b.detail) for b in stored if b.library.startswith("cublaslt")}
    algos = {k: v for k, v in algos.items() if v}
    if best is None and not base:
        return None
    source = "confirm" if best is not None else ""
    time_us = conf["time_us"] if best is not None else 0.0
    h = best["hash"] if best is not None else ""
    if best is not None:
        base.update({k: v for k, v in json.loads(conf["baselines"]).items() if k in LIBRARIES})
    evo_spread = float(conf["spread"] or 0.0) if best is not None else 0.0
    kernel_path = str(Path(gpu) / problem.layout / f"{problem.key}.cu") if best is not None else ""
    roof = problem.roofline_us(*ceilings) if ceilings else 0.0
    ds = datasheet(gpu)
    ds_roof = problem.roofline_us(ds.peak_tflops_fp16_dense, ds.dram_gbs) if ds else 0.0
    row = TableRow(
        gpu=gpu, shape=problem.key, layout=problem.layout, m=problem.m, n=problem.n, k=problem.k,
        family=best["family"] if best else "", hash=h, kernel_path=kernel_path,
        **timed_fields(problem, time_us, evo_spread, base, spreads, noise_floor() if floor is None else floor, roof, ds_roof),
        timing_source=source, lineage=" <- ".join(lineage(store, h)) if h else "",
        cuda=best["cuda"] if best else "", driver=best["driver"] if best else "",
        date=measured_day(store, problem, gpu, conf if best is not None else None), library_algorithms=algos,
    )
    if best is not None and (write or not (out_dir / kernel_path).is_file()):
        write_kernel_files(store, problem, row, out_dir, best)
    return row


def measured_day(store: Store, problem: Problem, gpu: str, conf: sqlite3.Row | None) -> str:
    """The day a row's numbers were measured (UTC): its kernel's side-by-side run with the libraries (the confirm),
    for a row without an evo kernel its newest library timing; today where the archive kept no time. An export of a
    kept archive so leaves a row searched last week dated last week (`evo.sweep --rows-dated-before`)."""
    when = conf["created"] if conf is not None else next(store.rows(
        "SELECT MAX(created) FROM baselines WHERE shape=? AND layout=? AND gpu=?", (problem.key, problem.layout, gpu)))[0]
    return time.strftime("%Y-%m-%d", time.gmtime(when) if when else time.gmtime())


def timed_fields(problem: Problem, time_us: float, spread: float, libs: dict[str, float], lib_spreads: dict[str, float],
                 floor: float, roofline_us: float = 0.0, datasheet_roof_us: float = 0.0) -> dict:
    """A row's fields that follow from one side-by-side window: evo's time (0: no evo kernel) and spread, each
    library's time and spread; the speedups, the best library, the noise band (evo.noise.band), the verdict and the
    winner (evo only beyond the band), and the percentages of the two rooflines for the winner's time."""
    libs = {k: v for k, v in libs.items() if k in LIBRARIES and v > 0}
    best_lib = min(libs, key=libs.get) if libs else ""
    best_lib_us = libs.get(best_lib, 0.0)
    lib_spread = float(lib_spreads.get(best_lib, 0.0) or 0.0)
    band = noise.band(spread, lib_spread, floor=floor)
    verdict = noise.verdict(best_lib_us, time_us, band) if time_us else ""
    evo_wins = bool(time_us) and (not best_lib_us or verdict == "win")
    shown = time_us if evo_wins else best_lib_us
    sp = lambda lib: round(libs[lib] / time_us, 4) if time_us and lib in libs else 0.0  # noqa: E731
    return dict(
        winner="evo" if evo_wins else best_lib, time_us=round(time_us, 3),
        tflops=round(problem.tflops(time_us), 2) if time_us else 0.0,
        cublas_us=libs.get("cublas", 0.0), cublaslt_heuristic_us=libs.get("cublaslt_heuristic", 0.0),
        cublaslt_autotune_us=libs.get("cublaslt_autotune", 0.0), speedup_cublas=sp("cublas"),
        speedup_cublaslt_heuristic=sp("cublaslt_heuristic"), speedup_cublaslt_autotune=sp("cublaslt_autotune"),
        speedup_best_library=round(best_lib_us / time_us, 4) if time_us and best_lib_us else 0.0, best_library=best_lib,
        roofline_us=round(roofline_us, 3), pct_of_roofline=round(100.0 * roofline_us / shown, 1) if roofline_us and shown else 0.0,
        spread=round(spread, 4), best_library_spread=round(lib_spread, 4), noise_band=round(band, 4), verdict=verdict,
        datasheet_roof_us=round(datasheet_roof_us, 3),
        pct_of_datasheet_roof=round(100.0 * datasheet_roof_us / shown, 1) if datasheet_roof_us and shown else 0.0,
    )


def write_kernel_files(store: Store | None, problem: Problem, row: TableRow, out_dir: Path, best=None,
                       chain: list[str] | None = None) -> None:
    """A row's evo kernel (the archive's champion for its shape, or `best`: a mapping with its source, family,
    params as JSON, cuda and driver) as <kernel_path> and the JSON beside it: source, parameters, launch rules, the
    row's times and the kernel's lineage (from the archive, or `chain`)."""
    best = best if best is not None else store.champion(problem.key, problem.layout, row.gpu)
    ks = KernelSource.parse(best["source"])
    atomic_write(out_dir / row.kernel_path, best["source"])
    libs = {lib: getattr(row, f"{lib}_us") for lib in LIBRARIES if getattr(row, f"{lib}_us")}
    meta = {
        "shape": problem.key, "layout": problem.layout, "gpu": row.gpu, "hash": row.hash, "family": best["family"],
        "params": json.loads(best["params"]), "launch": asdict(ks.launch(problem, 132)),
        "launch_rules": {"grid": ks.meta.grid, "block": ks.meta.block, "smem": ks.meta.smem,
                         "workspace": ks.meta.workspace, "requires": ks.meta.requires,
                         "tensor_maps": list(ks.meta.tensor_maps), "archs": ks.meta.archs,
                         "cooperative": ks.meta.cooperative},
        "time_us": row.time_us, "baselines_us": libs, "timing_source": row.timing_source,
        "lineage": chain if chain is not None else lineage(store, row.hash), "cuda": best["cuda"], "driver": best["driver"],
    }
    if ks.meta.launch == "host":  # "launch" above is the front matter's estimate; the kernel's host code decides
        meta["launch_abi"] = "host"
        meta["host_args"] = list(ks.host_arg_values(problem, 132))
    atomic_write(out_dir / Path(row.kernel_path).with_suffix(".json"), json.dumps(meta, indent=2, default=str))


def export_table(store: Store, gpu: str, out_dir: str | Path, layout: str = "TN",
                 only: set[str] | None = None, keep_better: bool = True,
                 raced: dict[str, set[str]] | None = None) -> tuple[Path, list[TableRow]]:
    """Write the table for one GPU from the archive (idempotent). Kernel files are rewritten only for the
    shapes in `only` (all when None) or where missing; table.csv/json cover every shape the archive holds an evo
    kernel's measurement of (not the shapes whose libraries alone were timed), and keep
    the rows of the table already there for shapes this archive does not hold (a search on a fresh machine with
    the committed table adds its shapes to it instead of replacing it). With `keep_better`, a row already there
    also stays where its kernel (another one than the archive's best) was measured faster against the best
    library than the archive's best was in its own side-by-side run: a short search does not replace a
    better kernel. `raced` ({shape: hashes}) names kernels just timed side by side with the archive's best (a
    search's runoff): a row whose kernel is among them is not kept on the strength of its older ratio."""
    out = Path(out_dir)
    # the shapes evo has measured a kernel of (correct or not); a shape whose libraries alone were timed (a
    # sweep times the next shapes' libraries ahead of their searches) has had no search and gets no row
    shapes = sorted({r[0] for r in store.rows(
        "SELECT DISTINCT shape FROM evaluations WHERE gpu=? AND layout=?", (gpu, layout))},
        key=lambda s: tuple(int(x) for x in s.split("x")))
    ceilings = store.ceilings(gpu)
    floor = noise_floor()
    existing = _existing_rows(out / gpu, layout)  # the table already there, read once
    there = {r.shape: r for r in existing if r.kernel_path} if keep_better else {}
    rows = []
    for s in shapes:
        prob, old, write = parse_shape(s, layout), there.get(s), only is None or s in only
        r = row_for(store, prob, gpu, out, ceilings, write and old is None, floor)
        if old and r is not None and old.hash in (raced or {}).get(s, ()):
            # compared side by side in the runoff just now: the archive's confirmed best stands
            if write and r.kernel_path:
                write_kernel_files(store, prob, r, out)
            rows.append(r)
            continue
        if old and (r is None or better_row(old, r)):
            rows.append(old)
            continue
        if old and write and r is not None and r.kernel_path:  # the archive's row wins: now its kernel file is written
            write_kernel_files(store, prob, r, out)
        if r:
            rows.append(r)
    have = {r.shape for r in rows}
    rows = sorted(rows + [r for r in existing if r.shape not in have], key=lambda r: (r.m, r.n, r.k))
    launch = launch_floor_us(store, gpu)
    ds = datasheet(gpu)
    doc = {"gpu": gpu, "layout": layout,
           "ceilings": ({"peak_tflops": ceilings[0], "bw_gbs": ceilings[1], **({"launch_us": launch} if launch else {})}
                        if ceilings else None),
           "datasheet": ({"model": ds.model, "peak_tflops_fp16_dense": ds.peak_tflops_fp16_dense, "dram_gbs": ds.dram_gbs}
                         if ds else None),
           "noise_floor": floor}
    write_table(out / gpu, doc, rows)
    write_readme(out)
    return out / gpu, rows


def better_row(old: TableRow, new: TableRow) -> bool:
    """Whether the table's row `old` beats the archive's `new` for the same shape: another evo kernel, measured
    faster against the best library (each ratio from its own side-by-side run)."""
    return bool(old.hash) and old.hash != new.hash and old.speedup_best_library > (new.speedup_best_library or 0.0)


def _existing_rows(table_dir: Path, layout: str) -> list[TableRow]:
    """The rows of the table already there (this layout) whose kernel file, if they name one, is still there; none
    if it is missing or unreadable (the archive's rows are written)."""
    if not (table_dir / "table.json").is_file():
        return []
    try:
        _, old = read_table(table_dir)
    except EvoError:
        return []
    return [r for r in old if r.layout == layout and (not r.kernel_path or (table_dir.parent / r.kernel_path).is_file())]


def launch_floor_us(store: Store, gpu: str) -> float:
    """The launch floor measured with the ceilings (an empty kernel between CUDA events), 0 where not measured."""
    for r in store.rows("SELECT detail FROM ceilings WHERE gpu=?", (gpu,)):
        text = r[0] or ""
        if "launch_us=" in text:
            try:
                return float(text.split("launch_us=", 1)[1].split(";")[0].split()[0])
            except (ValueError, IndexError):
                return 0.0
    return 0.0


def readme_text(out: Path) -> str:
    """kernels_out/README.md, computed from every <GPU>/table.json under `out` (nothing in it is typed by hand)."""
    lines = ["# The kernel table", "",
             "Generated by `evo.export` from the tables below; do not edit (it is rewritten at every export).", "",
             "One folder per GPU model: `table.csv` / `table.json` (one row per shape: the winner, evo or the fastest",
             "library, its µs, each baseline's µs, speedups, the noise band and verdict, % of roofline, family, lineage,",
             "CUDA and driver), `TN/<MxNxK>.cu` (the kernel) with `TN/<MxNxK>.json` (its launch geometry for that shape).",
             "Load it from a program with `evo.dispatch` or the `evo::matmul` torch op (README); render the report with",
             "`python -m evo.report` (it needs only these files). `measurements.csv.gz`, where a folder has one: the",
             "sweeps' measurements on that GPU, what a search's cost model trains on when its own archive lacks them.",
             "", "## What is here", ""]
    found = False
    for tj in sorted(out.glob("*/table.json")):
        try:
            doc = json.loads(tj.read_text())
        except (OSError, ValueError):
            continue
        rows = doc.get("rows") or []
        if not rows:
            continue
        found = True
        wins = [r for r in rows if r.get("winner") == "evo"]
        ties = [r for r in rows if r.get("verdict") == "tie"]
        by_winner: dict[str, int] = {}
        for r in rows:
            by_winner[r.get("winner") or "none"] = by_winner.get(r.get("winner") or "none", 0) + 1
        dates = sorted({r.get("date", "") for r in rows if r.get("date")})
        drivers = sorted({r.get("driver", "") for r in rows if r.get("driver")})
        cudas = sorted({r.get("cuda", "") for r in rows if r.get("cuda")})
        best = sorted(wins, key=lambda r: -(r.get("speedup_best_library") or 0))
        win_text = ", ".join(f"{r['shape']} ({r.get('speedup_best_library', 0):.3f}x)" for r in best) or "none"
        lines += [f"`{tj.parent.name}/`: {len(rows)} shapes; evo wins {len(wins)} beyond the noise band: {win_text}."
                  + (f" {len(ties)} within the noise band (ties: the library serves them, unless evo led by more than"
                     " the noise floor and evo.dispatch measures it ahead on first use)." if ties else ""),
                  "Winners: " + ", ".join(f"{k} {v}" for k, v in sorted(by_winner.items(), key=lambda kv: -kv[1])) + ".",
                  f"Measured {', '.join(dates) or '-'}; driver {', '.join(drivers) or '-'}, CUDA {', '.join(cudas) or '-'}.", ""]
        classes = table_classes.markdown([_table_row(r) for r in rows])
        if classes:
            lines += ["By class (the best library's time by K; evo's best kernel and what the table serves, against the "
                      "best library):", ""] + classes + [""]
    if not found:
        lines += ["No table yet: `python -m evo.sweep --shapes shapes/grid1000.yaml` writes one.", ""]
    return "\n".join(lines)


def write_readme(out: Path) -> None:
    atomic_write(Path(out) / "README.md", readme_text(Path(out)))


def _table_row(d: dict) -> TableRow:
    fields = TableRow.__dataclass_fields__
    kw = {k: v for k, v in d.items() if k in fields}
    if isinstance(kw.get("library_algorithms"), str):
        try:
            kw["library_algorithms"] = json.loads(kw["library_algorithms"] or "{}")
        except ValueError:
            kw["library_algorithms"] = {}
    kw.setdefault("library_algorithms", {})
    missing = [k for k, f in fields.items() if k not in kw and f.default is dataclasses.MISSING]
    for k in missing:  # an older table: absent text columns are empty, numbers 0
        kw[k] = "" if fields[k].type in ("str", str) else 0
    return TableRow(**kw)


def published_kernel(out_dir: str | Path, row: TableRow) -> KernelSource:
    """The kernel a table row publishes (its file under the table folder `out_dir`, e.g. kernels_out); EvoError
    with one line where the file is missing or unreadable or is not the kernel the row names (its hash)."""
    path = Path(out_dir) / row.kernel_path
    try:
        ks = KernelSource.parse(path.read_text()) if row.kernel_path else None
    except (OSError, EvoError) as e:
        raise EvoError(f"kernel file {path} unreadable: {str(e).splitlines()[0]}") from None
    if ks is None or ks.hash != row.hash:
        raise EvoError(f"{path} is not the row's kernel {row.hash[:10]}" if ks else f"row {row.shape} names no kernel file")
    return ks


def read_table(table_dir: str | Path) -> tuple[dict, list[TableRow]]:
    """A committed table.json as (document, rows); EvoError with one line if it cannot be read."""
    path = Path(table_dir) / "table.json"
    try:
        doc = json.loads(path.read_text())
    except OSError:
        raise EvoError(f"no kernel table at {path}") from None
    except ValueError as e:
        raise EvoError(f"{path} is not valid JSON: {e}") from None
    rows = (doc.get("rows") or []) if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise EvoError(f"{path} needs a 'rows' list of objects")
    return doc, [_table_row(r) for r in rows]


def refresh_table(table_dir: str | Path, floor: float | None = None) -> list[TableRow]:
    """Recompute a table's derived columns from its own numbers (no archive needed): noise band (from the spreads
    it carries, else the floor), verdict, winner, the shares of both rooflines; rewrite table.csv/json and kernels_out/README.md."""
    floor = noise_floor() if floor is None else floor
    table_dir = Path(table_dir)
    doc, rows = read_table(table_dir)
    gpu = doc.get("gpu") or table_dir.name
    ds = datasheet(gpu)
    for r in rows:
        p = parse_shape(r.shape)
        libs = {lib: getattr(r, f"{lib}_us") for lib in LIBRARIES if getattr(r, f"{lib}_us")}
        best_lib = min(libs, key=libs.get) if libs else r.best_library
        best_lib_us = libs.get(best_lib, 0.0)
        r.noise_band = round(r.noise_band or noise.band(r.spread, r.best_library_spread, floor=floor), 4)
        if r.hash and r.time_us:
            r.verdict = noise.verdict(best_lib_us, r.time_us, r.noise_band) if best_lib_us else "win"
            r.winner = "evo" if r.verdict == "win" else best_lib
        shown = r.time_us if r.winner == "evo" else best_lib_us
        r.pct_of_roofline = round(100.0 * r.roofline_us / shown, 1) if r.roofline_us and shown else 0.0
        if ds:
            r.datasheet_roof_us = round(p.roofline_us(ds.peak_tflops_fp16_dense, ds.dram_gbs), 3)
            r.pct_of_datasheet_roof = round(100.0 * r.datasheet_roof_us / shown, 1) if shown else 0.0
    doc["noise_floor"] = floor
    doc["datasheet"] = ({"model": ds.model, "peak_tflops_fp16_dense": ds.peak_tflops_fp16_dense, "dram_gbs": ds.dram_gbs}
                       if ds else None)
    write_table(table_dir, doc, rows)
    write_readme(table_dir.parent)
    return rows


def merge_table(table_dir: str | Path, source_dir: str | Path) -> list[str]:
    """Take another table's rows for its shapes into `table_dir` (same GPU and layout; e.g. a sweep of a few shapes
    into an empty folder), with their kernel files and the folder's measurements (evo.measurements), replacing the
    rows there for those shapes; the caller refreshes the derived columns (refresh_table). Returns the shapes taken.
    EvoError with one line where the tables are of different GPUs or layouts or a file is missing."""
    table_dir, source_dir = Path(table_dir), Path(source_dir)
    doc, rows = read_table(table_dir)
    src_doc, src_rows = read_table(source_dir)
    for key in ("gpu", "layout"):
        if doc.get(key) != src_doc.get(key):
            raise EvoError(f"{source_dir} is a table of {key} {src_doc.get(key)}, {table_dir} of {doc.get(key)}")
    out_dir, src_out = table_dir.parent, source_dir.parent
    for r in src_rows:
        if r.kernel_path:
            published_kernel(src_out, r)  # the file is there and is the row's kernel
            for f in (Path(r.kernel_path), Path(r.kernel_path).with_suffix(".json")):
                atomic_write(out_dir / f, (src_out / f).read_text())
    taken = {r.shape for r in src_rows}
    merged = sorted([r for r in rows if r.shape not in taken] + list(src_rows), key=lambda r: (r.m, r.n, r.k))
    write_table(table_dir, doc, merged)
    if (source_dir / measurements.FILE_NAME).is_file():  # what the cost model trains on: the source's rows win
        measurements.save(table_dir / measurements.FILE_NAME, measurements.load(source_dir / measurements.FILE_NAME))
    return sorted(taken, key=lambda s: tuple(int(x) for x in s.split("x")))


def merge_archive(table_dir: str | Path, db: str | Path) -> list[str]:
    """Take into `table_dir` the rows of the shapes whose search finished in the archive `db` (a sweep run with --out
    elsewhere, its archive brought back alone; a killed sweep's unfinished shapes are left out), with their kernel
    files, and the archive's measurements (evo.measurements; the archive's win). Each row is exported as the search
    would export it into this table: where the archive timed the table's kernel for the shape, the archive's best
    (side by side with it there) replaces the row; where it did not, the row stays if it was measured better
    (export_table). The caller refreshes the derived columns (refresh_table). Returns the shapes taken; EvoError with
    one line where the archive is missing or holds no finished search of the table's GPU and layout."""
    import shutil
    import tempfile

    from .cost_model import history  # (the archive's measurements as the cost model reads them)

    table_dir = Path(table_dir)
    doc, _ = read_table(table_dir)
    gpu, layout = doc.get("gpu"), doc.get("layout", "TN")
    if not Path(db).is_file():
        raise EvoError(f"no archive at {db}")
    store = Store(db)
    try:
        timed: dict[str, set[str]] = {}  # shape -> every kernel the archive evaluated there
        for shape, h in store.rows("SELECT shape, hash FROM evaluations WHERE gpu=? AND layout=?", (gpu, layout)):
            timed.setdefault(shape, set()).add(h)
        done = set(timed) & {r[0] for r in store.rows("SELECT shape FROM runs WHERE gpu=? AND status='done'", (gpu,))}
        if not done:
            raise EvoError(f"{db} holds no finished search of {gpu} ({layout})")
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / gpu
            shutil.copytree(table_dir, copy)
            _, rows = export_table(store, gpu, tmp, layout, only=done, raced={s: timed[s] for s in done})
            write_table(copy, doc, [r for r in rows if r.shape in done])
            (copy / measurements.FILE_NAME).unlink(missing_ok=True)  # the table's own: nothing to take from the copy
            taken = merge_table(table_dir, copy)
        measurements.save(table_dir / measurements.FILE_NAME, history(store, gpu, layout, failures=True))
    finally:
        store.close()
    return taken


def write_table(table_dir: str | Path, doc: dict, rows: list[TableRow]) -> None:
    """table.csv and table.json of one GPU's folder: the document's header fields with these rows."""
    table_dir = Path(table_dir)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(TableRow.__dataclass_fields__))
    w.writeheader()
    for r in rows:
        d = asdict(r)
        w.writerow({**d, "library_algorithms": json.dumps(d["library_algorithms"] or {}, separators=(",", ":"), sort_keys=True)})
    atomic_write(table_dir / "table.csv", buf.getvalue())
    atomic_write(table_dir / "table.json", json.dumps({**doc, "rows": [asdict(r) for r in rows]}, indent=2))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from .cli import _Parser

    ap = _Parser(prog="python -m evo.export", description="Recompute a kernel table's derived columns "
                 "(noise band, verdict, winner, datasheet roof) and kernels_out/README.md from the table alone; "
                 "with --merge or --merge-archive, after taking another table's or an archive's rows for their shapes.")
    ap.add_argument("--refresh", required=True, metavar="DIR", help="a table folder, e.g. kernels_out/NVIDIA_H200")
    ap.add_argument("--merge", metavar="FROM", help="first take this table folder's rows (with their kernel files "
                    "and its measurements) for its shapes, replacing the rows there (e.g. a sweep of a few shapes run with --out elsewhere)")
    ap.add_argument("--merge-archive", metavar="DB", help="first take the rows of the shapes whose search finished in "
                    "this archive (e.g. a sweep's --db brought back from another machine without its --out), with "
                    "their kernel files and the archive's measurements")
    ns = ap.parse_args(argv)
    if ns.merge:
        taken = merge_table(ns.refresh, ns.merge)
        print(f"{ns.refresh}: took {len(taken)} rows from {ns.merge}: {', '.join(taken)}")
    if ns.merge_archive:
        taken = merge_archive(ns.refresh, ns.merge_archive)
        print(f"{ns.refresh}: took {len(taken)} rows from {ns.merge_archive}: {', '.join(taken)}")
    rows = refresh_table(ns.refresh)
    wins = sum(r.winner == "evo" for r in rows)
    print(f"{ns.refresh}: {len(rows)} rows, evo wins {wins} beyond the noise band; README.md rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
