"""The sweep's time arithmetic: the overhead a shape pays beyond its search budget, measured on earlier shapes;
the header's estimate built on it; round 1 of a GPU-hour budget net of it; a budget that stops starting shapes."""
from __future__ import annotations

import io
import time
from dataclasses import dataclass

from evo.problem import parse_shape
from evo.store import Store
from evo.sweep import ShapeResult, SweepLog, _clock, run_sweep
from evo.sweep_budget import MIN_SEARCH_S, Overhead, first_round, header_estimate, measured_overhead, per_shape_seconds
from test_sweep import SHAPES, CachingFakeCompiler, ShapeFake, make_cfg, sweep_rows


@dataclass
class Row:
    status: str
    seconds: float
    budget_s: float


def test_overhead_is_the_median_beyond_the_budget_of_done_shapes_with_one():
    rows = [Row("done", 64, 30), Row("done", 128, 30), Row("done", 34, 30), Row("failed", 900, 30),
            Row("done", 500, 0), Row("done", 20, 30)]  # failed and budget-less rows do not count; an early stop does
    o = measured_overhead(rows)
    assert o == Overhead(19.0, 4)  # median of 34, 98, 4, -10
    assert measured_overhead(rows[:2]) is None  # too few to trust


def test_per_shape_time_and_the_header_say_what_they_rest_on():
    assert per_shape_seconds(30, None) == 30
    assert per_shape_seconds(30, Overhead(45, 9)) == 75
    assert per_shape_seconds(60, Overhead(-100, 9)) == 6  # never below a tenth of the budget
    bare = header_estimate(10, 0.5, 1, None, _clock)
    assert bare.startswith(", 0:05:00 of search budgets at 0.5 min per shape") and "come on top" in bare
    measured = header_estimate(10, 0.5, 2, Overhead(45, 9), _clock)
    assert measured.startswith(", about 0:06:15 at 0.5 min per shape (+45 s per shape") and "9 earlier shapes" in measured
    assert header_estimate(10, 0, 1, None, _clock) == ""  # no budget: no estimate


def test_first_round_takes_the_overhead_off_and_says_how_far_the_budget_reaches():
    # 1 GPU-hour, 60 % in round 1, 24 shapes: 90 s each; 40 s of it is overhead -> 50 s of search
    fr = first_round(3600, 0.6, 24, 0, Overhead(40, 12))
    assert abs(fr.minutes - 50 / 60) < 1e-9 and fr.reaches == 24 and fr.overhead_s == 40
    assert first_round(3600, 0.6, 24, 0.5, Overhead(40, 12)).minutes == 0.5  # --budget-minutes-per-shape caps it
    assert first_round(3600, 0.6, 24, 0, None).minutes == 1.5  # nothing measured: the share as it is
    # 1000 shapes on 1 GPU-hour with 60 s of overhead each: the budget reaches 2160 / 66 = 32 of them
    small = first_round(3600, 0.6, 1000, 0, Overhead(60, 30))
    assert small.minutes == MIN_SEARCH_S / 60 and small.reaches == 32
    assert first_round(3600, 0.6, 24, 0, Overhead(-5, 12)).minutes == 1.5  # a negative median adds nothing


def _history(tmp_path, gpu="Fake_GPU", n=4, seconds=100.0, budget=30.0):
    store = Store(tmp_path / "evo.db")
    log = SweepLog(store)
    for i in range(n):
        log.record(ShapeResult(f"{64 * (i + 1)}x64x64", "TN", gpu, "done", seconds=seconds, budget_s=budget))
    store.close()


def test_the_header_estimate_uses_the_archives_earlier_shapes(tmp_path):
    _history(tmp_path)  # four earlier shapes took 70 s beyond a 30 s budget
    cfg = make_cfg(tmp_path, budget_minutes=0.5, max_candidates=2)
    out = io.StringIO()
    run_sweep([parse_shape(s) for s in SHAPES[:2]], cfg, shapes_file="t.yaml", device_ids=[0],
              worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=out)
    head = out.getvalue().splitlines()[0]
    assert "about 0:03:20 at 0.5 min per shape (+70 s per shape beyond its budget, the median of 4 earlier" in head
    rows = sweep_rows(cfg)
    assert all(rows[s].budget_s == 30.0 for s in SHAPES[:2])  # what each was given is recorded for the next estimate


def test_a_gpu_hour_budget_stops_starting_shapes_once_spent(tmp_path, monkeypatch):
    clock = [1000.0]

    def tick():  # every reading of the clock is a second of GPU time
        clock[0] += 1.0
        return clock[0]

    monkeypatch.setattr(time, "monotonic", tick)
    _history(tmp_path, seconds=20.0, budget=6.0)  # this GPU's shapes cost 14 s beyond their search (as the fake's do)
    cfg = make_cfg(tmp_path, max_candidates=0, patience_seconds=0, first_round_share=0.5)
    out = io.StringIO()
    budget_h = 0.015  # 54 GPU-seconds: round 1's 27 s leave the 4 shapes less than a search each beside the overhead
    outcome = run_sweep([parse_shape(s) for s in SHAPES], cfg, shapes_file="t.yaml", device_ids=[0],
                        worker_factory=ShapeFake, compiler=CachingFakeCompiler(), budget_gpu_hours=budget_h, out=out)
    text = out.getvalue()
    assert "14 s per shape beyond its search, the median of 4 earlier shapes" in text
    assert "the budget reaches about 1 of the 4 shapes" in text
    assert "GPU-hour budget is spent" in text and "no more shapes are started" in text
    assert "round 2" not in text
    done = [r for r in outcome.this_run if r.status == "done"]
    assert 1 <= len(done) < 4 and outcome.left == 4 - len(done) and outcome.exit_code == 1
    spent = sum(r.seconds for r in done)
    assert spent >= budget_h * 3600 and spent - max(r.seconds for r in done) < budget_h * 3600  # stops after the shape that spent it
    assert "left)" in outcome.summary and f"{4 - len(done)} left" in outcome.summary
