"""Sweep a shape set: one search per shape, resumable, one GPU worker per GPU, optionally over a Ray cluster.

    python -m evo.sweep --shapes shapes/grid1000.yaml --budget-minutes-per-shape 2
                        [--max-candidates-per-shape N] [--limit-shapes K | --sample K --seed S]
                        [--gpus 0,1] [--ray [--ray-address ADDR] [--ray-actors N]]

Every finished shape is recorded in the archive's ``sweep_shapes`` table; a rerun skips finished shapes and
resumes an interrupted one (its search finds everything it already measured in the archive). Before a shape
is searched, the winners of the nearest already searched shapes on the same GPU (log-distance of M, N, K,
up to ``search.seed_winners``) that accept it are timed on it first ("compile once, time everywhere": their
cubins are in the compile cache). The sweep prints one progress line per shape with an ETA and ends with one
summary paragraph fit for a cron log; exit code 0 when every selected shape is done, 1 otherwise.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from .cli import config_from_args, parser, require_positive
from .compile_ahead import AheadCounts, CompileAhead
from .config import Config
from .errors import EvoError, NoGpuError, cli_entry
from .cost_model import SharedModel, history
from .export import LIBRARIES, export_table
from .kernel import KernelSource
from .measurements import save as save_measurements, shipped_path
from .problem import GpuInfo, Problem
from .proposers.neighbours import neighbour_seeds
from .shapes import RowFilter, load_shapes
from .space import Enumerations
from .stats import geomean
from .store import Store
from .sweep_budget import first_round, header_estimate, measured_overhead, per_shape_seconds
from .sweep_due import other_gpus_finds
from .sweep_order import longest_first, order_pending

# --- the sweep's own table in the archive ---------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_shapes (
    shape TEXT, layout TEXT, gpu TEXT, status TEXT, worker TEXT, started REAL, finished REAL, seconds REAL,
    best_hash TEXT, best_us REAL, winner TEXT, best_lib_us REAL,
    seeds_offered INTEGER, seeds_correct INTEGER, seed_won INTEGER,
    compiles_new INTEGER, compile_seconds REAL, compiles_reused INTEGER, compile_seconds_saved REAL,
    error TEXT, stop TEXT, drift_scaled INTEGER, PRIMARY KEY (shape, layout, gpu));
"""


@dataclass
class ShapeResult:
    """What one shape's search in a sweep did (one row of ``sweep_shapes``)."""

    shape: str
    layout: str
    gpu: str
    status: str  # "done" or "failed"
    worker: str = ""
    started: float = 0.0
    finished: float = 0.0
    seconds: float = 0.0  # wall time the shape held its GPU
    best_hash: str = ""
    best_us: float = 0.0
    winner: str = ""  # "evo" (faster than every library beyond the noise band, as the table publishes it) or the fastest library
    verdict: str = ""  # evo against the fastest library: "win", "tie" (inside the noise band) or "loss" (evo.noise.verdict)
    noise_band: float = 0.0  # the relative band a speedup had to clear (evo.noise.band)
    best_lib_us: float = 0.0
    seeds_offered: int = 0  # kernels of other shapes offered (the archive's winners timed first, the table's nearest rows in generation 0)
    seeds_correct: int = 0
    seed_won: int = 0  # 1 when the shape's winner is one of those seeds
    compiles_new: int = 0  # nvcc actually ran
    compile_seconds: float = 0.0
    compiles_reused: int = 0  # cubin taken from the compile cache
    compile_seconds_saved: float = 0.0  # what those compiles took when they ran
    error: str = ""
    stop: str = ""  # why its search stopped ("time budget spent" = still improving, "converged: ...")
    templates: str = ""  # evo.template_fingerprint.fingerprint of the families it was searched with
    drift_scaled: int = 0  # candidates timed in two windows where the whole GPU ran slow, their times scaled (evo/drift.py)
    budget_s: float = 0.0  # the search budgets the shape was given (seconds, every round of the run that finished it; 0: none)
    gpu_state: str = ""  # what the GPU reported after the first slow timing window of the shape's search (evo/gpu/gpu_state.py)
    table_hash: str = ""  # the kernel the table (--out) published for the shape before its search ("" where it had none)
    table_us: float = 0.0  # that kernel's time in the search's runoff, side by side with best_us (0: it did not race)


