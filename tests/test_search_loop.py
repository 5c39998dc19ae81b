"""The search plumbing end to end with a fake GPU worker and a fake compiler."""
import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from evo.config import load_config
from evo.problem import parse_shape
from evo.search import Search
from evo.store import Store
from evo.kernel import KernelSource
from evo.records import BaselineResult
from fakes import FakeCompiler, FakeWorker, copy_table_as_other_gpu

TOY = str(Path(__file__).parent / "data" / "families")


def make_cfg(tmp_path, **search):
    s = {"budget_minutes": 0, "max_candidates": 20, "children": 6, "population": 6, "elites": 2, "initial_random": 4, "seed": 1}
    s.update(search)
    return load_config(overrides={"search": s, "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"),
                                                          "templates": TOY}})


def run(tmp_path, cache_dir=None, **search):
    cfg = make_cfg(tmp_path, **search)
    out = io.StringIO()
    comp = FakeCompiler(cache_dir)
    s = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=comp)
    summary = s.run()
    return summary, out.getvalue(), comp, cfg


def test_search_finds_best_and_exports(tmp_path):
    summary, text, comp, cfg = run(tmp_path, max_candidates=0)  # until the space is exhausted
    # best toy instance: UNROLL 8, TILE 16, PAD 0 -> 12.5 us
    assert summary.best_us == pytest.approx(12.5)
    assert summary.correct > 0 and summary.rejected > 0
    assert "compile failed" in text and "rejected at crash" in text and "rejected at check" in text
    assert "new best" in text and "[gen 1" in text
    table = Path(summary.export_dir) / "table.csv"
    rows = list(csv.DictReader(table.open()))
    assert rows[0]["shape"] == "256x256x256" and rows[0]["winner"] == "evo"
    assert float(rows[0]["speedup_cublaslt_autotune"]) == pytest.approx(45.0 / 12.5, rel=1e-3)
    assert rows[0]["timing_source"] == "confirm"
    kernel = Path(cfg.paths.out) / rows[0]["kernel_path"]
    assert "UNROLL 8" in kernel.read_text()
    meta = json.loads(kernel.with_suffix(".json").read_text())
    assert meta["launch"]["block"] == [16, 16, 1] and meta["params"]["UNROLL"] == 8


def test_rerun_resumes_without_repeating(tmp_path):
    s1, _, comp1, cfg = run(tmp_path, max_candidates=10)
    store = Store(cfg.paths.db)
    n1 = store.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    store.close()
    s2, text2, comp2, _ = run(tmp_path, max_candidates=10)
    assert "resuming" in text2
    store = Store(cfg.paths.db)
    hashes = [r[0] for r in store.db.execute("SELECT hash FROM evaluations")]
    assert len(hashes) == len(set(hashes)) and len(hashes) > n1
    assert not set(comp1.compiled) & set(comp2.compiled), "a candidate was compiled twice"
    # baselines and ceilings are measured once per (shape, GPU)
    assert FakeWorker.instances[-1].calls.count("baselines") == 1  # only the final confirm
    assert s2.best_us <= s1.best_us


def test_exhausted_space_stops(tmp_path):
    summary, text, _, _ = run(tmp_path, max_candidates=0, children=20)
    assert "exhausted" in summary.stop_reason
    # 3 TILE x 4 UNROLL x 4 PAD = 48 instances, all constraint-valid
    store = Store(load_config(overrides={"paths": {"db": str(tmp_path / "evo.db")}}).paths.db)
    assert store.db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 48


def test_optuna_proposer_runs(tmp_path):
    summary, text, _, _ = run(tmp_path, max_candidates=16, proposers=["optuna", "mutate"])
    assert summary.correct > 0
    store = Store(str(tmp_path / "evo.db"))
    props = {r[0] for r in store.db.execute("SELECT proposer FROM candidates")}
    assert {"optuna", "mutate"} <= props


def test_only_vetted_champions_are_published(tmp_path, monkeypatch):
    """A champion that fails its pre-export re-check is rejected; the table publishes the next vetted one."""
    monkeypatch.setattr(FakeWorker, "fail_recheck", staticmethod(lambda p: p.get("UNROLL") == 8 and p.get("PAD") == 0))
    summary, text, _, cfg = run(tmp_path, max_candidates=0)
    assert "is rejected: re-check failed" in text
    rows = list(csv.DictReader((Path(summary.export_dir) / "table.csv").open()))
    assert rows[0]["winner"] == "evo" and rows[0]["timing_source"] == "confirm"
    kernel = (Path(cfg.paths.out) / rows[0]["kernel_path"]).read_text()
    assert "UNROLL 8" in kernel and "PAD 1" in kernel  # the 12.5 us PAD 0 champion was rejected: 13.5 us is next
    assert summary.best_us == pytest.approx(13.5)


