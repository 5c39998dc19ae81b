"""Compiles ahead of the search (evo.compile_ahead): the background queue, the shared cache and lock, what a search
and a sweep (one GPU or several) queue there."""
import io
import os
import random
import threading
import time
from pathlib import Path

import pytest

from evo.compile import CANCELLED, Compiler
from evo.compile_ahead import CompileAhead
from evo.config import load_config
from evo.families import load_families
from evo.kernel import KernelSource
from evo.prior import GpuSpec, Prior
from evo.problem import Problem, parse_shape
from evo.proposers.base import ProposalContext, is_start
from evo.proposers.mutate import MutateProposer
from evo.records import CompileResult
from evo.select import Selector

from fakes import FakeCompiler, FakeWorker

DATA = Path(__file__).parent / "data"
TOY = DATA / "families"


def _compiler(tmp_path, nvcc="/bin/false") -> Compiler:
    return Compiler(nvcc=nvcc, flags=(), include_dirs=(), cache_dir=tmp_path / "cache", timeout_s=60, memory_mb=0,
                    reject_spills=True, ptx_checks=False)


def test_a_compile_waiting_for_another_threads_compile_of_the_same_code_stops_when_cancelled(tmp_path, naive_source):
    # the search's compile of a kernel the background is compiling waits for it (one nvcc run), but a search whose
    # budget is spent does not: its cancel ends the wait at once
    comp = _compiler(tmp_path)
    ks = KernelSource.parse(naive_source)
    lock = comp._key_lock(comp.key(ks, "sm_80"))
    lock.acquire()  # the background's compile of the same code, still running
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    got = []
    t = threading.Thread(target=lambda: got.append(comp.compile(ks, "sm_80", cancel=cancel)), daemon=True)
    t.start()
    t.join(3)
    returned = list(got)  # while the other compile still holds the lock
    lock.release()
    t.join(3)
    assert returned and returned[0].error == CANCELLED
    assert not list((tmp_path / "cache").rglob("*.json"))  # returned before compiling anything


def test_the_background_compiles_once_per_kernel_and_fills_the_cache(tmp_path, naive_source):
    calls = []

    class Counting(Compiler):
        def _compile(self, ks, arch, key, cancel=None):
            calls.append(key)
            return CompileResult(ks.hash, arch, True, cubin_path="x", cached=len(calls) > 1)

    comp = Counting(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                    reject_spills=True, ptx_checks=False)
    other = naive_source.replace("---*/", "# another launch rule\nworkspace: 16\n---*/", 1)
    ahead = CompileAhead(comp, jobs=4)
    assert ahead.workers == 4  # as many as the search's compile jobs (at a lower priority)
    assert ahead.submit([naive_source, naive_source, other], "sm_80") == 2  # a text queued before is not again
    assert ahead.submit([naive_source], "sm_80") == 0
    assert ahead.submit([naive_source], "sm_70") == 0  # an arch the family does not claim
    ahead.wait(10)
    assert ahead.counts.submitted == 2 and ahead.counts.compiled + ahead.counts.cached == 2
    ahead.close()
    assert "2 kernels submitted" in ahead.counts.line()


def test_a_failed_background_compile_is_named_once_in_the_log_of_the_search_that_follows(tmp_path):
    from evo.search import Search

    (toy,) = load_families(TOY)
    bad, good = toy.render({"TILE": 32, "UNROLL": 1, "PAD": 0}), toy.render({"TILE": 8, "UNROLL": 1, "PAD": 0})
    ahead = CompileAhead(FakeCompiler(), jobs=1)  # FakeCompiler fails TILE 32
    ahead.submit([bad.text, good.text], "sm_80")
    ahead.wait(10)
    assert ahead.counts.failed == 1 and ahead.counts.compiled == 1
    logs = []
    for shape in ("256x256x256", "512x256x128"):
        out = io.StringIO()
        Search(parse_shape(shape), _cfg(tmp_path / shape), out=out, worker_factory=FakeWorker, compiler=FakeCompiler(),
               ahead=ahead).run()
        logs.append(out.getvalue())
    ahead.close()
    line = f"compiled ahead, failed: {bad.hash[:10]} toy: error: too many resources requested"
    assert line in logs[0] and "compiled ahead, failed" not in logs[1]  # named once, by the next log written
    assert good.hash[:10] not in logs[0]


