"""A generation's slow kernels (a family whose median compile takes `compile.defer_s` or more: CUTLASS SM90, ~50 s;
family.yaml's compile_s before the archive has one) compile in the background while the generation times the others;
each is timed in the first generation after it lands. Children still compiling when the search stops are timed then
(budget allowing); seeds and starts are timed then however it stops. A 5-minute H200 search left the GPU idle 111 of
159 s waiting for such children, and a fresh host's CUTLASS seeds held its first generation 81 s (docs/perf-search.md)."""
import io
import shutil
import time
from pathlib import Path

from evo.compile_ahead import AheadCounts
from evo.config import load_config
from evo.families import load_families
from evo.kernel import KernelSource
from evo.problem import parse_shape
from evo.progress import Progress
from evo.proposers.base import Proposal
from evo.search import Search
from evo.store import Store
from fakes import FAKE_GPU, FakeCompiler, FakeWorker

TOY = Path(__file__).parent / "data" / "families" / "toy"
SLOW = {"slowtoy": 50.0, "toy": 1.0}  # a family's usual compile seconds: slowtoy defers, toy does not


def _two_families(tmp_path) -> Path:
    """The toy family twice: `toy` and `slowtoy` (the same kernel under another name)."""
    root = tmp_path / "fams"
    shutil.copytree(TOY, root / "toy")
    shutil.copytree(TOY, root / "slowtoy")
    for f in ("family.yaml", "kernel.cu"):
        p = root / "slowtoy" / f
        p.write_text(p.read_text().replace("name: toy", "name: slowtoy").replace("family: toy", "family: slowtoy"))
    return root


def _cfg(tmp_path, templates, defer_s=20, **search):
    s = {"budget_minutes": 0, "max_candidates": 30, "children": 6, "population": 6, "elites": 2, "initial_random": 4,
         "seed": 1, **search}
    return load_config(overrides={"search": s, "compile": {"defer_s": defer_s},
                                  "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"),
                                            "templates": str(templates)}})


class Background:
    """A CompileAhead stand-in: what is submitted lands in the compiler's cache after `lag` more submits (0: at
    once; None: never)."""

    def __init__(self, compiler, lag=0, workers=8):
        self.compiler, self.lag, self.waiting, self.submitted, self.workers = compiler, lag, [], [], workers
        self.ranks = []  # (hash, rank) per submit

    def submit(self, sources, arch, rank=0.0):
        kss = [KernelSource.parse(t) for t in sources]
        self.submitted += [ks.hash for ks in kss]
        self.ranks += [(ks.hash, rank) for ks in kss]
        self.waiting += [(ks, arch) for ks in kss]
        if self.lag is not None:
            while len(self.waiting) > self.lag:
                ks, a = self.waiting.pop(0)
                self.compiler.compile(ks, a)
        return len(kss)

    def withdraw(self, hashes, arch):
        n = len([ks for ks, a in self.waiting if ks.hash in hashes])
        self.waiting = [(ks, a) for ks, a in self.waiting if ks.hash not in hashes]
        return n

    @property
    def counts(self):
        return AheadCounts(submitted=len(self.submitted))

    def take_failures(self):
        return []


def _kernel(family, tile, unroll, pad=0, idea="mutate"):
    """A toy instance under the family name given, with the proposal that brought it."""
    (fam,) = load_families(TOY.parent, names=["toy"])
    text = fam.render({"TILE": tile, "UNROLL": unroll, "PAD": pad}).text.replace("family: toy", f"family: {family}")
    return KernelSource.parse(text), Proposal(text, "mutate", (), idea)


def _search(tmp_path, comp, ahead, defer_s=20):
    s = Search(parse_shape("256x256x256"), _cfg(tmp_path, TOY.parent, defer_s), out=io.StringIO(),
               worker_factory=FakeWorker, compiler=comp, ahead=ahead)
    return s