def test_nothing_published_when_no_champion_survives(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "fail_recheck", staticmethod(lambda p: True))
    summary, text, _, cfg = run(tmp_path, max_candidates=12)
    rows = list(csv.DictReader((Path(summary.export_dir) / "table.csv").open()))
    assert rows[0]["winner"] != "evo" and rows[0]["kernel_path"] == "" and rows[0]["family"] == ""
    assert not list(Path(cfg.paths.out).rglob("*.cu"))


def test_archive_on_a_machine_without_its_cubins(tmp_path):
    """The archive's compile records point into the compile cache of the machine that built it. On another
    machine (or after the cache is cleared) the champion is compiled again, not rejected for a missing file."""
    import shutil

    s1, _, _, cfg = run(tmp_path, cache_dir=tmp_path / "cache1", max_candidates=0)  # exhausts the toy space
    shutil.rmtree(tmp_path / "cache1")  # the archive moves on; its cubins stay behind
    s2, text, comp2, _ = run(tmp_path, cache_dir=tmp_path / "cache2", max_candidates=0)  # nothing new to try
    assert "is rejected" not in text and "re-timing failed" not in text
    assert s2.best_hash == s1.best_hash and s2.best_us == pytest.approx(12.5)
    assert s2.best_hash in comp2.compiled  # recompiled here, into this machine's cache
    store = Store(cfg.paths.db)
    assert Path(store.compile_result(s2.best_hash, "sm_90a").cubin_path).parent == tmp_path / "cache2"
    bad = store.db.execute("SELECT COUNT(*) FROM evaluations WHERE stage = 'recheck'").fetchone()[0]
    assert bad == 0


def test_the_budget_starts_after_the_baselines(tmp_path):
    # timing the baselines (cuBLASLt autotune) and the GPU's ceilings is one-off setup, not search: the budget counts
    # the search itself, so a slow baseline call leaves it whole
    import time

    class SlowBaselines(FakeWorker):
        def call(self, op, timeout_s, **kw):
            if op == "baselines":
                time.sleep(1.5)
            return super().call(op, timeout_s, **kw)

    cfg = make_cfg(tmp_path, budget_minutes=0.02, max_candidates=0)  # 1.2 s, shorter than the baselines
    s = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=SlowBaselines, compiler=FakeCompiler())
    summary = s.run()
    assert summary.correct > 1 and summary.seconds >= 1.5  # more than generation 0's first correct kernel


def test_quick_compiles_are_started_first(tmp_path):
    # the archive's compile times per family order a generation's compiles: CUTLASS instances (30-60 s each) go
    # after the ones that take a second, so those are timed while CUTLASS compiles; within a family, proposal order
    from types import SimpleNamespace

    from evo.records import CompileResult
    from evo.search import quick_compiles_first

    store = Store(str(tmp_path / "evo.db"))
    ks = lambda fam, h: SimpleNamespace(hash=h, meta=SimpleNamespace(family=fam, params={}), text=h)  # noqa: E731
    for fam, h, sec in [("slow", "s0", 40.0), ("slow", "s1", 50.0), ("slow", "s2", 0.0), ("quick", "q0", 0.8)]:
        store.db.execute("INSERT INTO candidates VALUES (?,?,?,?,?,?,?,?,?)", (h, fam, "{}", h, "", "", "", "", 0.0))
        store.add_compile(CompileResult(h, "sm_90a", True, seconds=sec))
    store.db.commit()
    assert store.compile_seconds("sm_90a") == {"slow": 50.0, "quick": 0.8} and store.compile_seconds("sm_80") == {}
    fresh = [(ks("slow", "a"), 1), (ks("quick", "b"), 2), (ks("new", "c"), 3), (ks("slow", "d"), 4), (ks("quick", "e"), 5)]
    order = [k.hash for k, _ in quick_compiles_first(fresh, store.compile_seconds("sm_90a"))]
    assert order == ["c", "b", "e", "a", "d"]