class SweepLog:
    """The ``sweep_shapes`` table: which shapes of a sweep are finished, and what each cost."""

    def __init__(self, store: Store):
        self.store = store
        store.db.executescript(_SCHEMA)
        have = {r[1] for r in store.db.execute("PRAGMA table_info(sweep_shapes)")}
        for f in fields(ShapeResult):  # archives written before a column existed get it added
            if f.name not in have:
                kind = {"float": "REAL", "int": "INTEGER"}.get(f.type if isinstance(f.type, str) else f.type.__name__, "TEXT")
                store.db.execute(f"ALTER TABLE sweep_shapes ADD COLUMN {f.name} {kind}")

    def done(self, gpu: str, layout: str = "TN", templates: str | None = None) -> set[str]:
        """Shapes finished on this GPU; with `templates`, only those searched with that template fingerprint."""
        q = "SELECT shape FROM sweep_shapes WHERE gpu=? AND layout=? AND status='done'"
        args: tuple = (gpu, layout)
        if templates is not None:
            q, args = q + " AND templates=?", args + (templates,)
        return {r[0] for r in self.store.db.execute(q, args)}

    def record(self, r: ShapeResult) -> None:
        names = [f.name for f in fields(ShapeResult)]
        self.store.db.execute(f"INSERT OR REPLACE INTO sweep_shapes ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                              tuple(getattr(r, n) for n in names))

    def results(self, gpu: str, layout: str = "TN") -> list[ShapeResult]:
        cur = self.store.db.execute("SELECT * FROM sweep_shapes WHERE gpu=? AND layout=?", (gpu, layout))
        cols = [d[0] for d in cur.description]
        known = {f.name for f in fields(ShapeResult)}
        return [ShapeResult(**{c: v for c, v in zip(cols, row) if c in known}) for row in cur]


# --- compile once, time everywhere ------------------------------------------------------------------------

class CountingCompiler:
    """Wraps a compiler and counts, per shape, the compiles that ran and the ones served from the compile cache."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.reset()

    @property
    def nvcc(self) -> str:
        return getattr(self.inner, "nvcc", "nvcc")

    def reset(self) -> None:
        self.new = self.reused = 0
        self.seconds = self.saved = 0.0
        self.reused_hashes: set[str] = set()

    def _count(self, r: Any) -> None:
        if getattr(r, "cached", False):
            self.reused += 1
            self.saved += r.seconds or 0.0
            self.reused_hashes.add(r.hash)
        else:
            self.new += 1
            self.seconds += r.seconds or 0.0

    def compile(self, ks: Any, arch: str, **kw: Any) -> Any:
        """One compile (e.g. an archived kernel whose cubin is not on this machine: evo.compile.stored_cubin)."""
        r = self.inner.compile(ks, arch, **kw)
        self._count(r)
        return r

    def is_cached(self, ks: Any, arch: str) -> bool:
        return self.inner.is_cached(ks, arch)

    def compile_many(self, items: Iterable, jobs: int = 0, on_done: Callable | None = None,
                     stop: Callable[[], bool] | None = None) -> list:
        def done(r: Any) -> None:
            self._count(r)
            if on_done:
                on_done(r)

        return self.inner.compile_many(items, jobs, on_done=done, stop=stop)


def search_shape(problem: Problem, cfg: Config, worker: Any, compiler: Any, log_dir: Path,
                 worker_name: str = "", seeds: list[str] | None = None,
                 enumerations: Enumerations | None = None, ahead: Any = None,
                 next_problems: list[Problem] | None = None, shared_model: SharedModel | None = None) -> ShapeResult:
    """One shape's search with a started worker; never raises for a failed search (KeyboardInterrupt passes).
    enumerations: the families' valid instances, kept by the caller across its shapes. ahead, next_problems: the
    caller's background compiles (evo.compile_ahead) and the shapes it searches next, whose kernels they compile.
    shared_model: the caller's cost model (evo.cost_model.SharedModel), kept across its shapes."""
    from .search import Search

    info: GpuInfo = worker.info
    started = time.time()
    t0 = time.monotonic()
    res = ShapeResult(problem.key, problem.layout, info.key, "failed", worker=worker_name, started=started,
                      budget_s=cfg.search.budget_minutes * 60.0)
    store = Store(cfg.paths.db)
    try:
        if seeds is None:
            seeds = neighbour_seeds(store, problem, info.key, info.arch, info.sm_count, cfg.search.seed_winners)
        counting = CountingCompiler(compiler)
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / f"{info.key}_{problem.key}.log", "a") as out:
            search = Search(problem, cfg, out=out, compiler=counting, seed_sources=seeds, worker=worker,
                            enumerations=enumerations, ahead=ahead, next_problems=next_problems,
                            shared_model=shared_model)
            search.llm_checked = True  # evo.sweep sends the LLM preflight once, before any GPU work, not per shape
            try:
                summary = search.run()
            finally:
                search.store.close()
        seed_hashes = {KernelSource.parse(s).hash for s in search.neighbour_seeds}  # and the table's nearest rows
        res.status = "done"
        res.stop = summary.stop_reason
        res.best_hash, res.best_us = summary.best_hash, summary.best_us
        res.verdict, res.noise_band = summary.verdict, summary.noise_band
        libs = {k: v for k, v in summary.baselines.items() if v and v > 0}
        if libs:  # as the table row publishes it: evo wins only beyond the noise band
            lib = min(libs, key=libs.get)
            res.best_lib_us = libs[lib]
            res.winner = "evo" if res.best_us and summary.verdict == "win" else lib
        elif res.best_us:
            res.winner = "evo"
        res.seeds_offered = len(seed_hashes)
        if seed_hashes:
            marks = ",".join("?" * len(seed_hashes))
            res.seeds_correct = next(store.rows(
                f"SELECT COUNT(*) FROM evaluations WHERE shape=? AND layout=? AND gpu=? AND ok=1 AND hash IN ({marks})",
                (problem.key, problem.layout, info.key, *seed_hashes)))[0]
        res.seed_won = int(bool(res.best_hash) and res.best_hash in seed_hashes)
        res.drift_scaled = summary.drift_scaled
        res.table_hash, res.table_us = summary.table_hash, round(summary.table_us, 3)
        res.gpu_state = summary.drift_states[0] if summary.drift_states else ""
        res.compiles_new, res.compile_seconds = counting.new, round(counting.seconds, 3)
        res.compiles_reused, res.compile_seconds_saved = counting.reused, round(counting.saved, 3)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - one bad shape must not end a 1000-shape sweep
        res.error = " ".join(f"{type(e).__name__}: {e}".split())[:300]
    finally:
        store.close()
    res.seconds = round(time.monotonic() - t0, 3)
    res.finished = time.time()
    return res