def test_a_higher_rank_goes_ahead_of_the_compiles_still_waiting(tmp_path, naive_source):
    """A later search's lists (a higher rank) go ahead of what earlier searches queued and no worker has started;
    those go back behind them in their order, a kernel of both once, in the new list's place; the compile running is
    left alone; lists of one rank keep their order."""
    order, gate = [], threading.Event()

    class Gated(Compiler):
        def _compile(self, ks, arch, key, cancel=None):
            order.append(ks.hash)
            gate.wait(10)  # the first compile holds the one worker until the rest are queued
            return CompileResult(ks.hash, arch, True, cubin_path="x")

    comp = Gated(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                 reject_spills=True, ptx_checks=False)
    a, b, c, d, e = (naive_source.replace("---*/", f"# kernel {i}\nworkspace: {16 * (i + 1)}\n---*/", 1) for i in range(5))
    h = {name: KernelSource.parse(t).hash for name, t in zip("abcde", (a, b, c, d, e))}
    ahead = CompileAhead(comp, jobs=1)  # one worker
    assert ahead.submit([a, b, c], "sm_80") == 3
    deadline = time.monotonic() + 5
    while not order and time.monotonic() < deadline:  # a is running
        time.sleep(0.01)
    assert ahead.submit([d, c], "sm_80", rank=1.0) == 1  # c was queued before: not new
    assert ahead.submit([e], "sm_80", rank=1.0) == 1  # the same rank: behind d and c, still ahead of b
    gate.set()
    ahead.wait(10)
    assert order == [h["a"], h["d"], h["c"], h["e"], h["b"]]
    assert ahead.snapshot().submitted == 5 and ahead.snapshot().compiled == 5
    ahead.close()


def test_withdraw_drops_the_named_compiles_not_started_and_lets_them_come_back(tmp_path, naive_source):
    order, gate = [], threading.Event()

    class Gated(Compiler):
        def _compile(self, ks, arch, key, cancel=None):
            order.append(ks.hash)
            gate.wait(10)
            return CompileResult(ks.hash, arch, True, cubin_path="x")

    comp = Gated(nvcc="/bin/false", flags=(), include_dirs=(), cache_dir=tmp_path, timeout_s=5, memory_mb=0,
                 reject_spills=True, ptx_checks=False)
    a, b, c = (naive_source.replace("---*/", f"# kernel {i}\nworkspace: {16 * (i + 1)}\n---*/", 1) for i in range(3))
    h = {name: KernelSource.parse(t).hash for name, t in zip("abc", (a, b, c))}
    ahead = CompileAhead(comp, jobs=1)  # one worker
    ahead.submit([a, b, c], "sm_80")
    deadline = time.monotonic() + 5
    while not order and time.monotonic() < deadline:  # a is running
        time.sleep(0.01)
    assert ahead.withdraw({h["a"], h["b"]}, "sm_80") == 1  # b; a runs on
    gate.set()
    ahead.wait(10)
    assert order == [h["a"], h["c"]]
    assert ahead.submit([b], "sm_80") == 1  # withdrawn: queued again when asked
    ahead.wait(10)
    assert order[-1] == h["b"]
    ahead.close()


def test_close_kills_the_running_compile_and_drops_the_queue(tmp_path, naive_source):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\nsleep 30\n")  # a compile that would run 30 s
    nvcc.chmod(0o755)
    ahead = CompileAhead(_compiler(tmp_path, str(nvcc)), jobs=1)  # one worker
    other = naive_source.replace("---*/", "# another\nworkspace: 16\n---*/", 1).replace("evo_gemm", "evo_gemm ")
    ahead.submit([naive_source, other], "sm_80")
    time.sleep(0.5)
    t0 = time.monotonic()
    ahead.close()
    assert time.monotonic() - t0 < 5
    assert ahead.counts.compiled == ahead.counts.cached == ahead.counts.failed == 0
    assert not list((tmp_path / "cache").rglob("*.json"))  # nothing cached from a killed compile


