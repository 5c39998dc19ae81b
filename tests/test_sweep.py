"""evo.sweep with the fake worker and compiler: progress, resume after an interruption, idempotent rerun,
seeding from neighbouring shapes, one process per GPU, the summary paragraph, and row merging for Ray."""
from __future__ import annotations

import csv
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evo.config import load_config
from evo.errors import EvoError
from evo.problem import parse_shape
from evo.records import BaselineResult, CompileResult, EvalResult
from evo.shapes import load_shapes
from evo.store import Store
from evo.sweep import SweepLog, main, neighbour_seeds, run_sweep, select_shapes
from fakes import FakeCompiler, FakeWorker, copy_table_as_other_gpu, fake_time

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
TOY = TESTS / "data" / "families"
SHAPES = ["256x256x256", "256x256x512", "512x256x256", "1024x1024x1024"]


def _jitter(*parts: str) -> float:
    h = int(hashlib.sha256("|".join(parts).encode()).hexdigest()[:8], 16)
    return h / 0xFFFFFFFF


def shape_time(p, factor: float) -> float:
    """A plausible time: compute at 400 TFLOP/s plus memory at 3 TB/s plus 3 us launch."""
    return (p.flops / 400e12 + p.min_bytes / 3000e9) * 1e6 * factor + 3.0


LIB_FACTORS = {"cublas": 1.12, "cublaslt_heuristic": 1.18, "cublaslt_autotune": 1.04}


def lib_us(p, name: str) -> float:
    """The fake library's time on a shape: its factor over shape_time, jittered per shape and library."""
    return shape_time(p, LIB_FACTORS[name] * (0.95 + 0.1 * _jitter(p.key, name)))


class ShapeFake(FakeWorker):
    """FakeWorker whose times depend on the shape, so speedups vary from shape to shape (for sweeps and reports)."""

    def call(self, op, timeout_s, **kw):
        from evo.kernel import KernelSource

        p = kw.get("problem")
        if op == "recheck":  # the champion's re-check before export: the base fake may not know it
            try:
                return super().call(op, timeout_s, **kw)
            except AssertionError:
                self.calls.append(op)
                return {"ok": True, "error": "", "shapes": {}}
        res = super().call(op, timeout_s, **kw)
        if p is None:
            return res
        if op == "baselines":
            out = {}
            for name, b in res["results"].items():
                if name in LIB_FACTORS:
                    out[name] = BaselineResult(name, lib_us(p, name))
                else:  # a kernel re-timed side by side
                    src = kw["extra"][name][0]
                    out[name] = BaselineResult(name, self._kernel_us(p, KernelSource.parse(src)))
            res["results"] = out
            return res
        if op == "evaluate" and res.ok:
            ks = KernelSource.parse(kw["source"])
            res.time_us = self._kernel_us(p, ks)
            res.cublas_us = shape_time(p, 1.12)
            res.seconds = 0.5
        return res

    @staticmethod
    def _kernel_us(p, ks) -> float:
        return shape_time(p, (0.82 + fake_time(ks) / 250) * (0.9 + 0.3 * _jitter(p.key, ks.hash)))


class CachingFakeCompiler(FakeCompiler):
    """FakeCompiler with a compile cache: the first compile of a hash 'takes' 2 s, later ones are cache hits."""

    def __init__(self):
        super().__init__()
        self.cache: set[str] = set()

    def compile(self, ks, arch):
        r = super().compile(ks, arch)
        r.seconds = 2.0
        if r.ok and ks.hash in self.cache:
            r.cached = True
        self.cache.add(ks.hash)
        return r


class InterruptingFake(ShapeFake):
    """Raises KeyboardInterrupt (Ctrl-C) at the Nth evaluation of the process."""

    evaluations = 0
    interrupt_at = 0

    def call(self, op, timeout_s, **kw):
        if op == "evaluate":
            InterruptingFake.evaluations += 1
            if InterruptingFake.evaluations == InterruptingFake.interrupt_at:
                raise KeyboardInterrupt
        return super().call(op, timeout_s, **kw)


def make_cfg(tmp_path, templates=TOY, **search):
    s = {"budget_minutes": 0, "max_candidates": 8, "children": 4, "population": 6, "elites": 2, "initial_random": 4,
         "seed": 1, "seed_winners": 4}
    s.update(search)
    return load_config(overrides={"search": s, "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"),
                                                          "templates": str(templates)},
                                  "compile": {"cache_dir": str(tmp_path / "cache")}})


def sweep(tmp_path, shapes=SHAPES, worker=ShapeFake, compiler=None, devices=(0,), **search):
    cfg = make_cfg(tmp_path, **search)
    out = io.StringIO()
    outcome = run_sweep([parse_shape(s) for s in shapes], cfg, shapes_file="test.yaml", device_ids=list(devices),
                        worker_factory=worker, compiler=compiler or CachingFakeCompiler(), out=out)
    return outcome, out.getvalue(), cfg


def sweep_rows(cfg):
    store = Store(cfg.paths.db)
    try:
        return {r.shape: r for r in SweepLog(store).results("Fake_GPU")}
    finally:
        store.close()