# --- where the searches run: in this process, one process per GPU, or Ray actors --------------------------

def successors(problems: list[Problem], gpus: int, depth: int = 1) -> dict[str, list[Problem]]:
    """Each shape's likely successors on its GPU, nearest first, at most `depth` of them: with every GPU taking the
    next shape in the order as it finishes one, the shapes `gpus`, 2 `gpus`, ... places later (the compile cache is
    shared, so whichever GPU takes one finds its kernels). Shapes without a successor are left out."""
    step = max(1, gpus)
    out = {a.key: problems[i + step: i + step * depth + 1: step] for i, a in enumerate(problems)}
    return {k: v for k, v in out.items() if v}


class InlineBackend:
    """One GPU, searched in this process."""

    def __init__(self, cfg: Config, device_id: int, worker_factory: Callable, compiler: Any, log_dir: Path):
        self.cfg, self.device_id, self.log_dir = cfg, device_id, log_dir
        self.worker = worker_factory(cfg, device_id)
        self.compiler = compiler
        self.enumerations = Enumerations()  # each family's space enumerated once for all shapes
        self.shared_model = SharedModel(cfg.search.cost_model_regrow)  # the cost model, trained again as the archive grows
        self.todo: deque[tuple[Problem, float | None]] = deque()
        self.slots = self.n_gpus = 1
        # the next shapes' kernels compile while this one is searched (evo.compile_ahead); next_of: the sweep's order
        self.ahead = CompileAhead.from_config(compiler, cfg.compile)
        self.next_of: dict[str, list[Problem]] = {}

    def start(self) -> list[GpuInfo]:
        return [self.worker.start()]

    def ahead_counts(self) -> AheadCounts:
        """What compiled ahead so far (nothing where compile-ahead is off)."""
        return self.ahead.snapshot() if self.ahead is not None else AheadCounts()

    def submit(self, problem: Problem, minutes: float | None = None) -> None:
        self.todo.append((problem, minutes))

    def next_result(self) -> ShapeResult:
        p, minutes = self.todo.popleft()
        nxt = self.next_of.get(p.key, [])
        return search_shape(p, with_budget(self.cfg, minutes), self.worker, self.compiler, self.log_dir, f"gpu{self.device_id}",
                            enumerations=self.enumerations, ahead=self.ahead, next_problems=nxt,
                            shared_model=self.shared_model)

    def stop(self) -> None:
        if self.ahead is not None:
            self.ahead.close()
        self.worker.stop()


def _gpu_process(device_id: int, cfg: Config, worker_factory: Callable, compiler: Any, log_dir: Path,
                 tasks: Any, results: Any) -> None:
    """A GPU's process in a multi-GPU sweep: one started worker, shapes in, ShapeResults out."""
    worker = ahead = None
    try:
        worker = worker_factory(cfg, device_id)
        try:
            info = worker.start()
        except Exception as e:  # noqa: BLE001
            results.put(("fatal", device_id, f"{type(e).__name__}: {e}"))
            return
        results.put(("hello", device_id, info))
        enumerations = Enumerations()  # each family's space enumerated once for this GPU's shapes
        shared_model = SharedModel(cfg.search.cost_model_regrow)  # this GPU's cost model, trained again as the archive grows
        ahead = CompileAhead.from_config(compiler, cfg.compile)  # this GPU's share of the CPUs
        while True:
            task = tasks.get()
            if task is None:
                break
            p, minutes, nxt = task
            results.put(("start", device_id, p.key))
            res = search_shape(p, with_budget(cfg, minutes), worker, compiler, log_dir, f"gpu{device_id}",
                               enumerations=enumerations, ahead=ahead, next_problems=list(nxt),
                               shared_model=shared_model)
            if ahead is not None:  # this GPU's counts so far, ahead of the result that the sweep waits for
                results.put(("ahead", device_id, ahead.snapshot()))
            results.put(("result", device_id, res))
    except KeyboardInterrupt:
        pass
    finally:
        if ahead is not None:
            ahead.close()
        if worker is not None:
            worker.stop()


