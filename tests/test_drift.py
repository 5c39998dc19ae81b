"""Timing drift: windows where the whole GPU ran slow (cuBLAS beside the candidate) are re-timed, then scaled."""
import io
import sqlite3

import pytest

from evo.drift import DriftReference, corrected_us, drifted, retimed, tolerance
from evo.kernel import KernelSource
from evo.problem import parse_shape
from evo.records import BaselineResult, CheckResult, EvalResult
from evo.search import Search
from evo.store import APP_ID, Store
from fakes import BUSY_GPU, FAKE_GPU_STATE, FakeCompiler, FakeWorker, fake_time
from test_search_loop import make_cfg


def test_drifted_needs_a_reference_and_a_tolerance():
    assert drifted(120.0, 100.0, 0.1) and not drifted(109.0, 100.0, 0.1)
    assert not drifted(500.0, 0.0, 0.1)   # no reference yet
    assert not drifted(500.0, 100.0, 0.0)  # off
    assert corrected_us(30.0, 150.0, 50.0, 0.1) == pytest.approx(10.0)
    assert corrected_us(30.0, 52.0, 50.0, 0.1) == 30.0  # inside the tolerance: never touched


def test_the_tolerance_widens_to_cublas_own_spread_on_the_shape():
    assert tolerance(0.2, 0.31) == 0.31   # a 5 us shape: one window's repetitions scatter 31 %
    assert tolerance(0.2, 0.03) == 0.2    # a long shape: the configured tolerance
    assert tolerance(0.0, 0.31) == 0.0    # off stays off
    # the windows of one 64x512x128 search on an H200 (Run 62): cuBLAS medians 4.77-5.76 us, spread 0.31
    assert drifted(5.76, 4.77, 0.2) and not drifted(5.76, 4.77, tolerance(0.2, 0.31))


def test_reference_is_the_quiet_speed():
    ref = DriftReference(tol=0.1)
    for us in (0.0, 80.0, 50.0, 400.0, 0.0):
        ref.observe(us)
    assert ref.ref_us == 50.0  # a slow GPU makes cuBLAS slower, never faster: the lowest median is the quiet one


def windows(*pairs):
    it = iter(pairs)
    calls = []

    def window():
        calls.append(1)
        return next(it)
    return window, calls


def settled(window, ref, tol):
    """What the worker keeps (evo.gpu.session): the least drifted window, scaled if it drifted too."""
    t, cublas = retimed(window(), window, lambda w: w[1], ref, tol)[0]
    return corrected_us(t, cublas, ref, tol), t, cublas


def test_a_quiet_window_is_kept_as_measured():
    w, calls = windows((10.0, 51.0), (99.0, 99.0))
    assert settled(w, 50.0, 0.1) == (10.0, 10.0, 51.0) and len(calls) == 1


def test_a_drifted_window_is_timed_again():
    w, calls = windows((30.0, 150.0), (10.2, 50.5))
    assert settled(w, 50.0, 0.1) == (10.2, 10.2, 50.5) and len(calls) == 2  # the second window was quiet: its raw time


def test_a_gpu_that_stays_slow_is_scaled():
    w, calls = windows((30.0, 150.0), (20.0, 100.0), (1.0, 1.0))
    scaled, raw, cublas = settled(w, 50.0, 0.1)
    assert len(calls) == 2  # at most two windows
    assert scaled == pytest.approx(10.0) and raw == 20.0 and cublas == 100.0


def test_the_less_drifted_window_is_kept():
    w, calls = windows((20.0, 100.0), (30.0, 150.0))
    scaled, raw, cublas = settled(w, 50.0, 0.1)
    assert len(calls) == 2 and (raw, cublas) == (20.0, 100.0) and scaled == pytest.approx(10.0)


BEST = {"UNROLL": 8, "TILE": 16, "PAD": 0}  # the toy family's fastest instance (12.5 us)


