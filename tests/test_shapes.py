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