class ProcessBackend:
    """One process per GPU on this host, each with its own started GPU worker; shapes go to whichever is free."""

    def __init__(self, cfg: Config, device_ids: list[int], worker_factory: Callable, compiler: Any, log_dir: Path):
        ctx = mp.get_context("spawn")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        # not daemonic: each process starts its own GPU worker process
        self.procs = {d: ctx.Process(target=_gpu_process, args=(d, cfg, worker_factory, compiler, log_dir,
                                                                self.tasks, self.results)) for d in device_ids}
        self.running: dict[int, str] = {}
        self.slots = self.n_gpus = len(device_ids)
        self.layout = "TN"
        self.next_of: dict[str, list[Problem]] = {}  # each shape's likely successors on its GPU, compiled ahead there
        self.ahead_by_gpu: dict[int, AheadCounts] = {}  # each GPU process's compile-ahead counts, as last reported

    def start(self) -> list[GpuInfo]:
        for p in self.procs.values():
            p.start()
        infos, errors = {}, []
        deadline = time.monotonic() + 600
        while len(infos) + len(errors) < len(self.procs):
            try:
                kind, dev, payload = self.results.get(timeout=2)
            except queue.Empty:
                if time.monotonic() > deadline or not any(p.is_alive() for p in self.procs.values()):
                    raise EvoError("the GPU processes of the sweep did not start")
                continue
            if kind == "hello":
                infos[dev] = payload
            else:
                errors.append(f"GPU {dev}: {payload}")
        if errors:
            self.stop()
            raise EvoError("; ".join(errors))
        return [infos[d] for d in sorted(infos)]

    def submit(self, problem: Problem, minutes: float | None = None) -> None:
        self.layout = problem.layout
        self.tasks.put((problem, minutes, self.next_of.get(problem.key, [])))

    def next_result(self) -> ShapeResult:
        while True:
            try:
                kind, dev, payload = self.results.get(timeout=5)
            except queue.Empty:
                for dev, proc in self.procs.items():
                    if not proc.is_alive() and dev in self.running:
                        shape = self.running.pop(dev)
                        self.slots -= 1
                        return ShapeResult(shape, self.layout, "", "failed", worker=f"gpu{dev}",
                                           error=f"the sweep process of GPU {dev} died (exit code {proc.exitcode})")
                if not any(p.is_alive() for p in self.procs.values()):
                    raise EvoError("every GPU process of the sweep has died")
                continue
            if kind == "start":
                self.running[dev] = payload
            elif kind == "ahead":
                self.ahead_by_gpu[dev] = payload
            elif kind == "result":
                self.running.pop(dev, None)
                return payload

    def ahead_counts(self) -> AheadCounts:
        """What the GPU processes compiled ahead, summed over their last reports."""
        return sum(self.ahead_by_gpu.values(), AheadCounts())

    def stop(self) -> None:
        for _ in self.procs:
            try:
                self.tasks.put(None)
            except (OSError, ValueError):
                pass
        for p in self.procs.values():
            if p.pid is None:
                continue
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()


