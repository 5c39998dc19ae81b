"""The search loop for one shape: propose -> compile -> check -> time -> select, then export.

    python -m evo.search --shape 4096x4096x1024 [--budget-minutes 5] [--compile-only --arch sm_90a]
"""
from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cli import config_from_args, parser, require_positive
from .compile import Compiler, stored_cubin
from .compile_ahead import CompileAhead
from .config import Config
from .convergence import Convergence
from .cost_model import SharedModel
from .drift import DriftReference, drifted, retimed, tolerance
from .errors import EvoError, cli_entry
from .families import Family, load_families, rerendered
from .gpu.device import COMPILE_ONLY_HINT, require_gpu
from .gpu.gpu_state import describe_state
from .gpu.worker import GpuWorker, WorkerFault
from .kernel import KernelSource
from .ltgemm import algorithm_from_detail
from .problem import GpuInfo, Problem, parse_shape
from .progress import Progress
from .proposers.base import Proposal, ProposalContext, is_fitted_start, is_start
from .proposers.library_tiles import algorithm_proposals, library_tile_proposals
from .proposers.neighbours import nearest_winners, read_tables, serving, table_neighbours
from .proposers.transposed import transposed_proposals, transposed_shape
from .proposers.mutate import MutateProposer
from .records import LIBRARIES, BaselineResult, CompileResult, EvalResult, Individual, Sample
from .select import Diversity, Selector
from .store import Store

ARCHS = ("sm_80", "sm_90a")


@dataclass
class SearchSummary:
    problem: Problem
    gpu: str
    best_hash: str = ""
    best_us: float = 0.0
    baselines: dict[str, float] = field(default_factory=dict)
    verdict: str = ""  # evo against the fastest library as the table row publishes it: "win" (beyond the noise band), "tie", "loss"
    noise_band: float = 0.0  # the relative band that speedup had to clear (evo.noise.band)
    compiled: int = 0
    compile_failed: int = 0
    correct: int = 0
    rejected: int = 0
    generations: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    export_dir: str = ""
    kernel_path: str = ""
    proposer_lines: list[str] = field(default_factory=list)
    drift_scaled: int = 0  # candidates timed in two drifted windows, their times scaled (evo/drift.py)
    drift_states: list[str] = field(default_factory=list)  # what the GPU reported after slow windows (evo/gpu/gpu_state.py)
    table_hash: str = ""  # the kernel the table published for the shape when the search began ("" where it had none)
    table_us: float = 0.0  # its time in the final runoff, side by side with best_us (0: it did not race there)


def build_proposers(cfg: Config, selector: Selector, store: Store | None = None, check_llm: bool = True,
                    say=None) -> list:
    """The proposers of cfg.search.proposers. The llm proposer keeps its conversations and reads its parents'
    evidence in ``store``; check_llm: send its preflight chat request (main() has already sent it)."""
    out = []
    for name in cfg.search.proposers:
        if name == "mutate":
            out.append(MutateProposer(selector, cfg.search.crossover_rate, cfg.search.initial_random,
                                      coordinated_rate=cfg.search.coordinated_rate,
                                      cross_family_rate=cfg.search.cross_family_rate,
                                      switch_best=cfg.search.switch_best))
        elif name == "optuna":
            from .proposers.optuna_tpe import OptunaProposer

            out.append(OptunaProposer(cfg.search.seed))
        elif name == "llm":
            from .proposers.llm import LlmProposer  # type: ignore

            from .profile import Profiler

            profiler = Profiler(cfg.llm.ncu, cfg.llm.profile_timeout_s, say=say) if cfg.llm.profile else None
            p = LlmProposer.from_config(cfg, store=store, profiler=profiler, say=say)
            if check_llm:
                p.check_endpoints()
            out.append(p)
    return out


def timed_past_budget(prop: Proposal, generation: int) -> bool:
    """Besides everything while no kernel is correct: the seeds (generation 0: the table's kernel for the shape, its
    rendering from today's template, winners of other shapes) and the families' known-good starts in the first
    generation are compiled and timed past the budget, so a budget spent on a fresh machine's first compiles and
    evaluation still ends with the incumbent and the vetted instances timed (a few, ~1 s each). Without it a sweep
    of a table shape at 0.5 minutes on a fresh H100 timed two neighbours' winners, dropped the table's CUTLASS
    kernel while it compiled and never reached the starts (docs/perf-search.md)."""
    return generation == 0 or (generation == 1 and is_start(prop))


def family_of(source: str) -> str:
    """The family a kernel source's front matter names ("" where it does not parse)."""
    try:
        return KernelSource.parse(source).meta.family
    except EvoError:
        return ""


def quick_compiles_first(fresh: list, seconds: dict[str, float]) -> list:
    """(KernelSource, Proposal) pairs ordered by their family's usual compile time (`Store.compile_seconds`; a family
    never compiled here counts as quick), the proposal order kept within a family."""
    return sorted(fresh, key=lambda kp: seconds.get(kp[0].meta.family, 0.0))


def gpu_state_now(worker):
    """What the worker's GPU reports now (evo/gpu/gpu_state.py), or None: no reading, or the worker could not ask."""
    try:
        return worker.call("gpu_state", timeout_s=30)
    except (WorkerFault, EvoError):
        return None


def split_children(cfg: Config, proposers: list, n: int) -> list[int]:
    w = [float(cfg.search.proposer_weights.get(p.name, 1.0)) for p in proposers]
    total = sum(w) or 1.0
    counts = [max(1, round(n * x / total)) for x in w]
    return counts