def _niceness_nvcc(tmp_path) -> Path:
    """An nvcc that writes its own niceness (field 19 of /proc/self/stat, read by the shell it runs in) and fails."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncut -d' ' -f19 /proc/$$/stat > {tmp_path / 'nice'}\nexit 1\n")
    nvcc.chmod(0o755)
    return nvcc


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads a process's niceness from /proc")
def test_the_background_nvcc_runs_at_a_lower_priority_and_the_searchs_own_does_not(tmp_path, naive_source):
    # the background uses every CPU the search's compiles leave idle: its nvcc runs `nice` above the search's, which
    # (compiling on its own thread meanwhile) keeps its priority
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    comp = _compiler(tmp_path, str(_niceness_nvcc(tmp_path)))
    ahead = CompileAhead(comp, jobs=1, nice=7)
    ahead.submit([naive_source], "sm_80")
    ahead.wait(10)
    ahead.close()
    assert ahead.counts.failed == 1
    assert int((tmp_path / "nice").read_text()) == min(19, mine + 7)
    other = naive_source.replace("evo_gemm", "evo_gemm ")  # other code: not the cached failure
    assert not comp.compile_many([(KernelSource.parse(other), "sm_80")], jobs=1)[0].ok
    assert int((tmp_path / "nice").read_text()) == mine  # the search's compile, after the background's
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the calling thread untouched


def test_nice_zero_leaves_the_background_at_the_searchs_priority(tmp_path, naive_source):
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    ahead = CompileAhead(_compiler(tmp_path, str(_niceness_nvcc(tmp_path))), jobs=1, nice=0)
    ahead.submit([naive_source], "sm_80")
    ahead.wait(10)
    ahead.close()
    assert int((tmp_path / "nice").read_text()) == mine


@pytest.fixture(scope="module")
def fams():
    return [f for f in load_families() if "sm_90a" in f.archs]


def test_starts_are_those_of_the_first_generation_and_leave_the_refits_for_it(fams):
    prior = Prior(fams, GpuSpec(), sample=50)
    prop = MutateProposer(Selector(16, 4, 3), 0.3, 1, prior=prior, prior_top=4, fit_starts=3)
    problem = Problem(384, 1536, 6144)

    def ctx():
        return ProposalContext(problem, "sm_90a", None, fams, [], [], random.Random(0))

    ahead = prop.starts(ctx())
    assert ahead and all(is_start(p) for p in ahead)
    assert any("fitted to the shape" in p.idea for p in ahead)
    first = prop.propose(ctx(), 12)  # the search's first generation still refits: starts() used up nothing
    first_starts = {KernelSource.parse(p.source).hash for p in first if is_start(p)}
    assert {KernelSource.parse(p.source).hash for p in ahead} == first_starts
    assert any(p.idea.startswith("prior ") for p in first) and not any(p.idea.startswith("prior ") for p in ahead)
    # what the shape has already timed is not compiled again
    known = {KernelSource.parse(p.source).hash for p in ahead[:2]}
    again = prop.starts(ProposalContext(problem, "sm_90a", None, fams, [], [], random.Random(0), known=known))
    assert len(again) == len(ahead) - 2


class Recording:
    """A CompileAhead stand-in that records what a search queues."""

    def __init__(self):
        self.queued: list[tuple[str, str]] = []

    def submit(self, sources, arch, rank=0.0):
        self.queued += [(KernelSource.parse(s).hash, arch) for s in sources]
        return len(sources)

    @property
    def counts(self):
        from evo.compile_ahead import AheadCounts

        return AheadCounts(submitted=len(self.queued))

    def take_failures(self):
        return []



class ListsRecording(Recording):
    """Each submitted list on its own, in order."""

    def __init__(self):
        super().__init__()
        self.lists = []

    def submit(self, sources, arch, rank=0.0):
        self.lists.append([KernelSource.parse(s).hash for s in sources])
        return super().submit(sources, arch, rank)


def _cfg(tmp_path, compile_: dict | None = None, **search):
    return load_config(overrides={
        "search": {"budget_minutes": 0, "max_candidates": 6, "children": 3, "seed": 0, **search},
        "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": str(TOY)},
        "check": {"sanitize": False}, "compile": compile_ or {}})


def test_a_search_queues_its_starts_then_the_next_shapes(tmp_path):
    from evo.search import Search

    rec = Recording()
    cfg = _cfg(tmp_path)
    this, nxt = parse_shape("256x256x256"), parse_shape("512x256x128")
    Search(this, cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(), ahead=rec,
           next_problems=[nxt]).run()
    fams = load_families(TOY)

    def starts(q):
        return [ks.hash for f in fams for ks in (f.render(p, q) for p in f.start_instances()) if ks.accepts(q)]

    queued = [h for h, _ in rec.queued]
    assert starts(this) and set(starts(this)) | set(starts(nxt)) <= set(queued)
    # this shape's first, then the next one's
    assert set(queued[:len(set(starts(this)))]) == set(starts(this))


def test_the_compile_ahead_thread_ranks_the_shape_after_its_starts_before_the_next_shapes(tmp_path, monkeypatch):
    # the prior's ranking (seconds of Python) is computed while the seeds are timed, on the compile-ahead thread,
    # once; generation 0 waits for it rather than computing it again
    import threading

    from evo.prior import Prior
    from evo.search import Search

    events, real = [], Prior._rank

    def recording_rank(self, problem):
        events.append(("rank", threading.current_thread().name))
        return real(self, problem)

    class Ordered(Recording):
        def submit(self, sources, arch, rank=0.0):
            events.append(("submit", len(sources)))
            return super().submit(sources, arch, rank)

    monkeypatch.setattr(Prior, "_rank", recording_rank)
    this, nxt, far = parse_shape("256x256x256"), parse_shape("512x256x128"), parse_shape("128x256x64")
    Search(this, _cfg(tmp_path), out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(), ahead=Ordered(),
           next_problems=[nxt, far]).run()
    assert [e for e in events if e[0] == "rank"] == [("rank", "evo-compile-ahead")]
    # this shape's list (the next shapes' seeds, its starts), the ranking, the next shapes' starts
    assert [e[0] for e in events if e[0] == "rank" or e[1] > 0] == ["submit", "rank", "submit", "submit"]


def test_a_sweep_refits_each_shapes_starts_once_ahead_and_queues_them_two_searches_ahead(tmp_path, monkeypatch):
    # a CUTLASS start takes ~50-60 s of nvcc: a shape's starts are queued by the search two shapes before it (a
    # short search one shape before left the GPU idle waiting), refitted there once; the search after it and the
    # shape's own search (on its compile-ahead thread) list them again at their own ranks from the same refits (the
    # sweep's Enumerations keep them: refitted with a newer cost model they moved to instances nobody had compiled,
    # 35-47 s of nvcc on an H200), and no first generation refits
    from evo.search import Search
    from evo.space import Enumerations

    refits, real = [], MutateProposer.starts
    fits, real_fit = [], Prior._fit

    def counting(self, ctx):
        if threading.current_thread().name == "evo-compile-ahead":
            refits.append(ctx.problem.key)
        return real(self, ctx)

    def fit(self, family, params, problem, *a):
        fits.append((threading.current_thread().name, problem.key))
        return real_fit(self, family, params, problem, *a)

    monkeypatch.setattr(MutateProposer, "starts", counting)
    monkeypatch.setattr(Prior, "_fit", fit)
    shapes = [parse_shape(s) for s in ("256x256x256", "512x256x128", "128x256x64", "256x128x128")]
    rec, lists, shared = Recording(), [], Enumerations()
    for i, q in enumerate(shapes):
        before = len(rec.queued)
        Search(q, _cfg(tmp_path), out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(), ahead=rec,
               next_problems=shapes[i + 1:i + 3], enumerations=shared).run()
        lists.append([h for h, _ in rec.queued[before:]])
    # the start lists: by each search that queues a shape (two ahead, one ahead) and by its own
    assert sorted(refits) == sorted([shapes[0].key] + [shapes[1].key] * 2 + [q.key for q in shapes[2:] for _ in range(3)])
    assert fits and all(name == "evo-compile-ahead" for name, _ in fits)  # none in a first generation
    assert len(fits) == len(set(fits)) == len(shapes)  # each shape's start fitted once in the sweep
    fams = load_families(TOY)
    third = {ks.hash for f in fams for ks in (f.render(p, shapes[2]) for p in f.start_instances())
             if ks.accepts(shapes[2])}
    assert third and third <= set(lists[0])  # queued by the first search, two shapes ahead
    assert third <= set(lists[1]) and third <= set(lists[2])  # and again, at each later search's rank


def test_the_next_shapes_library_tiles_come_from_the_table(tmp_path):
    # where the table records cuBLASLt's algorithm for the next shape, that tile's instance compiles ahead too
    import json

    from evo.search import Search

    cfg = _cfg(tmp_path)
    this, nxt = parse_shape("256x256x256"), parse_shape("512x256x128")
    Search(nxt, cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler()).run()  # its table row
    (table,) = Path(cfg.paths.out).glob("*/table.json")

    def record_algorithm():  # (each search exports the table again, from the archive's baselines, which carry none)
        doc = json.loads(table.read_text())
        (row,) = [r for r in doc["rows"] if r["shape"] == nxt.key]
        row["library_algorithms"] = {"cublaslt_heuristic": {"tile": [8, 64], "cluster_shape": [1, 1, 1], "split_k": 1}}
        table.write_text(json.dumps(doc))

    (toy,) = load_families(TOY)
    tile8 = toy.render({"TILE": 8, "UNROLL": 4, "PAD": 0}).hash  # the toy family's instance of an 8-wide tile

    def queued(problem, config, nexts):
        record_algorithm()
        rec = Recording()
        Search(problem, config, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(), ahead=rec,
               next_problems=nexts).run()
        return {h for h, _ in rec.queued}

    assert tile8 in queued(this, cfg, [nxt])
    assert tile8 not in queued(nxt, cfg, [])  # not for the shape itself: its seeds compile as the search times them
    assert tile8 not in queued(parse_shape("128x256x256"), _cfg(tmp_path, library_seeds=False), [nxt])  # seeds off


class TimesLibraries(FakeWorker):
    """A worker whose cuBLASLt baselines carry the algorithm (an 8-wide tile), recording the shapes it times them on
    (a search's own timing of them, not its runoff's)."""

    shapes: list = []

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "baselines":
            import json

            from evo.ltgemm import ALGO_MARK
            from evo.records import BaselineResult

            if not kw.get("extra"):  # not a runoff's re-timing beside the finalists
                TimesLibraries.shapes.append(kw["problem"].key)
            algo = {"tile": [8, 64], "cluster_shape": [1, 1, 1], "split_k": 1}
            res["results"]["cublaslt_heuristic"] = BaselineResult("cublaslt_heuristic", 55.0, 0.0,
                                                                  f"heuristic top-1{ALGO_MARK}{json.dumps(algo)}")
        return res


def test_the_next_shapes_libraries_are_timed_ahead_so_its_library_tiles_compile_ahead(tmp_path):
    """A sweep's next shape that neither the table nor the archive knows: its baselines are timed during this search,
    its cuBLASLt tile's instance queued to compile, and its own search finds the baselines and does not time them."""
    from evo.search import Search
    from evo.store import Store

    (toy,) = load_families(TOY)
    tile8 = toy.render({"TILE": 8, "UNROLL": 4, "PAD": 0}).hash
    this, nxt = parse_shape("256x256x256"), parse_shape("512x256x128")

    def run(cfg, problem, nexts):
        TimesLibraries.shapes = []
        rec, out = Recording(), io.StringIO()
        Search(problem, cfg, out=out, worker_factory=TimesLibraries, compiler=FakeCompiler(), ahead=rec,
               next_problems=nexts).run()
        return [h for h, _ in rec.queued], list(TimesLibraries.shapes), out.getvalue()

    cfg = _cfg(tmp_path)
    queued, timed, log = run(cfg, this, [nxt])
    assert timed == [this.key, nxt.key] and tile8 in queued
    # the next shape's list: its library tile first (its search times it as a seed before its first generation),
    # then its starts (the recording keeps each shape's list whole, repeats included)
    starts = {h for h in queued if h != tile8}
    assert set(queued[queued.index(tile8) + 1:]) == starts
    assert "timing the next shape's baselines (512x256x128)" in log
    setup = next(line for line in log.splitlines() if line.startswith("  setup: "))  # where the time before the budget went
    assert all(step in setup for step in ("the ceilings", "the baselines", "the guide", "the next shapes' baselines"))
    assert {b.library for b in Store(cfg.paths.db).baselines(nxt.key, nxt.layout, "Fake_GPU")} >= {"cublas", "cublaslt_heuristic"}
    _, timed, _ = run(cfg, nxt, [])
    assert timed == []  # the next search reads them from the archive
    queued, timed, _ = run(_cfg(tmp_path / "off", {"ahead_baselines": False}), this, [nxt])
    assert timed == [this.key] and tile8 not in queued


