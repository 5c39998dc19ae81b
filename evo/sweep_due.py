"""Which shapes a sweep has finished are due again because another GPU's table found a kernel for them since.

A search races the kernels other GPUs' tables publish for its shape (evo.search, `_other_gpus_seeds`), but a sweep
searches a finished shape again only after a template change (evo.template_fingerprint). A find on one GPU (the
H100's row for 256x1024x8192 was 1.2 % faster on the H200 than the H200's own row, docs/perf-hopper.md Run 50)
would wait for that. Here a finished shape is due again when another GPU's table in the output folder publishes a
kernel for it that

* is dated on or after the day this GPU's search of the shape finished (a find made since; the same day counts, so
  two GPUs swept the same night still meet; a shape searched again is not due again for a find older than that),
* this archive has never evaluated on the shape for this GPU (a kernel that failed here counts as evaluated),
* claims this GPU's arch, is of one of the sweep's families, and serves the shape on this GPU,

so each find makes a shape due once.
"""
from __future__ import annotations

import time
from pathlib import Path

from .errors import EvoError
from .export import published_kernel, read_table
from .problem import GpuInfo, Problem
from .store import Store


def other_gpus_finds(store: Store, out_dir: str | Path, info: GpuInfo, shapes: list[Problem],
                     finished: dict[str, float], families: set[str] | None = None) -> dict[str, str]:
    """Of `shapes`, those finished on `info`'s GPU (`finished`: shape -> the time its search finished) for which another
    GPU's table under `out_dir` publishes a kernel found since that this archive has not evaluated here. Returns shape
    -> the name of that table's GPU folder. `families`: the names of the sweep's families (a search seeds no other
    family's kernel; None: any)."""
    root = Path(out_dir)
    if not root.is_dir() or not finished:
        return {}
    wanted = {p.key: p for p in shapes if p.key in finished}
    since = {k: time.strftime("%Y-%m-%d", time.gmtime(finished[k])) for k in wanted}  # the day each search finished
    due: dict[str, str] = {}
    for folder in sorted(d for d in root.iterdir() if d.is_dir() and d.name != info.key):
        try:
            _, rows = read_table(folder)
        except EvoError:
            continue
        for row in rows:
            p = wanted.get(row.shape)
            if p is None or row.shape in due or row.layout != p.layout or not row.hash:
                continue
            if not row.date or row.date < since[row.shape]:
                continue
            if store.evaluated(row.hash, p.key, p.layout, info.key):
                continue
            try:
                ks = published_kernel(root, row)
            except EvoError:
                continue
            if families is not None and ks.meta.family not in families:
                continue
            if ks.serves(p, info.arch, info.sm_count):  # claims this GPU's arch, accepts the shape, launches on it
                due[row.shape] = folder.name
    return due