class Search:
    def __init__(self, problem: Problem, cfg: Config, out=sys.stdout, worker_factory=GpuWorker, compiler=None,
                 seed_sources: list[str] | None = None, worker: GpuWorker | None = None, enumerations=None,
                 ahead: CompileAhead | None = None, next_problems: list[Problem] | None = None,
                 shared_model: SharedModel | None = None):
        """seed_sources: full kernel texts (e.g. winners of neighbouring shapes) evaluated before anything new is proposed.
        worker: an already started GPU worker to reuse (a sweep keeps one per GPU); otherwise one is started.
        enumerations: evo.space.Enumerations shared by a sweep's searches (each family's space enumerated once).
        ahead: a sweep's background compiles (evo.compile_ahead), kept across its shapes; None: the search runs its own
        while `compile.ahead` is on. next_problems: shapes searched after this one: their seeds (library tiles where
        the table or the archive knows the algorithm, the transposed shape's fastest kernels) compile ahead before
        this shape's starts, their starts after them.
        shared_model: a sweep's cost model (evo.cost_model.SharedModel), trained again only as the archive grows."""
        self.ahead = ahead
        self.shared_model = shared_model
        self.ahead_queue: threading.Thread | None = None  # the thread queueing this search's compiles ahead
        self.ahead_rank = 0.0  # the rank it queues them at (its own starts, then the next shapes'; evo.compile_ahead)
        self.next_problems = list(next_problems or [])
        self.enumerations = enumerations
        self.seed_sources = list(seed_sources or [])
        self.neighbour_seeds: list[str] = []  # kernels of other shapes this run offered (seed_sources, the table's nearest rows)
        self.deferred: list[tuple[KernelSource, Proposal]] = []  # slow children compiling in the background (_defer_slow)
        # deferred seeds and starts: timed however the search stops (timed_past_budget; a start refitted to the shape
        # still compiling at a time or convergence stop is not: _time_deferred)
        self.must_time: set[str] = set()
        self.typical_compile_s: dict[str, float] = {}  # family -> its family.yaml compile_s (before the archive knows)
        self.family_names: list[str] = []  # the families this search proposes from (set when it runs)
        self.resumed = False  # the archive held candidates of this shape when it started (set when it runs)
        self.shared_worker = worker
        self.problem = problem
        self.cfg = cfg
        self.out = out
        self.store = Store(cfg.paths.db)
        self.compiler = compiler or Compiler.from_config(cfg.compile)
        self.worker_factory = worker_factory
        self.selector = Selector(cfg.search.population, cfg.search.elites, cfg.search.tournament)
        self.diversity = Diversity(cfg.search.islands, cfg.search.migrate_every, cfg.search.elites)
        self.templates = Path(cfg.paths.templates) if cfg.paths.templates else None
        self.llm_checked = False  # main() sent the LLM preflight already
        self.guide = None  # evo.guide.Guide of the running search

    def families(self, arch: str) -> list[Family]:
        fams = load_families(self.templates, cfg_names(self.cfg), arch=arch)
        if not fams:
            raise EvoError(f"no kernel family compiles for {arch} (families: {', '.join(cfg_names(self.cfg)) or 'all'})")
        return fams

    # --- compile-only --------------------------------------------------------
    def compile_only(self, arch: str) -> list[CompileResult]:
        if arch not in ARCHS:
            raise EvoError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
        fams = self.families(arch)
        ctx = ProposalContext(self.problem, arch, None, fams, [], [], random.Random(self.cfg.search.seed))
        proposals = MutateProposer(self.selector, 0.0, self.cfg.search.initial_random).propose(ctx, 0)
        items = [(KernelSource.parse(p.source), arch) for p in proposals]
        print(f"compiling {len(items)} initial candidates of {', '.join(f.name for f in fams)} for {arch} "
              f"with {self.compiler.nvcc} ({self.cfg.compile.jobs or 'all'} jobs)", file=self.out, flush=True)
        print(f"{'hash':<16} {'family':<14} {'ok':<4} {'regs':>4} {'smem':>7} {'dyn smem':>8} {'s':>5}  params / error",
              file=self.out)
        results = []
        by_hash = {ks.hash: ks for ks, _ in items}

        def done(r: CompileResult) -> None:
            ks = by_hash[r.hash]
            spec = ks.launch(self.problem, 132)
            info = " ".join(f"{k}={v}" for k, v in ks.meta.params.items()) if r.ok else r.error
            print(f"{r.hash:<16} {ks.meta.family:<14} {'yes' if r.ok else 'NO':<4} {r.registers:>4} {r.smem_static:>7} "
                  f"{spec.smem:>8} {r.seconds:>5.1f}  {info}", file=self.out, flush=True)
            results.append(r)

        self.compiler.compile_many(items, self.cfg.compile.jobs, on_done=done)
        ok = sum(r.ok for r in results)
        print(f"{ok} of {len(results)} compiled for {arch}", file=self.out)
        return results

    # --- the search ------------------------------------------------------------
    def run(self) -> SearchSummary:
        cfg, p = self.cfg, self.problem
        t_start = time.monotonic()
        print(f"evo search {p.key} ({p.layout}, fp16 in, fp32 accumulate, fp16 out)", file=self.out)
        print(f"  database: {Path(cfg.paths.db).resolve()}\n  output:   {Path(cfg.paths.out).resolve()}", file=self.out, flush=True)
        proposers = build_proposers(cfg, self.selector, store=self.store, check_llm=not self.llm_checked,
                                    say=lambda line: print(line, file=self.out, flush=True))
        owned = None
        if self.ahead is None:
            self.ahead = owned = CompileAhead.from_config(self.compiler, cfg.compile)
        try:
            if self.shared_worker is not None:
                return self._run(self.shared_worker, self.shared_worker.info, proposers, t_start)
            worker = self.worker_factory(cfg)
            info = worker.start()
            try:
                return self._run(worker, info, proposers, t_start)
            finally:
                worker.stop()
        finally:
            if self.ahead_queue is not None:
                self.ahead_queue.join(timeout=120)  # (seconds of Python at most; its submits land before the count)
                self.ahead_queue = None
            if self.ahead is not None:
                print(f"  {self.ahead.counts.line()}" + (" (this sweep so far)" if owned is None else ""), file=self.out)
                for line in self.ahead.take_failures():
                    print(f"  compiled ahead, failed: {line}", file=self.out)
            if owned is not None:
                owned.close()
                self.ahead = None

    def _run(self, worker: GpuWorker, info: GpuInfo, proposers: list, t_start: float) -> SearchSummary:
        cfg, p, store = self.cfg, self.problem, self.store
        gpu = info.key
        fams = self.families(info.arch)
        self.typical_compile_s = {f.name: f.compile_s for f in fams if f.compile_s}
        self.family_names = [f.name for f in fams]
        print(f"  GPU:      {info.name} ({info.arch}, {info.sm_count} SMs, L2 {info.l2_bytes >> 20} MiB), "
              f"driver {info.driver}, CUDA runtime {info.cuda_runtime}", file=self.out)
        print(f"  families: {', '.join(f.name for f in fams)}; proposers: {', '.join(x.name for x in proposers)}", file=self.out, flush=True)
        state = gpu_state_now(worker)  # another process timing on the same GPU slows every window it overlaps
        if state is not None and state.others() > 0:
            print(f"  warning:  this GPU is shared ({describe_state(state)}): windows the other processes overlap run "
                  "slow and are timed again or scaled (docs/evaluator.md, \"Timing drift\")", file=self.out, flush=True)
        setup: dict[str, float] = {}  # seconds of each step before the search's own budget starts (logged below)
        t = time.monotonic()
        if store.ceilings(gpu) is None:
            print("measuring the GPU's ceilings (8192^3 cuBLAS, 1 GiB copy)...", file=self.out, flush=True)
            c = worker.call("ceilings", timeout_s=300)
            store.set_ceilings(gpu, c["peak_tflops"], c["bw_gbs"], c["detail"])
            setup["the ceilings"], t = time.monotonic() - t, time.monotonic()
        peak, bw = store.ceilings(gpu)  # type: ignore[misc]
        info.extra.update(peak_tflops=peak, bw_gbs=bw, roofline_us=p.roofline_us(peak, bw))  # for prompts
        baselines = store.baselines(p.key, p.layout, gpu)
        measured_now = not baselines
        if not baselines:
            print("timing the baselines (cuBLAS, cuBLASLt heuristic, cuBLASLt autotune)...", file=self.out, flush=True)
            res = worker.call("baselines", timeout_s=600, problem=p)
            for b in res["results"].values():
                store.add_baseline(p.key, p.layout, gpu, b)
            for k, v in res["notes"].items():
                if k == "cublaslt":
                    print(f"  note: {v}", file=self.out)
            baselines = store.baselines(p.key, p.layout, gpu)
            setup["the baselines"], t = time.monotonic() - t, time.monotonic()
        best_lib = min((b.time_us for b in baselines if b.time_us > 0), default=0.0)
        for b in baselines:
            print(f"  {b.library:<20} {b.time_us:9.2f} us  {p.tflops(b.time_us):7.1f} TFLOP/s", file=self.out)
        print(f"  roofline bound {p.roofline_us(peak, bw):.2f} us (P={peak:.0f} TFLOP/s, BW={bw:.0f} GB/s measured)", file=self.out, flush=True)
        self._warm_checker(worker, setup)

        # the kernel the table publishes for this shape (timed here if this archive lacks it, so that it races in the
        # final runoff) and the winners of other shapes
        table_hash, seeds = self._table_seeds(info, fams, p)
        # winners of other shapes in this run's families only (--families: a sweep restricted to one family timed a
        # neighbour's CUTLASS kernel, and on a fresh machine waited for its compile)
        names = {f.name for f in fams}
        self.seed_sources = [src for src in self.seed_sources if family_of(src) in names]
        # the table's kernels of the nearest shapes join generation 0 (beside the prior's picks, in predicted order),
        # not the seeds timed ahead of it: a neighbour's winner can be slow here (they compile ahead meanwhile)
        # the tables read once, here: for this shape's neighbours and the next shapes' (compiled ahead, from a thread
        # that may still read them after this search has exported its own row)
        tables = (read_tables(Path(cfg.paths.out), info)
                  if not table_hash or (self.ahead is not None and self.next_problems) else [])
        near = (table_neighbours(Path(cfg.paths.out), info, fams, p, cfg.search.seed_winners - len(self.seed_sources),
                                 tables) if not table_hash else [])
        t = time.monotonic()
        guide = self._start_guide(fams, info, proposers)
        setup["the guide (prior, cost model)"], t = time.monotonic() - t, time.monotonic()
        if self.ahead is not None:
            if cfg.compile.ahead_baselines and cfg.search.library_seeds and self.next_problems:
                self._next_baselines(worker, info)
                setup["the next shapes' baselines"] = time.monotonic() - t
            self.ahead_queue = self._compile_ahead(fams, info, proposers, [x.source for x in near], tables)
        print("  setup: " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()), file=self.out, flush=True)
        run_id = store.start_run(p.key, gpu, cfg.to_dict())
        budget_s = cfg.search.budget_minutes * 60.0
        # the budget is the search's own time (propose, compile, check, time): it starts here, after the one-off
        # setup above (the GPU's ceilings, the baselines with cuBLASLt autotune, the prior's ranking), so a short
        # budget is not spent before any candidate is compiled
        t_search = time.monotonic()
        cublas = next((b for b in baselines if b.library == "cublas"), BaselineResult("cublas", 0.0))
        prog = Progress(budget_s=budget_s, stream=self.out, started=t_search,  # drift: beyond cuBLAS's own noise here
                        drift=DriftReference(tolerance(cfg.timing.drift_tol, cublas.spread)))
        prog.best_lib_us = best_lib
        if measured_now:  # cuBLAS timed a moment ago: a first estimate of the GPU's quiet speed (evo/drift.py)
            prog.drift.observe(cublas.time_us)
        rng = random.Random(cfg.search.seed * 7919 + len(store.individuals(p.key, p.layout, gpu, info.arch)))
        new_candidates = 0
        stalls = 0
        stop = ""

        def time_spent() -> str:
            return "time budget spent" if budget_s and time.monotonic() - t_search >= budget_s else ""

        def out_of_budget() -> str:
            if time_spent():
                return time_spent()
            if cfg.search.max_candidates and new_candidates + len(self.deferred) >= cfg.search.max_candidates:
                return "candidate budget spent"  # the deferred children are timed before the search stops
            if any(getattr(x, "exhausted", False) for x in proposers):
                return next((x.stop_reason for x in proposers if getattr(x, "exhausted", False) and getattr(x, "stop_reason", "")),
                            "LLM token/cost budget spent")
            return guide.stop_reason(time.monotonic() - t_search)  # converged: no gain beyond noise for a while

        individuals = store.individuals(p.key, p.layout, gpu, info.arch)
        self.resumed = bool(individuals)
        if individuals:
            best = next((i for i in individuals if i.correct), None)
            print(f"resuming: {len(individuals)} candidates already evaluated on {p.key} for this GPU"
                  + (f", best {best.time_us:.2f} us" if best else ""), file=self.out, flush=True)
            prog.best_us = best.time_us if best else 0.0
            if best:
                guide.note_best(0.0, best.time_us)
        seeds += [Proposal(src, "seed", (), "winner of another shape") for src in self.seed_sources]
        if cfg.search.library_seeds:  # the tile, cluster and split cuBLASLt runs here
            seeds += library_tile_proposals(p, baselines, fams)
        if cfg.search.transposed_seeds:  # what won N x M x K (in the archive or the table), transposed
            seeds += transposed_proposals(p, store, gpu, fams, published=self._published_transposed(info))
        self.neighbour_seeds = self.seed_sources + [x.source for x in near]
        if seeds:
            fresh = self._admit(seeds, gpu, len(seeds))
            if fresh:
                t_gen, best_before = time.monotonic(), prog.best_us  # gathering the seeds: Python while the GPU waits
                prog.line(f"timing {len(fresh)} seed kernels (the table's kernel for this shape and its rendering from today's "
                          "template, other GPUs' tables' kernels for it; winners of other shapes; cuBLASLt's tile for it; "
                          f"the transposed shape's fastest, transposed) before proposing anything new (gathered in "
                          f"{t_gen - t_search:.1f} s)")
                seeded = self._compile_and_evaluate(fresh, worker, info, prog, out_of_budget, run_id)
                guide.observe(seeded, time.monotonic() - t_gen, best_before, time.monotonic() - t_search)
        while not (stop := out_of_budget()) or prog.generation == 0:
            # the first generation runs even past the budget: its starts are timed (timed_past_budget), however long
            # the seeds took, and no shape ends without a kernel
            prog.generation += 1
            individuals = store.individuals(p.key, p.layout, gpu, info.arch)
            failures = [i for i in individuals if not i.correct][:20]
            island, pool = self.diversity.pool(individuals, prog.generation)
            ctx = ProposalContext(p, info.arch, info, fams, pool, baselines, rng, prog.generation, failures,
                                  known={i.hash for i in individuals} | {ks.hash for ks, _ in self.deferred},
                                  island=island)
            proposals: list[Proposal] = []
            counts = guide.propose_counts(proposers, split_children(cfg, proposers, cfg.search.children))
            for proposer, n in zip(proposers, counts):
                proposals += proposer.propose(ctx, n)
            proposals, near = proposals + near, []
            proposals = guide.choose(proposals, cfg.search.children)  # what is compiled: cost model + bandit
            limit = (cfg.search.max_candidates - new_candidates - len(self.deferred) if cfg.search.max_candidates
                     else len(proposals))
            fresh = self._admit(proposals, gpu, limit)
            if not fresh:
                stalls += 1
                if stalls >= 3:
                    why = [getattr(x, "stop_reason", "") for x in proposers]  # e.g. the LLM request limit, a failing endpoint
                    stop = next((w for w in why if w), "no new candidates (search space exhausted for these families)")
                    break
                continue
            stalls = 0
            t_gen, best_before = time.monotonic(), prog.best_us
            children = self._compile_and_evaluate(fresh, worker, info, prog, out_of_budget, run_id)
            guide.observe(children, time.monotonic() - t_gen, best_before, time.monotonic() - t_search)
            new_candidates += len(children)
            for proposer in proposers:
                proposer.observe(children)
            prog.line(prog.status())
        children = self._time_deferred(stop, worker, info, prog, time_spent, run_id) if self.deferred else []
        new_candidates += len(children)
        for proposer in proposers if children else []:
            proposer.observe(children)
        for proposer in proposers:
            if hasattr(proposer, "drop_pending"):
                proposer.drop_pending()
        prog.line(f"stopping: {stop}")
        summary = self._finish(worker, info, run_id, stop, prog, t_start, proposers, table_hash)
        return summary

    def _compile_ahead(self, fams: list[Family], info: GpuInfo, proposers: list, near: list[str],
                       published: list) -> threading.Thread | None:
        """Queue the background compiles, from a thread of its own (refitting the starts is seconds of Python that
        the seeds' timing need not wait for), earliest need first: this shape's family starts and `near`, the table's
        nearest rows' kernels rendered for it where the table lacks it (the first generation compiles both; the
        seeds, timed before it, may take a minute of CUTLASS compiles), then shape by shape the next shapes' seeds
        that do not depend on this search (the instances of their cuBLASLt tiles where the table or the archive
        knows them, the transposed shapes' fastest kernels with SWAP_AB flipped, the kernels the tables publish for
        them; their searches time them first), the table's nearest rows where it lacks them, and their starts. A
        sweep's search of a shape outside the table paused 27 s for a nearest row's CUTLASS kernel that nothing had
        compiled ahead (docs/perf-search.md). All of them go ahead of the compiles earlier searches queued that have not
        started, and carry this search's rank, its start time, so a later search's lists go ahead of these in turn.
        A shape's starts are refitted once in a sweep, by the first search that queues them: the priors keep the
        refits in the sweep's Enumerations (Prior.kept), so each later search, the shape's own included, queues the
        same list at its own rank, and its first generation reads them instead of refitting on the GPU's critical
        path. `published`: the kernel tables as read before the search (evo.proposers.neighbours.read_tables), which its
        own export rewrites while this thread may still be reading. Between this shape's starts and the next shapes'
        the thread also computes the prior's ranking of this shape, claimed for it (Prior.claim_rank): generation 0
        waits for that rather than ranking again. A failure is one log line: compiling ahead only saves time, it never
        ends a search."""
        mut = next((x for x in proposers if isinstance(x, MutateProposer)), None)
        problems = [self.problem] + self.next_problems
        try:  # what each shape has timed already, read here: the archive's connection belongs to this thread
            known = [{x.hash for x in self.store.individuals(q.key, q.layout, info.key, info.arch)} for q in problems]
            algorithms = [self._library_algorithms(info, q) for q in problems]
            transposed = [[x.source for x in transposed_proposals(q, self.store, info.key, fams,
                                                                   published=self._published_transposed(info, q))]
                          if i and self.cfg.search.transposed_seeds else [] for i, q in enumerate(problems)]
            # the archive's winners nearest to each next shape, its sweep's seeds (evo.sweep): the table's nearest rows
            # its generation 0 takes fill what they leave of search.seed_winners (this search's own winner may take one
            # more). Read here, checked on the thread (parsing them is ~4 ms a kernel); twice as many as the room, so
            # that those that do not accept the shape still leave a count (past them, a neighbour too many may compile)
            room, names = self.cfg.search.seed_winners, {f.name for f in fams}
            winners = [list(itertools.islice(nearest_winners(self.store, q, info.key), 2 * room))
                       for q in problems[1:]]
        except Exception as e:  # noqa: BLE001
            self._ahead_skipped(e)
            return None

        def starts(q: Problem, seen: set[str]) -> list[str]:
            ctx = ProposalContext(q, info.arch, info, fams, [], [], random.Random(0), known=seen)
            return [x.source for x in mut.starts(ctx)] if mut is not None else []

        def tables(q: Problem, archived: list[str]) -> list[str]:
            """Next shape q's kernels from the tables: its row's (its seeds), else the nearest rows' that its generation
            0 takes (evo.proposers.neighbours), as many as the archive's winners (`archived`) leave room for."""
            row, seeds = self._table_seeds(info, fams, q)
            if row:
                return [x.source for x in seeds]
            seeded = [src for src in serving(archived, q, info.arch, info.sm_count, room) if family_of(src) in names]
            near = table_neighbours(Path(self.cfg.paths.out), info, fams, q, room - len(seeded), published)
            return [x.source for x in seeds + near]

        rank = self.ahead_rank = time.monotonic()  # this search's compiles go ahead of those earlier searches queued

        def queue() -> None:
            # earliest need first: this shape's starts (its search times them before it stops, a CUTLASS one ~40-60 s
            # of nvcc), then each next shape's seeds and starts together, in the order the shapes come (a sweep's
            # shape waited 35-47 s for its refitted CUTLASS start queued behind the farther shape's library tiles,
            # docs/perf-search.md)
            try:
                self.ahead.submit(starts(problems[0], known[0]) + near, info.arch, rank)
            except Exception as e:  # noqa: BLE001
                self._ahead_skipped(e)
                return
            finally:
                ranking()  # generation 0's, claimed for this thread: after this shape's starts, before the next shapes'
            try:  # the next shapes', the farther ones too: a short search before a CUTLASS start left the GPU idle
                # 19-42 s waiting for one (docs/perf-search.md)
                for q, algos, flipped, seen, archived in zip(problems[1:], algorithms[1:], transposed[1:], known[1:],
                                                             winners):
                    seeds = ([x.source for x in algorithm_proposals(q, algos, fams)]
                             if self.cfg.search.library_seeds else []) + flipped
                    self.ahead.submit(seeds + tables(q, archived) + starts(q, seen), info.arch, rank)
            except Exception as e:  # noqa: BLE001
                self._ahead_skipped(e)

        t = threading.Thread(target=queue, name="evo-compile-ahead", daemon=True)
        # the prior's ranking of this shape (every family's sample sized: seconds of Python that left the GPU idle
        # before generation 0) is computed here too, while the seeds are timed; generation 0 waits for it
        ranking = mut.prior.claim_rank(self.problem, t) if mut is not None and mut.prior is not None else (lambda: None)
        try:
            t.start()
        except BaseException:
            ranking()  # no thread to release the claim: ranked here
            raise
        return t

    def _warm_checker(self, worker: GpuWorker, setup: dict[str, float]) -> None:
        """The checker's and timer's CuPy kernels compiled before the budget starts (Session.handle_warmup; once a
        worker process): on a bare machine the first candidate's evaluation took 28-50 s of NVRTC, inside the budget.
        A failure is one line: the first candidate then pays it, as before."""
        try:
            w = worker.call("warmup", timeout_s=600)
        except (EvoError, WorkerFault) as e:
            print(f"  the checker was not warmed up: {' '.join(str(e).split())[:200]}", file=self.out, flush=True)
            return
        if w["first"]:
            setup["the checker's first use"] = w["seconds"]
        if not w["ok"]:  # the reference product failed the checks: a defect of the checker, said, not hidden
            print(f"  warning: the exact product failed the checker's warm-up: {w['error'][:300]}", file=self.out, flush=True)

    def _ahead_skipped(self, e: Exception) -> None:
        print(f"  compiling ahead skipped: {' '.join(f'{type(e).__name__}: {e}'.split())[:200]}", file=self.out)

    def _table_algorithms(self, info: GpuInfo, q: Problem) -> list[tuple[str, dict]]:
        """The (library, cuBLASLt algorithm) pairs the table recorded for shape q (none without a row)."""
        row, _ = self._published_row(Path(self.cfg.paths.out) / info.key, q.key)
        return list(((row.library_algorithms or {}) if row is not None else {}).items())

    def _library_algorithms(self, info: GpuInfo, q: Problem) -> list[tuple[str, dict]]:
        """Shape q's cuBLASLt algorithms: the table's record, else what this archive's baselines of q carry."""
        table = self._table_algorithms(info, q)
        if table:
            return table
        timed = [(b.library, algorithm_from_detail(b.detail)) for b in self.store.baselines(q.key, q.layout, info.key)
                 if b.library.startswith("cublaslt")]
        return [(lib, algo) for lib, algo in timed if algo]

    def _next_baselines(self, worker, info: GpuInfo) -> None:
        """Time the libraries of the shapes searched next, where neither the table nor this archive knows their
        cuBLASLt algorithms yet: their library-tile seeds (CUTLASS instances of cuBLASLt's tile, ~40-60 s of nvcc
        each) then compile during this search instead of with the GPU idle at the start of theirs. Those searches
        find the baselines in the archive and do not time them again. A failure is one line; it never ends this search."""
        for q in self.next_problems:
            try:
                if self._table_algorithms(info, q) or self.store.baselines(q.key, q.layout, info.key):
                    continue
                print(f"  timing the next shape's baselines ({q.key}), so that its library seeds compile ahead",
                      file=self.out, flush=True)
                res = worker.call("baselines", timeout_s=600, problem=q)
                for b in res["results"].values():
                    self.store.add_baseline(q.key, q.layout, info.key, b)
            except Exception as e:  # noqa: BLE001  (its own search times them, and fails there if it must)
                print(f"  the next shape's baselines were not timed ahead: {type(e).__name__}: "
                      f"{' '.join(str(e).split())[:200]}", file=self.out)

    def _start_guide(self, fams: list[Family], info: GpuInfo, proposers: list):
        """The prior, the cost model (trained on the archive now), the bandit and the convergence rule (evo.guide);
        the mutate proposer gets the prior for generation 0 and cross-family moves, Optuna the viable families."""
        from .guide import Guide

        guide = Guide(self.cfg, fams, info, self.store, self.problem, self.cfg.search.seed, self.enumerations,
                      self.shared_model)
        for x in proposers:
            if isinstance(x, MutateProposer):
                x.prior, x.prior_top, x.fit_starts = guide.prior, self.cfg.search.prior_top, self.cfg.search.fit_starts
                x.predict = guide.tie_order()  # the prior's ties in generation 0
                x.prior_ties = self.cfg.search.prior_ties
            if hasattr(x, "only_families"):
                x.only_families = set(guide.viable_families())
        print(guide.intro(), file=self.out, flush=True)
        self.guide = guide
        return guide

    def _admit(self, proposals: list[Proposal], gpu: str, limit: int) -> list[tuple[KernelSource, Proposal]]:
        """Parse and de-duplicate proposals; store the new ones. Nothing already evaluated here is compiled or timed again."""
        fresh, seen = [], set()
        for prop in proposals:
            if len(fresh) >= limit:
                break
            try:
                ks = KernelSource.parse(prop.source)
            except EvoError as e:
                print(f"  rejected a {prop.proposer} proposal before compiling: {e}", file=self.out)
                continue
            if ks.hash in seen or self.store.evaluated(ks.hash, self.problem.key, self.problem.layout, gpu):
                continue
            if not ks.accepts(self.problem):
                continue  # e.g. a seed from another shape whose `requires` excludes this one
            seen.add(ks.hash)
            self.store.add_candidate(ks, ",".join(prop.parents), prop.proposer, prop.idea, prop.model)
            fresh.append((ks, prop))
        return fresh

    def _defer_slow(self, fresh: list, generation: int, arch: str, seconds: dict[str, float],
                    deadline: float = float("inf")) -> list:
        """What a generation compiles and times now: its kernels less those of a family whose median compile takes
        `compile.defer_s` or more (CUTLASS SM90) and not in the cache yet, which go to the background queue
        (self.ahead) and wait in self.deferred; plus the deferred ones that have landed in the cache since.
        - Children: as many wait as the background compiles at once (the rest are left out of the generation, as if
          not proposed, and so are those whose family's compile would end after the budget, at `deadline` on
          time.monotonic()'s clock).
        - Seeds and starts (timed_past_budget) all wait, in self.must_time: timed when they land, and before the search
          stops however it stops (but a refitted start still compiling then: _time_deferred). A fresh machine's
          CUTLASS seeds held the first generation ~80 s (docs/perf-search.md).
        Where nothing else would be timed meanwhile, nothing is deferred (the deferred ones are compiled here and
        waited for): a search of slow families only does not spin through generations. A resumed search's seed round
        of slow seeds alone (generation 0: its quick seeds were timed before it was killed) is deferred all the
        same where one of its families compiles quickly: the first generation's children, bred from what the
        archive holds, are timed meanwhile (a resumed sweep's shape took its first evaluation 48 s in,
        docs/perf-hopper.md Run 85). A fresh search's seed round is waited for: its first generation breeds from the
        seeds' times."""
        limit = self.cfg.compile.defer_s
        if not limit or self.ahead is None:
            return fresh
        room = getattr(self.ahead, "workers", 1)  # children pending at most what the background compiles at once
        landed = {ks.hash for ks, _ in self.deferred if self.compiler.is_cached(ks, arch)}
        ready = [kp for kp in self.deferred if kp[0].hash in landed]
        waiting = [kp for kp in self.deferred if kp[0].hash not in landed]
        pending = {ks.hash for ks, _ in self.deferred}
        now, later, must = [], [], []
        for ks, prop in fresh:
            if ks.hash in pending:
                continue
            slow = seconds.get(ks.meta.family, 0.0) >= limit and not self.compiler.is_cached(ks, arch)
            (now if not slow else must if timed_past_budget(prop, generation) else later).append((ks, prop))
        children_next = generation == 0 and self.resumed and must and not later and any(
            seconds.get(f, 0.0) < limit for f in self.family_names)  # quick children will be timed meanwhile
        if not now and not ready and not children_next:
            self.deferred = []
            return waiting + later + must
        left_s = deadline - time.monotonic() if later and deadline != float("inf") else float("inf")
        late = [kp for kp in later if seconds[kp[0].meta.family] > left_s]
        later = [kp for kp in later if seconds[kp[0].meta.family] <= left_s]
        children_waiting = sum(ks.hash not in self.must_time for ks, _ in waiting)
        later, dropped = later[:max(0, room - children_waiting)], later[max(0, room - children_waiting):]
        if dropped or late:  # not compiled: the background holds as many as it compiles at once, or they would land
            # after the budget (a sweep's next shapes need the background then)
            print(f"  {len(dropped) + len(late)} slow children left out of this generation ("
                  + ", ".join(([f"{room} compiling in the background"] if dropped else [])
                              + ([f"{len(late)} would compile past the budget"] if late else [])) + ")",
                  file=self.out, flush=True)
        # the seeds and starts go first; the children behind what the search queued ahead (the next shapes' starts,
        # which their searches time whatever happens, before a child this one may not get to time)
        for group, what, also, rank in ((must, "seeds or starts", " and before the search stops", None),
                                        (later, "children", "", self.ahead_rank)):
            if group:  # (the clock read only when needed: a sweep's test counts every read as a second)
                self.ahead.submit([ks.text for ks, _ in group], arch, time.monotonic() if rank is None else rank)
                fams = sorted({ks.meta.family for ks, _ in group})
                print(f"  {len(group)} {'/'.join(fams)} {what} compile in the background (~"
                      f"{max(seconds[f] for f in fams):.0f} s each); each is timed in the first generation after it "
                      f"lands{also}", file=self.out, flush=True)
        self.must_time |= {ks.hash for ks, _ in must}
        self.deferred = waiting + must + later
        return ready + now

    def _time_deferred(self, stop: str, worker: GpuWorker, info: GpuInfo, prog: Progress, time_spent,
                       run_id: int) -> list[Individual]:
        """When the search stops: the slow compiles still in the background (self.deferred), waited for as their
        generation would have. The seeds and starts among them (self.must_time) are timed however the search stopped
        (timed_past_budget), except a start the prior refitted to the shape whose compile has not landed where the
        time is spent or the search converged: an instance never measured, a guess as a child is (55 refitted
        CUTLASS starts in 35 searches of H200 sweeps: the three still in nvcc at the end held the GPU 7-44 s each and
        were 1.24-1.32x slower than their search's best; docs/perf-search.md). The children: all of them where the
        search stopped on a count (candidates, tokens); where its time budget is spent (time_spent(): a reason, or
        "") none; where it converged (no gain beyond its noise for a while) those already compiled, and no wait on
        nvcc for the rest (a converged 5-minute mission search held the GPU ~70 s for 14 CUTLASS children, all
        slower: docs/perf-search.md). Those left untimed that no worker has started are withdrawn from the queue (a
        sweep's next shapes need it); the running ones land in the cache, for the shape's next search."""
        late, self.deferred = self.deferred, []
        must = [kp for kp in late if kp[0].hash in self.must_time]
        rest = [kp for kp in late if kp[0].hash not in self.must_time]
        spent = bool(time_spent())
        converged = not spent and stop.startswith(Convergence.REASON)
        compiling = {ks.hash for ks, _ in late if not self.compiler.is_cached(ks, info.arch)} if spent or converged \
            else set()
        left = (rest if spent else [kp for kp in rest if kp[0].hash in compiling] if converged else [])
        if spent or converged:
            left += [kp for kp in must if is_fitted_start(kp[1]) and kp[0].hash in compiling]
        why = "time budget spent" if spent else "converged, still compiling"
        if left:
            n = self.ahead.withdraw({ks.hash for ks, _ in left}, info.arch) if self.ahead is not None else 0
            prog.line(f"{len(left)} slow compiles left untimed ({why}; {n} not started are dropped, "
                      "the running ones land in the cache)")
            gone = {ks.hash for ks, _ in left}
            must = [kp for kp in must if kp[0].hash not in gone]
            rest = [kp for kp in rest if kp[0].hash not in gone]
        if not (must or rest):
            return []
        prog.line(f"timing the {len(must) + len(rest)} slow compiles left in the background before stopping ({stop})"
                  + (f"; {len(must)} of them seeds or starts, timed past the budget" if must else ""))
        return self._compile_and_evaluate(must + rest, worker, info, prog, time_spent, run_id, defer=False)

    def _past_budget(self, ks: KernelSource, prop: Proposal, generation: int) -> bool:
        """Timed past the budget: a seed or start in its own generation, or one deferred from it (self.must_time)."""
        return timed_past_budget(prop, generation) or ks.hash in self.must_time

    def _compile_and_evaluate(self, fresh, worker: GpuWorker, info: GpuInfo, prog: Progress, out_of_budget, run_id: int,
                              defer: bool = True) -> list[Individual]:
        store = self.store
        seconds = {**self.typical_compile_s, **store.compile_seconds(info.arch)}  # the archive's medians first
        if defer:  # a child that takes a minute of nvcc does not hold the GPU idle: it is timed a generation later
            deadline = prog.started + prog.budget_s if prog.budget_s else float("inf")
            fresh = self._defer_slow(fresh, prog.generation, info.arch, seconds, deadline)
        # quick compiles first (stable within a family): with results handed over as they finish, the first
        # candidates are timed within seconds while a family that takes a minute per instance (CUTLASS) compiles
        fresh = quick_compiles_first(fresh, seconds)
        items = [(ks, info.arch) for ks, _ in fresh]
        by_hash = {ks.hash: (ks, prop) for ks, prop in fresh}
        children: list[Individual] = []
        starts_left = {ks.hash for ks, prop in fresh if self._past_budget(ks, prop, prog.generation)}

        def compiled(r: CompileResult) -> None:
            # each candidate is evaluated as soon as its compile finishes (in the order compiles finish), while others compile
            store.add_compile(r)
            starts_left.discard(r.hash)
            ks, prop = by_hash[r.hash]
            child = self._evaluate_compiled(ks, prop, r, worker, info, prog, out_of_budget, run_id)
            if child is not None:
                children.append(child)

        def stop() -> bool:
            # the budget is spent and a kernel is correct: the compiles still queued or running are dropped, not
            # waited for with the GPU idle (a generation of CUTLASS instances overran a 0.3-minute budget by ~40 s);
            # what is timed past the budget (timed_past_budget) is still compiled
            return bool(out_of_budget()) and bool(prog.best_us) and not starts_left

        self.compiler.compile_many(items, self.cfg.compile.jobs, on_done=compiled, stop=stop)
        return children

    def _evaluate_compiled(self, ks: KernelSource, prop: Proposal, r: CompileResult, worker: GpuWorker, info: GpuInfo,
                           prog: Progress, out_of_budget, run_id: int) -> Individual | None:
        p, store, gpu = self.problem, self.store, info.key
        if not r.ok:
            prog.compile_failed += 1
            ev = EvalResult(ks.hash, False, "compile", r.error)
        elif out_of_budget() and prog.best_us and not self._past_budget(ks, prop, prog.generation):
            return None  # compiled and cached before the compiles were stopped; a later run evaluates it
        else:
            prog.compiled += 1
            try:
                ev = worker.call("evaluate", timeout_s=self.cfg.timing.timeout_s, problem=p, source=ks.text,
                                 cubin=r.cubin_path, h=ks.hash, bound_us=info.extra.get("roofline_us", 0.0),
                                 screen_reps=self.cfg.search.screen_reps, screen_vs_us=prog.best_us,  # staged timing
                                 cublas_ref_us=prog.drift.ref_us,  # a window where the GPU ran slow: timed again
                                 drift_tol=prog.drift.tol)
            except WorkerFault as e:
                ev = EvalResult(ks.hash, False, "crash" if "crash" in str(e) else "timeout", str(e))
            except EvoError as e:
                ev = EvalResult(ks.hash, False, "check", str(e))
        store.add_evaluation(p.key, p.layout, gpu, ev, info.cuda_runtime, info.driver, run_id)
        if ev.ok:
            prog.correct += 1
            mark = ""
            if ev.measured_us:
                prog.drift.corrected += 1
                slow = f"{ev.cublas_us / prog.drift.ref_us:.2f}x" if prog.drift.ref_us > 0 else "slower than"
                mark = f"  (timed twice while cuBLAS ran {slow} its quiet time: measured {ev.measured_us:.2f} us, scaled)"
            elif ev.gpu_state:
                mark = "  (a first window ran slow; timed again, the quiet window kept)"
            if ev.gpu_state:
                prog.drift.note_state(ev.gpu_state)
            prog.drift.observe(ev.cublas_us)
            if not prog.best_us or ev.time_us < prog.best_us:
                prog.best_us = ev.time_us
                mark += "  * new best"
            elif ev.stage == "screened":
                mark += "  (screened: clearly slower than the best, not timed in full)"
            if ev.gpu_state:  # on a line of its own, under the candidate's
                mark += f"\n      the GPU after the slow window: {ev.gpu_state}"
            prog.event(f"{ks.hash[:10]} {ks.meta.family:<12} {prop.proposer:<6} {ev.time_us:9.2f} us  {p.tflops(ev.time_us):6.1f} TFLOP/s  "
                       f"cuBLAS {ev.cublas_us:.2f} us ({ev.cublas_us / ev.time_us:.2f}x){mark}")
        elif ev.stage != "compile":
            prog.failed += 1
            prog.event(f"{ks.hash[:10]} {ks.meta.family:<12} {prop.proposer:<6} rejected at {ev.stage}: {ev.error[:140]}")
        else:
            prog.event(f"{ks.hash[:10]} {ks.meta.family:<12} {prop.proposer:<6} compile failed: {ev.error[:140]}")
        return Individual(hash=ks.hash, family=ks.meta.family, params=ks.meta.params, source=ks.text,
                          parent=",".join(prop.parents), proposer=prop.proposer, idea=prop.idea,
                          compiled=r.ok, correct=ev.ok, time_us=ev.time_us, cublas_us=ev.cublas_us,
                          error=ev.error, registers=r.registers, smem=r.smem_static,
                          compile_log=r.log if not r.ok else "")

    def _table_seeds(self, info: GpuInfo, fams: list[Family], q: Problem) -> tuple[str, list[Proposal]]:
        """Shape q's seeds from the tables: the kernel this GPU's table publishes for it and its rendering from today's
        template, and what the other GPUs' tables publish for it, even where this GPU has a row (all only where the
        search races the table's kernel, search.runoff > 1). Returns (this GPU's row's hash or '', the seeds)."""
        if self.cfg.search.runoff <= 1:
            return "", []
        table_hash, table_src = self._published(info, q)
        seeds = [Proposal(table_src, "seed", (), "the table's kernel for this shape")] if table_src else []
        return table_hash, seeds + self._rerendered_seed(table_src, fams, q) + self._other_gpus_seeds(info, fams, q)

    def _rerendered_seed(self, table_src: str, fams: list[Family], q: Problem) -> list[Proposal]:
        """The table's kernel for shape q rendered from today's template of its family, where that differs (the
        template improved since it was found): timed beside it, so a search takes the improvement up."""
        if not table_src:
            return []
        try:
            old = KernelSource.parse(table_src)
            new = rerendered(old, fams, q)
        except EvoError:
            return []
        return [] if new.hash == old.hash else [Proposal(new.text, "seed", (old.hash,),
                                                         "the table's kernel rendered from today's template")]

    def _other_gpus_seeds(self, info: GpuInfo, fams: list[Family], q: Problem) -> list[Proposal]:
        """The kernels other GPUs' tables in paths.out publish for shape q (in this run's families, claiming this GPU's
        arch), each as published and as rendered from today's template, timed here like any seed. A first search on a new
        GPU starts from what the others found; a GPU whose row predates another GPU's find races it too (the H200's
        K = 128 rows gained 3-5 % from the H100's row-panel kernels, docs/perf-output-bound.md). Kernels already
        evaluated here are not timed again."""
        out: list[Proposal] = []
        root = Path(self.cfg.paths.out)
        names = {f.name for f in fams}  # this run's families only (--families: no other family's compile to wait for)
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != info.key) if root.is_dir() else []:
            h, text = self._published_in(folder, q)
            meta = KernelSource.parse(text).meta if text else None
            if meta is None or info.arch not in meta.archs or meta.family not in names:
                continue
            out.append(Proposal(text, "seed", (), f"the {folder.name} table's kernel for this shape"))
            out += self._rerendered_seed(text, fams, q)
        return out

    def _published(self, info: GpuInfo, q: Problem) -> tuple[str, str]:
        """The kernel this GPU's table in paths.out publishes for shape q: (hash, source text), ('', '') if none; the
        text is '' where its file is missing or is not that kernel."""
        return self._published_in(Path(self.cfg.paths.out) / info.key, q)

    def _published_transposed(self, info: GpuInfo, problem: Problem | None = None) -> list[Sample]:
        """The table's kernel for the transposed shape N x M x K of this shape or `problem` (none where the table
        lacks it or its file)."""
        shape = transposed_shape(problem or self.problem)
        row, text = self._published_row(Path(self.cfg.paths.out) / info.key, shape) if shape else (None, "")
        if row is None or not text:
            return []
        meta = KernelSource.parse(text).meta
        return [Sample(shape, row.hash, meta.family, dict(meta.params), row.time_us)]

    def _published_in(self, table_dir: Path, q: Problem) -> tuple[str, str]:
        row, text = self._published_row(table_dir, q.key)
        return (row.hash, text) if row is not None else ("", "")

    def _published_row(self, table_dir: Path, shape: str):
        """The table row for `shape` (this layout) and its kernel's text: (None, '') if none; the text is '' where
        its file is missing or is not that kernel."""
        from .export import published_kernel, read_table

        try:
            _, rows = read_table(table_dir)
        except EvoError:
            return None, ""
        row = next((r for r in rows if r.shape == shape and r.layout == self.problem.layout and r.hash), None)
        if row is None:
            return None, ""
        try:
            text = published_kernel(table_dir.parent, row).text
        except EvoError:
            text = ""
        return row, text

    def _runoff(self, worker, info: GpuInfo, run_id: int, table_hash: str, quiet_cublas_us: float = 0.0,
                drift_tol: float | None = None) -> tuple[dict, list[str]]:
        """The archive's search.runoff fastest kernels of the shape, the fastest of this run and the kernel the table
        publishes for the shape now (`table_hash`, if the archive holds it), timed side by side with every baseline in one window
        (search.confirm_reps flushed repetitions, every call checked): stored times come from different runs, and a
        lucky one must not keep a kernel that is slower here. A contender whose output is wrong there is recorded
        as rejected. A window where cuBLAS ran more than `drift_tol` (the shape's tolerance, evo.drift.tolerance;
        None: timing.drift_tol) slower than `quiet_cublas_us` (this run's quiet cuBLAS time) is timed once more, and
        the less drifted of the two is kept. Returns the window's results (by hash and library) and the correct
        contenders' hashes, fastest first."""
        p, store = self.problem, self.store
        n = max(1, self.cfg.search.runoff)
        fastest = store.fastest(p.key, p.layout, info.key, 3 * n)  # 3 x: the long calls' look beyond the first n
        rows = fastest[:n]
        if n > 1:
            rows += store.fastest(p.key, p.layout, info.key, 1, run_id=run_id)
            row = store.kernel_row(table_hash, p.key, p.layout, info.key) if table_hash else None
            rows += [row] if row is not None else []
            sus = self.cfg.search.sustained_from_us
            if sus and fastest and fastest[0]["time_us"] >= sus:  # long calls (see _sustained_order): every kernel of
                # the 3 x runoff fastest whose stored time is inside the noise floor of the stored best races too;
                # near-copies of one kernel can fill the first places, and another structure tied with them must race
                rows += [r for r in fastest[n:] if r["time_us"] <= fastest[0]["time_us"] * (1.0 + self.cfg.dispatch.noise_floor)]
        rows = list({r["hash"]: r for r in rows}.values())  # first occurrence kept: stored-time order, then the rest
        if not rows:
            return {}, []
        what = (f"the best kernel {rows[0]['hash'][:10]}" if len(rows) == 1 else
                f"the {len(rows)} fastest kernels ({', '.join(r['hash'][:10] for r in rows)})")
        print(f"re-timing {what} side by side with every baseline ({self.cfg.search.confirm_reps} flushed repetitions)...",
              file=self.out, flush=True)
        def window() -> dict:
            return worker.call("baselines", timeout_s=900, problem=p, extra=extra, reps=self.cfg.search.confirm_reps,
                               bound_us=info.extra.get("roofline_us", 0.0))["results"]

        timings: dict = {}
        while rows and not timings:
            try:
                extra = {r["hash"]: (r["source"], stored_cubin(self.compiler, store, r["source"], info.arch)) for r in rows}
                timings = window()
            except (WorkerFault, EvoError) as e:  # one contender that cannot load must not cost the others the re-timing
                print(f"  re-timing failed: {e}" + ("; again with the stored best alone" if len(rows) > 1 else ""), file=self.out)
                rows = rows[:1] if len(rows) > 1 else []
        if not timings:
            return {}, []

        def cublas_us(w: dict) -> float:
            return w["cublas"].time_us if "cublas" in w else 0.0

        windows = [timings]  # a contender wrong in any window is rejected, whichever window's times are kept
        tol = self.cfg.timing.drift_tol if drift_tol is None else drift_tol
        if drifted(cublas_us(timings), quiet_cublas_us, tol):
            print(f"  cuBLAS ran {cublas_us(timings) / quiet_cublas_us:.2f}x its quiet time of this run in that window (the "
                  "GPU ran slow): timed once more", file=self.out, flush=True)
            print(f"  the GPU after the slow window: {describe_state(gpu_state_now(worker))}", file=self.out, flush=True)
            try:
                windows = retimed(timings, window, cublas_us, quiet_cublas_us, tol)
            except (WorkerFault, EvoError) as e:
                print(f"  the second window failed ({e}); the first is kept", file=self.out)
        timings = windows[0]
        failed = {h: w[h].detail for w in reversed(windows) for h in extra if h in w and w[h].detail.startswith("WRONG")}
        wrong = [h for h in extra if h in failed]
        for h in wrong:
            print(f"  {h[:10]} failed its check in the re-timing: {failed[h]}", file=self.out)
            store.add_evaluation(p.key, p.layout, info.key, EvalResult(h, False, "confirm", failed[h][:500]),
                                 info.cuda_runtime, info.driver, run_id)
        ranked = sorted((h for h in extra if h in timings and timings[h].time_us > 0 and h not in wrong),
                        key=lambda h: timings[h].time_us)
        if len(rows) > 1 and ranked:
            print("  runoff: " + ", ".join(f"{h[:10]} {timings[h].time_us:.2f} us" for h in ranked), file=self.out, flush=True)
        return timings, ranked

    def _sustained_order(self, worker, info: GpuInfo, run_id: int, timings: dict, ranked: list[str]) -> list[str]:
        """The runoff's order, with the kernels that tie the fastest cold reordered by SM cycles per call under
        sustained load (fewest first, where one takes search.sustained_margin fewer than the cold fastest), where the
        fastest takes search.sustained_from_us or more: at that size a
        call holds the board at its power cap, the clock drops, and a harness that interleaves contenders sees
        their cycles, not their times at full clock (evo/sustained.py). The published time stays the cold one.
        Each tie runs search.sustained_seconds back to back, search.sustained_rounds times; one whose output is
        wrong afterwards is rejected. Nothing changes where fewer than two kernels tie, or the windows fail."""
        from .sustained import REST_S, fewest_cycles_first, tied_cold

        s, p, store = self.cfg.search, self.problem, self.store
        if not s.sustained_from_us or len(ranked) < 2 or timings[ranked[0]].time_us < s.sustained_from_us:
            return ranked
        cold = {h: timings[h].time_us for h in ranked}
        tied = tied_cold(ranked, cold, {h: timings[h].spread for h in ranked}, self.cfg.dispatch.noise_floor)
        if len(tied) < 2:
            return ranked
        print(f"under sustained load: the {len(tied)} kernels that tie the fastest cold ({', '.join(h[:10] for h in tied)}), "
              f"{s.sustained_seconds:g} s back to back each, {s.sustained_rounds} rounds...", file=self.out, flush=True)
        try:
            rows = {h: store.kernel_row(h, p.key, p.layout, info.key) for h in tied}
            extra = {h: (r["source"], stored_cubin(self.compiler, store, r["source"], info.arch)) for h, r in rows.items()}
            got = worker.call("sustained", timeout_s=120 + len(tied) * s.sustained_rounds * (s.sustained_seconds + REST_S) * 3,
                              problem=p, extra=extra, seconds=s.sustained_seconds, rounds=s.sustained_rounds, rest=REST_S)
        except (WorkerFault, EvoError) as e:
            print(f"  the sustained windows failed ({e}); the cold order stands", file=self.out, flush=True)
            return ranked
        wrong = [h for h in tied if got.get(h, {}).get("detail", "").startswith("WRONG")]
        for h in wrong:
            print(f"  {h[:10]} failed its check after the sustained windows: {got[h]['detail']}", file=self.out)
            store.add_evaluation(p.key, p.layout, info.key, EvalResult(h, False, "sustained", got[h]["detail"][:500]),
                                 info.cuda_runtime, info.driver, run_id)
        for h in tied:
            if h in got and h not in wrong:
                g = got[h]
                clock = f" at {g['sm_mhz']:.0f} MHz, {g['kcycles']:.1f} k cycles a call" if g["kcycles"] > 0 else " (no clock reading)"
                print(f"  {h[:10]}: {cold[h]:.2f} us cold, {g['us']:.2f} us a call back to back{clock}", file=self.out)
        order = fewest_cycles_first([h for h in ranked if h not in wrong], [h for h in tied if h not in wrong],
                                    {h: got[h]["kcycles"] for h in got if h not in wrong}, s.sustained_margin)
        if order and order[0] != ranked[0]:
            print(f"  {order[0][:10]} goes first: fewest cycles a call where the cold times tie", file=self.out, flush=True)
        return order

    def _finish(self, worker, info: GpuInfo, run_id: int, stop: str, prog: Progress, t_start: float, proposers,
                table_hash: str = "") -> SearchSummary:
        from .export import export_table, row_for
        from .sanitize import vet_champion

        p, store, gpu = self.problem, self.store, info.key
        summary = SearchSummary(p, info.name, generations=prog.generation, stop_reason=stop)
        timings, ranked = self._runoff(worker, info, run_id, table_hash, prog.drift.ref_us, prog.drift.tol)
        ranked = self._sustained_order(worker, info, run_id, timings, ranked)
        summary.drift_scaled, summary.drift_states = prog.drift.corrected, list(prog.drift.states)
        summary.table_hash = table_hash
        summary.table_us = timings[table_hash].time_us if table_hash in ranked else 0.0
        # re-check (+ sanitizer) before export, in the runoff's order (by stored time where there was none)
        best = vet_champion(worker, store, self.compiler, p, info, self.cfg, self.out, run_id, order=ranked or None)
        if best is not None and best["hash"] in ranked:
            mine = timings[best["hash"]]
            libs = {k: v.time_us for k, v in timings.items() if k in LIBRARIES}
            store.set_confirm(p.key, p.layout, gpu, best["hash"], mine.time_us, mine.spread, libs, run_id)
            for lib in libs:  # the libraries as re-timed beside the champion: their spreads make its noise band,
                if timings[lib].time_us > 0:  # their algorithms are what won
                    store.add_baseline(p.key, p.layout, gpu, timings[lib])
        # the table's kernel for the shape, if it ran in the runoff, was compared side by side: no older ratio keeps it
        out_dir, rows = export_table(store, gpu, self.cfg.paths.out, p.layout, only={p.key}, raced={p.key: set(ranked)})
        row = next((r for r in rows if r.shape == p.key), None)
        kept = None
        if row is not None and best is not None and row.hash and row.hash != best["hash"]:
            # the table kept a kernel measured faster against the libraries than this search's best
            kept = row
            row = row_for(store, p, gpu, Path(self.cfg.paths.out), store.ceilings(gpu), write=False)
        counts = store.counts(p.key, p.layout, gpu, info.arch)
        summary.compiled, summary.correct, summary.rejected = counts["compiled"], counts["correct"], counts["rejected"]
        summary.compile_failed = prog.compile_failed
        summary.seconds = time.monotonic() - t_start
        summary.export_dir = str(out_dir)
        summary.proposer_lines = [l for x in proposers if hasattr(x, "summary_lines") for l in x.summary_lines()]
        summary.proposer_lines += self.guide.lines() if self.guide is not None else []
        if row:
            summary.best_hash, summary.best_us = row.hash, row.time_us
            summary.baselines = {"cublas": row.cublas_us, "cublaslt_heuristic": row.cublaslt_heuristic_us,
                                 "cublaslt_autotune": row.cublaslt_autotune_us}
            summary.verdict, summary.noise_band = row.verdict, row.noise_band
            summary.kernel_path = str(Path(self.cfg.paths.out) / row.kernel_path) if row.kernel_path and kept is None else ""
        store.finish_run(run_id, "done", {"best": summary.best_hash, "best_us": summary.best_us, "stop": stop,
                                          "seconds": summary.seconds})
        print_table(summary, row, self.out, info)
        if kept is not None:
            print(f"the table keeps its kernel {kept.hash[:10]} ({kept.family}, {kept.speedup_best_library:.3f}x the best library "
                  f"in its run) for this shape: this search's best was {row.speedup_best_library if row else 0.0:.3f}x; "
                  f"its source is {Path(self.cfg.paths.out) / kept.kernel_path}", file=self.out)
        return summary