def test_a_search_without_compile_ahead_queues_nothing(tmp_path):
    from evo.search import Search

    cfg = load_config(overrides={
        "search": {"budget_minutes": 0, "max_candidates": 4, "children": 3, "seed": 0},
        "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": str(TOY)},
        "check": {"sanitize": False}, "compile": {"ahead": False}})
    comp = FakeCompiler()
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp).run()
    assert "compiled ahead" not in out.getvalue()
    on = _cfg(tmp_path / "on")
    out = io.StringIO()
    Search(parse_shape("256x256x256"), on, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "compiled ahead:" in out.getvalue()  # its own queue, closed with the search


def test_a_failure_while_queueing_never_ends_the_search(tmp_path, monkeypatch):
    from evo.search import Search

    def broken(self, ctx):
        raise ValueError("a start that does not render")

    monkeypatch.setattr(MutateProposer, "starts", broken)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), _cfg(tmp_path), out=out, worker_factory=FakeWorker,
                     compiler=FakeCompiler(), ahead=Recording()).run()
    assert summary.best_us > 0 and "compiling ahead skipped: ValueError: a start that does not render" in out.getvalue()


def test_the_search_waits_for_its_queueing_thread_before_it_returns(tmp_path, monkeypatch):
    # the starts are refitted on a thread of their own (seconds of Python the seeds need not wait for); the search
    # returns only once that thread has queued them, so its "compiled ahead" count holds them
    from evo.search import Search

    real = MutateProposer.starts

    def slow(self, ctx):
        time.sleep(0.5)
        return real(self, ctx)

    monkeypatch.setattr(MutateProposer, "starts", slow)
    rec = Recording()
    out = io.StringIO()
    Search(parse_shape("256x256x256"), _cfg(tmp_path), out=out, worker_factory=FakeWorker, compiler=FakeCompiler(),
           ahead=rec).run()
    assert rec.queued and f"compiled ahead: {len(rec.queued)} kernels submitted" in out.getvalue()