def test_a_search_does_not_replace_a_better_table_kernel(tmp_path):
    # the table already holds another kernel for the shape, measured 9x the best library: a new search (fresh
    # archive, same table folder) that ends slower says so and leaves the table's row and kernel file as they were
    _, _, _, cfg = run(tmp_path / "first", max_candidates=0)
    out_dir = Path(cfg.paths.out)
    table = out_dir / "Fake_GPU" / "table.json"
    doc = json.loads(table.read_text())
    doc["rows"][0].update(hash="0123456789abcdef", speedup_best_library=9.0)
    table.write_text(json.dumps(doc))
    kernel = out_dir / doc["rows"][0]["kernel_path"]
    before = kernel.read_text()
    cfg2 = make_cfg(tmp_path / "second", max_candidates=3)
    cfg2.paths.out = str(out_dir)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg2, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    text = out.getvalue()
    assert "the table keeps its kernel 0123456789 (toy, 9.000x the best library in its run)" in text
    assert "exported kernel:" not in text and summary.kernel_path == ""
    assert kernel.read_text() == before
    assert json.loads(table.read_text())["rows"][0]["hash"] == "0123456789abcdef"


def _lucky(cfg) -> str:
    """Give a slow kernel of the archive a stored time better than the true best's (a lucky measurement of an
    earlier run); returns its hash."""
    store = Store(cfg.paths.db)
    slow = store.db.execute("SELECT hash FROM evaluations WHERE ok=1 ORDER BY time_us LIMIT 1 OFFSET 1").fetchone()[0]
    store.db.execute("UPDATE evaluations SET time_us=1.0 WHERE hash=?", (slow,))
    store.db.commit()
    store.close()
    return slow


def test_the_runoff_publishes_the_fastest_side_by_side(tmp_path):
    """Stored times come from different runs: the final re-timing races the archive's fastest few in one window,
    and the kernel that is fastest there is published, not the one with the luckiest stored time."""
    s1, _, _, cfg = run(tmp_path, max_candidates=0)  # exhausts the toy space: the true best is 12.5 us
    lucky = _lucky(cfg)
    s2, text, _, _ = run(tmp_path, max_candidates=0, runoff=3)
    assert "re-timing the 3 fastest kernels (" in text and "runoff: " in text
    assert s2.best_hash == s1.best_hash != lucky and s2.best_us == pytest.approx(12.5)
    store = Store(cfg.paths.db)
    assert store.confirm("256x256x256", "TN", "Fake_GPU")["hash"] == s1.best_hash
    # with a runoff of one, the stored best alone is re-timed and published (the behaviour this replaces)
    s3, text3, _, _ = run(tmp_path, max_candidates=0, runoff=1)
    assert "re-timing the best kernel " + lucky[:10] in text3 and s3.best_hash == lucky


class _WrongInTiming(FakeWorker):
    """The toy's true best computes wrong results when timed side by side (a kernel that cheats the timing)."""

    def call(self, op, timeout_s, **kw):
        res = super().call(op, timeout_s, **kw)
        if op == "baselines":
            for name, (src, _c) in (kw.get("extra") or {}).items():
                p = KernelSource.parse(src).meta.params
                if p.get("UNROLL") == 8 and p.get("PAD") == 0 and p.get("TILE") == 16:
                    res["results"][name] = BaselineResult(name, 12.5, 0.0, "WRONG: timed call: checksum differs")
        return res


def test_a_contender_wrong_in_the_runoff_is_rejected(tmp_path):
    cfg = make_cfg(tmp_path, max_candidates=0)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=_WrongInTiming, compiler=FakeCompiler()).run()
    text = out.getvalue()
    assert "failed its check in the re-timing: WRONG" in text
    assert summary.best_us == pytest.approx(13.5)  # the next one, vetted and confirmed
    store = Store(cfg.paths.db)
    stages = [r[0] for r in store.db.execute("SELECT stage FROM evaluations WHERE ok=0 AND stage='confirm'")]
    assert stages == ["confirm"]


def test_the_runoff_includes_this_runs_best(tmp_path):
    """A kernel found in this run races the archive's fastest even when older, luckier stored times rank it below
    the runoff's size."""
    s1, _, _, cfg = run(tmp_path, max_candidates=0)
    store = Store(cfg.paths.db)
    store.db.execute("DELETE FROM evaluations WHERE hash=?", (s1.best_hash,))  # the true best is found again below
    others = [r[0] for r in store.db.execute("SELECT hash FROM evaluations WHERE ok=1 ORDER BY time_us LIMIT 3")]
    for i, h in enumerate(others):  # three slower kernels with lucky stored times
        store.db.execute("UPDATE evaluations SET time_us=? WHERE hash=?", (1.0 + 0.1 * i, h))
    store.db.commit()
    store.close()
    s2, text, _, _ = run(tmp_path, max_candidates=0, runoff=3)
    assert "re-timing the 4 fastest kernels (" in text
    assert s2.best_hash == s1.best_hash and s2.best_us == pytest.approx(12.5)