def add_llm_flags(ap) -> None:
    ap.add_argument("--llm-url", help="OpenAI-compatible endpoint for --proposer llm (default $OPENAI_BASE_URL or llm.endpoints)")
    ap.add_argument("--llm-model", help="model served there (default: llm.model, else each llm.endpoints model, "
                    "else $EVO_LLM_MODEL)")
    ap.add_argument("--llm-key-env", help="environment variable holding its API key (default EVO_LLM_API_KEY, then OPENAI_API_KEY)")


def apply_llm_flags(cfg: Config, args) -> None:
    for flag, key in (("llm_url", "url"), ("llm_model", "model"), ("llm_key_env", "key_env")):
        if getattr(args, flag, None):
            setattr(cfg.llm, key, getattr(args, flag).strip())


def llm_preflight(cfg: Config) -> bool:
    """With the llm proposer: one tiny chat request per endpoint, before the GPU is looked at (EvoError, one line,
    on a wrong path, key, model or host). True when it was sent."""
    if "llm" not in cfg.search.proposers:
        return False
    from .proposers.llm import LlmProposer

    p = LlmProposer.from_config(cfg)
    try:
        for r in p.check_endpoints():
            print(f"LLM endpoint {r.base_url} ({r.model}) answered a preflight chat request in {r.seconds:.1f} s",
                  flush=True)
    finally:
        p.close()
    return True


