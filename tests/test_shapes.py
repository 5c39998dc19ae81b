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
