from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.shapes import load_shapes

SHAPES = Path(__file__).resolve().parent.parent / "shapes"


def test_grid1000():
    shapes = load_shapes(SHAPES / "grid1000.yaml")
    assert len(shapes) == 1000
    assert shapes[0].key == "64x64x64" and shapes[-1].key == "16384x16384x16384"


@pytest.mark.parametrize("name", ["llm.yaml", "bench.yaml"])
def test_named_sets(name):
    shapes = load_shapes(SHAPES / name)
    assert len(shapes) >= 5 and len({p.key for p in shapes}) == len(shapes)


def test_bad_sets(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("shapes: [4096x4096]\n")
    with pytest.raises(EvoError, match="malformed shape"):
        load_shapes(f)
    f.write_text("nothing: 1\n")
    with pytest.raises(EvoError, match="needs a 'grid'"):
        load_shapes(f)
    with pytest.raises(EvoError, match="cannot read"):
        load_shapes(tmp_path / "missing.yaml")


def test_shapes_listed_on_the_command_line(tmp_path, monkeypatch):
    """`bench.compare --shapes 4096x4096x1024,512x2048x4096` (or `evo.sweep`) takes the shapes themselves."""
    from evo.shapes import RowFilter

    monkeypatch.chdir(tmp_path)
    assert [p.key for p in load_shapes("4096x4096x1024, 512x2048x4096 4096x4096x1024")] == ["4096x4096x1024",
                                                                                            "512x2048x4096"]
    assert load_shapes("64x64x64")[0].layout == "TN"
    with pytest.raises(EvoError, match="has a dimension over"):
        load_shapes("99999999x64x64")  # a listed shape is checked as any other
    with pytest.raises(EvoError, match="nor a list of shapes: '4096x4096' is not MxNxK"):
        load_shapes("4096x4096")  # meant as a shape, malformed: said so, not "no such file"
    with pytest.raises(EvoError, match="'1x2x' is not MxNxK"):
        load_shapes("64x64x64,1x2x")
    with pytest.raises(EvoError, match="cannot read"):
        load_shapes("nope.yaml")  # a missing file stays a missing file
    with pytest.raises(EvoError, match="lists shapes, not a kernel table"):
        load_shapes("64x64x64", RowFilter(below=1.0))
    (tmp_path / "64x64x64").write_text("shapes: [128x128x128]\n")  # a file of that name is read first
    assert [p.key for p in load_shapes("64x64x64")] == ["128x128x128"]


def test_shipped_sets_resolve_by_name_from_anywhere(tmp_path, monkeypatch):
    from evo.shapes import load_shapes, resolve, shipped_sets

    monkeypatch.chdir(tmp_path)  # no shapes/ folder here
    assert resolve("shapes/llm.yaml") == shipped_sets() / "llm.yaml"
    assert load_shapes("llm") == load_shapes(shipped_sets() / "llm.yaml")
    assert resolve("nope.yaml") == tmp_path.joinpath("nope.yaml").relative_to(tmp_path)


def test_a_kernel_tables_folder_is_the_set_of_its_rows_shapes(tmp_path):
    """`evo.sweep --shapes kernels_out/NVIDIA_H200` searches every row of the committed table again."""
    import json

    table = SHAPES.parent / "kernels_out" / "NVIDIA_H200"
    rows = json.loads((table / "table.json").read_text())["rows"]
    shapes = load_shapes(table)
    assert [p.key for p in shapes] == [r["shape"] for r in rows] and len(shapes) > 50
    assert load_shapes(table / "table.json") == shapes and all(p.layout == "TN" for p in shapes)
    bad = tmp_path / "t"
    bad.mkdir()
    with pytest.raises(EvoError, match="no kernel table at"):
        load_shapes(bad)
    (bad / "table.json").write_text("{")
    with pytest.raises(EvoError, match="not valid JSON"):
        load_shapes(bad)
    (bad / "table.json").write_text(json.dumps({"rows": 5}))
    with pytest.raises(EvoError, match="needs a 'rows' list of objects"):
        load_shapes(bad)
    (bad / "table.json").write_text(json.dumps({"rows": [{"hash": "x"}]}))  # a row that names no shape
    with pytest.raises(EvoError, match="malformed shape ''"):
        load_shapes(bad)
    (bad / "table.json").write_text(json.dumps({"layout": "TN", "rows": [{"shape": "64x64"}]}))
    with pytest.raises(EvoError, match="malformed shape"):
        load_shapes(bad)


def _table(tmp_path, rows):
    import json

    d = tmp_path / "G"
    d.mkdir(exist_ok=True)
    (d / "table.json").write_text(json.dumps({"gpu": "G", "layout": "TN", "rows": rows}))
    return d


def test_a_tables_rows_picked_by_date_speedup_or_origin(tmp_path):
    """`evo.sweep --shapes <table> --rows-dated-before D --rows-below X --rows-ported`: the rows that most need searching
    again."""
    from evo.shapes import RowFilter

    d = _table(tmp_path, [
        {"shape": "64x64x64", "date": "2026-11-20", "speedup_best_library": 1.20},    # old, a win
        {"shape": "128x64x64", "date": "2026-11-29", "speedup_best_library": 0.98,    # new, below, searched here
         "timing_source": "confirm"},
        {"shape": "256x64x64", "date": "2026-11-29", "speedup_best_library": 1.10,    # new, a win, ported
         "timing_source": "port"},
        {"shape": "512x64x64", "speedup_best_library": 1.30},                          # undated: old
        {"shape": "1024x64x64", "date": "2026-11-29", "speedup_best_library": 0.0},   # no evo kernel: below
    ])
    keys = lambda f: [p.key for p in load_shapes(d, f)]  # noqa: E731
    assert keys(None) == keys(RowFilter()) == ["64x64x64", "128x64x64", "256x64x64", "512x64x64", "1024x64x64"]
    assert keys(RowFilter(dated_before="2026-11-29")) == ["64x64x64", "512x64x64"]
    assert keys(RowFilter(dated_before="2026-11-20")) == ["512x64x64"]
    assert keys(RowFilter(below=1.0)) == ["128x64x64", "1024x64x64"]
    assert keys(RowFilter(below=1.15)) == ["128x64x64", "256x64x64", "1024x64x64"]
    assert keys(RowFilter("2026-11-29", 1.0)) == ["64x64x64", "128x64x64", "512x64x64", "1024x64x64"]
    assert RowFilter("2026-11-29", 1.0).describe() == "dated before 2026-11-29 or below 1x the best library"
    assert keys(RowFilter(ported=True)) == ["256x64x64"]  # a row re-rendered or searched here is no longer "port"
    assert keys(RowFilter(below=1.0, ported=True)) == ["128x64x64", "256x64x64", "1024x64x64"]
    assert RowFilter(ported=True) and RowFilter(ported=True).describe() == "ported from another GPU's table"
    every = RowFilter(below=1.15, ported=True, every=True)  # the ported rows below 1.15x only
    assert keys(every) == ["256x64x64"] and keys(RowFilter(below=1.0, ported=True, every=True)) == []
    assert every.describe() == "below 1.15x the best library and ported from another GPU's table"
    assert keys(RowFilter("2026-11-29", 1.0, every=True)) == []  # the old rows are wins
    assert keys(RowFilter("2026-11-30", 1.0, every=True)) == ["128x64x64", "1024x64x64"]
    with pytest.raises(EvoError, match="give the filters"):
        RowFilter(every=True)
    for bad in ("29-11-2026", "2026-13-01", "2026-11-31", "yesterday", "20261129"):
        with pytest.raises(EvoError, match="YYYY-MM-DD"):
            RowFilter(dated_before=bad)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(EvoError, match="must be positive"):
            RowFilter(below=bad)
    with pytest.raises(EvoError, match="not a kernel table"):
        load_shapes(SHAPES / "llm.yaml", RowFilter(below=1.0))


def test_the_sweep_searches_only_the_picked_rows(tmp_path, monkeypatch, capsys):
    import evo.sweep as sweep

    d = _table(tmp_path, [{"shape": "64x64x64", "date": "2026-11-20", "speedup_best_library": 1.2},
                          {"shape": "128x64x64", "date": "2026-11-29", "speedup_best_library": 0.98,
                           "timing_source": "port"}])
    searched = []

    def fake_run(shapes, cfg, **kw):
        searched.append([p.key for p in shapes])
        return type("Outcome", (), {"exit_code": 0})()

    monkeypatch.setattr(sweep, "run_sweep", fake_run)
    db = ["--db", str(tmp_path / "a.db")]
    assert sweep.main(["--shapes", str(d), "--rows-below", "1"] + db) == 0
    assert sweep.main(["--shapes", str(d), "--rows-dated-before", "2026-11-29"] + db) == 0
    assert sweep.main(["--shapes", str(d)] + db) == 0
    assert sweep.main(["--shapes", str(d), "--rows-ported"] + db) == 0
    assert sweep.main(["--shapes", str(d), "--rows-ported", "--rows-below", "1", "--rows-every"] + db) == 0
    assert searched == [["128x64x64"], ["64x64x64"], ["64x64x64", "128x64x64"], ["128x64x64"], ["128x64x64"]]
    capsys.readouterr()
    assert sweep.main(["--shapes", str(d), "--rows-dated-before", "2026-11-21", "--rows-below", "1", "--rows-every"]
                      + db) == 2
    assert capsys.readouterr().err.strip() == (f"error: no row of {d} is dated before 2026-11-21 and below 1x the best "
                                               "library: nothing to search")
    assert sweep.main(["--shapes", str(d), "--rows-every"] + db) == 2
    assert "give the filters" in capsys.readouterr().err
    assert sweep.main(["--shapes", str(d), "--rows-below", "0.5"] + db) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: no row of {d} is below 0.5x the best library: nothing to search"]
    assert sweep.main(["--shapes", "shapes/llm.yaml", "--rows-dated-before", "2026-11-29"] + db) == 2
    assert sweep.main(["--shapes", str(d), "--rows-dated-before", "11/29"] + db) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a kernel table" in err[0] and "YYYY-MM-DD" in err[1]
    assert len(searched) == 5