def cfg_names(cfg: Config) -> list[str]:
    return [f for f in cfg.search.families if f]


def versus_table(best_hash: str, best_us: float, table_hash: str, table_us: float) -> str:
    """What became of the kernel the table published for a shape before its search, in the final runoff's side-by-side
    times: "stays" (still the fastest), "did not race" (not correct here, or not timed), or "T -> B us (Rx)", the
    table's kernel against the search's best; "" where the table had no row."""
    if not table_hash:
        return ""
    if best_hash == table_hash:
        return "stays"
    if not (table_us and best_us):
        return "did not race"
    return f"{table_us:.2f} -> {best_us:.2f} us ({table_us / best_us:.3f}x)"


def print_table(s: SearchSummary, row, out, info: GpuInfo) -> None:
    p = s.problem
    print(f"\n{p.key} on {info.name} (driver {info.driver}, CUDA {info.cuda_runtime}); "
          f"timings are medians of L2-flushed device time, measured side by side", file=out)
    print(f"{'':<22}{'us':>10}{'TFLOP/s':>10}{'evo speedup':>13}{'% roofline':>12}", file=out)
    roof = row.roofline_us if row else 0.0
    lines = [("evo best (" + (row.family if row and row.family else "none") + ")", s.best_us)]
    lines += [(k, v) for k, v in s.baselines.items()]
    for name, us in lines:
        if not us:
            print(f"{name:<22}{'-':>10}", file=out)
            continue
        sp = f"{us / s.best_us:.3f}x" if s.best_us and name != lines[0][0] else ""
        pct = f"{100 * roof / us:.1f}" if roof else ""
        print(f"{name:<22}{us:>10.2f}{p.tflops(us):>10.1f}{sp:>13}{pct:>12}", file=out)
    print(f"candidates on this shape: {s.compiled} compiled, {s.correct} correct, {s.rejected} rejected "
          f"({s.compile_failed} compile failures this run); {s.generations} generations in {s.seconds / 60:.1f} min; "
          f"stopped: {s.stop_reason}", file=out)
    if s.drift_scaled:
        print(f"timing drift: {s.drift_scaled} candidates were timed in two windows where cuBLAS beside them ran more than "
              "timing.drift_tol (or cuBLAS's own spread on the shape, where wider) slower than its quiet time of this run; "
              "their times were scaled to it (evo/drift.py)", file=out)
    for state in s.drift_states:
        print(f"the GPU after a slow timing window: {state}", file=out)
    for line in s.proposer_lines:
        print(line, file=out)
    if s.table_hash:
        print(f"the table's kernel {s.table_hash[:10]} for this shape, in the runoff beside this search's best: "
              + versus_table(s.best_hash, s.best_us, s.table_hash, s.table_us), file=out)
    if s.kernel_path:
        print(f"exported kernel: {s.kernel_path}\ntable: {s.export_dir}/table.csv", file=out)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m evo.search", "Search the fastest HGEMM kernel for one shape.")
    ap.add_argument("--shape", required=True, help="MxNxK (or M,N,K): C[M,N] = A[M,K] B[N,K]^T")
    ap.add_argument("--budget-minutes", type=float, help="wall-clock budget of the search itself, after the baselines "
                    "are timed (default from config: 10)")
    ap.add_argument("--max-candidates", type=int, help="stop after this many new candidates")
    ap.add_argument("--proposer", help="comma list: mutate, optuna, llm (default mutate)")
    ap.add_argument("--compile-only", action="store_true", help="compile the initial population, no GPU needed")
    ap.add_argument("--arch", default="sm_90a", help="with --compile-only: sm_80 or sm_90a")
    add_llm_flags(ap)
    args = ap.parse_args(argv)
    require_positive(args.budget_minutes, "--budget-minutes")
    require_positive(args.max_candidates, "--max-candidates")
    problem = parse_shape(args.shape)
    cfg = config_from_args(args, {"budget_minutes": args.budget_minutes, "max_candidates": args.max_candidates,
                                  "proposers": args.proposer.split(",") if args.proposer else None})
    apply_llm_flags(cfg, args)
    search = Search(problem, cfg)
    if args.compile_only:
        results = search.compile_only(args.arch)
        return 0 if results and all(r.ok for r in results) else 1
    load_families(search.templates, cfg_names(cfg))  # unknown family names fail before the GPU is touched
    search.llm_checked = llm_preflight(cfg)  # a wrong endpoint ends here, GPU or not
    require_gpu(COMPILE_ONLY_HINT)  # no GPU: one line, before anything else is printed
    summary = search.run()
    return 1 if summary.stop_reason.startswith("LLM endpoint failing") else 0  # the run's proposer broke: say so to scripts


if __name__ == "__main__":
    sys.exit(main())