def test_the_table_kernel_races_and_loses_its_row(tmp_path):
    """The table's kernel for the shape runs in the runoff; slower there, its older (better-looking) ratio does
    not keep its row."""
    s1, _, _, cfg = run(tmp_path, max_candidates=0)
    store = Store(cfg.paths.db)
    slower = store.db.execute("SELECT hash FROM evaluations WHERE ok=1 ORDER BY time_us LIMIT 1 OFFSET 4").fetchone()[0]
    store.close()
    table = Path(cfg.paths.out) / "Fake_GPU" / "table.json"
    doc = json.loads(table.read_text())
    doc["rows"][0].update(hash=slower, speedup_best_library=9.0)
    table.write_text(json.dumps(doc))
    s2, text, _, _ = run(tmp_path, max_candidates=0, runoff=3)
    assert "re-timing the 4 fastest kernels (" in text and slower[:10] in text.split("runoff: ")[1].splitlines()[0]
    assert "the table keeps its kernel" not in text
    assert json.loads(table.read_text())["rows"][0]["hash"] == s1.best_hash
    assert s2.table_hash == slower and s2.table_us > s2.best_us  # both from the runoff's one window
    assert (f"the table's kernel {slower[:10]} for this shape, in the runoff beside this search's best: "
            f"{s2.table_us:.2f} -> {s2.best_us:.2f} us ({s2.table_us / s2.best_us:.3f}x)") in text


def test_the_table_kernel_is_timed_where_the_archive_lacks_it(tmp_path):
    """A search on another archive (a fresh machine with the committed table) times the table's kernel for the shape
    first, so that it races in the runoff instead of keeping its row on a ratio from another run."""
    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)  # the table now publishes the toy's best
    cfg2 = make_cfg(tmp_path / "second", max_candidates=1)
    cfg2.paths.out = cfg1.paths.out
    out = io.StringIO()
    s2 = Search(parse_shape("256x256x256"), cfg2, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    text = out.getvalue()
    assert "timing 1 seed kernels (the table's kernel for this shape" in text
    store = Store(cfg2.paths.db)
    assert store.evaluated(s1.best_hash, "256x256x256", "TN", "Fake_GPU")
    assert s1.best_hash[:10] in text.split("runoff: ")[1].splitlines()[0] and s2.best_hash == s1.best_hash
    assert s2.table_hash == s1.best_hash and s2.table_us == pytest.approx(s2.best_us)
    assert f"the table's kernel {s1.best_hash[:10]} for this shape, in the runoff beside this search's best: stays" in text


def test_the_table_kernel_is_also_timed_as_rendered_from_todays_template(tmp_path):
    """A table kernel found with an older template (its text differs from what the family renders today for its
    parameters) is seeded twice: as published and re-rendered, so a search takes a template's improvement up."""
    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)
    table = Path(cfg1.paths.out) / "Fake_GPU" / "table.json"
    doc = json.loads(table.read_text())
    kfile = Path(cfg1.paths.out) / doc["rows"][0]["kernel_path"]
    older = kfile.read_text().replace("float acc = 0.f;", "float acc = 0.f; acc += 0.f;")  # "the older template"
    kfile.write_text(older)
    doc["rows"][0]["hash"] = KernelSource.parse(older).hash
    table.write_text(json.dumps(doc))
    cfg2 = make_cfg(tmp_path / "second", max_candidates=1)
    cfg2.paths.out = cfg1.paths.out
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg2, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "timing 2 seed kernels (the table's kernel for this shape and its rendering from today's template" in out.getvalue()
    store = Store(cfg2.paths.db)
    assert store.evaluated(KernelSource.parse(older).hash, "256x256x256", "TN", "Fake_GPU")
    assert store.evaluated(s1.best_hash, "256x256x256", "TN", "Fake_GPU")  # today's rendering of the same parameters