def test_a_start_is_refitted_once_per_shape(fams):
    # evo.compile_ahead refits a shape's starts before its first generation does: the prior keeps its answers
    prior = Prior(fams, GpuSpec(), sample=50)
    calls = []
    real = prior._fit
    prior._fit = lambda *a: calls.append(a) or real(*a)
    fam = next(f for f in fams if f.name == "wgmma_sm90")
    start = fam.start_instances()[0]
    a = prior.fit(fam.name, start, Problem(384, 1536, 6144))
    b = prior.fit(fam.name, start, Problem(384, 1536, 6144))
    assert len(calls) == 1 and a is b
    prior.fit(fam.name, start, Problem(384, 1536, 4096))  # another shape
    prior.fit(fam.name, start, Problem(384, 1536, 6144), margin=0.1)  # another question
    prior.fit(fam.name, start, Problem(384, 1536, 6144), order=lambda ps: [1.0] * len(ps), ties=0.02)
    assert len(calls) == 4


def test_a_one_gpu_sweep_hands_each_search_the_shapes_after_it(tmp_path, monkeypatch):
    import evo.sweep as sweep

    seen = []

    def fake_search_shape(problem, cfg, worker, compiler, log_dir, name="", seeds=None, enumerations=None,
                          ahead=None, next_problems=None, shared_model=None):
        seen.append((problem.key, [q.key for q in next_problems or []], ahead is not None))
        return sweep.ShapeResult(problem.key, problem.layout, worker.info.key, "done", best_us=1.0, best_lib_us=1.0,
                                 winner="cublas")

    monkeypatch.setattr(sweep, "search_shape", fake_search_shape)
    shapes = [parse_shape(s) for s in ("256x256x256", "512x256x128", "128x128x64")]
    cfg = _cfg(tmp_path)
    sweep.run_sweep(shapes, cfg, device_ids=[0], worker_factory=FakeWorker, compiler=FakeCompiler(), out=io.StringIO(),
                    order="longest")
    order = [k for k, _, _ in seen]  # compile.ahead_depth 2: the next two shapes, as far as the order goes
    assert [n for _, n, _ in seen] == [[order[1], order[2]], [order[2]], []] and all(a for _, _, a in seen)
    seen.clear()
    sweep.run_sweep(shapes, _cfg(tmp_path / "one", {"ahead_depth": 1}), device_ids=[0], worker_factory=FakeWorker,
                    compiler=FakeCompiler(), out=io.StringIO(), order="longest")
    assert [n for _, n, _ in seen] == [[order[1]], [order[2]], []]


