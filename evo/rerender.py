"""Re-render a kernel table's evo kernels from today's templates, and keep each where it measures faster.

A table row stores the kernel source it was measured with. When a family's template improves (a better
instruction stream, a fixed epilogue), the rows found with it keep the old text until searched again. This
renders every evo row's family and parameters from the current templates; where the text differs, it compiles
both, re-checks the new one as strongly as a search's champion (evo.sanitize.vet_kernel: seeds, off-tile
shapes), times old, new and every library side by side in one window (L2 flushed, interleaved, every call checked)
and replaces the row's kernel only where the new one is faster than the old beyond their noise band and passes the
sanitizer where enabled (run on the kernel about to be written only: a process per tool costs seconds). The row
then carries that window's times (timing_source "rerender").

    python -m evo.rerender kernels_out/NVIDIA_H200                # on the GPU the table is for
    python -m evo.rerender kernels_out/NVIDIA_H200 --plan-only    # which rows would be re-rendered (no GPU)
    python -m evo.rerender kernels_out/NVIDIA_H200 --port         # on another GPU: seed its own table

--port starts the table of the GPU at hand (kernels_out/<this GPU>) from another GPU's: each evo row's kernel, as
published there and as rendered from today's templates, is re-checked and timed here beside the libraries; the
faster correct one becomes this GPU's row (timing_source "port"), with this GPU's library times, ceilings and
verdict. Shapes the destination table already has are left to it (rerender them there). A search or sweep on this
GPU then improves the rows like any other.

--set tries a parameter on the published kernels: each evo row whose family has the parameters (and, with --where,
whose parameters and shape, M, N and K, satisfy that constraint expression) is rendered with them put over its own,
and replaces the row's kernel as above, only where valid, correct and faster beyond the band. For a switch that
landed after the rows were searched:

    python -m evo.rerender kernels_out/NVIDIA_H100_80GB_HBM3 --set RING_SPLIT=2 --where "PINGPONG == 1 and K >= 1024"

A rendering whose compiled kernel is byte for byte the old one's, launched the same way on the row's shape (a
template change that reaches other instances only, or comments), is not timed: "same machine code".

The table is rewritten after every replaced row (atomic renames): a killed run keeps what it finished.
"""
from __future__ import annotations

import io
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from . import noise
from .errors import EvoError, cli_entry
from .datasheet import datasheet
from .export import (TableRow, published_kernel, read_table, refresh_table, timed_fields, write_kernel_files,
                     write_table)
from .kernel import KernelSource
from .ltgemm import algorithm_from_detail
from .problem import parse_shape
from .records import LIBRARIES


SAME_CODE = "same machine code (not timed)"


@dataclass
class Rendering:
    """One evo row of a table and its kernel rendered from the current templates (None where it cannot be)."""

    row: TableRow
    old: KernelSource
    new: KernelSource | None
    note: str = ""  # why there is no new rendering, or "same source"


@dataclass
class Outcome:
    shape: str
    family: str
    action: str  # "replaced", "kept", "rejected" (the new rendering failed), or why nothing was timed
    old_us: float = 0.0
    new_us: float = 0.0
    best_library_us: float = 0.0
    band: float = 0.0


def plan(table_dir: str | Path, templates: str | Path | None, shapes: set[str] | None = None,
         overrides: dict[str, int] | None = None, where: str = "") -> tuple[dict, list[Rendering]]:
    """The table's evo rows (those of `shapes` where given) with their re-rendered kernels. With `overrides`, only
    the rows whose family has those parameters and whose own parameters (and shape: M, N, K) satisfy `where` (a
    constraint expression, evo.expr), each rendered with the overrides put over its parameters. CPU only."""
    from .families import load_families, rerendered

    table_dir = Path(table_dir)
    doc, rows = read_table(table_dir)
    fams = {f.name: f for f in load_families(Path(templates) if templates else None)}
    if where and not overrides:
        raise EvoError("--where picks the rows a --set applies to: give a --set")
    out = []
    for r in rows:
        if not r.hash or not r.kernel_path or (shapes and r.shape not in shapes):
            continue
        if overrides and not set(overrides) <= set(getattr(fams.get(r.family), "space", ())):
            continue  # a family without the parameter: nothing to try
        try:
            old = published_kernel(table_dir.parent, r)
        except EvoError as e:
            out.append(Rendering(r, None, None, str(e)))  # type: ignore[arg-type]
            continue
        p = parse_shape(r.shape, r.layout)
        if overrides and where and not _matches(where, fams[r.family].env(old.meta.params, p)):
            continue
        try:
            new = rerendered(old, list(fams.values()), p, overrides)
        except EvoError as e:
            out.append(Rendering(r, old, None, f"with {_set_text(overrides)}: {e}" if overrides else str(e)))
            continue
        out.append(Rendering(r, old, new, "same source" if new.hash == old.hash else ""))
    return doc, out