def test_slow_children_go_to_the_background_and_come_back_once_cached(tmp_path):
    comp = FakeCompiler()
    bg = Background(comp, lag=None)
    s = _search(tmp_path, comp, bg)
    slow, quick = _kernel("slowtoy", 16, 2), _kernel("toy", 16, 4)
    seconds = SLOW
    assert s._defer_slow([slow, quick], 1, "sm_90a", seconds) == [quick]
    assert bg.submitted == [slow[0].hash] and [k.hash for k, _ in s.deferred] == [slow[0].hash]
    # proposed again while it compiles: not compiled or counted twice
    other = _kernel("toy", 8, 1)
    assert s._defer_slow([slow, other], 2, "sm_90a", seconds) == [other] and len(s.deferred) == 1
    comp.compile(slow[0], "sm_90a")  # it lands
    later = _kernel("toy", 8, 2)
    assert s._defer_slow([later], 3, "sm_90a", seconds) == [slow, later] and s.deferred == []


def test_no_more_are_deferred_than_the_background_compiles_at_once(tmp_path):
    comp = FakeCompiler()
    s = _search(tmp_path, comp, Background(comp, lag=None, workers=2))
    s.out = io.StringIO()
    slow = [_kernel("slowtoy", 16, u) for u in (1, 2, 4)]
    quick = _kernel("toy", 8, 1)
    assert s._defer_slow(slow + [quick], 1, "sm_90a", {"slowtoy": 50.0, "toy": 1.0}) == [quick]
    assert [k.hash for k, _ in s.deferred] == [slow[0][0].hash, slow[1][0].hash]
    assert "1 slow children left out of this generation (2 compiling in the background)" in s.out.getvalue()
    more = _kernel("slowtoy", 8, 8)
    assert s._defer_slow([more, _kernel("toy", 8, 2)], 2, "sm_90a", {"slowtoy": 50.0, "toy": 1.0})[0][0].meta.family == "toy"
    assert len(s.deferred) == 2  # still full


def test_a_slow_child_that_would_land_after_the_budget_is_left_out(tmp_path):
    comp = FakeCompiler()
    s = _search(tmp_path, comp, Background(comp, lag=None))
    s.out = io.StringIO()
    slow, quick = _kernel("slowtoy", 16, 2), _kernel("toy", 8, 1)
    seconds = SLOW
    soon = time.monotonic() + 30.0
    assert s._defer_slow([slow, quick], 1, "sm_90a", seconds, deadline=soon) == [quick] and s.deferred == []
    assert "1 slow children left out of this generation (1 would compile past the budget)" in s.out.getvalue()
    later = time.monotonic() + 60.0
    assert s._defer_slow([slow, quick], 1, "sm_90a", seconds, deadline=later) == [quick] and len(s.deferred) == 1


def test_nothing_is_deferred_where_nothing_else_would_be_timed_meanwhile(tmp_path):
    comp = FakeCompiler()
    bg = Background(comp, lag=None)
    s = _search(tmp_path, comp, bg)
    a, b = _kernel("slowtoy", 16, 2), _kernel("slowtoy", 16, 4)
    seconds = {"slowtoy": 50.0}
    assert s._defer_slow([a], 1, "sm_90a", seconds) == [a] and s.deferred == []
    # with one deferred and only slow children next, the deferred one is waited for with them
    quick = _kernel("toy", 8, 1)
    assert s._defer_slow([a, quick], 1, "sm_90a", {**seconds, "toy": 1.0}) == [quick]
    assert s._defer_slow([b], 2, "sm_90a", seconds) == [a, b] and s.deferred == []


def test_cached_kernels_and_quick_families_are_never_deferred(tmp_path):
    comp = FakeCompiler()
    s = _search(tmp_path, comp, Background(comp, lag=None))
    seconds = SLOW
    quick = _kernel("toy", 8, 1)
    cached = _kernel("slowtoy", 8, 2)
    comp.compile(cached[0], "sm_90a")
    assert s._defer_slow([cached, quick], 0, "sm_90a", seconds) == [cached, quick] and s.deferred == []
    assert s._defer_slow([cached, quick], 1, "sm_90a", seconds) == [cached, quick] and s.deferred == []
    off = _search(tmp_path / "off", comp, Background(comp, lag=None), defer_s=0)
    slow = _kernel("slowtoy", 32, 8)
    assert off._defer_slow([slow, quick], 0, "sm_90a", seconds) == [slow, quick]
    assert off._defer_slow([slow, quick], 1, "sm_90a", seconds) == [slow, quick]