def test_a_one_gpu_sweep_says_what_it_compiled_ahead(tmp_path):
    import evo.sweep as sweep

    out = io.StringIO()
    cfg = _cfg(tmp_path)
    outcome = sweep.run_sweep([parse_shape(s) for s in ("256x256x256", "512x256x128")], cfg, device_ids=[0],
                              worker_factory=FakeWorker, compiler=FakeCompiler(), out=out)
    assert "Compiled ahead: " in outcome.summary and "kernels submitted" in outcome.summary
    off = load_config(overrides={"search": {"budget_minutes": 0, "max_candidates": 4, "children": 3, "seed": 0},
                                 "paths": {"db": str(tmp_path / "off.db"), "out": str(tmp_path / "off"),
                                           "templates": str(TOY)},
                                 "check": {"sanitize": False}, "compile": {"ahead": False}})
    outcome = sweep.run_sweep([parse_shape("256x256x256")], off, device_ids=[0], worker_factory=FakeWorker,
                              compiler=FakeCompiler(), out=io.StringIO())
    assert outcome.summary and "Compiled ahead" not in outcome.summary


def test_each_gpu_compiles_ahead_the_shapes_it_likely_takes_next():
    from evo.sweep import successors

    shapes = [parse_shape(s) for s in ("64x64x64", "128x64x64", "256x64x64", "512x64x64", "1024x64x64")]
    keys = lambda d: {k: [q.key for q in v] for k, v in d.items()}  # noqa: E731
    one = successors(shapes, 1)
    assert keys(one) == {a.key: [b.key] for a, b in zip(shapes, shapes[1:])}
    two = successors(shapes, 2)  # GPU 0 takes shapes 0, 2, 4 and GPU 1 shapes 1, 3 while they keep pace
    assert keys(two) == {shapes[0].key: [shapes[2].key], shapes[1].key: [shapes[3].key], shapes[2].key: [shapes[4].key]}
    # deeper: the next shapes on the same GPU, nearest first, as far as the order goes
    assert keys(successors(shapes, 1, 2)) == {shapes[0].key: [shapes[1].key, shapes[2].key],
                                              shapes[1].key: [shapes[2].key, shapes[3].key],
                                              shapes[2].key: [shapes[3].key, shapes[4].key],
                                              shapes[3].key: [shapes[4].key]}
    assert keys(successors(shapes, 2, 2)) == {shapes[0].key: [shapes[2].key, shapes[4].key],
                                              shapes[1].key: [shapes[3].key], shapes[2].key: [shapes[4].key]}
    assert successors(shapes, 1, 0) == {}  # depth 0: no shape compiles ahead of its own search


def test_a_multi_gpu_sweep_sends_each_shape_with_its_successor():
    import queue

    from evo.sweep import ProcessBackend, successors

    backend = ProcessBackend.__new__(ProcessBackend)  # no GPU processes: what goes on the task queue
    backend.tasks, backend.layout = queue.Queue(), "TN"
    shapes = [parse_shape(s) for s in ("64x64x64", "128x64x64", "256x64x64")]
    backend.next_of = successors(shapes, 2)
    for p in shapes:
        backend.submit(p, 0.5)
    sent = [backend.tasks.get_nowait() for _ in shapes]
    assert [(p.key, m, [q.key for q in n]) for p, m, n in sent] == [
        (shapes[0].key, 0.5, [shapes[2].key]), (shapes[1].key, 0.5, []), (shapes[2].key, 0.5, [])]


