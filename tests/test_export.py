"""evo.export: noise bands and verdicts, cuBLASLt algorithms, datasheet roof, launch floor, the generated README."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

from evo.export import export_table, published_kernel, readme_text
from evo.problem import parse_shape
from evo.records import BaselineResult, EvalResult
from evo.store import Store
from evo.sweep import run_sweep
from test_sweep import CachingFakeCompiler, ShapeFake, make_cfg

GPU = "Fake_GPU"
ALGO = {"algorithm_id": 21, "tile": "64x128", "split_k": 1}


def swept(tmp_path, shapes):
    cfg = make_cfg(tmp_path)
    run_sweep([parse_shape(s) for s in shapes], cfg, device_ids=[0], worker_factory=ShapeFake,
              compiler=CachingFakeCompiler(), out=io.StringIO())
    return cfg, Store(cfg.paths.db)


def set_lead(store, shape, lead, spread):
    libs = json.loads(store.confirm(shape, "TN", GPU)["baselines"])
    best = min(v for v in libs.values() if v > 0)
    store.db.execute("UPDATE confirms SET time_us=?, spread=? WHERE shape=?", (best / lead, spread, shape))
    store.db.execute("UPDATE baselines SET spread=? WHERE shape=?", (spread, shape))
    store.db.commit()


def test_wins_count_only_beyond_noise_and_algorithms_are_kept(tmp_path):
    shapes = ["256x256x256", "512x512x2048", "1024x1024x1024"]
    cfg, store = swept(tmp_path, shapes)
    set_lead(store, "256x256x256", 1.009, 0.01)  # the 1.009x of the issue: a tie
    set_lead(store, "512x512x2048", 1.10, 0.01)  # a win
    set_lead(store, "1024x1024x1024", 1.04, 0.12)  # 4 % with 12 % spreads: inside a 6 % band
    store.db.execute("UPDATE baselines SET detail=? WHERE library='cublaslt_autotune'",
                     ("best of 8 by nvmath autotune; algorithm=" + json.dumps(ALGO),))
    store.db.execute("UPDATE ceilings SET detail = COALESCE(detail, '') || '; launch_us=3.420'")
    store.db.commit()
    out, rows = export_table(store, GPU, cfg.paths.out)
    by = {r.shape: r for r in rows}
    assert by["256x256x256"].verdict == "tie" and by["256x256x256"].winner != "evo"
    assert by["256x256x256"].noise_band == 0.02 and by["256x256x256"].speedup_best_library == 1.009
    assert by["512x512x2048"].verdict == "win" and by["512x512x2048"].winner == "evo"
    assert by["1024x1024x1024"].verdict == "tie" and by["1024x1024x1024"].noise_band == 0.06
    assert all(r.library_algorithms == {"cublaslt_autotune": ALGO} for r in rows)
    doc = json.loads((out / "table.json").read_text())
    assert doc["ceilings"]["launch_us"] == 3.42 and doc["noise_floor"] == 0.02 and doc["datasheet"] is None
    assert doc["rows"][0]["library_algorithms"]["cublaslt_autotune"]["algorithm_id"] == 21
    with open(out / "table.csv") as f:
        first = next(csv.DictReader(f))
    assert json.loads(first["library_algorithms"]) == {"cublaslt_autotune": ALGO} and first["verdict"]
    readme = (Path(cfg.paths.out) / "README.md").read_text()
    assert readme == readme_text(Path(cfg.paths.out))
    assert f"`{GPU}/`: 3 shapes; evo wins 1 beyond the noise band: 512x512x2048 (1.100x)." in readme
    assert "2 within the noise band" in readme


def test_readme_without_tables(tmp_path):
    assert "No table yet" in readme_text(tmp_path)


def test_committed_table_readme_is_current():
    """kernels_out/README.md is what the export writes for the committed tables."""
    root = Path(__file__).resolve().parent.parent / "kernels_out"
    assert (root / "README.md").read_text() == readme_text(root)


def test_refresh_recomputes_verdicts_from_the_table_alone(tmp_path, capsys):
    from evo.export import main, read_table

    src = Path(__file__).resolve().parent.parent / "kernels_out" / "NVIDIA_H200"
    dst = tmp_path / "NVIDIA_H200"
    dst.mkdir()
    doc = json.loads((src / "table.json").read_text())
    for r in doc["rows"]:  # as an older export wrote it: no noise columns
        for k in ("noise_band", "verdict", "spread", "best_library_spread", "library_algorithms",
                  "datasheet_roof_us", "pct_of_datasheet_roof"):
            r.pop(k, None)
        if r["hash"] and r["speedup_best_library"] > 1:
            r["winner"] = "evo"
    (dst / "table.json").write_text(json.dumps(doc))
    assert main(["--refresh", str(dst)]) == 0
    _, rows = read_table(dst)
    by = {r.shape: r for r in rows}
    # a row inside the 2 % band (the only band without spreads) is a tie, served by its best library
    tie = next(r["shape"] for r in doc["rows"] if r["hash"] and 0.98 < r["speedup_best_library"] < 1.0)
    assert by[tie].verdict == "tie" and by[tie].winner == by[tie].best_library != "evo"
    assert by["1x4096x4096"].winner == "evo" and by["1x4096x4096"].pct_of_datasheet_roof > 0
    r = by["1x4096x4096"]  # the share of the measured roofline follows the winner's time
    assert r.pct_of_roofline == round(100.0 * r.roofline_us / r.time_us, 1)
    # without spreads every band is the 2 % floor: a row is a win exactly when evo leads by more than that (counted
    # from the times, not the 4-digit speedup: 7.328 / 7.184 = 1.02004 is stored as 1.02)
    from evo.records import LIBRARIES

    def lead(r):
        libs = [r[f"{lib}_us"] for lib in LIBRARIES if r.get(f"{lib}_us")]
        return min(libs) / r["time_us"] if libs and r["time_us"] else 0.0

    wins = sum(1 for r in doc["rows"] if r["hash"] and lead(r) > 1.02)
    assert wins >= 2 and sum(r.winner == "evo" for r in rows) == wins
    assert f"evo wins {wins} beyond the noise band" in capsys.readouterr().out
    assert main(["--refresh", str(tmp_path / "nothing")]) == 2


def test_an_export_keeps_the_rows_of_shapes_its_archive_lacks(tmp_path):
    # a table exported from one archive, then a search of other shapes from a fresh archive into the same folder:
    # the first table's rows (and kernel files) stay, the new shapes are added, a shape in both takes the new row
    cfg, store = swept(tmp_path / "a", ["256x256x256", "512x512x2048"])
    out, first = export_table(store, GPU, cfg.paths.out)
    cfg2, store2 = swept(tmp_path / "b", ["512x512x2048", "1024x1024x1024"])
    set_lead(store2, "512x512x2048", 1.25, 0.01)
    _, rows = export_table(store2, GPU, cfg.paths.out)
    by = {r.shape: r for r in rows}
    assert list(by) == ["256x256x256", "512x512x2048", "1024x1024x1024"]
    assert by["256x256x256"] == next(r for r in first if r.shape == "256x256x256")
    assert (Path(cfg.paths.out) / by["256x256x256"].kernel_path).is_file()
    assert by["512x512x2048"].speedup_best_library == 1.25
    doc = json.loads((out / "table.json").read_text())
    assert [r["shape"] for r in doc["rows"]] == list(by)
    # a row whose kernel file is gone is not kept (the table never points at a missing kernel)
    (Path(cfg.paths.out) / by["256x256x256"].kernel_path).unlink()
    _, rows = export_table(store2, GPU, cfg.paths.out)
    assert [r.shape for r in rows] == ["512x512x2048", "1024x1024x1024"]


def test_a_shape_whose_libraries_alone_were_timed_gets_no_row(tmp_path):
    # a sweep times the next shapes' libraries ahead of their searches; killed before it searches one, its table
    # must not claim the library wins a shape evo never ran on (that row would then merge into the real table)
    cfg, store = swept(tmp_path, ["256x256x256"])
    for lib, us in (("cublas", 9.0), ("cublaslt_heuristic", 8.5), ("cublaslt_autotune", 8.0)):
        store.add_baseline("4096x128x8192", "TN", GPU, BaselineResult(lib, us))
    _, rows = export_table(store, GPU, cfg.paths.out)
    assert [r.shape for r in rows] == ["256x256x256"]
    # once evo has measured a kernel there, even one that failed its check, the shape has a row
    store.add_evaluation("4096x128x8192", "TN", GPU, EvalResult("0123456789abcdef", False, "check", "wrong"))
    _, rows = export_table(store, GPU, cfg.paths.out)
    assert [r.shape for r in rows] == ["256x256x256", "4096x128x8192"]
    assert rows[1].winner == "cublaslt_autotune" and not rows[1].kernel_path


def test_an_export_keeps_a_row_whose_kernel_beat_the_library_by_more(tmp_path):
    # the table's kernel for a shape was measured 1.20x the best library; a later, short search of the shape ends
    # with another kernel at 0.90x: the table keeps its row and kernel file (keep_better=False replaces them)
    cfg, store = swept(tmp_path / "a", ["512x512x2048"])
    set_lead(store, "512x512x2048", 1.20, 0.01)
    out, first = export_table(store, GPU, cfg.paths.out)
    doc = json.loads((out / "table.json").read_text())
    doc["rows"][0]["hash"] = "0123456789abcdef"  # another kernel than the second archive's best
    (out / "table.json").write_text(json.dumps(doc))
    kernel = Path(cfg.paths.out) / first[0].kernel_path
    kernel.write_text(kernel.read_text() + "\n// the table's kernel\n")
    cfg2, store2 = swept(tmp_path / "b", ["512x512x2048", "1024x1024x1024"])
    set_lead(store2, "512x512x2048", 0.90, 0.01)
    _, rows = export_table(store2, GPU, cfg.paths.out, only={"512x512x2048"})
    by = {r.shape: r for r in rows}
    assert by["512x512x2048"].hash == "0123456789abcdef" and by["512x512x2048"].speedup_best_library == 1.20
    assert kernel.read_text().endswith("// the table's kernel\n")  # not overwritten
    assert "1024x1024x1024" in by
    # a better kernel than the table's replaces it
    set_lead(store2, "512x512x2048", 1.30, 0.01)
    _, rows = export_table(store2, GPU, cfg.paths.out, only={"512x512x2048"})
    assert next(r for r in rows if r.shape == "512x512x2048").speedup_best_library == 1.30
    assert not kernel.read_text().endswith("// the table's kernel\n")
    # keep_better=False: the archive's row, whatever the table held
    set_lead(store2, "512x512x2048", 0.90, 0.01)
    _, rows = export_table(store2, GPU, cfg.paths.out, only={"512x512x2048"}, keep_better=False)
    assert next(r for r in rows if r.shape == "512x512x2048").speedup_best_library == 0.90


def test_merge_takes_another_tables_rows_and_kernel_files(tmp_path, capsys):
    # a few shapes swept into their own folder, merged into a table that has other rows and one of the same shape
    from evo.export import main, read_table
    from evo.measurements import FILE_NAME, load

    cfg, store = swept(tmp_path / "a", ["256x256x256", "512x512x2048"])
    table, _ = export_table(store, GPU, cfg.paths.out)
    cfg2, store2 = swept(tmp_path / "b", ["512x512x2048", "1024x1024x1024"])
    set_lead(store2, "512x512x2048", 0.90, 0.01)  # a slower row replaces the old one: the merge takes it as measured
    src, _ = export_table(store2, GPU, cfg2.paths.out)
    _, old = read_table(table)
    before = {(s.shape, s.hash) for s in load(table / FILE_NAME)}
    assert main(["--refresh", str(table), "--merge", str(src)]) == 0
    assert "took 2 rows" in capsys.readouterr().out
    _, rows = read_table(table)
    by = {r.shape: r for r in rows}
    assert [r.shape for r in rows] == ["256x256x256", "512x512x2048", "1024x1024x1024"]
    assert by["256x256x256"] == next(r for r in old if r.shape == "256x256x256")
    assert by["512x512x2048"].speedup_best_library == 0.9 and by["512x512x2048"].verdict == "loss"
    for s in ("512x512x2048", "1024x1024x1024"):  # the kernel files came along and are the rows' kernels
        assert (Path(cfg.paths.out) / by[s].kernel_path).read_text() == (Path(cfg2.paths.out) / by[s].kernel_path).read_text()
        assert (Path(cfg.paths.out) / by[s].kernel_path).with_suffix(".json").exists()
    # the sweep's measurements (what a fresh machine's cost model trains on) joined the table's
    theirs = {(s.shape, s.hash) for s in load(src / FILE_NAME)}
    assert theirs - before and {(s.shape, s.hash) for s in load(table / FILE_NAME)} == before | theirs
    other = tmp_path / "c" / "Other_GPU"
    other.mkdir(parents=True)
    (other / "table.json").write_text(json.dumps({"gpu": "Other_GPU", "layout": "TN", "rows": []}))
    assert main(["--refresh", str(table), "--merge", str(other)]) == 2  # another GPU's table: one line, exit 2
    assert "table of gpu Other_GPU" in capsys.readouterr().err


def test_merge_archive_takes_the_rows_of_the_searches_that_finished(tmp_path, capsys):
    # a sweep's archive brought back without its --out: the shapes it finished come into the table, not a shape
    # whose search was killed or whose libraries alone were timed, and the archive's measurements come along
    from evo.export import main, read_table, write_table
    from evo.measurements import FILE_NAME, load

    cfg, store = swept(tmp_path / "a", ["256x256x256", "512x512x2048"])
    table, _ = export_table(store, GPU, cfg.paths.out)
    cfg2, store2 = swept(tmp_path / "b", ["512x512x2048", "1024x1024x1024"])
    set_lead(store2, "512x512x2048", 0.95, 0.01)
    # the table's row for 512x512x2048: another kernel, 1.5x in an older run, that the archive evaluated and found
    # wanting (here it failed; slower side by side reads the same): the archive's best replaces it all the same
    best = store2.confirm("512x512x2048", "TN", GPU)["hash"]
    other = next(r for r in store2.rows("SELECT c.hash, c.source FROM evaluations e JOIN candidates c ON c.hash=e.hash "
                                        "WHERE e.shape='512x512x2048' AND c.hash != ?", (best,)))
    doc, rows = read_table(table)
    row = next(r for r in rows if r.shape == "512x512x2048")
    (Path(cfg.paths.out) / row.kernel_path).write_text(other["source"])
    rows = [dataclasses.replace(r, hash=other["hash"], speedup_best_library=1.5) if r is row else r for r in rows]
    write_table(table, doc, rows)
    _, old = read_table(table)
    run = store2.start_run("2048x2048x2048", GPU, {})  # killed: its run never finished
    store2.add_evaluation("2048x2048x2048", "TN", GPU, EvalResult("fedcba9876543210", False, "check", "wrong"), run_id=run)
    store2.add_baseline("4096x128x8192", "TN", GPU, BaselineResult("cublas", 9.0))  # timed ahead, never searched
    db = cfg2.paths.db
    store2.close()
    before = {(x.shape, x.hash) for x in load(table / FILE_NAME)}
    assert main(["--refresh", str(table), "--merge-archive", db]) == 0
    assert "took 2 rows from" in capsys.readouterr().out
    _, rows = read_table(table)
    by = {r.shape: r for r in rows}
    assert list(by) == ["256x256x256", "512x512x2048", "1024x1024x1024"]
    assert by["256x256x256"] == next(r for r in old if r.shape == "256x256x256")
    assert by["512x512x2048"].speedup_best_library == 0.95 and by["512x512x2048"].hash == best
    for s in ("512x512x2048", "1024x1024x1024"):  # the rows' own kernels came along
        assert published_kernel(Path(cfg.paths.out), by[s]).hash == by[s].hash
        assert (Path(cfg.paths.out) / by[s].kernel_path).with_suffix(".json").is_file()
    after = {(x.shape, x.hash) for x in load(table / FILE_NAME)}
    assert before < after and "1024x1024x1024" in {shape for shape, _ in after}
    # a missing archive, or one without a finished search of this GPU: one line, exit 2
    assert main(["--refresh", str(table), "--merge-archive", str(tmp_path / "none.db")]) == 2
    assert "no archive at" in capsys.readouterr().err
    empty = Store(tmp_path / "empty.db")
    empty.close()
    assert main(["--refresh", str(table), "--merge-archive", str(tmp_path / "empty.db")]) == 2
    assert "holds no finished search of Fake_GPU" in capsys.readouterr().err


def test_a_row_is_dated_the_day_its_numbers_were_measured(tmp_path):
    """A row's date is its confirm's day (for a row without an evo kernel, its newest library timing's), not the
    export's: exporting a kept archive again leaves a shape searched earlier dated earlier, so
    `evo.sweep --rows-dated-before` finds the rows that have not raced since."""
    import time

    cfg, store = swept(tmp_path, ["256x256x256", "512x512x2048"])
    day = lambda t: time.strftime("%Y-%m-%d", time.gmtime(t))  # noqa: E731
    earlier, today = time.time() - 9 * 86400, day(time.time())
    store.db.execute("UPDATE confirms SET created=? WHERE shape='256x256x256'", (earlier,))
    store.db.execute("UPDATE baselines SET created=? WHERE shape='512x512x2048'", (earlier - 86400,))
    store.db.execute("UPDATE baselines SET created=? WHERE shape='512x512x2048' AND library='cublas'", (earlier,))
    store.db.execute("DELETE FROM confirms WHERE shape='512x512x2048'")  # no vetted champion: a library row
    store.db.commit()
    fresh = tmp_path / "fresh"  # (the sweep's own table would keep its row with a kernel for 512x512x2048)
    out, rows = export_table(store, GPU, fresh)
    by = {r.shape: r for r in rows}
    assert by["256x256x256"].date == day(earlier) != today and by["256x256x256"].hash
    assert by["512x512x2048"].date == day(earlier) and not by["512x512x2048"].hash
    store.db.execute("UPDATE confirms SET created=? WHERE shape='256x256x256'", (time.time(),))  # raced again today
    store.db.commit()
    _, rows = export_table(store, GPU, fresh)
    assert {r.shape: r.date for r in rows} == {"256x256x256": today, "512x512x2048": day(earlier)}


def test_committed_tables_launch_every_waiting_kernel_cooperatively():
    """A published kernel whose CTAs wait on each other (its family's `cooperative` expression holds for its
    parameters; a parameter the kernel predates counts as its feature absent) declares the cooperative launch, in
    its front matter and in the JSON that programs outside evo read; no other kernel does."""
    import re

    from evo import expr
    from evo.export import published_kernel, read_table
    from evo.kernel import parse_meta

    root = Path(__file__).resolve().parent.parent
    rules = {}
    for t in sorted((root / "templates").glob("*/kernel.cu")):
        m = parse_meta(t.read_text().replace("{{PARAMS}}", "{}"))
        rules[t.parent.name] = m.cooperative
    assert rules["wgmma_sm90"] and rules["cutlass_sm90"]
    seen = 0
    for table in sorted((root / "kernels_out").glob("*/table.json")):
        _, rows = read_table(table.parent)
        for r in rows:
            if not r.kernel_path:
                continue
            ks = published_kernel(root / "kernels_out", r)
            p = parse_shape(r.shape, r.layout)
            rule = rules.get(r.family, False)
            env = {k: 0 for k in re.findall(r"[A-Z_]+", str(rule))}
            env.update(ks.env(p, 132))
            want = bool(expr.evaluate(rule, env))
            assert ks.launch(p, 132).cooperative is want, (table, r.shape)
            meta = json.loads((root / "kernels_out" / r.kernel_path).with_suffix(".json").read_text())
            assert meta["hash"] == ks.hash and bool(meta["launch"].get("cooperative")) is want, (table, r.shape)
            seen += want
    assert seen >= 1
