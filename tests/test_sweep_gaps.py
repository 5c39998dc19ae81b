"""bench.sweep_gaps: a run's first evaluation, its seeds' end, the wait to the first child and the pauses between
evaluations, read from an archive whose timestamps are set by hand; a missing archive is one line, exit 2."""
import pytest

from bench.sweep_gaps import family_seconds, main, run_gaps
from evo.store import Store


def _archive(path):
    """Run 1 starts at t=1000: seeds evaluated 1002-1004 and 1004-1010, a child 1013-1014, another child 1030-1031
    (a 16 s pause, the family's start), a seed compiled in the background timed last, 1031-1032; run 2 has no seed."""
    store = Store(path)
    r1 = store.start_run("256x256x256", "G", {})
    r2 = store.start_run("128x128x128", "G", {})
    store._exec("UPDATE runs SET started=? WHERE id=?", (1000.0, r1))
    store._exec("UPDATE runs SET started=? WHERE id=?", (2000.0, r2))
    for h, who in (("s1", "seed"), ("s2", "seed"), ("c1", "mutate"), ("c2", "optuna"), ("c3", "mutate"), ("s3", "seed")):
        store._exec("INSERT INTO candidates (hash, family, proposer, idea) VALUES (?,?,?,?)",
                    (h, "f", who, "f start  instance 2" if h == "c2" else None))
    for h, shape, run, end, secs in (("s1", "256x256x256", r1, 1004.0, 2.0), ("s2", "256x256x256", r1, 1010.0, 6.0),
                                     ("c1", "256x256x256", r1, 1014.0, 1.0), ("c2", "256x256x256", r1, 1031.0, 1.0),
                                     ("c3", "128x128x128", r2, 2005.0, 1.0), ("s3", "256x256x256", r1, 1032.0, 1.0)):
        store._exec("INSERT INTO evaluations (hash, shape, layout, gpu, ok, run_id, created, seconds) "
                    "VALUES (?,?,?,?,?,?,?,?)", (h, shape, "TN", "G", 1, run, end, secs))
    store.close()


def test_first_evaluation_seeds_child_wait_and_pauses(tmp_path):
    db = tmp_path / "a.db"
    _archive(db)
    store = Store(db)
    one, two = run_gaps(store, gap_s=5.0)
    store.close()
    assert (one.shape, one.evaluations, one.first_eval_s, one.seeds_end_s, one.child_wait_s, one.seeds_later) == \
        ("256x256x256", 5, 2.0, 10.0, 3.0, 1)
    assert one.pauses == [(14.0, 16.0, "f start instance 2")] and one.longest_pause_s == 16.0 and one.span_s == 32.0
    assert (two.first_eval_s, two.seeds_end_s, two.child_wait_s, two.pauses) == (4.0, None, None, [])


def test_evaluation_seconds_by_family(tmp_path):
    db = tmp_path / "a.db"
    _archive(db)
    store = Store(db)
    store._exec("UPDATE candidates SET family='slow' WHERE hash IN ('s2', 'c2')")
    fams = family_seconds(store)
    store.close()
    assert [(f.family, f.evaluations, f.median_s, f.p90_s, f.total_s) for f in fams] == \
        [("slow", 2, 6.0, 6.0, 7.0), ("f", 4, 1.0, 2.0, 5.0)]
    assert abs(fams[0].share - 7 / 12) < 1e-9


def test_cli_prints_the_table_and_refuses_a_missing_archive(tmp_path, capsys):
    db = tmp_path / "a.db"
    _archive(db)
    assert main([str(db), "--gap-s", "2", "--md", str(tmp_path / "g.md")]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 256x256x256 | 5 |" in out and "| 1 | 10: 3.0 (f), 14: 16.0 (f start instance 2) |" in out
    assert "| f | 6 | 1.000 | 6.000 | 12.0 | 100% |" in out
    assert (tmp_path / "g.md").read_text().strip() == out.strip()
    assert main([str(tmp_path / "none.db")]) == 2
    assert capsys.readouterr().err.startswith("error: no archive at")
    with pytest.raises(SystemExit) as e:
        main([str(db), "--gap-s", "x"])
    assert e.value.code == 2