def test_a_two_gpu_sweep_compiles_ahead_in_each_gpus_process(tmp_path):
    import evo.sweep as sweep

    cfg = _cfg(tmp_path)
    shapes = [parse_shape(s) for s in ("256x256x256", "512x256x128", "128x128x64")]
    outcome = sweep.run_sweep(shapes, cfg, device_ids=[0, 1], worker_factory=FakeWorker, compiler=FakeCompiler(),
                              out=io.StringIO())
    assert outcome.done == 3
    logs = list(Path(cfg.paths.db).parent.rglob("*.log"))
    assert len(logs) == 3 and all("compiled ahead:" in f.read_text() and "(this sweep so far)" in f.read_text()
                                  for f in logs)
    assert "Compiled ahead: " in outcome.summary and "kernels submitted" in outcome.summary  # the GPUs' counts


def test_a_multi_gpu_sweep_sums_each_gpus_latest_compile_ahead_counts():
    import queue

    from evo.compile_ahead import AheadCounts
    from evo.sweep import ProcessBackend

    backend = ProcessBackend.__new__(ProcessBackend)  # no GPU processes: the messages they send
    backend.results, backend.running, backend.procs, backend.ahead_by_gpu = queue.Queue(), {}, {}, {}
    assert backend.ahead_counts() == AheadCounts()  # none reported yet
    done = object()
    for msg in [("start", 0, "a"), ("ahead", 0, AheadCounts(3, 2, 1, 0)), ("ahead", 1, AheadCounts(2, 1, 0, 1)),
                ("ahead", 0, AheadCounts(5, 3, 2, 0)), ("result", 0, done)]:
        backend.results.put(msg)
    assert backend.next_result() is done
    assert backend.ahead_counts() == AheadCounts(7, 4, 2, 1)  # GPU 0's later report replaces its earlier one



def test_a_later_round_compiles_ahead_in_its_own_order(tmp_path, monkeypatch):
    # --budget-gpu-hours: shapes still improving get a second round, longest first; each shape's successor is the
    # one after it in that round, and the round's last shape has none (not its successor of the first round)
    import evo.sweep as sweep

    seen = []

    def fake_search_shape(problem, cfg, worker, compiler, log_dir, name="", seeds=None, enumerations=None,
                          ahead=None, next_problems=None, shared_model=None):
        seen.append((problem.key, [q.key for q in next_problems or []]))
        stop = "converged" if problem.key == "64x64x64" else "time budget spent"  # the others still improve
        return sweep.ShapeResult(problem.key, problem.layout, worker.info.key, "done", best_us=1.0, best_lib_us=1.0,
                                 winner="cublas", stop=stop, seconds=1.0)

    monkeypatch.setattr(sweep, "search_shape", fake_search_shape)
    shapes = [parse_shape(s) for s in ("64x64x64", "8192x8192x8192", "1024x1024x1024")]
    sweep.run_sweep(shapes, _cfg(tmp_path), device_ids=[0], worker_factory=FakeWorker, compiler=FakeCompiler(),
                    out=io.StringIO(), budget_gpu_hours=0.05, order="likely-wins")
    first, second = seen[:3], seen[3:5]
    assert first == [("8192x8192x8192", ["1024x1024x1024", "64x64x64"]), ("1024x1024x1024", ["64x64x64"]),
                     ("64x64x64", [])]
    assert second == [("8192x8192x8192", ["1024x1024x1024"]), ("1024x1024x1024", [])]  # not 64x64x64, done


def test_the_next_shapes_transposed_seed_compiles_ahead_before_its_starts(tmp_path, monkeypatch):
    """The transposed shape's fastest kernel (SWAP_AB flipped), which a search times among its seeds, does not
    depend on this search: it is queued for the next shape, after this shape's starts (needed first: this search
    times them before it stops) and before the next shape's; not for this shape (its own search compiles it), not
    with transposed seeds off."""
    import evo.search as search_mod
    from evo.proposers.base import Proposal

    (toy,) = load_families(TOY)
    flipped = toy.render({"TILE": 16, "UNROLL": 2, "PAD": 1})
    asked = []

    def fake(problem, store, gpu, families, per_family=1, published=()):
        asked.append(problem.key)
        return [Proposal(flipped.text, "seed", (), "the transposed shape's fastest")] if problem.key == nxt.key else []

    monkeypatch.setattr(search_mod, "transposed_proposals", fake)
    this, nxt = parse_shape("256x256x256"), parse_shape("512x256x128")

    def queued(cfg, nexts):
        rec = ListsRecording()
        search_mod.Search(this, cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(), ahead=rec,
                          next_problems=nexts).run()
        return rec.lists

    alone = queued(_cfg(tmp_path / "alone"), [])  # this shape's starts, with no next shape
    assert len(alone) == 1 and alone[0] and flipped.hash not in alone[0]
    lists = queued(_cfg(tmp_path), [nxt])
    assert nxt.key in asked and len(lists) == 2
    assert lists[0] == alone[0]  # this shape's starts first
    assert lists[1][0] == flipped.hash and flipped.hash not in lists[1][1:] and lists[1][1:]  # then the next shape's seed, its starts
    asked.clear()
    off = queued(_cfg(tmp_path / "off", transposed_seeds=False), [nxt])
    assert all(flipped.hash not in x for x in off) and asked == []


