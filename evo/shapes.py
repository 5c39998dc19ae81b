"""Shape sets: YAML files in shapes/ listing shapes explicitly or as a grid.

    name: grid1000
    grid: {m: [64, 128], n: [64, 128], k: [64, 128]}   # every combination
    shapes: ["4096x4096x1024", "1000x1000x1000"]        # and/or an explicit list

Where no such file exists, the text itself may list the shapes: ``4096x4096x1024,512x2048x4096`` (layout TN).
A kernel table's folder (e.g. kernels_out/NVIDIA_H200) or its table.json is a shape set too: its rows' shapes, so
that `evo.sweep --shapes kernels_out/NVIDIA_H200` searches every row again (each against the row's kernel), or,
with a `RowFilter`, only its rows measured before a day, where evo's kernel is below a speedup over the best
library, or whose kernel was ported from another GPU's table and never searched on this one, or that pass all of
those given (the rows a table most needs searched again).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Callable

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


@dataclass(frozen=True)
class RowFilter:
    """Which rows of a kernel table a shape set takes (several given: a row passing any, or with `every` all)."""
    dated_before: str | None = None  # YYYY-MM-DD: rows measured before this day (a row without a date counts as old)
    below: float | None = None  # rows where evo's kernel is below this speedup over the best library (none: 0)
    ported: bool = False  # rows whose kernel came from another GPU's table (`evo.rerender --port`) and has not been
                          # searched or re-rendered on this GPU since (timing_source "port")
    every: bool = False  # several filters given: a row must pass every one (ported rows evo does not win)

    def __post_init__(self):
        if self.dated_before is not None and _iso_day(self.dated_before) != self.dated_before:
            raise EvoError(f"a row date wants a day as YYYY-MM-DD, not {self.dated_before!r}")
        if self.below is not None and not self.below > 0:
            raise EvoError(f"a speedup to search rows below must be positive, not {self.below}")
        if self.every and not self:
            raise EvoError("rows that pass every filter: give the filters (a date, a speedup or ported rows)")

    def _given(self) -> list[tuple[str, Callable[[str, float, str], bool]]]:
        """The filters given: what each says, and whether a row (its date, speedup, timing source) passes it."""
        return ([(f"dated before {self.dated_before}", lambda day, _, __: (day or "") < self.dated_before)]
                if self.dated_before is not None else []) + \
               ([(f"below {self.below:g}x the best library", lambda _, speedup, __: (speedup or 0.0) < self.below)]
                if self.below is not None else []) + \
               ([("ported from another GPU's table", lambda _, __, source: source == "port")] if self.ported else [])

    def __bool__(self) -> bool:
        return bool(self._given())

    def describe(self) -> str:
        return (" and " if self.every else " or ").join(said for said, _ in self._given())

    def takes(self, day: str, speedup: float, source: str) -> bool:
        passed = [test(day, speedup, source) for _, test in self._given()]
        return bool(passed) and (all(passed) if self.every else any(passed))


def _iso_day(text: str) -> str:
    """`text` as a calendar day written YYYY-MM-DD (a row's date compares as a string), or "" where it is none."""
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        return ""


_SHAPE = re.compile(r"\d+x\d+x\d+")
_ONLY_TABLES = "only a table's rows can be picked by date, speedup or origin"


def _tokens(text: str) -> list[str]:
    """The words of a text that lists shapes, separated by commas or spaces."""
    return [t for t in re.split(r"[,\s]+", str(text).strip()) if t]


def inline_shapes(text: str) -> list[str]:
    """The shapes of a text that lists them (MxNxK separated by commas or spaces), else []."""
    tokens = _tokens(text)
    return tokens if tokens and all(_SHAPE.fullmatch(t) for t in tokens) else []


def load_shapes(path: str | Path, rows: RowFilter | None = None) -> list[Problem]:
    given, path = path, resolve(path)
    listed = [] if path.exists() else inline_shapes(str(given))
    if not listed and not path.exists():
        tokens = _tokens(given)
        if tokens and all(re.fullmatch(r"[\dx]+", t) and "x" in t for t in tokens):  # meant as shapes, one malformed
            bad = next(t for t in tokens if not _SHAPE.fullmatch(t))
            raise EvoError(f"no shape set {given}, nor a list of shapes: {bad!r} is not MxNxK "
                           "(e.g. 4096x4096x1024,512x2048x4096)")
    if listed:
        if rows:
            raise EvoError(f"{given} lists shapes, not a kernel table: {_ONLY_TABLES}")
        return _unique([parse_shape(x) for x in listed])
    if path.is_dir() or path.name == "table.json":
        return _table_shapes(path if path.is_dir() else path.parent, rows)
    if rows:
        raise EvoError(f"shape set {path} is not a kernel table: {_ONLY_TABLES}")
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
    return _unique(out)


def _unique(problems: list[Problem]) -> list[Problem]:
    """The problems in order, each once."""
    seen, unique = set(), []
    for p in problems:
        if p.key not in seen:
            seen.add(p.key)
            unique.append(p)
    return unique


def _table_shapes(table_dir: Path, pick: RowFilter | None = None) -> list[Problem]:
    """The shapes of a kernel table's rows (evo.export.read_table), in its order; those `pick` takes where given."""
    from .export import read_table  # (the table's reader; export is heavier than a shape set needs up front)

    doc, rows = read_table(table_dir)
    out: dict[str, Problem] = {}
    for r in rows:
        if pick and not pick.takes(r.date, r.speedup_best_library, r.timing_source):
            continue
        p = parse_shape(r.shape, r.layout or doc.get("layout") or "TN")
        out.setdefault(p.key, p)
    return list(out.values())
