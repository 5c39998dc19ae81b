"""Seeds from the transposed shape. C = A B^T of M x N x K and of N x M x K are one GEMM with A and B exchanged
(C^T = B A^T; in the TN layout both operands stay K-major), so a kernel measured on N x M x K computes this shape
with its SWAP_AB flipped: the same tiles, clusters and K splits over the same operand data, only C stored the other
way round. The archive's fastest kernel of the transposed shape on this GPU, per family with a SWAP_AB switch (every
family's SWAP_AB = 1 computes C^T = B A^T), flipped and rendered from today's template, becomes a seed.

Why: cuBLASLt records one algorithm for a shape and for its transpose, while the kernel that ties it is the same
kernel transposed: on an H100 the CUTLASS 64 x 64 pair that took 128x4096x8192 to 28.24 us took 4096x128x8192 to
28.11 us with SWAP_AB flipped, where the library's own mapping had given 30.91 (docs/perf-hopper.md Run 29).

Besides the archive, the kernel table's row for the transposed shape is a source: the table travels with the
repository while an archive may never have held that shape (a fresh machine's is empty), and on an H100 a sweep of
two transposes of table rows timed no transposed seed at all while only the archive was read (docs/perf-hopper.md
Run 30).
"""
from __future__ import annotations

import json
import random
from typing import Iterable

from ..families import Family
from ..problem import Problem
from ..records import Sample
from ..store import Store
from .base import Proposal
from .mutate import repair


def transposed_shape(problem: Problem) -> str:
    """The key of the transposed problem ("" where there is none: a square output, or a layout whose transpose is
    another layout)."""
    if problem.layout != "TN" or problem.m == problem.n:
        return ""
    return f"{problem.n}x{problem.m}x{problem.k}"


def transposed_proposals(problem: Problem, store: Store, gpu: str, families: list[Family],
                         per_family: int = 1, published: Iterable[Sample] = ()) -> list[Proposal]:
    """Up to `per_family` seeds per family: the fastest correct kernels of the transposed shape on `gpu` (the
    archive's, and `published`: the kernel table's row for it, as a Sample) with SWAP_AB flipped (a flipped instance
    that breaks a constraint is repaired keeping SWAP_AB; none where no valid instance is near)."""
    shape = transposed_shape(problem)
    fams = {f.name: f for f in families if {0, 1} <= set(f.space.get("SWAP_AB", ()))}
    if not shape or not fams:
        return []
    q = """SELECT e.hash, MIN(e.time_us) AS t, c.family, c.params FROM evaluations e JOIN candidates c ON c.hash = e.hash
           WHERE e.shape = ? AND e.layout = ? AND e.gpu = ? AND e.ok = 1 GROUP BY e.hash ORDER BY t"""
    out: list[Proposal] = []
    seen: set[str] = set()
    taken: dict[str, int] = {}
    rng = random.Random(0)  # for repairs only: the search's own random stream is left as it is
    found = [(t, h, family, params, "") for h, t, family, params in store.rows(q, (shape, problem.layout, gpu))]
    found += [(x.time_us, x.hash, x.family, json.dumps(x.params), " in the kernel table") for x in published
              if x.shape == shape]
    found.sort(key=lambda r: r[0])
    for t, h, family, params, where in found:
        fam = fams.get(family)
        if fam is None or taken.get(family, 0) >= per_family:
            continue
        try:
            p = json.loads(params or "{}")
        except ValueError:
            continue
        if not isinstance(p, dict) or "SWAP_AB" not in p:
            continue
        p = fam.complete({**p, "SWAP_AB": 1 - int(p["SWAP_AB"])})
        if not fam.valid(p):
            p, _ = repair(fam, p, rng, fixed=("SWAP_AB",))
            if p is None:
                continue
        ks = fam.render(p, problem if fam.shape_specialized else None)
        if ks.hash in seen:
            continue
        seen.add(ks.hash)
        taken[family] = taken.get(family, 0) + 1
        out.append(Proposal(ks.text, "seed", (h,), f"the fastest {family} kernel of the transposed shape {shape}{where} "
                                                   f"({t:.2f} us there), SWAP_AB flipped"))
    return out