def share_cpus(cfg: Config, n_gpus: int) -> Config:
    """compile.jobs 0 (every CPU) split among the GPUs' processes: their nvcc runs at once and each may take GBs."""
    if cfg.compile.jobs or n_gpus <= 1:
        return cfg
    return replace(cfg, compile=replace(cfg.compile, jobs=max(1, (os.cpu_count() or 1) // n_gpus)))


def with_budget(cfg: Config, minutes: float | None) -> Config:
    """The config with one shape's budget (a round of --budget-gpu-hours); unchanged when minutes is None."""
    if minutes is None:
        return cfg
    return replace(cfg, search=replace(cfg.search, budget_minutes=max(minutes, 1e-3)))


def visible_gpus() -> list[int]:
    """Device ids visible to this process, counted in a child so this process never creates a CUDA context."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        n = int(out.stdout.strip() or 0) if out.returncode == 0 else 0
    except (OSError, ValueError, subprocess.TimeoutExpired):
        n = 0
    if n == 0:
        raise NoGpuError("no CUDA GPU is visible; a sweep needs at least one (use --ray to run on a cluster)")
    return list(range(n))


# --- the sweep ---------------------------------------------------------------------------------------------

@dataclass
class SweepOutcome:
    selected: int
    done: int
    failed: int
    left: int
    this_run: list[ShapeResult] = field(default_factory=list)
    summary: str = ""
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        return 0 if self.done == self.selected and not self.failed else 1


def select_shapes(shapes: list[Problem], limit: int | None = None, sample: int | None = None, seed: int = 0) -> list[Problem]:
    if limit is not None and sample is not None:
        raise EvoError("--limit-shapes and --sample exclude each other")
    if limit is not None:
        return shapes[:limit]
    if sample is not None:
        if sample > len(shapes):
            raise EvoError(f"--sample {sample} exceeds the {len(shapes)} shapes of the set")
        picked = set(random.Random(seed).sample(range(len(shapes)), sample))
        return [p for i, p in enumerate(shapes) if i in picked]
    return shapes


def _clock(s: float) -> str:
    s = int(max(0, s))
    d, s = divmod(s, 86400)
    return (f"{d}d " if d else "") + f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_line(i: int, total: int, r: ShapeResult, elapsed: float, eta: float, width: int = 20) -> str:
    filled = round(width * i / total) if total else width
    bar = "#" * filled + "." * (width - filled)
    if r.status != "done":
        what = f"FAILED: {r.error[:120]}"
    elif r.winner == "evo":
        what = f"evo wins {r.best_lib_us / r.best_us:.2f}x best library" if r.best_lib_us else "evo"
        what += f" (noise band {100 * r.noise_band:.1f} %)" if r.noise_band else ""
    elif r.winner and r.verdict == "tie":
        what = (f"tie: evo {r.best_lib_us / r.best_us:.2f}x {r.winner}, inside the noise band of {100 * r.noise_band:.1f} %"
                f" ({r.winner} kept)")
    elif r.winner:
        what = f"{r.winner} wins (evo {r.best_lib_us / r.best_us:.2f}x)" if r.best_us else f"{r.winner} wins (no correct evo kernel)"
    else:
        what = "no result"
    seeds = f", seeds: {r.seeds_correct} of {r.seeds_offered} offered timed and correct" if r.seeds_offered else ""
    reuse = f", cubins reused {r.compiles_reused}" if r.compiles_reused else ""
    conv = ", converged" if (r.stop or "").startswith("converged") else ""
    drift = f", {r.drift_scaled} timed while the GPU ran slow" if r.drift_scaled else ""
    return (f"[{bar}] {i:>{len(str(total))}}/{total} {r.shape:<17} {r.worker:<6} {what}{_versus_table(r)}; "
            f"{r.seconds / 60:.1f} min{conv}{seeds}{reuse}{drift} | elapsed {_clock(elapsed)}, ETA {_clock(eta)}")


def _versus_table(r: ShapeResult) -> str:
    """The shape's row before the sweep against its new kernel, both timed in the search's runoff."""
    from .search import versus_table

    what = versus_table(r.best_hash, r.best_us, r.table_hash, r.table_us) if r.status == "done" else ""
    return f"; the table's kernel {what}" if what else ""


def _table_rows_line(done: list[ShapeResult]) -> str:
    """The sweep's shapes that had a table row before their search: how many took a faster kernel, by how much."""
    had = [r for r in done if r.table_hash]
    if not had:
        return ""
    kept = sum(r.best_hash == r.table_hash for r in had)
    faster = [r for r in had if r.best_hash != r.table_hash and r.best_us and r.table_us > r.best_us]
    text = f"Of the {len(had)} shapes the table had a row for, {len(faster)} took a kernel faster than the row's in the same runoff"
    if faster:
        top = max(faster, key=lambda r: r.table_us / r.best_us)
        text += (f" (geomean {geomean([r.table_us / r.best_us for r in faster]):.3f}x; most on {top.shape}, "
                 f"{top.table_us:.2f} -> {top.best_us:.2f} us)")
    return text + f", {kept} kept the row's kernel."


def summarize(store: Store, gpu: str, shapes: list[Problem], this_run: list[ShapeResult], wall_s: float, n_gpus: int,
              shapes_file: str, out_dir: str, interrupted: bool = False, templates: str | None = None) -> str:
    """The one paragraph a cron log keeps. With `templates`, a shape counts as done only if searched with them."""
    keys = {p.key for p in shapes}
    layout = shapes[0].layout if shapes else "TN"
    recs = {r.shape: r for r in SweepLog(store).results(gpu, layout) if r.shape in keys}
    done = [r for r in recs.values() if r.status == "done" and (templates is None or r.templates == templates)]
    failed_now = [r for r in this_run if r.status != "done"]
    done_now = [r for r in this_run if r.status == "done"]
    left = len(shapes) - len(done)
    _, rows = export_table(store, gpu, out_dir, layout)
    rows = [r for r in rows if r.shape in keys and r.shape in {d.shape for d in done}]
    wins = sum(r.winner == "evo" for r in rows)
    parts = [f"evo sweep of {shapes_file} on {gpu} ({n_gpus} GPU{'s' if n_gpus != 1 else ''})"
             + (" was INTERRUPTED" if interrupted else "") + ":",
             f"{len(done)} of {len(shapes)} shapes done ({len(done_now)} this run, {len(failed_now)} failed this run, {left} left)."]
    if rows:
        gm = [f"{lib} {geomean([getattr(r, f'speedup_{lib}') for r in rows]):.3f}x" for lib in LIBRARIES
              if any(getattr(r, f"speedup_{lib}") for r in rows)]
        table_vs_lib = geomean([max(r.speedup_best_library, 1.0) if r.time_us else 1.0 for r in rows if r.best_library])
        ties = sum(r.winner != "evo" and r.verdict == "tie" for r in rows)
        parts.append(f"evo wins {wins} of {len(rows)} shapes beyond the noise band ({ties} ties inside it, "
                     f"the best library faster on {len(rows) - wins - ties}).")
        if gm:
            parts.append(f"Geomean speedup of evo's best kernel vs {', vs '.join(gm)}; "
                         f"the table (evo where it wins, the library elsewhere) vs the best library {table_vs_lib:.3f}x.")
    if line := _table_rows_line(done_now):
        parts.append(line)
    gpu_min_all = sum(r.seconds for r in done) / 60
    gpu_min_now = sum(r.seconds for r in this_run) / 60
    if done:
        parts.append(f"GPU time {gpu_min_all:.1f} GPU-minutes over the done shapes, {gpu_min_all / len(done):.2f} GPU-minutes per shape; "
                     f"this run {gpu_min_now:.1f} GPU-minutes in {wall_s / 60:.1f} min wall.")
    offered = sum(r.seeds_offered for r in done)
    if offered or any(r.compiles_reused for r in done):
        parts.append(f"Compile once, time everywhere: {offered} kernels of neighbouring shapes offered as seeds "
                     f"({sum(r.seeds_correct for r in done)} of them timed and correct, the others passed over by generation 0's "
                     f"choice or failed; the winner on {sum(r.seed_won for r in done)} shapes); "
                     f"compiles reused: {sum(r.compiles_reused for r in done)}, compile seconds saved ≈ "
                     f"{sum(r.compile_seconds_saved for r in done):.0f} s (new compiles: {sum(r.compiles_new for r in done)}, "
                     f"{sum(r.compile_seconds for r in done):.0f} s of nvcc).")
    drifted = [r for r in done_now if r.drift_scaled]
    if drifted:
        parts.append(f"Timing drift: on {len(drifted)} shapes the GPU ran slow for a while (candidates timed in two "
                     f"slow windows, their times scaled for ranking: {', '.join(r.shape for r in drifted[:5])}"
                     + (f" and {len(drifted) - 5} more" if len(drifted) > 5 else "") + "); search them again on a quiet GPU "
                     "(python -m evo.search --shape S; docs/sweep.md).")
        state = next((r for r in drifted if r.gpu_state), None)
        if state is not None:
            parts.append(f"After a slow window on {state.shape} the GPU reported: {state.gpu_state}.")
    if failed_now:
        parts.append("Failed: " + "; ".join(f"{r.shape} ({r.error[:80]})" for r in failed_now[:5])
                     + (f" and {len(failed_now) - 5} more" if len(failed_now) > 5 else "") + "; rerun to retry them.")
    parts.append(f"Archive {store.path}, table {Path(out_dir) / gpu / 'table.csv'}.")
    return " ".join(parts)


def run_sweep(shapes: list[Problem], cfg: Config, *, shapes_file: str = "", device_ids: list[int] | None = None,
              worker_factory: Callable | None = None, compiler: Any = None, ray: bool = False,
              ray_address: str | None = None, ray_actors: int = 0, gpus_per_actor: float = 1.0,
              budget_gpu_hours: float = 0.0, keep_stale: bool = False, order: str = "likely-wins",
              out=sys.stdout) -> SweepOutcome:
    """Search every shape not yet done for this GPU in `order` (evo.sweep_order: where the GPU's table says evo
    wins first, or longest first); print a line per shape and the summary paragraph.
    A shape done with other templates (another evo.template_fingerprint.fingerprint of the searched families) is due again,
    unless ``keep_stale``: a nightly run after a template change searches with the new kernels. So is a shape done
    before another GPU's table published a kernel for it that this archive never timed (evo.sweep_due), so that the
    search races it.

    With ``budget_gpu_hours``: a first round gives every pending shape ``search.first_round_share`` of the budget
    (evenly; a shape that converges early hands its rest back), then rounds share what is left among the shapes
    that were still improving when their time ran out (stop reason "time budget spent"), up to 3 more rounds."""
    from .compile import Compiler
    from .gpu.worker import GpuWorker

    if not shapes:
        raise EvoError("the shape selection is empty")
    if ray and budget_gpu_hours:
        raise EvoError("--budget-gpu-hours is not supported with --ray yet; give --budget-minutes-per-shape")
    log_dir = Path(cfg.paths.db).parent / "sweep_logs"
    t0 = time.monotonic()
    if ray:
        from .distributed import RayBackend

        # the nodes build their own compiler (nvcc may live elsewhere there) unless one is given
        backend: Any = RayBackend(cfg, worker_factory, compiler, ray_address, ray_actors, gpus_per_actor)
    else:
        worker_factory = worker_factory or GpuWorker
        compiler = compiler or Compiler.from_config(cfg.compile)
        device_ids = device_ids if device_ids is not None else visible_gpus()
        if len(device_ids) == 1:
            backend = InlineBackend(cfg, device_ids[0], worker_factory, compiler, log_dir)
        else:
            backend = ProcessBackend(share_cpus(cfg, len(device_ids)), device_ids, worker_factory, compiler, log_dir)
    store = Store(cfg.paths.db)
    sweep_log = SweepLog(store)
    results: list[ShapeResult] = []
    interrupted = False
    gpu = ""
    templates = ""
    outcome = SweepOutcome(len(shapes), 0, 0, len(shapes))
    try:
        infos = backend.start()
        gpus = sorted({i.key for i in infos})
        if len(gpus) > 1:
            raise EvoError(f"the sweep's GPUs are of different models ({', '.join(gpus)}); pick one model with --gpus")
        gpu = gpus[0]
        if hasattr(backend, "attach"):
            backend.attach(store, gpu)
        from .families import load_families
        from .template_fingerprint import fingerprint
        from .search import cfg_names

        families = load_families(cfg.paths.templates or None, cfg_names(cfg), arch=infos[0].arch)
        templates = fingerprint(families)
        done = sweep_log.done(gpu, shapes[0].layout, None if keep_stale else templates)
        stale = len({p.key for p in shapes} & (sweep_log.done(gpu, shapes[0].layout) - done))
        found: dict[str, str] = {}
        if not keep_stale and cfg.search.runoff > 1:  # a search races other GPUs' kernels only with a runoff
            finished = {r.shape: r.finished for r in sweep_log.results(gpu, shapes[0].layout) if r.shape in done}
            found = other_gpus_finds(store, cfg.paths.out, infos[0], shapes, finished, {f.name for f in families})
            done -= set(found)
        pending = [p for p in shapes if p.key not in done]
        n_workers = len(infos)
        overhead = measured_overhead(sweep_log.results(gpu, shapes[0].layout))
        est = "" if budget_gpu_hours else header_estimate(len(pending), cfg.search.budget_minutes, n_workers, overhead, _clock)
        again = f" ({stale} of them done with older templates: searched again)" if stale else ""
        if found:
            again += (f" ({len(found)} of them done before another GPU's table published a kernel for them: "
                      f"searched again to race it, e.g. {next(iter(found))} from {next(iter(found.values()))})")
        print(f"evo sweep {shapes_file or ''}: {len(shapes)} shapes selected, {len(shapes) - len(pending)} already done, "
              f"{len(pending)} to search{again} on {n_workers} x {infos[0].name}{est}", file=out)
        print(f"  archive {Path(cfg.paths.db).resolve()}, per-shape logs {log_dir.resolve()}", file=out, flush=True)
        pending, order_words = order_pending(pending, order, cfg.paths.out, gpu)
        if pending:
            print(f"  order: {order_words}", file=out, flush=True)
        budget_s = budget_gpu_hours * 3600.0
        first = None
        expect_s = 0.0  # what a started shape is expected to cost (the GPU-hour budget stops starting shapes on it)
        if budget_s and pending:
            fr = first_round(budget_s, cfg.search.first_round_share, len(pending), cfg.search.budget_minutes, overhead)
            first = fr.minutes
            expect_s = per_shape_seconds(first * 60.0, overhead)
            based = (f" ({fr.overhead_s:.0f} s per shape beyond its search, the median of {overhead.shapes} earlier "
                     f"shapes of this GPU, taken off first)" if overhead is not None else
                     " (no earlier shapes of this GPU to measure what a shape costs beyond its search: the first "
                     "shapes' cost decides when the budget is spent)")
            print(f"  budget {budget_gpu_hours:g} GPU-hours: round 1 gives each shape {first:.2f} GPU-minutes of "
                  f"search{based}, the rest goes to shapes still improving", file=out, flush=True)
            if fr.reaches < len(pending):
                print(f"  the budget reaches about {fr.reaches} of the {len(pending)} shapes; the others are left "
                      f"for the next run", file=out, flush=True)
        spent: dict[str, float] = {}
        given: dict[str, float] = {}
        last_stop: dict[str, str] = {}
        stopped = False  # the GPU-hour budget is spent: no shape is started any more

        def budget_spent(in_flight: int) -> bool:
            nonlocal stopped
            if not budget_s:
                return False
            used = sum(spent.values()) + in_flight * expect_s
            if used >= budget_s and not stopped:
                stopped = True
                print(f"  the {budget_gpu_hours:g} GPU-hour budget is spent ({sum(spent.values()) / 3600:.2f} GPU-hours "
                      f"used{f', {in_flight} shapes still running' if in_flight else ''}): no more shapes are started",
                      file=out, flush=True)
            return stopped

        def run_round(items: list[tuple[Problem, float | None]], finished_before: int, total: int) -> None:
            # the shapes each GPU likely takes after each, whose kernels compile ahead; this round's order only
            backend.next_of = successors([q for q, _ in items], backend.slots, cfg.compile.ahead_depth)
            it = iter(items)
            in_flight = 0
            n_round = 0

            def submit(p: Problem, minutes: float | None) -> None:
                if minutes is None:
                    backend.submit(p)
                else:
                    backend.submit(p, minutes)

            for p, minutes in it:
                if budget_spent(in_flight):
                    break
                submit(p, minutes)
                in_flight += 1
                if in_flight >= backend.slots:
                    break
            while in_flight:
                r = backend.next_result()
                in_flight -= 1
                n_round += 1
                if not r.gpu:
                    r.gpu = gpu
                r.templates = templates
                spent[r.shape] = spent.get(r.shape, 0.0) + r.seconds
                given[r.shape] = given.get(r.shape, 0.0) + r.budget_s
                r.seconds = round(spent[r.shape], 3)  # every round of this run on the shape
                r.budget_s = round(given[r.shape], 3)
                last_stop[r.shape] = r.stop
                sweep_log.record(r)
                results.append(r)
                elapsed = time.monotonic() - t0
                avg = sum(spent.values()) / max(1, len(results))
                eta = (in_flight if stopped else len(items) - n_round) * avg / max(1, backend.slots)
                print(progress_line(finished_before + n_round, total, r, elapsed, eta), file=out, flush=True)
                nxt = None if budget_spent(in_flight) else next(it, None)
                if nxt is not None and backend.slots > 0:
                    submit(*nxt)
                    in_flight += 1

        run_round([(p, first) for p in pending], len(shapes) - len(pending), len(shapes))
        rounds = 1
        while budget_s and rounds < 4 and not stopped:
            left = budget_s - sum(spent.values())
            improving = [p for p in shapes if last_stop.get(p.key) == "time budget spent"]
            if not improving or left / len(improving) < 10.0:
                break
            per = left / len(improving) / 60.0
            rounds += 1
            print(f"round {rounds}: {len(improving)} shapes still improving get {per:.2f} GPU-minutes each "
                  f"({left / 3600:.2f} GPU-hours left)", file=out, flush=True)
            run_round([(p, per) for p in longest_first(improving)], 0, len(improving))
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            backend.stop()
        except Exception:  # noqa: BLE001
            pass
        if gpu:
            current = None if keep_stale or not templates else templates
            text = summarize(store, gpu, shapes, results, time.monotonic() - t0, backend.n_gpus,
                             shapes_file or "the shape set", cfg.paths.out, interrupted, current)
            counts = backend.ahead_counts()
            if counts.submitted:  # their cache hits are among the "compiles reused" above
                line = counts.line()
                text += (f" {line[:1].upper()}{line[1:]} in the background (each shape's starts while its seeds "
                         "were timed, its successor's starts and library tiles; a search that met one counts it as "
                         "reused).")
            print("\n" + text, file=out, flush=True)
            if results:
                print(ship_measurements(store, gpu, cfg.paths.out), file=out, flush=True)
            done_set = sweep_log.done(gpu, shapes[0].layout, current)
            sel = {p.key for p in shapes}
            outcome = SweepOutcome(len(shapes), len(done_set & sel), sum(r.status != "done" for r in results),
                                   len(sel - done_set), results, text, interrupted)
        store.close()
    return outcome


def ship_measurements(store: Store, gpu: str, out_dir: str) -> str:
    """The archive's measurements of ``gpu`` merged into the file beside its table (evo.measurements), where a
    machine with an empty archive trains its cost model on them; one line saying so (or why not)."""
    path = shipped_path(out_dir, gpu)
    try:
        n = save_measurements(path, history(store, gpu, failures=True))
    except (EvoError, OSError) as e:
        return f"measurements beside the table not written ({e})"
    return f"measurements beside the table: {path} ({n} rows, what a fresh machine's cost model trains on)"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m evo.sweep", "Search every shape of a shape set (resumable; one line per shape; a summary at the end).")
    ap.add_argument("--shapes", required=True, help="shape set YAML, e.g. shapes/grid1000.yaml, or a kernel table's "
                    "folder (its rows' shapes), e.g. kernels_out/NVIDIA_H200, or the shapes themselves, e.g. "
                    "4096x4096x1024,512x2048x4096")
    ap.add_argument("--budget-minutes-per-shape", type=float, help="wall-clock budget of each shape's search")
    ap.add_argument("--max-candidates-per-shape", type=int, help="new candidates per shape")
    ap.add_argument("--budget-gpu-hours", type=float, help="budget of the whole sweep: a first round for every shape, "
                    "the rest to shapes still improving (docs/sweep.md)")
    ap.add_argument("--rows-dated-before", metavar="YYYY-MM-DD", help="with a table's folder as --shapes: only its "
                    "rows measured before this day (a row's date: its kernel's side-by-side run with the libraries)")
    ap.add_argument("--rows-below", type=float, metavar="X", help="with a table's folder as --shapes: only its rows "
                    "where evo's kernel is below X times the best library (1.0: every row evo does not win outright); "
                    "given with --rows-dated-before or --rows-ported, a row any of them picks (all of them: --rows-every)")
    ap.add_argument("--rows-ported", action="store_true", help="with a table's folder as --shapes: only its rows whose "
                    "kernel was ported from another GPU's table (evo.rerender --port) and never searched on this GPU")
    ap.add_argument("--rows-every", action="store_true", help="with several --rows-* filters: only the rows that pass "
                    "every one (e.g. --rows-ported --rows-below 1.0: the ported rows evo does not win)")
    ap.add_argument("--limit-shapes", type=int, metavar="K", help="only the first K shapes of the set")
    ap.add_argument("--sample", type=int, metavar="K", help="a random sample of K shapes (seeded by --seed)")
    ap.add_argument("--proposer", help="comma list: mutate, optuna, llm (default mutate)")
    ap.add_argument("--seed-winners", type=int, help="winners of the nearest searched shapes timed first (default config: 8)")
    ap.add_argument("--gpus", help="comma list of device ids on this host (default: every visible GPU)")
    ap.add_argument("--ray", action="store_true", help="run the searches on a Ray cluster (pip install -e .[ray])")
    ap.add_argument("--ray-address", help="Ray cluster address (default: auto, i.e. the cluster `ray start --head` started)")
    ap.add_argument("--ray-actors", type=int, help="searches at once (default: the cluster's GPU count)")
    ap.add_argument("--order", choices=["likely-wins", "longest"], default="likely-wins",
                    help="which pending shapes first: where the GPU's table's nearest rows say evo wins (default; "
                    "longest first without a table), or longest first")
    ap.add_argument("--keep-stale", action="store_true", help="count shapes searched with older templates, or before "
                    "another GPU's table published a kernel for them, as done (default: either makes them due again)")
    from .search import add_llm_flags, apply_llm_flags, llm_preflight

    add_llm_flags(ap)
    args = ap.parse_args(argv)
    for v, flag in ((args.budget_minutes_per_shape, "--budget-minutes-per-shape"),
                    (args.max_candidates_per_shape, "--max-candidates-per-shape"), (args.seed_winners, "--seed-winners")):
        require_positive(v, flag)
    for v, flag in ((args.limit_shapes, "--limit-shapes"), (args.sample, "--sample"), (args.ray_actors, "--ray-actors")):
        if v is not None and v < 1:
            raise EvoError(f"{flag} must be at least 1")
    if args.limit_shapes is not None and args.sample is not None:
        raise EvoError("--limit-shapes and --sample exclude each other")
    require_positive(args.budget_gpu_hours, "--budget-gpu-hours")
    if args.budget_gpu_hours and args.ray:
        raise EvoError("--budget-gpu-hours is not supported with --ray yet; give --budget-minutes-per-shape")
    if args.budget_gpu_hours and args.budget_minutes_per_shape is None:
        args.budget_minutes_per_shape = 0.0  # no per-shape cap: the rounds set each shape's budget
    device_ids = None
    if args.gpus:
        try:
            device_ids = sorted({int(x) for x in args.gpus.split(",") if x.strip()})
        except ValueError:
            raise EvoError(f"--gpus wants device ids like 0,1, not {args.gpus!r}") from None
        if not device_ids:
            raise EvoError("--gpus names no device")
    cfg = config_from_args(args, {"budget_minutes": args.budget_minutes_per_shape,
                                  "max_candidates": args.max_candidates_per_shape,
                                  "proposers": args.proposer.split(",") if args.proposer else None,
                                  "seed_winners": args.seed_winners})
    apply_llm_flags(cfg, args)
    rows = RowFilter(args.rows_dated_before, args.rows_below, args.rows_ported, args.rows_every)
    shapes = select_shapes(load_shapes(args.shapes, rows), args.limit_shapes, args.sample, cfg.search.seed)
    if rows and not shapes:
        raise EvoError(f"no row of {args.shapes} is {rows.describe()}: nothing to search")
    llm_preflight(cfg)  # a wrong LLM endpoint ends the sweep before any GPU work
    outcome = run_sweep(shapes, cfg, shapes_file=args.shapes, device_ids=device_ids, ray=args.ray,
                        ray_address=args.ray_address, ray_actors=args.ray_actors or 0,
                        budget_gpu_hours=args.budget_gpu_hours or 0.0, keep_stale=args.keep_stale, order=args.order)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