def test_a_gpu_without_a_table_row_starts_from_other_gpus_tables(tmp_path):
    """A first search on a new GPU times the kernel another GPU's table publishes for the shape (as published and
    as rendered today), if its family claims this GPU's arch."""
    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)
    out = Path(cfg1.paths.out)
    (out / "Fake_GPU").rename(out / "Other_GPU")
    table = out / "Other_GPU" / "table.json"
    doc = json.loads(table.read_text())
    for r in doc["rows"]:
        r["gpu"], r["kernel_path"] = "Other_GPU", r["kernel_path"].replace("Fake_GPU/", "Other_GPU/")
    table.write_text(json.dumps(doc))
    cfg2 = make_cfg(tmp_path / "second", max_candidates=1, runoff=3)
    cfg2.paths.out = cfg1.paths.out
    text = io.StringIO()
    Search(parse_shape("256x256x256"), cfg2, out=text, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "timing 1 seed kernels" in text.getvalue()
    assert Store(cfg2.paths.db).evaluated(s1.best_hash, "256x256x256", "TN", "Fake_GPU")
    # a kernel whose family does not claim this GPU's arch is not seeded
    shutil.rmtree(out / "Fake_GPU")  # the table the second search wrote for this GPU
    kfile = out / doc["rows"][0]["kernel_path"]
    kfile.write_text(kfile.read_text().replace("archs: [sm_80, sm_90a]", "archs: [sm_80]"))
    doc["rows"][0]["hash"] = KernelSource.parse(kfile.read_text()).hash
    table.write_text(json.dumps(doc))
    cfg3 = make_cfg(tmp_path / "third", max_candidates=1, runoff=3)
    cfg3.paths.out = cfg1.paths.out
    text = io.StringIO()
    Search(parse_shape("256x256x256"), cfg3, out=text, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "seed kernels" not in text.getvalue()


def test_a_gpu_with_a_table_row_also_races_other_gpus_kernels(tmp_path):
    """This GPU's table has a row for the shape, and another GPU's table publishes another kernel for it (found
    there later, or with a newer template): the search times both, so a find on one GPU reaches the other's row."""
    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)
    out = Path(cfg1.paths.out)
    table, doc = copy_table_as_other_gpu(out)
    kfile = out / doc["rows"][0]["kernel_path"]
    theirs = kfile.read_text().replace("float acc = 0.f;", "float acc = 0.f; acc += 0.f;")  # another GPU's find
    kfile.write_text(theirs)
    doc["rows"][0]["hash"] = KernelSource.parse(theirs).hash
    table.write_text(json.dumps(doc))
    cfg2 = make_cfg(tmp_path / "second", max_candidates=1, runoff=3)
    cfg2.paths.out = cfg1.paths.out
    text = io.StringIO()
    Search(parse_shape("256x256x256"), cfg2, out=text, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "timing 2 seed kernels" in text.getvalue()  # this GPU's row and the other GPU's kernel
    store = Store(cfg2.paths.db)
    assert store.evaluated(s1.best_hash, "256x256x256", "TN", "Fake_GPU")
    assert store.evaluated(KernelSource.parse(theirs).hash, "256x256x256", "TN", "Fake_GPU")
    # a family outside the run's (--families: e.g. a CUTLASS kernel a wgmma-only sweep would wait to compile) is not
    foreign = theirs.replace("family: toy", "family: elsewhere", 1)
    kfile.write_text(foreign)
    doc["rows"][0]["hash"] = KernelSource.parse(foreign).hash
    table.write_text(json.dumps(doc))
    cfg3 = make_cfg(tmp_path / "third", max_candidates=1, runoff=3)
    cfg3.paths.out = cfg1.paths.out
    Search(parse_shape("256x256x256"), cfg3, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert not Store(cfg3.paths.db).evaluated(KernelSource.parse(foreign).hash, "256x256x256", "TN", "Fake_GPU")


def test_a_shape_the_table_lacks_weighs_its_nearest_rows_in_generation_0(tmp_path):
    """A search of a shape no table row has gets the kernels the table publishes for the nearest other shapes as
    proposals of generation 0, ranked there with the rest (not timed ahead of everything as seeds)."""
    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)  # the table now publishes 256x256x256's best
    cfg2 = make_cfg(tmp_path / "second", max_candidates=0)
    cfg2.paths.out = cfg1.paths.out
    out = io.StringIO()
    s2 = Search(parse_shape("512x256x256"), cfg2, out=out, worker_factory=FakeWorker, compiler=FakeCompiler())
    s2.run()
    assert "seed kernels" not in out.getvalue()
    assert [KernelSource.parse(t).hash for t in s2.neighbour_seeds] == [s1.best_hash]
    assert Store(cfg2.paths.db).evaluated(s1.best_hash, "512x256x256", "TN", "Fake_GPU")


def test_the_table_neighbours_are_proposals_of_generation_0(tmp_path, monkeypatch):
    from evo.proposers.mutate import MutateProposer

    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)
    monkeypatch.setattr(MutateProposer, "propose", lambda self, ctx, n: [])  # nothing but the table's neighbours
    cfg2 = make_cfg(tmp_path / "second", max_candidates=0)
    cfg2.paths.out = cfg1.paths.out
    out = io.StringIO()
    s2 = Search(parse_shape("512x256x256"), cfg2, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert s2.best_hash == s1.best_hash and " table " in out.getvalue()


def test_the_table_neighbours_offered_nearest_first_within_the_limit_and_the_families(tmp_path):
    from evo.families import load_families
    from evo.proposers.neighbours import table_neighbours
    from fakes import FAKE_GPU

    _, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)
    table = Path(cfg1.paths.out) / "Fake_GPU" / "table.json"
    doc = json.loads(table.read_text())
    far = dict(doc["rows"][0], shape="4096x4096x4096", m=4096, n=4096, k=4096)  # the same kernel, a farther shape
    fams = load_families(Path(TOY))
    other = fams[0].render(fams[0].complete({"TILE": 8, "UNROLL": 1, "PAD": 3}))  # another instance for it
    kfile = Path(cfg1.paths.out) / doc["rows"][0]["kernel_path"]
    (kfile.parent / "far.cu").write_text(other.text)
    far.update(hash=other.hash, kernel_path=str(Path(doc["rows"][0]["kernel_path"]).parent / "far.cu"))
    doc["rows"].append(far)
    table.write_text(json.dumps(doc))

    def offered(shape, limit=8, families=fams):
        return [p.idea for p in table_neighbours(Path(cfg1.paths.out), FAKE_GPU, families, parse_shape(shape), limit)]

    assert offered("512x256x256") == ["the Fake_GPU table's kernel for 256x256x256", "the Fake_GPU table's kernel for 4096x4096x4096"]
    assert offered("2048x4096x4096") == ["the Fake_GPU table's kernel for 4096x4096x4096", "the Fake_GPU table's kernel for 256x256x256"]
    assert offered("512x256x256", limit=1) == ["the Fake_GPU table's kernel for 256x256x256"]
    assert offered("512x256x256", limit=0) == [] and offered("512x256x256", families=[]) == []
    assert offered("256x256x256") == ["the Fake_GPU table's kernel for 4096x4096x4096"]  # never the shape's own row
    # from a snapshot (read_tables): what the tables held then, whatever was exported since (a search's own row is
    # exported while its compile-ahead thread may still be reading the next shapes' neighbours)
    from evo.proposers.neighbours import read_tables

    snap = read_tables(Path(cfg1.paths.out), FAKE_GPU)
    table.write_text(json.dumps(dict(doc, rows=doc["rows"][:1])))
    assert [p.idea for p in table_neighbours(Path(cfg1.paths.out), FAKE_GPU, fams, parse_shape("512x256x256"), 8,
                                             snap)][1:] == ["the Fake_GPU table's kernel for 4096x4096x4096"]
    assert offered("512x256x256") == ["the Fake_GPU table's kernel for 256x256x256"]  # the file as it is now


def test_a_spent_budget_stops_the_compiles_left_but_not_the_starts(tmp_path):
    # once the budget is spent and a kernel is correct, the generation's compiles still queued are dropped (the GPU
    # would wait idle for them): a 0.3-minute search on a fresh machine overran its budget by the ~40 s its first
    # generation took to compile. Generation 0's family starts are still compiled and timed.
    import time

    default = {"TILE": 16, "UNROLL": 1, "PAD": 0}  # the toy family's default instance: a start

    class SlowCompiler(FakeCompiler):
        def __init__(self):
            super().__init__()
            self.params = []

        def compile(self, ks, arch):
            time.sleep(0.1)
            self.params.append(dict(ks.meta.params))
            return super().compile(ks, arch)

        def compile_many(self, items, jobs=0, on_done=None, stop=None):
            rest = [it for it in items if it[0].meta.params != default]
            items = rest[:2] + [it for it in items if it[0].meta.params == default] + rest[2:]  # the start third
            return super().compile_many(items, jobs, on_done=on_done, stop=stop)

    class IgnoresStop(SlowCompiler):
        def compile_many(self, items, jobs=0, on_done=None, stop=None):
            return super().compile_many(items, jobs, on_done=on_done)

    def search(comp):
        cfg = make_cfg(tmp_path / type(comp).__name__, budget_minutes=0.001, max_candidates=0, children=12,
                       initial_random=8)
        s = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=comp)
        return s.run()

    stopped, waited = SlowCompiler(), IgnoresStop()
    s_stopped, _ = search(stopped), search(waited)
    assert 2 <= len(stopped.compiled) < len(waited.compiled)
    assert default in stopped.params and s_stopped.correct == 2  # the first correct one, then the start (third) timed