class SlowDuringBest(FakeWorker):
    """The GPU runs 3x slow whenever the toy family's best instance is timed (cuBLAS beside it too); the candidate's
    windows go through evo.drift.retimed and corrected_us as in evo.gpu.session."""

    def call(self, op, timeout_s, **kw):
        if op != "evaluate":
            return super().call(op, timeout_s, **kw)
        self.calls.append(op)
        self.refs = getattr(self, "refs", []) + [kw.get("cublas_ref_us", 0.0)]
        ks = KernelSource.parse(kw["source"])
        if ks.meta.params.get("PAD") == 3 or (ks.meta.params.get("UNROLL") == 8 and ks.meta.params.get("TILE") == 8):
            return super().call(op, timeout_s, **kw)
        slow = 3.0 if all(ks.meta.params.get(k) == v for k, v in BEST.items()) else 1.0
        scaled, raw, cublas = settled(lambda: (fake_time(ks) * slow, 50.0 * slow), kw.get("cublas_ref_us", 0.0),
                                      self.cfg.timing.drift_tol)
        slow_first = drifted(50.0 * slow, kw.get("cublas_ref_us", 0.0), self.cfg.timing.drift_tol)
        return EvalResult(kw["h"], True, "done", check=CheckResult(True, checks=3), time_us=scaled,
                          cublas_us=cublas, measured_us=raw if scaled != raw else 0.0,
                          gpu_state=FAKE_GPU_STATE if slow_first else "")  # the worker asks after a slow window


def search(tmp_path, worker, runoff=1, **timing):
    cfg = make_cfg(tmp_path, max_candidates=0, runoff=runoff)
    if timing:
        cfg.timing.drift_tol = timing["drift_tol"]
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=worker, compiler=FakeCompiler()).run()
    return summary, out.getvalue(), cfg


def test_search_finds_the_best_kernel_timed_while_the_gpu_ran_slow(tmp_path):
    summary, text, cfg = search(tmp_path, SlowDuringBest)
    assert summary.best_us == pytest.approx(12.5)  # scaled back to the quiet speed, so it won
    assert "ran 3.00x its quiet time: measured 37.50 us, scaled" in text and summary.drift_scaled == 1
    assert "timing drift: 1 candidates" in text
    assert max(SlowDuringBest.instances[-1].refs) == 50.0  # the baselines' cuBLAS, then the quiet evaluations'
    store = Store(cfg.paths.db)
    row = store.db.execute("SELECT time_us, measured_us FROM evaluations WHERE time_us < 13").fetchone()
    assert tuple(row) == pytest.approx((12.5, 37.5))  # the archive keeps the raw median beside the scaled time
    # what the GPU reported after the slow window: in the candidate's log line, the summary and the archive
    assert text.count(f"the GPU after the slow window: {FAKE_GPU_STATE}") == 1
    assert f"the GPU after a slow timing window: {FAKE_GPU_STATE}" in text and summary.drift_states == [FAKE_GPU_STATE]
    states = store.db.execute("SELECT gpu_state FROM evaluations WHERE gpu_state IS NOT NULL").fetchall()
    assert [r[0] for r in states] == [FAKE_GPU_STATE]


def test_without_drift_correction_the_slow_window_loses_the_best(tmp_path):
    summary, text, _ = search(tmp_path, SlowDuringBest, drift_tol=0.0)
    assert summary.best_us > 12.5 and "scaled" not in text  # what the correction protects against
    assert "the GPU after" not in text and not summary.drift_states  # no slow window flagged: nothing asked


class DriftedRunoff(FakeWorker):
    """The final side-by-side window runs while the GPU is 2x slow the first time, quiet the second; another
    process is on the GPU."""

    gpu_state_reply = BUSY_GPU

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "baselines" and kw.get("extra"):
            self.runoffs = getattr(self, "runoffs", 0) + 1
            if self.runoffs == 1:
                res["results"] = {k: BaselineResult(v.library, 2 * v.time_us) for k, v in res["results"].items()}
        return res


def test_a_drifted_runoff_is_timed_again(tmp_path):
    summary, text, _ = search(tmp_path, DriftedRunoff)
    assert "ran 2.00x its quiet time of this run in that window" in text and "timed once more" in text
    assert f"the GPU after the slow window: {FAKE_GPU_STATE}" in text
    assert f"warning:  this GPU is shared ({FAKE_GPU_STATE}): windows the other processes overlap run slow" in text
    assert DriftedRunoff.instances[-1].runoffs == 2
    assert summary.best_us == pytest.approx(12.5) and summary.baselines["cublas"] == pytest.approx(50.0)


def test_a_quiet_gpu_gets_no_warning_and_no_reading_changes_nothing(tmp_path):
    summary, text, _ = search(tmp_path, FakeWorker)
    assert "warning:" not in text and summary.best_us == pytest.approx(12.5)

    class NoReading(FakeWorker):
        gpu_state_reply = None  # nvidia-smi missing or silent

    summary, text, _ = search(tmp_path / "b", NoReading)
    assert "warning:" not in text and summary.best_us == pytest.approx(12.5)