def _matches(where: str, env: dict[str, int]) -> bool:
    from . import expr

    try:
        return bool(expr.evaluate(where, env))
    except EvoError as e:
        raise EvoError(f"--where {where!r}: {e}") from None


def _set_text(overrides: dict[str, int] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (overrides or {}).items())


def parse_set(text: str) -> dict[str, int]:
    """--set's "KEY=VALUE[,KEY=VALUE...]" (integer values) as a dict; EvoError for anything else."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        try:
            if not eq or not key.strip().isidentifier():
                raise ValueError
            out[key.strip()] = int(value)
        except ValueError:
            raise EvoError(f"--set {text!r}: give KEY=VALUE pairs with integer values, e.g. RING_SPLIT=2") from None
    return out


def decide(old_us: float, old_spread: float, new_us: float, new_spread: float, floor: float) -> tuple[bool, float]:
    """(replace?, band): the new rendering replaces the old only where it is faster beyond the noise band of the
    two timings (evo.noise.band)."""
    band = noise.band(old_spread, new_spread, floor=floor)
    return (new_us > 0 and old_us > 0 and new_us * (1.0 + band) < old_us), band


def updated_row(row: TableRow, new: KernelSource, t: dict, gpu_info, floor: float, source: str = "rerender",
                roofline_us: float | None = None) -> TableRow:
    """The row with the new kernel and this window's times (t: name -> BaselineResult, the new kernel under "new"):
    speedups, band, verdict and winner as an export computes them (evo.export.timed_fields)."""
    p = parse_shape(row.shape, row.layout)
    mine = t["new"]
    libs = {k: b.time_us for k, b in t.items() if k in LIBRARIES}
    ds = datasheet(gpu_info.key)
    algos = {k: a for k in libs if k.startswith("cublaslt") for a in [algorithm_from_detail(t[k].detail)] if a}
    return replace(
        row, gpu=gpu_info.key, hash=new.hash, family=new.meta.family,
        **timed_fields(p, mine.time_us, mine.spread, libs, {k: t[k].spread for k in libs}, floor,
                       row.roofline_us if roofline_us is None else roofline_us,
                       p.roofline_us(ds.peak_tflops_fp16_dense, ds.dram_gbs) if ds else 0.0),
        timing_source=source, lineage=f"{new.hash[:10]}({source}) <- {row.lineage}".strip(" <-"),
        cuda=gpu_info.cuda_runtime, driver=gpu_info.driver, date=time.strftime("%Y-%m-%d", time.gmtime()),
        library_algorithms=algos or row.library_algorithms,
    )


def _port_target(src_doc: dict, table_dir: Path, worker) -> tuple[Path, dict, list[TableRow]]:
    """The destination of a port: kernels_out/<this GPU>/ beside the source table, its document and rows (empty
    where it has no table yet; this GPU's ceilings measured then)."""
    info = worker.info
    dest = table_dir.parent / info.key
    if src_doc.get("gpu") == info.key:
        raise EvoError(f"{table_dir} is already this GPU's table: rerender it without --port")
    try:
        return (dest, *read_table(dest))
    except EvoError:
        if (dest / "table.json").exists():
            raise
    c = worker.call("ceilings", timeout_s=600)
    doc = {"gpu": info.key, "layout": src_doc.get("layout", "TN"),
           "ceilings": {"peak_tflops": c["peak_tflops"], "bw_gbs": c["bw_gbs"], **({"launch_us": round(c["launch_us"], 2)} if c.get("launch_us") else {})}}
    return dest, doc, []


def rerender(table_dir: str | Path, cfg, worker, compiler, shapes: set[str] | None = None, reps: int = 30,
             out: TextIO = sys.stdout, port: bool = False, overrides: dict[str, int] | None = None,
             where: str = "") -> list[Outcome]:
    """Re-render, check, time and replace (see the module text). `worker` is started (evo.gpu.worker.GpuWorker or
    a stand-in); the table must be this GPU's, or with `port` another GPU's (this GPU's table is written).
    `overrides` / `where`: the rows' kernels with those parameters set (plan)."""
    from .gpu.worker import WorkerFault
    from .sanitize import sanitize_kernel, vet_kernel

    table_dir = Path(table_dir)
    info = worker.info
    doc, items = plan(table_dir, cfg.paths.templates, shapes, overrides, where)
    floor = cfg.dispatch.noise_floor
    if port:
        dest, doc, rows = _port_target(doc, table_dir, worker)
        have = {r.shape for r in rows}
        results = [Outcome(it.row.shape, it.row.family, f"{dest.name} has its own row") for it in items if it.row.shape in have]
        items = [it for it in items if it.row.shape not in have and it.old is not None]
        for it in items:  # the published kernel is a contender of its own here; a rendering that is the same is not
            if it.note == "same source" or it.new is None:
                it.new, it.note = it.old, ""
    else:
        if doc.get("gpu") and doc["gpu"] != info.key:
            raise EvoError(f"{table_dir} is the table of {doc['gpu']}; this GPU is {info.key}: its times would not "
                           "compare (--port seeds this GPU's own table from it)")
        dest, (_, rows), results = table_dir, read_table(table_dir), []
    by_shape = {r.shape: i for i, r in enumerate(rows)}
    todo = [it for it in items if it.new is not None and not it.note]
    results += [Outcome(it.row.shape, it.row.family, it.note) for it in items if it.new is None or it.note]
    for o in results:
        print(f"{o.shape} {o.family}: {o.action}", file=out, flush=True)
    need = {ks.hash: ks for it in todo for ks in (it.old, it.new) if info.arch in ks.meta.archs}
    compiled = compile_all(compiler, [(ks, info.arch) for ks in need.values()], out)
    if not port:  # a port times the published kernel here anyway: it has no row on this GPU yet
        note_same_machine_code(todo, compiled, info.sm_count)
    for i, it in enumerate(todo, 1):
        p = parse_shape(it.row.shape, it.row.layout)
        head = f"[{i}/{len(todo)}] {p.key} {it.row.family} {it.old.hash[:10]} -> {it.new.hash[:10]}"
        o = Outcome(p.key, it.row.family, "")
        results.append(o)
        co, cn = compiled.get(it.old.hash), compiled.get(it.new.hash)
        if port and (cn is None or not cn.ok) and co is not None and co.ok:  # the rendering fails here: port as published
            print(f"{head}: today's rendering does not compile for {info.arch}; the published kernel alone", file=out)
            it.new, cn = it.old, co
        if cn is None or not cn.ok or co is None or not co.ok:
            o.action = "not compiled for " + info.arch + (f": {cn.error.splitlines()[0]}" if cn is not None and cn.error else "")
            print(f"{head}: {o.action}", file=out, flush=True)
            continue
        if it.note:  # the same machine code
            o.action = it.note
            print(f"{head}: {o.action}", file=out, flush=True)
            continue
        # contenders: the new rendering, and (porting) the published kernel too: it has not been checked here
        kinds = {"new": (it.new, cn)} if not port or it.new.hash == it.old.hash else {"new": (it.new, cn), "old": (it.old, co)}
        # the sanitizer (slow: a process per tool) runs later, on the one kernel the row would take
        failed = {k: why for k, (ks, cr) in kinds.items()
                  for why in [vet_kernel(worker, p, ks.text, cr.cubin_path, cfg, out, sanitizer=False)] if why}
        if len(failed) == len(kinds):
            o.action = f"rejected ({failed['new']})"
            print(f"{head}: {o.action}", file=out, flush=True)
            continue
        extra = {"new": (it.new.text, cn.cubin_path)} if "new" not in failed else {}
        if it.new.hash != it.old.hash and "old" not in failed:
            extra["old"] = (it.old.text, co.cubin_path)
        try:
            t = worker.call("baselines", timeout_s=900, problem=p, reps=reps, extra=extra)["results"]
        except (WorkerFault, EvoError) as e:
            o.action = f"not timed: {e}"
            print(f"{head}: {o.action}", file=out, flush=True)
            continue
        wrong = {k for k in ("old", "new") if k in t and t[k].detail.startswith("WRONG")} | set(failed)
        libs = [t[k].time_us for k in LIBRARIES if k in t and t[k].time_us > 0]
        o.best_library_us = min(libs) if libs else 0.0
        o.old_us, o.new_us = (t[k].time_us if k in t else 0.0 for k in ("old", "new"))
        if port:  # no incumbent on this GPU: the faster correct contender is its row
            good = [k for k in ("new", "old") if k in t and k not in wrong and t[k].time_us > 0]
            if not good:
                o.action = "rejected (" + "; ".join(t[k].detail[:120] for k in extra if k in t) + ")"
                print(f"{head}: {o.action}", file=out, flush=True)
                continue
            sanitized = {}
            for k in sorted(good, key=lambda k: t[k].time_us):  # the faster that passes the sanitizer
                ks, cr = kinds[k]
                sanitized[k] = sanitize_kernel(p, ks.text, cr.cubin_path, cfg, out)
                if not sanitized[k]:
                    break
            if all(sanitized.values()):
                o.action = "rejected (" + "; ".join(sanitized.values()) + ")"
                print(f"{head}: {o.action}", file=out, flush=True)
                continue
            pick = next(k for k, why in sanitized.items() if not why)
            o.action = "ported" + (" (as published)" if pick == "old" else "")
            o.new_us = o.new_us or t[pick].time_us
            chosen = it.old if pick == "old" else it.new
            base = replace(it.row, kernel_path=f"{info.key}/{it.row.layout}/{p.key}.cu",
                           lineage=f"{doc_gpu(table_dir)}: {it.row.lineage}")
            c = doc.get("ceilings") or {}
            roof = p.roofline_us(c["peak_tflops"], c["bw_gbs"]) if c.get("peak_tflops") and c.get("bw_gbs") else 0.0
            row = updated_row(base, chosen, {**t, "new": t[pick]}, info, floor, source="port", roofline_us=roof)
            what = ("published = rendered " if it.new.hash == it.old.hash else f"published {o.old_us:.2f} us, rendered ") \
                + (f"{t['new'].time_us:.2f} us" if "new" in t else "failed")
            print(f"{head}: {what}, best library {o.best_library_us:.2f} us: {o.action}", file=out, flush=True)
        else:
            if "new" in wrong or "new" not in t:
                o.action = "rejected (" + (t["new"].detail[:200] if "new" in t else "not timed") + ")"
                print(f"{head}: {o.action}", file=out, flush=True)
                continue
            ok, o.band = decide(o.old_us, t["old"].spread if "old" in t else 0.0, o.new_us, t["new"].spread, floor)
            if "old" in wrong:  # the published kernel failed its checks here: any correct rendering is better
                ok = True
            o.action = "replaced" if ok else "kept"
            ratio = f"{o.old_us / o.new_us:.3f}x" if o.new_us else "-"
            print(f"{head}: old {o.old_us:.2f} us, new {o.new_us:.2f} us ({ratio}, band {o.band:.3f}), best library "
                  f"{o.best_library_us:.2f} us: {o.action}" + (" (the old kernel failed its check)" if "old" in wrong else ""),
                  file=out, flush=True)
            if not ok:
                continue
            why = sanitize_kernel(p, it.new.text, cn.cubin_path, cfg, out)
            if why:
                o.action = f"rejected ({why})"
                print(f"{head}: {o.action}", file=out, flush=True)
                continue
            chosen, row = it.new, updated_row(it.row, it.new, t, info, floor)
        if p.key in by_shape:
            rows[by_shape[p.key]] = row
        else:
            by_shape[p.key] = len(rows)
            rows.append(row)
        chain = [s for s in row.lineage.split(" <- ") if s]
        best = {"source": chosen.text, "family": chosen.meta.family, "params": json.dumps(chosen.meta.params),
                "cuda": info.cuda_runtime, "driver": info.driver}
        write_kernel_files(None, p, row, dest.parent, best, chain=chain)
        write_table(dest, doc, sorted(rows, key=lambda r: (r.m, r.n, r.k)))
    if (dest / "table.json").exists():
        refresh_table(dest, floor)
    return results


def same_machine_code(old: KernelSource, old_cubin: str, new: KernelSource, new_cubin: str, problem,
                      num_sms: int) -> bool:
    """Whether two compiled kernels are one program on `problem`: the same cubin bytes (and, launched by their own
    host code, the same host library), launched with the same geometry, tensor maps and launch mode."""
    from .compile import host_library

    def read(path: str) -> bytes | None:
        try:
            return Path(path).read_bytes()
        except OSError:
            return None

    if old.meta.launch != new.meta.launch or old.meta.host_args != new.meta.host_args:
        return False
    a, b = read(old_cubin), read(new_cubin)
    if a is None or a != b:
        return False
    if new.meta.launch == "host" and read(host_library(old_cubin)) != read(host_library(new_cubin)):
        return False
    try:
        return old.launch(problem, num_sms) == new.launch(problem, num_sms)
    except (EvoError, ValueError, ZeroDivisionError, TypeError):
        return False


def compile_all(compiler, items: list, out: TextIO, every_s: float = 10.0) -> dict:
    """Compile every (kernel, arch) in parallel, cached; a progress line at most every `every_s` seconds while it
    runs (a CUTLASS instance takes 20-70 s of nvcc) and one at the end. Results by kernel hash."""
    if not items:
        return {}
    t0 = said = time.monotonic()
    n = failed = 0

    def done(res) -> None:
        nonlocal n, failed, said
        n, failed, now = n + 1, failed + (not res.ok), time.monotonic()
        if now - said >= every_s and n < len(items):
            said = now
            print(f"  compiled {n} of {len(items)} ({now - t0:.0f} s)", file=out, flush=True)

    results = compiler.compile_many(items, 0, on_done=done)
    print(f"compiled {len(items)} kernels in {time.monotonic() - t0:.0f} s" + (f" ({failed} failed)" if failed else ""),
          file=out, flush=True)
    return {r.hash: r for r in results}


def compiled_same(doc: dict, items: list[Rendering], compiler, out: TextIO | None = None) -> None:
    """--plan-only --compile: compile both renderings of every row whose text differs (no GPU) and note the rows
    whose kernels are the same machine code, launched the same way on the row's shape: compiled for sm_90a where the
    kernel claims it, else for the last arch it names; launched on the table's GPU's SM count (its datasheet; 132,
    an H100's or H200's, where the table names no GPU the datasheet knows). Progress lines go to `out` (stderr)."""
    sheet = datasheet(doc.get("gpu") or "")
    sms, arch = (sheet.sms if sheet else 132), "sm_90a"
    todo = [it for it in items if it.new is not None and not it.note]
    need = {ks.hash: ks for it in todo for ks in (it.old, it.new)}
    pick = {h: (arch if arch in ks.meta.archs or not ks.meta.archs else ks.meta.archs[-1]) for h, ks in need.items()}
    note_same_machine_code(todo, compile_all(compiler, [(ks, pick[h]) for h, ks in need.items()], out or sys.stderr),
                           sms)


def note_same_machine_code(items: list[Rendering], compiled: dict, num_sms: int) -> None:
    """Note the renderings whose old and new kernels, both compiled (`compiled`: results by kernel hash) for one arch,
    are the same machine code launched the same way on the row's shape: a run does not time them."""
    for it in items:
        co, cn = compiled.get(it.old.hash), compiled.get(it.new.hash)
        if co is None or cn is None or not (co.ok and cn.ok) or co.arch != cn.arch:
            continue
        if same_machine_code(it.old, co.cubin_path, it.new, cn.cubin_path, parse_shape(it.row.shape, it.row.layout),
                             num_sms):
            it.note = SAME_CODE


def doc_gpu(table_dir: Path) -> str:
    return read_table(table_dir)[0].get("gpu") or table_dir.name


def summary(results: list[Outcome]) -> str:
    buf = io.StringIO()
    print(f"{'shape':>18}  {'family':<18} {'old us':>9} {'new us':>9} {'new/old':>8} {'vs lib':>7}  action", file=buf)
    for o in results:
        if not o.new_us:
            print(f"{o.shape:>18}  {o.family:<18} {'':>9} {'':>9} {'':>8} {'':>7}  {o.action}", file=buf)
            continue
        kept = [u for u in (o.old_us, o.new_us) if u]  # a port keeps the faster; a rerender the new only if it won
        best = min(kept) if o.action.startswith(("replaced", "ported")) else (o.old_us or o.new_us)
        vs = f"{o.best_library_us / best:.3f}x" if o.best_library_us and best else "-"
        old = f"{o.old_us:9.2f}" if o.old_us else f"{'(same)':>9}"
        ratio = f"{o.old_us / o.new_us:7.3f}x" if o.old_us else f"{'-':>8}"
        print(f"{o.shape:>18}  {o.family:<18} {old} {o.new_us:9.2f} {ratio} {vs:>7}  {o.action}", file=buf)
    return buf.getvalue().rstrip()


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from .cli import _Parser
    from .config import load_config

    ap = _Parser(prog="python -m evo.rerender", description=__doc__.split("\n\n")[0])
    ap.add_argument("table", metavar="DIR", help="a table folder, e.g. kernels_out/NVIDIA_H200")
    ap.add_argument("--shapes", default="", help="comma-separated shapes (default: every evo row)")
    ap.add_argument("--reps", type=int, default=30, help="flushed repetitions of the side-by-side timing")
    ap.add_argument("--config", help="a YAML file of overrides (evo/defaults.yaml)")
    ap.add_argument("--plan-only", action="store_true", help="list the rows whose rendering differs; no GPU")
    ap.add_argument("--compile", action="store_true",
                    help="with --plan-only: compile both renderings here (nvcc, no GPU) and say which rows compile to "
                         "the same kernel, launched the same way (those a run does not time)")
    ap.add_argument("--port", action="store_true", help="DIR is another GPU's table: seed this GPU's own from it")
    ap.add_argument("--set", default="", metavar="KEY=VALUE[,...]",
                    help="try these parameters over each row's own (rows whose family has them), e.g. RING_SPLIT=2")
    ap.add_argument("--where", default="", metavar="EXPR",
                    help="with --set: only rows whose parameters and shape (M, N, K) satisfy this constraint "
                         "expression, e.g. 'PINGPONG == 1 and K >= 1024'")
    ns = ap.parse_args(argv)
    shapes = {parse_shape(s).key for s in ns.shapes.split(",") if s} or None
    overrides = parse_set(ns.set) or None
    cfg = load_config(ns.config)
    if ns.compile and not ns.plan_only:
        raise EvoError("--compile goes with --plan-only (a run compiles anyway)")
    from .compile import Compiler

    if ns.plan_only:
        doc, items = plan(ns.table, cfg.paths.templates, shapes, overrides, ns.where)
        if ns.compile:
            compiled_same(doc, items, Compiler.from_config(cfg.compile))
        for it in items:
            what = it.note or f"{it.old.hash[:10]} -> {it.new.hash[:10]}"
            print(f"{it.row.shape:>18}  {it.row.family:<18} {what}")
        differ = sum(1 for it in items if it.new is not None and not it.note)
        print(f"{differ} of {len(items)} evo rows render differently"
              + (f" ({sum(1 for it in items if it.note == SAME_CODE)} more only in their text: "
                 "the same machine code)" if ns.compile else ""))
        return 0
    from .gpu.worker import GpuWorker

    worker = GpuWorker(cfg)
    worker.start()
    try:
        results = rerender(ns.table, cfg, worker, Compiler.from_config(cfg.compile), shapes, ns.reps, port=ns.port,
                           overrides=overrides, where=ns.where)
    finally:
        worker.stop()
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