def test_slow_seeds_and_starts_all_wait_in_the_background_and_are_marked_to_be_timed(tmp_path):
    # a fresh machine's CUTLASS seeds (~75 s of nvcc each) held generation 1 ~80 s; they wait in the background like
    # slow children, but none is left out (no cap, no budget rule): each is timed past the budget
    comp = FakeCompiler()
    bg = Background(comp, lag=None, workers=1)
    s = _search(tmp_path, comp, bg)
    s.out = io.StringIO()
    seconds = SLOW
    quick = _kernel("toy", 8, 1)
    seeds = [_kernel("slowtoy", 16, u) for u in (1, 2, 4)]
    assert s._defer_slow(seeds + [quick], 0, "sm_90a", seconds, deadline=time.monotonic() + 1.0) == [quick]
    assert [k.hash for k, _ in s.deferred] == [k.hash for k, _ in seeds] and s.must_time == {k.hash for k, _ in seeds}
    assert "3 slowtoy seeds or starts compile in the background" in s.out.getvalue()
    start = _kernel("slowtoy", 8, 4, idea="slowtoy start instance 0")
    child = _kernel("slowtoy", 8, 8)
    got = s._defer_slow([start, child, _kernel("toy", 8, 2)], 1, "sm_90a", seconds)  # the cap holds children only
    assert [k.meta.family for k, _ in got] == ["toy"] and start[0].hash in s.must_time
    assert child[0].hash in {k.hash for k, _ in s.deferred} and child[0].hash not in s.must_time
    assert s._past_budget(*seeds[0], 5) and s._past_budget(*start, 7) and not s._past_budget(*child, 7)
    # where nothing else would be timed, they are compiled with the generation and waited for
    only = _search(tmp_path / "only", comp, Background(comp, lag=None))
    assert only._defer_slow(seeds, 0, "sm_90a", seconds) == seeds and only.deferred == []


def test_a_seed_round_of_slow_seeds_alone_waits_in_the_background_where_a_quick_family_searches(tmp_path):
    # a resumed search timed its quick seeds before it was killed: its seed round is the slow ones alone; with a quick
    # family to search, the first generation's children are timed while they compile instead of the GPU waiting
    comp = FakeCompiler()
    s = _search(tmp_path, comp, Background(comp, lag=None))
    s.out, s.family_names, s.resumed = io.StringIO(), ["toy", "slowtoy"], True
    seconds = SLOW
    seeds = [_kernel("slowtoy", 16, u) for u in (1, 2)]
    fresh = _search(tmp_path / "fresh", comp, Background(comp, lag=None))
    fresh.family_names = ["toy", "slowtoy"]  # a fresh search waits: its first generation breeds from the seeds' times
    assert fresh._defer_slow(seeds, 0, "sm_90a", seconds) == seeds and fresh.deferred == []
    assert s._defer_slow(seeds, 0, "sm_90a", seconds) == []
    assert s.must_time == {k.hash for k, _ in seeds} and "2 slowtoy seeds or starts compile" in s.out.getvalue()
    # a search of slow families only still waits for them (nothing else would be timed meanwhile), and so do the
    # slow children of a later generation with nothing quick beside them
    only = _search(tmp_path / "only", comp, Background(comp, lag=None))
    only.family_names, only.resumed = ["slowtoy"], True
    assert only._defer_slow(seeds, 0, "sm_90a", seconds) == seeds and only.deferred == []
    child = _kernel("slowtoy", 8, 8)
    assert s._defer_slow([child], 1, "sm_90a", seconds) == [*seeds, child] and s.deferred == []