def test_sweep_runs_every_shape_and_summarizes(tmp_path):
    outcome, text, cfg = sweep(tmp_path)
    assert outcome.exit_code == 0 and outcome.done == 4 and outcome.failed == 0
    lines = [l for l in text.splitlines() if l.startswith("[")]
    assert len(lines) == 4 and all("ETA" in l and "elapsed" in l for l in lines)
    assert lines[-1].startswith("[####################] 4/4")
    assert "  order: longest first (no table of Fake_GPU under" in text  # a fresh output folder: nothing to rank by
    rows = sweep_rows(cfg)
    assert set(rows) == set(SHAPES) and all(r.status == "done" and r.best_hash for r in rows.values())
    # seeding: the first shape has no neighbours; every later one is offered winners of the earlier ones,
    # which are cache hits of the compiler (no compile), and the summary says so
    from evo.sweep import longest_first

    first = longest_first([parse_shape(s) for s in SHAPES])[0].key  # shapes are searched longest first
    assert rows[first].seeds_offered == 0
    later = [rows[s] for s in SHAPES if s != first]
    assert all(r.seeds_offered >= 1 and r.compiles_reused >= 1 for r in later)
    assert sum("offered timed and correct" in l for l in lines) == len(later)  # the first shape had none offered
    assert all(r.compile_seconds_saved == pytest.approx(2.0 * r.compiles_reused) for r in later)
    summary = outcome.summary
    assert "\n" not in summary and summary in text
    assert "4 of 4 shapes done" in summary and "evo wins" in summary and "Geomean speedup" in summary
    for lib in ("cublas", "cublaslt_heuristic", "cublaslt_autotune"):
        assert f"vs {lib} " in summary or f"vs {lib} " in summary.replace(", vs ", " vs ")
    assert "compiles reused:" in summary and "compile seconds saved ≈" in summary and "GPU-minutes per shape" in summary
    assert (Path(cfg.paths.out) / "Fake_GPU" / "table.csv").is_file()
    assert (tmp_path / "sweep_logs" / "Fake_GPU_256x256x256.log").read_text().startswith("evo search 256x256x256")
    # the sweep's measurements go beside the table, where a fresh machine's cost model trains on them
    from evo.measurements import load

    shipped = load(Path(cfg.paths.out) / "Fake_GPU" / "measurements.csv.gz")
    assert {s.shape for s in shipped} == set(SHAPES) and f"({len(shipped)} rows" in text


class TieFake(ShapeFake):
    """Every kernel 1 % faster than the fastest library: inside the 2 % noise floor, so no shape is evo's."""

    @staticmethod
    def _kernel_us(p, ks) -> float:
        return min(lib_us(p, name) for name in LIB_FACTORS) / 1.01


def test_a_shape_inside_the_noise_band_is_a_tie_as_the_table_says(tmp_path):
    outcome, text, cfg = sweep(tmp_path, shapes=SHAPES[:2], worker=TieFake)
    rows = sweep_rows(cfg)
    with open(Path(cfg.paths.out) / "Fake_GPU" / "table.csv") as f:
        table = {r["shape"]: r for r in csv.DictReader(f)}
    for s in SHAPES[:2]:
        assert table[s]["verdict"] == "tie" and table[s]["winner"] != "evo"
        assert rows[s].winner == table[s]["winner"] and rows[s].verdict == "tie" and rows[s].noise_band == 0.02
    lines = [l for l in text.splitlines() if l.startswith("[")]
    assert all("tie: evo 1.01x" in l and "inside the noise band of 2.0 %" in l and "evo wins" not in l for l in lines)
    assert "evo wins 0 of 2 shapes" in outcome.summary


def test_progress_line_names_win_tie_and_loss():
    from evo.sweep import ShapeResult, progress_line

    def line(**kw):
        r = ShapeResult("256x256x256", "TN", "Fake_GPU", "done", worker="gpu0", seconds=60, **kw)
        return progress_line(1, 2, r, 60, 60)

    assert "evo wins 1.10x best library (noise band 2.0 %)" in line(winner="evo", verdict="win", noise_band=0.02,
                                                                      best_us=10.0, best_lib_us=11.0)
    assert "tie: evo 1.01x cublas, inside the noise band of 3.0 % (cublas kept)" in line(
        winner="cublas", verdict="tie", noise_band=0.03, best_us=10.0, best_lib_us=10.1)
    assert "cublas wins (evo 0.90x)" in line(winner="cublas", verdict="loss", noise_band=0.02, best_us=10.0, best_lib_us=9.0)
    assert "cublas wins (no correct evo kernel)" in line(winner="cublas")


def test_progress_line_compares_the_tables_kernel_in_the_runoff():
    from evo.sweep import ShapeResult, progress_line

    def line(**kw):
        r = ShapeResult("256x256x256", "TN", "Fake_GPU", "done", worker="gpu0", seconds=60, winner="cublas",
                        verdict="tie", noise_band=0.02, best_lib_us=10.0, **kw)
        return progress_line(1, 2, r, 60, 60)

    assert "; the table's kernel 10.40 -> 10.00 us (1.040x);" in line(best_hash="new", best_us=10.0, table_hash="old",
                                                                       table_us=10.4)
    assert "; the table's kernel stays;" in line(best_hash="old", best_us=10.0, table_hash="old", table_us=10.0)
    assert "; the table's kernel did not race;" in line(best_hash="new", best_us=10.0, table_hash="old")
    assert "table's kernel" not in line(best_hash="new", best_us=10.0)  # no row before the sweep


