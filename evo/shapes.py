"""Shape sets: YAML files in shapes/ listing shapes explicitly or as a grid.

    name: grid1000
    grid: {m: [64, 128], n: [64, 128], k: [64, 128]}   # every combination
    shapes: ["4096x4096x1024", "1000x1000x1000"]        # and/or an explicit list

A kernel table's folder (e.g. kernels_out/NVIDIA_H200) or its table.json is a shape set too: its rows' shapes, so
that `evo.sweep --shapes kernels_out/NVIDIA_H200` searches every row again (each against the row's kernel).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from .errors import EvoError
from .problem import Problem, parse_shape


def shipped_sets() -> Path:
    """The shape sets of an installed package (``evo/shape_sets``), else ``shapes/`` beside it in a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "shape_sets"
    return packaged if packaged.is_dir() else here.parent / "shapes"


def resolve(path: str | Path) -> Path:
    """A shape-set path as given; where it does not exist, a shipped set of that name (``shapes/llm.yaml``, ``llm``)."""
    path = Path(path)
    if path.exists():
        return path
    name = path.name if path.suffix else path.name + ".yaml"
    shipped = shipped_sets() / name
    return shipped if shipped.is_file() else path


def load_shapes(path: str | Path) -> list[Problem]:
    path = resolve(path)
    if path.is_dir() or path.name == "table.json":
        return _table_shapes(path if path.is_dir() else path.parent)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise EvoError(f"cannot read shape set {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise EvoError(f"shape set {path} is not valid YAML: {' '.join(str(e).split())[:160]}") from None
    if not isinstance(doc, dict) or not ("grid" in doc or "shapes" in doc):
        raise EvoError(f"shape set {path} needs a 'grid' mapping or a 'shapes' list")
    layout = doc.get("layout", "TN")
    out: list[Problem] = []
    grid = doc.get("grid")
    if grid:
        try:
            dims = [list(grid[d]) for d in ("m", "n", "k")]
        except (KeyError, TypeError):
            raise EvoError(f"shape set {path}: grid needs lists m, n and k") from None
        out += [parse_shape(f"{m}x{n}x{k}", layout) for m, n, k in itertools.product(*dims)]
    for s in doc.get("shapes") or []:
        out.append(parse_shape(str(s), layout))
    seen, unique = set(), []
    for p in out:
        if p.key not in seen:
            seen.add(p.key)
            unique.append(p)
    return unique


def _table_shapes(table_dir: Path) -> list[Problem]:
    """The shapes of a kernel table's rows (evo.export.read_table), in its order."""
    from .export import read_table  # (the table's reader; export is heavier than a shape set needs up front)

    doc, rows = read_table(table_dir)
    out: dict[str, Problem] = {}
    for r in rows:
        p = parse_shape(r.shape, r.layout or doc.get("layout") or "TN")
        out.setdefault(p.key, p)
    return list(out.values())