def test_a_resumed_search_whose_seeds_are_all_slow_goes_on_to_its_first_generation_and_times_them_after(
        tmp_path, monkeypatch):
    monkeypatch.setattr(Store, "compile_seconds", lambda self, arch: {"slowtoy": 50.0, "toy": 0.01})
    comp = FakeCompiler()
    seeds = [_kernel("slowtoy", 32, u, pad=3)[0].text for u in (1, 2)]
    fams = _two_families(tmp_path)
    Search(parse_shape("256x256x256"), _cfg(tmp_path, fams, max_candidates=2), out=io.StringIO(),
           worker_factory=FakeWorker, compiler=comp, ahead=Background(comp, lag=None)).run()  # the killed run's archive
    cfg = _cfg(tmp_path, fams, max_candidates=8)
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp,
           ahead=Background(comp, lag=None), seed_sources=seeds).run()
    log = out.getvalue()
    store = Store(cfg.paths.db)
    timed = {r[0] for r in store.rows("SELECT hash FROM evaluations")}
    store.close()
    assert "2 slowtoy seeds or starts compile in the background" in log, log  # not waited for in the seed round
    assert log.index("compile in the background") < log.index("[gen 1"), log
    assert {KernelSource.parse(t).hash for t in seeds} <= timed, log  # timed before the search stopped


def _searched(tmp_path, lag, monkeypatch, max_candidates=40, seed=1):
    monkeypatch.setattr(Store, "compile_seconds", lambda self, arch: {"slowtoy": 50.0, "toy": 0.5})
    deferred, real = set(), Search._defer_slow

    def spy(self, *a):
        out = real(self, *a)
        deferred.update(ks.hash for ks, _ in self.deferred)
        return out

    monkeypatch.setattr(Search, "_defer_slow", spy)
    comp = FakeCompiler()
    bg = Background(comp, lag=lag)
    cfg = _cfg(tmp_path, _two_families(tmp_path), max_candidates=max_candidates, seed=seed)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp, ahead=bg).run()
    store = Store(cfg.paths.db)
    timed = {r[0] for r in store.rows("SELECT hash FROM evaluations")}
    store.close()
    return summary, out.getvalue(), deferred, timed


def test_a_search_times_every_deferred_child_landed_or_left_at_the_end(tmp_path, monkeypatch):
    # lands two submits later; never lands (waited for with the next all-slow generation, or at the end)
    for lag, most in ((2, 40), (None, 40), (None, 12)):
        # (seed 3: the guide's first generations mix the two families, so a quick one is timed while slow ones wait)
        summary, log, deferred, timed = _searched(tmp_path / f"{lag}-{most}", lag, monkeypatch, most, seed=3)
        assert deferred and "children compile in the background" in log, log
        assert deferred <= timed  # none lost
        assert summary.correct > 0 and len(timed) <= most + 20  # the seeds and starts, then at most `most` children
    assert "slow compiles left in the background before stopping (candidate budget spent)" in log, log


def _at_the_end(tmp_path):
    """A search whose background compiles never land by themselves, recording what it withdraws from the queue."""
    comp = FakeCompiler()
    bg = Background(comp, lag=None)
    withdrawn = []
    bg.withdraw = lambda hashes, arch: withdrawn.append(set(hashes)) or len(hashes)
    s = _search(tmp_path, comp, bg)
    s.out = io.StringIO()
    return s, withdrawn


def _stop(s, stop, spent):
    """The search's end: _time_deferred after 5 generations with a best of 20 us; what it timed."""
    prog = Progress(budget_s=60.0, stream=s.out)
    prog.best_us, prog.generation = 20.0, 5
    worker = FakeWorker(s.cfg)
    worker.start()
    return s._time_deferred(stop, worker, FAKE_GPU, prog, lambda: "time budget spent" if spent else "", 1)



