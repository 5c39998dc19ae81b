"""The measurements shipped beside a GPU's kernel table: what the cost model learns from on a machine whose archive
is empty.

A search ranks its proposals with a cost model trained on the archive's measurements of this GPU (evo.cost_model);
a fresh clone's archive holds none, so its first searches would be ranked by the prior alone. The sweeps that made
a committed table measured thousands of instances on that GPU: ``<table folder>/measurements.csv.gz`` keeps them
(shape, kernel hash, family, parameters, time, correct or not), one row per (shape, kernel), and a search trains on
its archive plus the rows of this file its archive lacks. The rows are training data for a ranking only: every
kernel a search publishes is measured where it runs.

    python -m evo.cost_model --db .evo/evo.db --save kernels_out/NVIDIA_H100_80GB_HBM3/measurements.csv.gz
"""
from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

from .errors import EvoError
from .atomic_file import atomic_write
from .records import Sample

FILE_NAME = "measurements.csv.gz"
COLUMNS = ("shape", "hash", "family", "params", "time_us", "ok")


def shipped_path(out_dir: str | Path, gpu: str) -> Path:
    """Where the measurements of ``gpu`` live beside its table (paths.out/<GPU>/measurements.csv.gz)."""
    return Path(out_dir) / gpu / FILE_NAME


def load(path: str | Path) -> list[Sample]:
    """The rows of a measurements file ([] where there is none); EvoError if it cannot be read."""
    p = Path(path)
    if not p.is_file():
        return []
    try:
        with gzip.open(p, "rt", newline="") as f:
            rows = list(csv.DictReader(f))
        return [Sample(r["shape"], r["hash"], r["family"], json.loads(r["params"] or "{}"), float(r["time_us"] or 0.0),
                       r["ok"] == "1") for r in rows]
    except (OSError, EOFError, KeyError, ValueError, csv.Error) as e:
        raise EvoError(f"cannot read the measurements in {p}: {e}") from None


def merged(first: list[Sample], then: list[Sample]) -> list[Sample]:
    """``first`` and the rows of ``then`` whose (shape, kernel) ``first`` lacks: the archive's own measurement wins."""
    seen = {(s.shape, s.hash) for s in first}
    return list(first) + [s for s in then if (s.shape, s.hash) not in seen]


def save(path: str | Path, samples: list[Sample]) -> int:
    """Write ``samples`` merged over the file's existing rows (new rows win), sorted, gzip'd deterministically (no
    timestamp: the same rows give the same bytes); returns the number of rows written."""
    p = Path(path)
    rows = merged(samples, load(p))
    rows.sort(key=lambda s: (s.shape, s.family, s.hash))
    text = io.StringIO()
    w = csv.writer(text, lineterminator="\n")
    w.writerow(COLUMNS)
    for s in rows:
        w.writerow([s.shape, s.hash, s.family, json.dumps(s.params, sort_keys=True), f"{s.time_us:.3f}", int(s.ok)])
    atomic_write(p, gzip.compress(text.getvalue().encode(), mtime=0))
    return len(rows)