def test_seeds_that_spend_the_budget_still_leave_the_starts_timed(tmp_path):
    """A sweep of a table shape on a fresh machine: the table's kernel (a slow compile) and a neighbour's winner
    take the whole budget. The seeds are timed past it (the incumbent must race in the runoff), and so is the first
    generation's family start: a 0.5-minute H100 sweep once timed two neighbours' winners only, dropping the table's
    CUTLASS kernel mid-compile and never reaching the starts."""
    import time

    from evo.families import load_families

    s1, _, _, cfg1 = run(tmp_path / "first", max_candidates=0)  # the table now publishes the toy's best
    (fam,) = load_families(TOY, names=["toy"])
    start = fam.render(fam.complete({}))  # the toy family's default instance: a start
    other = next(fam.render(p) for p in ({"TILE": 32}, {"TILE": 8}, {"UNROLL": 2}) if fam.render(p).hash != s1.best_hash)

    class SlowCompiler(FakeCompiler):
        def compile(self, ks, arch):
            time.sleep(0.5)  # every compile outlasts the 0.06 s budget
            return super().compile(ks, arch)

    cfg2 = make_cfg(tmp_path / "second", budget_minutes=0.001, max_candidates=0)
    cfg2.paths.out = cfg1.paths.out
    s = Search(parse_shape("256x256x256"), cfg2, out=io.StringIO(), worker_factory=FakeWorker, compiler=SlowCompiler(),
               seed_sources=[other.text])
    s.run()
    store = Store(cfg2.paths.db)
    for h in {s1.best_hash, other.hash, start.hash}:  # the table's kernel, the neighbour's winner, the start
        assert store.evaluated(h, "256x256x256", "TN", "Fake_GPU"), h