def _stopping(tmp_path, spent, stop="converged: best 20.00 us has not improved", landed=False):
    """A search at its end with one slow child and one slow seed still in the background (neither landed; with
    `landed` the child's compile has finished)."""
    s, withdrawn = _at_the_end(tmp_path)
    child, seed = _kernel("slowtoy", 16, 2), _kernel("slowtoy", 16, 4)
    quick = _kernel("toy", 8, 1)
    assert s._defer_slow([seed, quick], 0, "sm_90a", SLOW) == [quick]
    assert s._defer_slow([child, _kernel("toy", 8, 2)], 1, "sm_90a", SLOW)[0][0].meta.family == "toy"
    if landed:
        s.compiler.compile(child[0], "sm_90a")
    return _stop(s, stop, spent), s.out.getvalue(), withdrawn, child, seed, s


def test_deferred_children_still_compiling_when_the_time_is_spent_are_withdrawn_and_seeds_timed(tmp_path):
    got, log, withdrawn, child, seed, s = _stopping(tmp_path, spent=True)
    assert [i.hash for i in got] == [seed[0].hash] and s.deferred == []
    assert withdrawn == [{child[0].hash}]
    assert "1 slow compiles left untimed (time budget spent; 1 not started are dropped" in log, log
    assert "timing the 1 slow compiles left in the background before stopping (converged" in log, log
    assert "1 of them seeds" in log, log


def test_deferred_ones_are_all_timed_when_the_search_stops_on_a_count(tmp_path):
    got, log, withdrawn, child, seed, _ = _stopping(tmp_path, spent=False, stop="candidate budget spent")
    assert {i.hash for i in got} == {seed[0].hash, child[0].hash} and not withdrawn
    assert "timing the 2 slow compiles left in the background before stopping (candidate budget spent)" in log, log


def test_a_converged_search_times_the_children_compiled_and_does_not_wait_for_the_rest(tmp_path):
    # converged with time left: the child still in nvcc is withdrawn, not waited for (the GPU idles meanwhile);
    # the seed is timed past the budget as ever
    got, log, withdrawn, child, seed, _ = _stopping(tmp_path / "compiling", spent=False)
    assert [i.hash for i in got] == [seed[0].hash] and withdrawn == [{child[0].hash}]
    assert "1 slow compiles left untimed (converged, still compiling; 1 not started are dropped" in log, log
    # the child's compile landed before the search stopped: timing it costs the GPU a moment, so it is timed
    got, log, withdrawn, child, seed, _ = _stopping(tmp_path / "landed", spent=False, landed=True)
    assert {i.hash for i in got} == {seed[0].hash, child[0].hash} and not withdrawn, log


def _with_a_fitted_start(tmp_path, spent, stop="converged: best 20.00 us has not improved", landed=False):
    """A search at its end with a start the prior refitted to the shape and an unmodified start, both slow and
    deferred in generation 1 (starts: timed past the budget while they land), neither landed (with `landed` the
    refitted one has)."""
    s, withdrawn = _at_the_end(tmp_path)
    fitted = _kernel("slowtoy", 32, 2,
                     idea="slowtoy start instance 2 fitted to the shape (TILE 16->32; estimate 9.0 us)")
    start = _kernel("slowtoy", 32, 4, idea="slowtoy start instance 3")
    assert s._defer_slow([fitted, start, _kernel("toy", 8, 4)], 1, "sm_90a", SLOW)[0][0].meta.family == "toy"
    assert {fitted[0].hash, start[0].hash} <= s.must_time
    if landed:
        s.compiler.compile(fitted[0], "sm_90a")
    got = _stop(s, stop, spent)
    return {i.hash for i in got}, s.out.getvalue(), withdrawn, fitted, start