def test_the_tables_kernels_compile_ahead_for_this_shape_and_the_next(tmp_path):
    """Where the table lacks a shape, the kernels its generation 0 takes from the table's nearest rows (rendered for
    it) compile ahead: this shape's after its starts, the next shape's before its starts; as many as the archive's
    winners leave room for in search.seed_winners. Where the table has the next shape's row, that row's kernel
    compiles ahead instead (a seed of its search), not the neighbours. A sweep of grid shapes paused 27 s for a
    nearest row's CUTLASS kernel compiled nowhere ahead (docs/perf-search.md)."""
    import json

    from evo.search import Search

    (toy,) = load_families(TOY)
    Search(parse_shape("256x256x256"), _cfg(tmp_path), out=io.StringIO(), worker_factory=FakeWorker,
           compiler=FakeCompiler()).run()  # a table row and the archive's winner
    (table,) = Path(_cfg(tmp_path).paths.out).glob("*/table.json")
    doc = json.loads(table.read_text())
    (row,) = doc["rows"]
    near, far = toy.render({"TILE": 8, "UNROLL": 1, "PAD": 3}), toy.render({"TILE": 32, "UNROLL": 8, "PAD": 2})
    kfile = table.parent.parent / row["kernel_path"]
    for ks, name in ((near, "near.cu"), (far, "far.cu")):
        (kfile.parent / name).write_text(ks.text)
    rows = [dict(row, hash=near.hash, kernel_path=str(Path(row["kernel_path"]).parent / "near.cu")),
            dict(row, shape="4096x4096x4096", m=4096, n=4096, k=4096, hash=far.hash,
                 kernel_path=str(Path(row["kernel_path"]).parent / "far.cu"))]

    def lists(this, nxt, **search):
        table.write_text(json.dumps(dict(doc, rows=rows)))  # (each search exports the table again)
        rec = ListsRecording()
        Search(parse_shape(this), _cfg(tmp_path, **search), out=io.StringIO(), worker_factory=FakeWorker,
               compiler=FakeCompiler(), ahead=rec, next_problems=[parse_shape(nxt)]).run()
        return rec.lists

    def starts(q):
        return [ks.hash for ks in (toy.render(p, q) for p in toy.start_instances()) if ks.accepts(q)]

    mine, nexts = lists("512x256x256", "128x256x512")
    assert set(starts(parse_shape("512x256x256"))) | {near.hash, far.hash} == set(mine)  # its starts and neighbours
    assert mine[:len(set(starts(parse_shape("512x256x256"))))] == starts(parse_shape("512x256x256"))  # starts first
    assert nexts[:2] == [near.hash, far.hash] and set(nexts[2:]) == set(starts(parse_shape("128x256x512")))
    # room for one: this shape (no winner of another shape handed to it) takes the nearest; the next shape's room is
    # taken by the archive's winner of 256x256x256
    mine, nexts = lists("512x256x256", "128x256x512", seed_winners=1)
    assert near.hash in mine and far.hash not in mine and near.hash not in nexts and far.hash not in nexts
    # the next shape has a row: its kernel (the search's seed), not the neighbours
    _, nexts = lists("512x256x256", "256x256x256")
    assert nexts[0] == near.hash and far.hash not in nexts
    # this shape has a row: no neighbours for it (its seeds are timed by the search itself)
    mine, _ = lists("256x256x256", "128x256x512")
    assert near.hash not in mine and far.hash not in mine


def test_a_search_and_a_sweep_compile_ahead_at_the_configured_niceness(tmp_path, monkeypatch):
    import evo.search
    from evo import sweep
    from evo.search import Search

    made = []

    class Noting(CompileAhead):
        def __init__(self, compiler, jobs=0, nice=0):
            made.append(nice)
            super().__init__(compiler, jobs, nice)

    monkeypatch.setattr(evo.search, "CompileAhead", Noting)
    monkeypatch.setattr(sweep, "CompileAhead", Noting)
    Search(parse_shape("256x256x256"), _cfg(tmp_path / "a", {"ahead_nice": 7}), out=io.StringIO(),
           worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    sweep.run_sweep([parse_shape("512x256x128")], _cfg(tmp_path / "b", {"ahead_nice": 3}), device_ids=[0],
                    worker_factory=FakeWorker, compiler=FakeCompiler(), out=io.StringIO())
    assert made == [7, 3] and load_config().compile.ahead_nice == 10  # the default lives in defaults.yaml only