def test_other_shapes_winners_of_families_outside_the_run_are_not_timed(tmp_path):
    """seed_sources (a sweep's neighbour winners) pass through the run's families: --families F keeps another
    family's kernel out (it would be compiled, e.g. a minute of CUTLASS on a fresh machine, and timed)."""
    from evo.families import load_families

    (fam,) = load_families(TOY, names=["toy"])
    mine = fam.render(fam.complete({"TILE": 8}))
    foreign = fam.render(fam.complete({"UNROLL": 2})).text.replace("family: toy", "family: elsewhere", 1)
    assert KernelSource.parse(foreign).meta.family == "elsewhere"
    cfg = make_cfg(tmp_path, max_candidates=1)
    s = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=FakeWorker, compiler=FakeCompiler(),
               seed_sources=[mine.text, foreign])
    s.run()
    store = Store(cfg.paths.db)
    assert store.evaluated(mine.hash, "256x256x256", "TN", "Fake_GPU")
    assert not store.evaluated(KernelSource.parse(foreign).hash, "256x256x256", "TN", "Fake_GPU")
    assert s.neighbour_seeds[:1] == [mine.text]


def _sustained_cfg(tmp_path, **search):
    s = {"budget_minutes": 0, "max_candidates": 0, "children": 6, "population": 6, "elites": 2, "initial_random": 4,
         "seed": 1, "runoff": 3, "sustained_from_us": 10.0, "sustained_seconds": 0.1, "sustained_rounds": 1,
         "sustained_margin": 0.01}
    s.update(search)
    return load_config(overrides={"search": s, "dispatch": {"noise_floor": 0.1},
                                  "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY}})


def _fewer_cycles_for_pad_1(params):
    return 10.0 if params.get("PAD") == 1 else 20.0  # the 13.5 us kernel takes fewer cycles a call than the 12.5 us one


def test_cold_ties_are_published_by_fewest_cycles_under_sustained_load(tmp_path, monkeypatch):
    """Where the runoff's fastest takes search.sustained_from_us or more, the kernels that tie it cold (12.5 and 13.5
    us inside a 10 % band; 14.5 is outside) run back to back, and the one of fewest cycles a call is published,
    with its own cold time."""
    monkeypatch.setattr(FakeWorker, "sustained_kcycles", staticmethod(_fewer_cycles_for_pad_1))
    cfg = _sustained_cfg(tmp_path)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    text = out.getvalue()
    assert "under sustained load: the 2 kernels that tie the fastest cold" in text
    assert "goes first: fewest cycles a call where the cold times tie" in text
    assert summary.best_us == pytest.approx(13.5)  # the cold time of the kernel chosen, not the faster one's
    store = Store(cfg.paths.db)
    champion = store.confirm("256x256x256", "TN", "Fake_GPU")["hash"]
    assert "PAD 1" in store.kernel_row(champion, "256x256x256", "TN", "Fake_GPU")["source"]
    assert FakeWorker.instances[-1].calls.count("sustained") == 1


def test_no_sustained_windows_below_the_threshold_or_when_off(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "sustained_kcycles", staticmethod(_fewer_cycles_for_pad_1))
    for i, search in enumerate(({"sustained_from_us": 13.0}, {"sustained_from_us": 0})):
        cfg = _sustained_cfg(tmp_path / str(i), **search)
        out = io.StringIO()
        summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
        assert summary.best_us == pytest.approx(12.5) and "under sustained load" not in out.getvalue()
        assert "sustained" not in FakeWorker.instances[-1].calls


def test_no_sustained_windows_without_a_cold_tie(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "sustained_kcycles", staticmethod(_fewer_cycles_for_pad_1))
    cfg = _sustained_cfg(tmp_path)
    cfg.dispatch.noise_floor = 0.02  # 13.5 / 12.5 = 1.08: outside the band
    summary = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=FakeWorker,
                     compiler=FakeCompiler()).run()
    assert summary.best_us == pytest.approx(12.5) and "sustained" not in FakeWorker.instances[-1].calls


def test_a_kernel_wrong_after_the_sustained_windows_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "sustained_kcycles", staticmethod(_fewer_cycles_for_pad_1))
    monkeypatch.setattr(FakeWorker, "sustained_wrong", staticmethod(
        lambda p: "WRONG: relative error 1e+00" if p.get("PAD") == 1 else ""))
    cfg = _sustained_cfg(tmp_path)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "failed its check after the sustained windows: WRONG" in out.getvalue()
    assert summary.best_us == pytest.approx(12.5)
    store = Store(cfg.paths.db)
    assert [r[0] for r in store.db.execute("SELECT stage FROM evaluations WHERE ok=0 AND stage='sustained'")] == ["sustained"]