def test_a_refitted_start_still_compiling_at_the_end_is_not_waited_for(tmp_path):
    # time spent or converged: the refitted start (never measured anywhere: a guess) is withdrawn like a child, the
    # unmodified start is waited for and timed past the budget as ever
    for spent in (True, False):
        got, log, withdrawn, fitted, start = _with_a_fitted_start(tmp_path / str(spent), spent)
        assert got == {start[0].hash} and withdrawn == [{fitted[0].hash}], log
        assert "1 slow compiles left untimed" in log, log
    # compiled by the time the search stops: timing it costs the GPU a moment, so it is timed
    got, log, withdrawn, fitted, start = _with_a_fitted_start(tmp_path / "landed", spent=True, landed=True)
    assert got == {fitted[0].hash, start[0].hash} and not withdrawn, log
    # stopped on a count: everything deferred is timed, the refitted start too
    got, log, withdrawn, fitted, start = _with_a_fitted_start(tmp_path / "count", spent=False,
                                                              stop="candidate budget spent")
    assert got == {fitted[0].hash, start[0].hash} and not withdrawn, log


def test_slow_seeds_are_timed_however_the_search_goes(tmp_path, monkeypatch):
    # a whole search with a tiny time budget and two slow seeds that never land in the background: both are timed
    monkeypatch.setattr(Store, "compile_seconds", lambda self, arch: {"slowtoy": 50.0, "toy": 0.01})
    comp = FakeCompiler()
    bg = Background(comp, lag=None)
    withdrawn = []
    bg.withdraw = lambda hashes, arch: withdrawn.append(set(hashes)) or 0
    seeds = [_kernel("slowtoy", 16, u)[0].text for u in (1, 2)]
    cfg = _cfg(tmp_path, _two_families(tmp_path), max_candidates=0, budget_minutes=0.01)
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp, ahead=bg,
           seed_sources=seeds + [_kernel("toy", 16, 4)[0].text]).run()
    log = out.getvalue()
    store = Store(cfg.paths.db)
    timed = {r[0] for r in store.rows("SELECT hash FROM evaluations")}
    store.close()
    hashes = {KernelSource.parse(t).hash for t in seeds}
    assert "2 slowtoy seeds or starts compile in the background" in log, log
    assert hashes <= timed, log
    assert not any(h in w for w in withdrawn for h in hashes)


def test_deferred_children_queue_behind_the_next_shapes_starts_and_seeds_ahead_of_all(tmp_path):
    # in a sweep the background also compiles the next shapes' starts (timed by their searches whatever happens): a
    # child this search may not get to time queues at the rank those were queued at (first in, first out behind them);
    # this shape's own seeds and starts go ahead of everything
    comp = FakeCompiler()
    bg = Background(comp, lag=None)
    s = _search(tmp_path, comp, bg)
    s.ahead_rank = 5.0  # the rank its compile-ahead thread queued the next shapes' starts at
    seed, child, quick = _kernel("slowtoy", 16, 4), _kernel("slowtoy", 16, 2), _kernel("toy", 8, 1)
    seconds = SLOW
    s._defer_slow([seed, quick], 0, "sm_90a", seconds)
    s._defer_slow([child, _kernel("toy", 8, 2)], 1, "sm_90a", seconds)
    ranks = dict(bg.ranks)
    assert ranks[child[0].hash] == 5.0 and ranks[seed[0].hash] > 5.0


def test_a_familys_compile_s_defers_its_seeds_before_the_archive_has_compiled_one(tmp_path):
    # a fresh archive knows no compile times: the family.yaml's compile_s (60 s for cutlass_sm90) stands for them
    fams = _two_families(tmp_path)
    spec = fams / "slowtoy" / "family.yaml"
    spec.write_text(spec.read_text() + "compile_s: 50\n")
    (slow,) = [f for f in load_families(fams) if f.name == "slowtoy"]
    assert slow.compile_s == 50.0 and [f.compile_s for f in load_families(fams) if f.name == "toy"] == [0.0]
    comp = FakeCompiler()
    seeds = [_kernel("slowtoy", 16, u)[0].text for u in (1, 2)]
    cfg = _cfg(tmp_path, fams, max_candidates=6)
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp,
           ahead=Background(comp, lag=None), seed_sources=seeds + [_kernel("toy", 16, 4)[0].text]).run()
    assert "2 slowtoy seeds or starts compile in the background (~50 s each)" in out.getvalue(), out.getvalue()