def test_the_summary_counts_table_rows_that_took_a_faster_kernel():
    from evo.sweep import ShapeResult, _table_rows_line

    def r(shape, best, table, best_us, table_us):
        return ShapeResult(shape, "TN", "Fake_GPU", "done", best_hash=best, best_us=best_us, table_hash=table,
                           table_us=table_us)

    done = [r("256x256x256", "a", "x", 10.0, 11.0), r("512x256x256", "b", "y", 20.0, 20.4),
            r("256x256x512", "c", "c", 5.0, 5.0), r("1024x1024x1024", "d", "", 7.0, 0.0)]
    assert _table_rows_line(done) == ("Of the 3 shapes the table had a row for, 2 took a kernel faster than the row's "
                                      "in the same runoff (geomean 1.059x; most on 256x256x256, 11.00 -> 10.00 us), "
                                      "1 kept the row's kernel.")
    assert _table_rows_line(done[3:]) == ""


def test_a_sweep_over_a_table_races_each_rows_kernel_and_says_what_became_of_it(tmp_path):
    """A second sweep with a fresh archive and the first one's table: every shape's search times the row's kernel
    in its runoff; a row holding a slow kernel takes a faster one, and the line and the summary say by how much."""
    import json

    _, _, cfg1 = sweep(tmp_path / "first", shapes=SHAPES[:2])
    out_dir = Path(cfg1.paths.out)
    doc = json.loads((out_dir / "Fake_GPU" / "table.json").read_text())
    row = next(r for r in doc["rows"] if r["shape"] == SHAPES[0])
    store = Store(cfg1.paths.db)
    slow_hash, slow_src = store.db.execute(
        "SELECT e.hash, c.source FROM evaluations e JOIN candidates c ON c.hash = e.hash WHERE e.shape=? AND e.ok=1 "
        "ORDER BY e.time_us DESC LIMIT 1", (SHAPES[0],)).fetchone()
    store.close()
    (out_dir / row["kernel_path"]).write_text(slow_src)  # the row now publishes the slowest correct kernel
    row["hash"] = slow_hash
    (out_dir / "Fake_GPU" / "table.json").write_text(json.dumps(doc))
    cfg2 = make_cfg(tmp_path / "second")
    cfg2.paths.out = str(out_dir)
    text_out = io.StringIO()
    outcome = run_sweep([parse_shape(s) for s in SHAPES[:2]], cfg2, shapes_file="test.yaml", device_ids=[0],
                        worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=text_out)
    rows = sweep_rows(cfg2)
    assert rows[SHAPES[0]].table_hash == slow_hash and rows[SHAPES[0]].best_hash != slow_hash
    assert rows[SHAPES[0]].table_us > rows[SHAPES[0]].best_us > 0
    line = next(l for l in text_out.getvalue().splitlines() if l.startswith("[") and SHAPES[0] in l)
    assert (f"; the table's kernel {rows[SHAPES[0]].table_us:.2f} -> {rows[SHAPES[0]].best_us:.2f} us "
            f"({rows[SHAPES[0]].table_us / rows[SHAPES[0]].best_us:.3f}x)") in line
    assert rows[SHAPES[1]].table_hash  # the other row raced too
    assert "Of the 2 shapes the table had a row for, " in outcome.summary
    assert "took a kernel faster than the row's in the same runoff (geomean " in outcome.summary


def test_rerun_is_idempotent(tmp_path):
    sweep(tmp_path)
    store = Store(tmp_path / "evo.db")
    n = store.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    store.close()
    outcome, text, _ = sweep(tmp_path)
    assert "4 already done, 0 to search" in text and outcome.exit_code == 0 and outcome.this_run == []
    store = Store(tmp_path / "evo.db")
    assert store.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == n
    store.close()


def test_resume_after_ctrl_c(tmp_path):
    InterruptingFake.evaluations = 0
    InterruptingFake.interrupt_at = 20  # inside the third shape (8 candidates + seeds per shape)
    with pytest.raises(KeyboardInterrupt):
        sweep(tmp_path, worker=InterruptingFake)
    rows = sweep_rows(make_cfg(tmp_path))
    assert 1 <= len(rows) < 4 and all(r.status == "done" for r in rows.values())
    store = Store(tmp_path / "evo.db")
    partial = [s for s in SHAPES if s not in rows and store.db.execute(
        "SELECT COUNT(*) FROM evaluations WHERE shape=?", (s,)).fetchone()[0]]
    assert partial, "the interrupted shape should have stored some evaluations"
    before = {tuple(r) for r in store.db.execute("SELECT hash, shape, run_id, created FROM evaluations")}
    finished_runs = store.db.execute("SELECT COUNT(*) FROM runs WHERE status='done'").fetchone()[0]
    store.close()
    outcome, text, cfg = sweep(tmp_path)
    assert f"{len(rows)} already done" in text and outcome.done == 4 and outcome.exit_code == 0
    store = Store(cfg.paths.db)
    after = {tuple(r) for r in store.db.execute("SELECT hash, shape, run_id, created FROM evaluations")}
    assert before <= after, "something measured before the interruption was measured again"
    shapes_searched_again = {r[0] for r in store.db.execute("SELECT shape FROM runs WHERE status='done'")}
    assert store.db.execute("SELECT COUNT(*) FROM runs WHERE status='done'").fetchone()[0] == finished_runs + 4 - len(rows)
    assert not set(rows) & {r.shape for r in outcome.this_run}
    assert shapes_searched_again == set(SHAPES)
    store.close()


SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{tests!r}, {root!r}]
    from test_sweep import ShapeFake, CachingFakeCompiler, make_cfg
    from evo.errors import cli_entry
    from evo.problem import parse_shape
    from evo.sweep import run_sweep
    from pathlib import Path

    class Slow(ShapeFake):
        def call(self, op, timeout_s, **kw):
            if op == "evaluate":
                time.sleep(0.15)
            return super().call(op, timeout_s, **kw)

    cfg = make_cfg(Path({tmp!r}))
    main = cli_entry(lambda argv: run_sweep([parse_shape(s) for s in {shapes!r}], cfg, device_ids=[0],
                                            worker_factory=Slow, compiler=CachingFakeCompiler()).exit_code)
    sys.exit(main(None))
""")


def start_until_a_shape_is_done(tmp_path: Path) -> subprocess.Popen:
    """SCRIPT's sweep started in a process of its own, returned once a shape of it is done (still running)."""
    script = tmp_path / "sweep_script.py"
    script.write_text(SCRIPT.format(tests=str(TESTS), root=str(ROOT), tmp=str(tmp_path), shapes=SHAPES))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    done = 0
    while time.monotonic() < deadline and proc.poll() is None and done < 1:
        if (tmp_path / "evo.db").exists():
            store = Store(tmp_path / "evo.db")
            try:
                done = store.db.execute("SELECT COUNT(*) FROM sweep_shapes WHERE status='done'").fetchone()[0]
            except Exception:
                done = 0
            store.close()
        time.sleep(0.1)
    if proc.poll() is not None or not done:
        proc.kill()
        raise AssertionError("the sweep ended or no shape was done within 60 s: " + "".join(proc.communicate()))
    return proc


