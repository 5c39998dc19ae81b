"""Seeds from the nearest other shapes (log-distance of M, N and K): the archive's winners of the shapes searched
nearest to this one (a sweep's "compile once, time everywhere": the same sources, already compiled), and the kernels
the kernel table publishes for its nearest rows, rendered for this shape (new compiles where a family compiles the
shape in). A search of a shape no sweep has seen starts from what the sweeps found around it, the kernels the
dispatcher would lend it (evo.dispatch).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import EvoError
from ..families import Family, rerendered
from ..kernel import KernelSource
from ..problem import GpuInfo, Problem, log_distance
from ..store import Store
from .base import Proposal


def nearest_winners(store: Store, problem: Problem, gpu: str) -> Iterator[str]:
    """The sources of the archive's winners of the searched shapes on this GPU, nearest to `problem` first (log-space
    of M, N, K), each kernel once, read as they are taken; whether they accept `problem` is not checked here."""
    q = """SELECT shape, hash, MIN(time_us) FROM evaluations WHERE gpu=? AND layout=? AND ok=1 AND shape<>?
           GROUP BY shape"""
    winners = []
    for shape, h, _ in store.rows(q, (gpu, problem.layout, problem.key)):
        m, n, k = (int(x) for x in shape.split("x"))
        winners.append((log_distance((problem.m, problem.n, problem.k), (m, n, k)), shape, h))
    seen: set[str] = set()
    for _, _, h in sorted(winners):
        if h in seen:
            continue
        seen.add(h)
        row = store.candidate(h)
        if row is not None:
            yield row["source"]


def serving(sources: Iterable[str], problem: Problem, arch: str, num_sms: int, limit: int) -> list[str]:
    """The first `limit` of `sources` that accept `problem` on this arch and SM count (parsing them is most of the
    cost: ~4 ms a kernel)."""
    out: list[str] = []
    if limit <= 0:
        return out
    for src in sources:  # (a lazy source is read no further than the last one taken)
        try:
            ks = KernelSource.parse(src)
        except EvoError:
            continue
        if ks.serves(problem, arch, num_sms):
            out.append(src)
            if len(out) >= limit:
                break
    return out


def neighbour_seeds(store: Store, problem: Problem, gpu: str, arch: str, num_sms: int, limit: int) -> list[str]:
    """Winners of the searched shapes nearest to `problem` (log-space of M, N, K) on this GPU that accept it."""
    return serving(nearest_winners(store, problem, gpu), problem, arch, num_sms, limit)  # (lazy: limit 0 reads nothing)


def read_tables(root: Path, info: GpuInfo) -> list[tuple[Path, list]]:
    """The tables under `root` that table_neighbours reads (this GPU's; other GPUs' where this GPU has none), each
    folder with its rows, as they are now: a snapshot that a later export does not change."""
    from ..export import read_table

    folders = [d for d in sorted(root.iterdir()) if d.is_dir()] if root.is_dir() else []
    own = [d for d in folders if d.name == info.key]
    tables = []
    for folder in own or folders:
        try:
            tables.append((folder, read_table(folder)[1]))
        except EvoError:
            continue
    return tables


def table_neighbours(root: Path, info: GpuInfo, fams: list[Family], problem: Problem, limit: int,
                     tables: list[tuple[Path, list]] | None = None) -> list[Proposal]:
    """The kernels the tables under `root` (this GPU's; other GPUs' where this GPU has none) publish for the shapes
    nearest to `problem`, its own row left out, rendered from today's template for it, that accept it: at most
    `limit`, nearest first, in `fams` only (proposer "table"). `tables`: read_tables(root, info) taken earlier."""
    from ..export import published_kernel

    if limit <= 0:
        return []
    names = {f.name for f in fams}
    near = []
    for folder, rows in read_tables(root, info) if tables is None else tables:
        near += [(log_distance((problem.m, problem.n, problem.k), (r.m, r.n, r.k)), r.shape, folder, r) for r in rows
                 if r.hash and r.family in names and r.layout == problem.layout and r.shape != problem.key]
    out: list[Proposal] = []
    seen: set[str] = set()
    for _, shape, folder, row in sorted(near, key=lambda t: t[:2]):
        if len(out) >= limit:
            break
        try:
            ks = published_kernel(folder.parent, row)
        except EvoError:
            continue
        with contextlib.suppress(EvoError):  # else as published (a family that compiles the shape in refuses it below)
            ks = rerendered(ks, fams, problem)  # today's template, with this shape's constants where the family compiles them in
        if ks.hash in seen or not ks.serves(problem, info.arch, info.sm_count):
            continue
        seen.add(ks.hash)
        out.append(Proposal(ks.text, "table", (), f"the {folder.name} table's kernel for {shape}"))
    return out
