"""Export the kernel table: the best correct kernel per (GPU, shape, layout), with its launch rules and timings.

Layout under the output folder:
    <gpu>/<layout>/<MxNxK>.cu      the kernel source (front matter = launch rules)
    <gpu>/<layout>/<MxNxK>.json    launch geometry for that shape, family, params, lineage, timings
    <gpu>/table.csv, table.json    one row per shape
Every file is written to a temporary name and renamed, so a kill never leaves half a table.
"""
from __future__ import annotations

import csv
import io
import json
import os
import time
from dataclasses import dataclass, asdict
from pathlib import Path

from .kernel import KernelSource
from .problem import Problem, parse_shape
from .store import Store

LIBRARIES = ("cublas", "cublaslt_heuristic", "cublaslt_autotune")


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


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def lineage(store: Store, h: str, depth: int = 20) -> list[str]:
    chain = []
    while h and len(chain) < depth:
        row = store.candidate(h)
        if row is None:
            break
        chain.append(f"{h[:10]}({row['proposer'] or '?'})")
        h = (row["parent"] or "").split(",")[0]
    return chain


def row_for(store: Store, problem: Problem, gpu: str, out_dir: Path, ceilings: tuple[float, float] | None,
            write: bool = True) -> TableRow | None:
    # Only a vetted champion is published: one that passed the strong re-check (and the sanitizer where
    # enabled) and was then re-timed side by side with every baseline (the confirms table).
    conf = store.confirm(problem.key, problem.layout, gpu)
    best = store.champion(problem.key, problem.layout, gpu)
    base = {b.library: b.time_us for b in store.baselines(problem.key, problem.layout, gpu)}
    if best is None and not base:
        return None
    source = "confirm" if best is not None else ""
    time_us = conf["time_us"] if best is not None else 0.0
    h = best["hash"] if best is not None else ""
    if best is not None:
        base.update({k: v for k, v in json.loads(conf["baselines"]).items() if k in LIBRARIES})
    libs = {k: v for k, v in base.items() if k in LIBRARIES and v > 0}
    best_lib = min(libs, key=libs.get) if libs else ""
    best_lib_us = libs.get(best_lib, 0.0)
    evo_wins = best is not None and (not best_lib_us or time_us < best_lib_us)
    rel_dir = Path(gpu) / problem.layout
    kernel_path = ""
    if best is not None:
        kernel_path = str(rel_dir / f"{problem.key}.cu")
    if best is not None and (write or not (out_dir / kernel_path).is_file()):
        ks = KernelSource.parse(best["source"])
        atomic_write(out_dir / kernel_path, best["source"])
        meta = {
            "shape": problem.key, "layout": problem.layout, "gpu": gpu, "hash": h, "family": best["family"],
            "params": json.loads(best["params"]), "launch": asdict(ks.launch(problem, 132)),
            "launch_rules": {"grid": ks.meta.grid, "block": ks.meta.block, "smem": ks.meta.smem,
                             "workspace": ks.meta.workspace, "requires": ks.meta.requires,
                             "tensor_maps": list(ks.meta.tensor_maps), "archs": ks.meta.archs},
            "time_us": time_us, "baselines_us": libs, "timing_source": source,
            "lineage": lineage(store, h), "cuda": best["cuda"], "driver": best["driver"],
        }
        atomic_write(out_dir / rel_dir / f"{problem.key}.json", json.dumps(meta, indent=2, default=str))
    roof = problem.roofline_us(*ceilings) if ceilings else 0.0
    shown = time_us if evo_wins else best_lib_us
    sp = lambda lib: (libs[lib] / time_us) if time_us and lib in libs else 0.0  # noqa: E731
    return TableRow(
        gpu=gpu, shape=problem.key, layout=problem.layout, m=problem.m, n=problem.n, k=problem.k,
        winner="evo" if evo_wins else best_lib, family=best["family"] if best else "", hash=h,
        kernel_path=kernel_path, time_us=round(time_us, 3), tflops=round(problem.tflops(time_us), 2) if time_us else 0.0,
        cublas_us=libs.get("cublas", 0.0), cublaslt_heuristic_us=libs.get("cublaslt_heuristic", 0.0),
        cublaslt_autotune_us=libs.get("cublaslt_autotune", 0.0),
        speedup_cublas=round(sp("cublas"), 4), speedup_cublaslt_heuristic=round(sp("cublaslt_heuristic"), 4),
        speedup_cublaslt_autotune=round(sp("cublaslt_autotune"), 4),
        speedup_best_library=round(best_lib_us / time_us, 4) if time_us and best_lib_us else 0.0,
        best_library=best_lib, roofline_us=round(roof, 3),
        pct_of_roofline=round(100.0 * roof / shown, 1) if roof and shown else 0.0,
        timing_source=source, lineage=" <- ".join(lineage(store, h)) if h else "",
        cuda=best["cuda"] if best else "", driver=best["driver"] if best else "",
        date=time.strftime("%Y-%m-%d", time.gmtime()),
    )


def export_table(store: Store, gpu: str, out_dir: str | Path, layout: str = "TN",
                 only: set[str] | None = None) -> tuple[Path, list[TableRow]]:
    """Write the table for one GPU from the archive (idempotent). Kernel files are rewritten only for the
    shapes in `only` (all when None) or where missing; table.csv/json always cover every shape."""
    out = Path(out_dir)
    shapes = sorted({r[0] for r in store.rows(
        "SELECT shape FROM evaluations WHERE gpu=? AND layout=? UNION SELECT shape FROM baselines WHERE gpu=? AND layout=?",
        (gpu, layout, gpu, layout))}, key=lambda s: tuple(int(x) for x in s.split("x")))
    ceilings = store.ceilings(gpu)
    rows = [r for r in (row_for(store, parse_shape(s, layout), gpu, out, ceilings, only is None or s in only)
                        for s in shapes) if r]
    buf = io.StringIO()
    fields = list(TableRow.__dataclass_fields__)
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for r in rows:
        w.writerow(asdict(r))
    atomic_write(out / gpu / "table.csv", buf.getvalue())
    doc = {"gpu": gpu, "layout": layout, "ceilings": {"peak_tflops": ceilings[0], "bw_gbs": ceilings[1]} if ceilings else None,
           "rows": [asdict(r) for r in rows]}
    atomic_write(out / gpu / "table.json", json.dumps(doc, indent=2))
    return out / gpu, rows
