"""Shape sets: YAML files in shapes/ listing shapes explicitly or as a grid.

    name: grid1000
    grid: {m: [64, 128], n: [64, 128], k: [64, 128]}   # every combination
    shapes: ["4096x4096x1024", "1000x1000x1000"]        # and/or an explicit list
"""
from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from .errors import EvoError
from .problem import Problem, parse_shape


def load_shapes(path: str | Path) -> list[Problem]:
    path = Path(path)
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