def test_failed_sustained_windows_leave_the_cold_order(tmp_path, monkeypatch):
    from evo.gpu.worker import WorkerFault

    class Hangs(FakeWorker):
        def call(self, op, timeout_s, **kw):
            if op == "sustained":
                raise WorkerFault("timeout: no answer within 130 s (hung kernel?); worker killed and restarted")
            return super().call(op, timeout_s, **kw)

    cfg = _sustained_cfg(tmp_path)
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=Hangs, compiler=FakeCompiler()).run()
    assert "the sustained windows failed (timeout" in out.getvalue() and summary.best_us == pytest.approx(12.5)


def test_long_calls_race_every_kernel_inside_the_noise_floor_of_the_stored_best(tmp_path):
    """Where the stored best takes search.sustained_from_us or more, the runoff also races the archive's kernels
    within dispatch.noise_floor of it, beyond search.runoff (12.5, 13.5 and 14.5 us inside a 20 % floor)."""
    for i, (sus, raced) in enumerate(((10.0, 3), (0.0, 2))):
        cfg = _sustained_cfg(tmp_path / str(i), runoff=2, sustained_from_us=sus)
        cfg.dispatch.noise_floor = 0.2
        out = io.StringIO()
        Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
        assert f"re-timing the {raced} fastest kernels (" in out.getvalue()


def test_fewer_cycles_inside_the_margin_leave_the_cold_fastest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(FakeWorker, "sustained_kcycles", staticmethod(lambda p: 19.9 if p.get("PAD") == 1 else 20.0))
    cfg = _sustained_cfg(tmp_path)  # 0.5 % fewer cycles against a 1 % margin
    out = io.StringIO()
    summary = Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=FakeWorker, compiler=FakeCompiler()).run()
    assert "under sustained load" in out.getvalue() and "goes first" not in out.getvalue()
    assert summary.best_us == pytest.approx(12.5)


def test_a_search_without_a_correct_kernel_ends_cleanly_with_the_sustained_order_on(tmp_path):
    from evo.records import EvalResult

    class AllWrong(FakeWorker):
        def call(self, op, timeout_s, **kw):
            if op == "evaluate":
                return EvalResult(kw["h"], False, "check", "random inputs #0: relative error 1e+00 > 1e-02")
            return super().call(op, timeout_s, **kw)

    cfg = _sustained_cfg(tmp_path, max_candidates=6)
    summary = Search(parse_shape("256x256x256"), cfg, out=io.StringIO(), worker_factory=AllWrong,
                     compiler=FakeCompiler()).run()
    assert summary.correct == 0 and summary.best_hash == "" and "sustained" not in FakeWorker.instances[-1].calls


def test_the_seeds_line_says_how_long_gathering_them_took(tmp_path):
    # gathering the seeds (tables read, kernels rendered and parsed) is Python while the GPU waits: the log says how long
    import re

    _, _, _, cfg = run(tmp_path, max_candidates=4)  # the table now publishes a kernel for the shape
    Path(cfg.paths.db).unlink()  # a fresh archive: the table's kernel is a seed to time
    _, text, _, _ = run(tmp_path, max_candidates=4)
    line = next(ln for ln in text.splitlines() if ln.startswith("timing ") and "seed kernels" in ln)
    assert re.search(r"\(gathered in \d+\.\d s\)$", line), line