def test_an_older_archive_gains_the_raw_time_column(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA application_id={APP_ID}")  # an evo archive from before the column
    con.execute("CREATE TABLE evaluations (hash TEXT, shape TEXT, layout TEXT, gpu TEXT, ok INTEGER, stage TEXT, "
                "error TEXT, time_us REAL, spread REAL, cublas_us REAL, rel_err REAL, seconds REAL, cuda TEXT, "
                "driver TEXT, run_id INTEGER, created REAL, PRIMARY KEY (hash, shape, layout, gpu))")
    con.execute("INSERT INTO evaluations (hash, shape, layout, gpu, ok, time_us) VALUES ('h0', 's', 'TN', 'g', 1, 5.0)")
    con.commit()
    con.close()
    store = Store(db)
    store.add_evaluation("s", "TN", "g", EvalResult("h1", True, "done", time_us=4.0, measured_us=8.0))
    rows = store.db.execute("SELECT hash, time_us, measured_us FROM evaluations ORDER BY hash").fetchall()
    assert [tuple(r) for r in rows] == [("h0", 5.0, None), ("h1", 4.0, 8.0)]


class WrongInDriftedRunoff(FakeWorker):
    """The first runoff window is drifted and finds the fastest contender's output wrong; the second is quiet and
    finds nothing: the wrong call still rejects it."""

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "baselines" and kw.get("extra"):
            self.runoffs = getattr(self, "runoffs", 0) + 1
            if self.runoffs == 1:
                r = {k: BaselineResult(v.library, 2 * v.time_us) for k, v in res["results"].items()}
                fastest = min(kw["extra"], key=lambda h: r[h].time_us)
                r[fastest] = BaselineResult(fastest, r[fastest].time_us, detail="WRONG: timed call #7 compared in full")
                res["results"] = r
        return res


def test_a_contender_wrong_in_the_drifted_runoff_window_stays_rejected(tmp_path):
    summary, text, _ = search(tmp_path, WrongInDriftedRunoff, runoff=3)
    assert WrongInDriftedRunoff.instances[-1].runoffs == 2 and "timed once more" in text
    assert "failed its check in the re-timing: WRONG: timed call #7" in text
    # the quiet window's times were kept, without the contender that was wrong in the other: the next fastest won
    assert summary.best_us == pytest.approx(13.5)


class NoisyShape(FakeWorker):
    """A 5 us shape: cuBLAS's baseline repetitions scatter 31 %, and one candidate's window has cuBLAS 1.25x its
    quiet median (noise of that size, not a slow GPU); the worker applies the tolerance the search passes."""

    spread = 0.31

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "baselines" and not kw.get("extra"):
            res["results"]["cublas"] = BaselineResult("cublas", 50.0, self.spread)
        if op == "evaluate" and isinstance(res, EvalResult) and res.ok:
            self.tols = getattr(self, "tols", []) + [kw.get("drift_tol")]
            ks = KernelSource.parse(kw["source"])
            noisy = 1.25 if all(ks.meta.params.get(k) == v for k, v in BEST.items()) else 1.0
            tol = self.cfg.timing.drift_tol if kw.get("drift_tol") is None else kw["drift_tol"]
            scaled, raw, cublas = settled(lambda: (fake_time(ks), 50.0 * noisy), kw.get("cublas_ref_us", 0.0), tol)
            res = EvalResult(kw["h"], True, "done", check=CheckResult(True, checks=3), time_us=scaled, cublas_us=cublas,
                             measured_us=raw if scaled != raw else 0.0)
        return res


class QuietShape(NoisyShape):
    spread = 0.02


def test_a_window_inside_the_shapes_own_noise_is_not_a_slow_gpu(tmp_path):
    summary, text, cfg = search(tmp_path, NoisyShape)
    tols = NoisyShape.instances[-1].tols
    assert tols and all(t == pytest.approx(0.31) for t in tols)  # the shape's tolerance reaches the worker
    assert summary.drift_scaled == 0 and "scaled" not in text and summary.best_us == pytest.approx(12.5)
    # the same window on a shape whose cuBLAS is steady: the GPU ran slow there, the time is scaled
    summary, text, _ = search(tmp_path / "quiet", QuietShape)
    tols = QuietShape.instances[-1].tols
    assert tols and all(t == pytest.approx(0.2) for t in tols)
    assert summary.drift_scaled == 1 and "ran 1.25x its quiet time" in text