def test_resume_after_sigkill(tmp_path):
    proc = start_until_a_shape_is_done(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done = [r for r in sweep_rows(make_cfg(tmp_path)).values() if r.status == "done"]
    assert 1 <= len(done) < 4
    rerun = subprocess.run([sys.executable, str(tmp_path / "sweep_script.py")], capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "already done" in rerun.stdout and "4 of 4 shapes done" in rerun.stdout
    assert all(r.status == "done" for r in sweep_rows(make_cfg(tmp_path)).values())


def test_sigterm_stops_the_sweep_as_ctrl_c_does(tmp_path):
    """`kill`, `timeout` and batch schedulers send SIGTERM: the sweep stops in order (its summary, the shapes done
    kept, one line, exit 143) instead of dying mid-write, and a rerun resumes."""
    proc = start_until_a_shape_is_done(tmp_path)
    os.kill(proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out + err
    assert err.strip().splitlines() == ["terminated; everything measured so far is stored, rerun to resume"]
    assert "was INTERRUPTED" in out and "shapes done" in out
    rows = sweep_rows(make_cfg(tmp_path))
    assert 1 <= len(rows) < 4 and all(r.status == "done" for r in rows.values())
    rerun = subprocess.run([sys.executable, str(tmp_path / "sweep_script.py")], capture_output=True, text=True,
                           timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{len(rows)} already done" in rerun.stdout and "4 of 4 shapes done" in rerun.stdout


def test_one_process_per_gpu(tmp_path):
    outcome, text, cfg = sweep(tmp_path, devices=(0, 1))
    assert outcome.exit_code == 0 and outcome.done == 4
    assert "(2 GPUs)" in outcome.summary
    rows = sweep_rows(cfg)
    assert {r.worker for r in rows.values()} <= {"gpu0", "gpu1"} and all(r.status == "done" for r in rows.values())


def test_failed_shape_exits_1_and_is_retried(tmp_path):
    class Broken(ShapeFake):
        def call(self, op, timeout_s, **kw):
            if op == "baselines" and kw["problem"].key == SHAPES[1]:
                raise RuntimeError("cuBLAS exploded")
            return super().call(op, timeout_s, **kw)

    outcome, text, cfg = sweep(tmp_path, worker=Broken)
    assert outcome.exit_code == 1 and outcome.failed == 1 and outcome.done == 3
    assert "FAILED: RuntimeError: cuBLAS exploded" in text and "Failed: 256x256x512" in outcome.summary
    outcome, text, _ = sweep(tmp_path)
    assert outcome.exit_code == 0 and [r.shape for r in outcome.this_run] == [SHAPES[1]]


def test_neighbour_seeds_nearest_first_and_accepting(tmp_path):
    from evo.kernel import KernelSource

    store = Store(tmp_path / "evo.db")
    naive = (TESTS / "data" / "naive.cu").read_text()
    texts = {}
    for i, (shape, req) in enumerate([("256x256x256", "M > 0"), ("4096x4096x4096", "M > 0"), ("512x512x512", "M % 1024 == 0")]):
        src = naive.replace("params: {}", f"params: {{V: {i}}}\nrequires: \"{req}\"", 1)
        ks = KernelSource.parse(src)
        texts[shape] = ks
        store.add_candidate(ks)
        store.add_evaluation(shape, "TN", "G", EvalResult(ks.hash, True, "done", time_us=10.0))
    seeds = neighbour_seeds(store, parse_shape("300x300x300"), "G", "sm_90a", 132, 5)
    hashes = [KernelSource.parse(s).hash for s in seeds]
    # 512^3's winner requires M % 1024 == 0 and is skipped; 256^3 is nearer than 4096^3
    assert hashes == [texts["256x256x256"].hash, texts["4096x4096x4096"].hash]
    assert neighbour_seeds(store, parse_shape("300x300x300"), "G", "sm_90a", 132, 1) == seeds[:1]
    assert neighbour_seeds(store, parse_shape("300x300x300"), "other", "sm_90a", 132, 5) == []
    assert neighbour_seeds(store, parse_shape("300x300x300"), "G", "sm_90a", 132, 0) == []
    # the unchecked list, nearest first (512^3's too), read no further than the last one taken
    from evo.proposers.neighbours import nearest_winners, serving

    near = [KernelSource.parse(s).hash for s in nearest_winners(store, parse_shape("300x300x300"), "G")]
    assert near == [texts[s].hash for s in ("256x256x256", "512x512x512", "4096x4096x4096")]

    def then_broken():
        yield from (texts["512x512x512"].text, texts["256x256x256"].text)
        raise AssertionError("read past the last one taken")

    assert serving(then_broken(), parse_shape("300x300x300"), "sm_90a", 132, 1) == [texts["256x256x256"].text]


def test_select_shapes_and_cli_errors(tmp_path, capsys):
    shapes = load_shapes(ROOT / "shapes" / "grid1000.yaml")
    assert [p.key for p in select_shapes(shapes, limit=3)] == ["64x64x64", "64x64x128", "64x64x256"]
    a, b = select_shapes(shapes, sample=10, seed=5), select_shapes(shapes, sample=10, seed=5)
    assert a == b and len(a) == 10 and a != select_shapes(shapes, sample=10, seed=6)
    with pytest.raises(EvoError):
        select_shapes(shapes, limit=3, sample=3)
    f = str(ROOT / "shapes" / "sample24.yaml")
    assert main(["--shapes", f, "--limit-shapes", "2", "--sample", "3"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(["--shapes", f, "--limit-shapes", "0"]) == 2
    assert main(["--shapes", f, "--gpus", "x"]) == 2
    assert main(["--shapes", str(tmp_path / "none.yaml")]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # argparse's refusal: one line, exit 2
        main(["--shapes", f, "--order", "shortest"])
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_sample24_spans_the_grid():
    grid = {p.key for p in load_shapes(ROOT / "shapes" / "grid1000.yaml")}
    sample = load_shapes(ROOT / "shapes" / "sample24.yaml")
    assert len(sample) == 24 and len({p.key for p in sample}) == 24 and {p.key for p in sample} <= grid
    flops = sorted(p.flops for p in sample)
    assert flops[0] <= 2 * 256 ** 3 and flops[-1] >= 2 * 8192 ** 3


def test_rows_merge_into_another_archive(tmp_path):
    """What a Ray node returns merges into the head's archive: runs get fresh ids and evaluations follow them."""
    from evo.distributed import export_rows, merge_rows

    sweep(tmp_path / "node", shapes=SHAPES[:2])
    node = Store(tmp_path / "node" / "evo.db")
    head = Store(tmp_path / "head.db")
    head.start_run("x", "y", {})  # the head's run ids differ from the node's
    ids = [r[0] for r in node.db.execute("SELECT id FROM runs WHERE shape=?", (SHAPES[1],))]
    rows = export_rows(node, SHAPES[1], "TN", "Fake_GPU", run_ids=ids)
    counts = merge_rows(head, rows)
    assert counts["runs"] == 1 and counts["evaluations"] > 0 and counts["baselines"] == 3
    q = "SELECT COUNT(*) FROM evaluations e JOIN runs r ON r.id=e.run_id WHERE e.shape=? AND r.shape=?"
    assert head.db.execute(q, (SHAPES[1], SHAPES[1])).fetchone()[0] == counts["evaluations"]
    assert head.best(SHAPES[1], "TN", "Fake_GPU")["hash"] == node.best(SHAPES[1], "TN", "Fake_GPU")["hash"]
    merge_rows(head, rows)  # merging twice adds a run record but no duplicate results
    assert head.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == counts["evaluations"]
    # the prior rows the head ships to a node carry everything about the shape
    prior = export_rows(head, SHAPES[1], "TN", "Fake_GPU")
    assert len(prior["evaluations"]["rows"]) == counts["evaluations"] and prior["runs"]["rows"] == []


def test_longest_shapes_first():
    from evo.sweep import longest_first

    shapes = [parse_shape(s) for s in ("64x64x64", "8192x8192x8192", "4096x4096x1024", "16x8192x8192")]
    assert [p.key for p in longest_first(shapes)] == ["8192x8192x8192", "4096x4096x1024", "16x8192x8192", "64x64x64"]


def test_gpu_hour_budget_goes_to_shapes_still_improving(tmp_path, monkeypatch):
    clock = [1000.0]

    def tick():  # every reading of the clock is a second of GPU time: the fake searches take time
        clock[0] += 1.0
        return clock[0]

    monkeypatch.setattr(time, "monotonic", tick)
    cfg = make_cfg(tmp_path, max_candidates=0, patience_seconds=0, first_round_share=0.5)
    out = io.StringIO()
    budget_h = 0.05  # 180 GPU-seconds: 30 per shape in round 1, the rest to shapes whose time ran out
    outcome = run_sweep([parse_shape(s) for s in SHAPES[:3]], cfg, shapes_file="t.yaml", device_ids=[0],
                        worker_factory=ShapeFake, compiler=CachingFakeCompiler(), budget_gpu_hours=budget_h, out=out)
    text = out.getvalue()
    assert outcome.exit_code == 0
    assert "round 1 gives each shape 0.50 GPU-minutes" in text
    assert "round 2:" in text
    rows = sweep_rows(cfg)
    assert all(r.stop for r in rows.values())
    spent = sum(r.seconds for r in rows.values())
    assert spent <= budget_h * 3600 * 1.5  # the rounds stop when the budget is used (a search overruns by its last step)
    assert max(r.seconds for r in rows.values()) > 30  # some shape got more than its first round


def test_sweep_cli_refuses_a_bad_budget(capsys):
    assert main(["--shapes", "shapes/sample24.yaml", "--budget-gpu-hours", "-1"]) == 2
    assert "--budget-gpu-hours" in capsys.readouterr().err


def test_sweep_compare_cheap_against_expensive(tmp_path, capsys):
    from bench.sweep_compare import main as compare_main

    dbs = []
    for name, times in (("cheap", (10.0, 20.0, 31.0)), ("expensive", (10.0, 19.9, 30.0))):
        store = Store(tmp_path / f"{name}.db")
        for shape, t in zip(("64x64x64", "128x128x128", "256x256x256"), times):
            store.add_evaluation(shape, "TN", "G", EvalResult(f"h{shape}", True, "done", time_us=t, seconds=1.0))
            store.db.execute("INSERT INTO candidates (hash, family, params) VALUES (?,?,?)", (f"h{shape}", "toy", "{}"))
        store.close()
        dbs.append(str(tmp_path / f"{name}.db"))
    assert compare_main(dbs + ["--md", str(tmp_path / "c.md")]) == 0
    out = capsys.readouterr().out
    assert "| 256x256x256 | 31.00 | 30.00 | 1.033 | NO |" in out and "| 128x128x128 | 20.00 | 19.90 | 1.005 | yes |" in out
    assert "on 67% of 3 shapes" in out and (tmp_path / "c.md").is_file()
    assert compare_main([dbs[0], str(tmp_path / "none.db")]) == 2


def test_table_origins_flags_unsearched_defaults(tmp_path, capsys):
    import json as _json

    from bench.table_origins import main as origins_main
    from evo.families import load_families

    (fam,) = load_families(names=["wgmma_sm90"])
    src = ROOT / "kernels_out" / "NVIDIA_H200" / "table.json"
    doc = _json.loads(src.read_text())
    row = next(r for r in doc["rows"] if r.get("family") == "wgmma_sm90")
    far = dict(fam.default_params(), BM=64, BN=64, CONSUMERS=1, STAGES=8, SPLIT_K=4, GROUP=1)
    rows = []
    (tmp_path / "G" / "TN").mkdir(parents=True)
    for name, params, lineage in (("64x64x64", fam.default_params(), "a(mutate)"), ("128x128x128", far, "a <- b <- c <- d <- e")):
        rows.append(dict(row, shape=name, kernel_path=f"G/TN/{name}.cu", lineage=lineage))
        (tmp_path / "G" / "TN" / f"{name}.json").write_text(_json.dumps({"params": params}))
    (tmp_path / "G" / "table.json").write_text(_json.dumps(dict(doc, rows=rows)))
    assert origins_main([str(tmp_path / "G")]) == 0
    out = capsys.readouterr().out
    assert "| 64x64x64 |" in out and out.split("| 64x64x64 |")[1].split("\n")[0].rstrip().endswith("YES |")
    assert out.split("| 128x128x128 |")[1].split("\n")[0].rstrip().endswith("no |")
    assert "1 of 2 rows with an evo kernel hold an unsearched default" in out


def test_gpu_processes_share_the_cpus(tmp_path):
    from evo.sweep import share_cpus

    cfg = make_cfg(tmp_path)
    assert cfg.compile.jobs == 0
    two = share_cpus(cfg, 2)
    assert two.compile.jobs == max(1, (os.cpu_count() or 1) // 2) and share_cpus(cfg, 1) is cfg
    fixed = share_cpus(load_config(overrides={"compile": {"jobs": 3}}), 4)
    assert fixed.compile.jobs == 3


def test_each_family_is_enumerated_once_per_sweep(tmp_path, monkeypatch):
    """The prior of every shape's search enumerates a family's space; a sweep's searches share one enumeration."""
    from evo.families import Family

    calls: list[str] = []
    real = Family.valid_instances
    monkeypatch.setattr(Family, "valid_instances", lambda self: calls.append(self.name) or real(self))
    outcome, _, _ = sweep(tmp_path)
    assert outcome.exit_code == 0
    assert calls and len(calls) == len(set(calls)), calls  # every family once, not once per shape


def test_a_template_change_makes_done_shapes_due_again(tmp_path):
    """A nightly rerun after a template change searches the done shapes again (with the new kernels); a rerun with
    the same templates, or templates changed only in their comments, searches nothing; --keep-stale keeps the old
    behaviour."""
    tpl = tmp_path / "templates"
    shutil.copytree(TOY, tpl)
    shapes = [parse_shape(s) for s in SHAPES]

    def run(**kw):
        cfg = make_cfg(tmp_path, templates=tpl)
        out = io.StringIO()
        o = run_sweep(shapes, cfg, shapes_file="test.yaml", device_ids=[0], worker_factory=ShapeFake,
                      compiler=CachingFakeCompiler(), out=out, **kw)
        return o, out.getvalue(), cfg

    first, _, cfg = run()
    assert first.done == 4 and len({r.templates for r in sweep_rows(cfg).values()}) == 1
    again, text, _ = run()
    assert "4 already done, 0 to search" in text and again.this_run == []
    kernel = next(tpl.glob("*/kernel.cu"))
    kernel.write_text(kernel.read_text() + "\n// a note: measured again, nothing changed\n")
    noted, text, _ = run()
    assert "4 already done, 0 to search" in text and noted.this_run == []   # a comment is not a new kernel
    kernel.write_text(kernel.read_text() + "__device__ int evo_changed;\n")
    kept, text, _ = run(keep_stale=True)
    assert "4 already done, 0 to search" in text and kept.this_run == []
    redone, text, cfg = run()
    assert "0 already done, 4 to search (4 of them done with older templates: searched again)" in text
    assert len(redone.this_run) == 4 and redone.exit_code == 0 and "4 of 4 shapes done" in redone.summary
    assert len({r.templates for r in sweep_rows(cfg).values()}) == 1 and first.this_run[0].templates != redone.this_run[0].templates


def test_another_gpus_newer_find_makes_a_done_shape_due_once(tmp_path):
    """A shape this GPU finished is searched again when another GPU's table publishes, dated since, a kernel for it
    that this archive never timed; the search races it, and the next run finds nothing due. A find dated before the
    shape's search, one whose family does not claim this GPU's arch, one of a family the sweep does not search, and
    --keep-stale leave the shape done."""
    import json

    from evo.kernel import KernelSource

    shapes = [parse_shape(s) for s in SHAPES[:2]]

    def run(**kw):
        cfg = make_cfg(tmp_path)
        out = io.StringIO()
        o = run_sweep(shapes, cfg, shapes_file="test.yaml", device_ids=[0], worker_factory=ShapeFake,
                      compiler=CachingFakeCompiler(), out=out, **kw)
        return o, out.getvalue(), cfg

    first, _, cfg = run()
    out_dir = Path(cfg.paths.out)
    table, doc = copy_table_as_other_gpu(out_dir)
    row = next(r for r in doc["rows"] if r["shape"] == SHAPES[0])
    kfile = out_dir / row["kernel_path"]
    theirs = kfile.read_text().replace("float acc = 0.f;", "float acc = 0.f; acc += 0.f;")  # the other GPU's find
    kfile.write_text(theirs)

    def publish(text, date):
        kfile.write_text(text)
        row.update(hash=KernelSource.parse(text).hash, date=date)
        table.write_text(json.dumps(doc))

    publish(theirs, "2000-01-01")  # found before this GPU's search
    _, text, _ = run()
    assert "2 already done, 0 to search" in text
    today = time.strftime("%Y-%m-%d", time.gmtime())
    publish(theirs.replace("archs: [sm_80, sm_90a]", "archs: [sm_80]"), today)  # not for this GPU's arch
    _, text, _ = run()
    assert "2 already done, 0 to search" in text
    publish(theirs.replace("family: toy", "family: elsewhere", 1), today)  # a family this sweep does not search
    _, text, _ = run()
    assert "2 already done, 0 to search" in text
    publish(theirs, today)
    _, text, _ = run(keep_stale=True)
    assert "2 already done, 0 to search" in text
    redone, text, _ = run()
    assert (f"1 already done, 1 to search (1 of them done before another GPU's table published a kernel for them: "
            f"searched again to race it, e.g. {SHAPES[0]} from Other_GPU)") in text
    assert [r.shape for r in redone.this_run] == [SHAPES[0]]
    store = Store(cfg.paths.db)
    assert store.evaluated(KernelSource.parse(theirs).hash, SHAPES[0], "TN", "Fake_GPU")
    store.close()
    _, text, _ = run()
    assert "2 already done, 0 to search" in text  # raced once: not due again


def test_a_fresh_archive_starts_from_the_tables_nearest_rows(tmp_path):
    """A sweep on a new archive beside an existing table: even its first shape is offered the kernels the table
    publishes for the nearest shapes (generation 0 weighs them with its other proposals), and the sweep counts
    them as seeds offered."""
    _, _, cfg1 = sweep(tmp_path / "first", shapes=SHAPES[:2])
    cfg = make_cfg(tmp_path / "second")
    cfg.paths.out = cfg1.paths.out
    buf = io.StringIO()
    outcome = run_sweep([parse_shape("300x300x300")], cfg, shapes_file="test.yaml", device_ids=[0],
                        worker_factory=ShapeFake, compiler=CachingFakeCompiler(), out=buf)
    assert outcome.done == 1
    assert "  order: likely wins first (evo's speedup on the 2-row table's nearest rows)" in buf.getvalue()
    row = sweep_rows(cfg)["300x300x300"]
    assert row.seeds_offered == 2  # the two rows of the table
    assert "kernels of neighbouring shapes offered as seeds" in outcome.summary


def test_counting_compiler_recompiles_an_archived_kernel_whose_cubin_is_gone(tmp_path):
    """A sweep carried to a fresh machine re-checks the archive's best kernels, whose cubins were built elsewhere:
    evo.compile.stored_cubin compiles them again through the sweep's counting wrapper (it once had no .compile and
    every shape of such a sweep failed with an AttributeError)."""
    from evo.compile import stored_cubin
    from evo.kernel import KernelSource
    from evo.sweep import CountingCompiler

    source = (Path(__file__).parent / "data" / "naive.cu").read_text()
    ks = KernelSource.parse(source)
    store = Store(str(tmp_path / "evo.db"))
    store.add_compile(CompileResult(ks.hash, "sm_90a", True, cubin_path=str(tmp_path / "elsewhere" / "k.cubin"), registers=32))
    counting = CountingCompiler(FakeCompiler(cache_dir=tmp_path / "cache"))
    path = stored_cubin(counting, store, source, "sm_90a")
    assert Path(path).is_file() and path.startswith(str(tmp_path / "cache"))
    assert counting.new == 1 and counting.reused == 0
    assert store.compile_result(ks.hash, "sm_90a").cubin_path == path  # the record points at this machine's cubin
    store.close()


class DriftOnOneShape(ShapeFake):
    """The worker reports every candidate of 512x256x256 as timed in two slow windows (its time scaled, the raw
    median twice as long), as evo.gpu.session does when cuBLAS beside it ran slow (evo/drift.py)."""

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "evaluate" and res.ok and kw["problem"].key == "512x256x256":
            res.measured_us, res.cublas_us = 2 * res.time_us, 2 * res.cublas_us
            res.gpu_state = "SM clock 990 of 1980 MHz; clock held back by hardware slowdown"  # asked after the slow window
        return res


def test_the_sweep_reports_shapes_timed_while_the_gpu_ran_slow(tmp_path):
    outcome, text, cfg = sweep(tmp_path, worker=DriftOnOneShape)
    line = next(l for l in text.splitlines() if l.startswith("[") and "512x256x256" in l)
    assert "timed while the GPU ran slow" in line
    assert not any("ran slow" in l for l in text.splitlines() if l.startswith("[") and "512x256x256" not in l)
    assert "Timing drift: on 1 shapes the GPU ran slow for a while" in outcome.summary and "512x256x256)" in outcome.summary
    assert ("After a slow window on 512x256x256 the GPU reported: SM clock 990 of 1980 MHz; clock held back by "
            "hardware slowdown." in outcome.summary)
    rows = sweep_rows(cfg)
    assert rows["512x256x256"].drift_scaled >= 1 and rows["256x256x256"].drift_scaled == 0
    assert rows["512x256x256"].gpu_state.startswith("SM clock 990") and not rows["256x256x256"].gpu_state
    assert (tmp_path / "sweep_logs" / "Fake_GPU_512x256x256.log").read_text().count("scaled)") == rows["512x256x256"].drift_scaled


def test_an_older_sweep_table_gains_integer_columns(tmp_path):
    import sqlite3

    from evo.store import APP_ID

    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute(f"PRAGMA application_id={APP_ID}")
    con.execute("CREATE TABLE sweep_shapes (shape TEXT, layout TEXT, gpu TEXT, status TEXT, PRIMARY KEY (shape, layout, gpu))")
    con.execute("INSERT INTO sweep_shapes VALUES ('64x64x64', 'TN', 'g', 'done')")
    con.commit()
    con.close()
    store = Store(db)
    log = SweepLog(store)
    kinds = {r[1]: r[2] for r in store.db.execute("PRAGMA table_info(sweep_shapes)")}
    assert kinds["drift_scaled"] == "INTEGER" and kinds["seeds_offered"] == "INTEGER" and kinds["best_us"] == "REAL"
    from evo.sweep import ShapeResult

    log.record(ShapeResult("128x64x64", "TN", "g", "done", drift_scaled=3))
    got = {r.shape: r.drift_scaled for r in log.results("g")}
    assert got == {"64x64x64": None, "128x64x64": 3}
