"""Seeds from the library's own choice for the shape: the tile, cluster and split of the algorithm cuBLASLt runs (its
heuristic's and its autotune's, recorded with the baselines), as instances of every family that maps them
(family.yaml ``library_tiles``, evaluated by ``Family.library_instances``).

cuBLASLt sees our row-major C = A B^T as its column-major C^T, so its tile TM x TN spans our N x M and its cluster
CM x CN pairs CTAs along our N (CM) or our M (CN). Why: on 12288x256x1024 the tile of cuBLAS's kernel (read from its
name by ncu, not a recorded cuBLASLt algorithm), as a wgmma_sm90 instance, was 7 % faster than what a 0.4-minute search
had found, and on 512x1024x12288 the swap-AB pair that mirrors cuBLASLt's 1x2 split-K kernel is the best evo instance
(docs/perf-search.md). Measured (H100, five random grid shapes, with and without them): the search's best was
0.3-6.5 % faster with them on all five, and a seed won three (docs/perf-search.md, last section).
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from ..families import Family
from ..ltgemm import algorithm_from_detail
from ..problem import Problem
from ..records import BaselineResult
from .base import Proposal


def algorithm_tile(algo: dict[str, Any]) -> dict[str, int] | None:
    """TM, TN, CM, CN, SPLIT of a recorded cuBLASLt algorithm ({"tile": [128, 64], "cluster_shape": [1, 2, 1],
    "split_k": 4, ...}), or None where it names no tile."""
    tile = algo.get("tile")
    if isinstance(tile, str):  # an enum's name, e.g. "TILE_128x64"
        m = re.search(r"(\d+)x(\d+)", tile)
        tile = [int(m.group(1)), int(m.group(2))] if m else None
    if not (isinstance(tile, (list, tuple)) and len(tile) >= 2 and all(isinstance(x, int) and x > 0 for x in tile[:2])):
        return None
    cluster = algo.get("cluster_shape")
    if not (isinstance(cluster, (list, tuple)) and len(cluster) >= 2 and all(isinstance(x, int) for x in cluster[:2])):
        cluster = [1, 1]
    split = algo.get("split_k")
    return {"TM": tile[0], "TN": tile[1], "CM": max(1, cluster[0]), "CN": max(1, cluster[1]),
            "SPLIT": split if isinstance(split, int) and split > 0 else 1}


def library_tile_proposals(problem: Problem, baselines: Iterable[BaselineResult], families: list[Family]) -> list[Proposal]:
    """One seed per distinct instance the families map the libraries' recorded algorithms to (none where no
    baseline carries an algorithm or no family declares `library_tiles`)."""
    return algorithm_proposals(problem, ((b.library, algorithm_from_detail(b.detail)) for b in baselines
                                         if b.library.startswith("cublaslt")), families)


def algorithm_proposals(problem: Problem, algorithms: Iterable[tuple[str, dict[str, Any]]],
                        families: list[Family]) -> list[Proposal]:
    """The same seeds from (library, recorded cuBLASLt algorithm) pairs, e.g. a kernel table row's
    ``library_algorithms`` (what evo.compile_ahead compiles for a sweep's next shape)."""
    out: list[Proposal] = []
    seen: set[str] = set()
    for library, algo in algorithms:
        t = algorithm_tile(algo) if isinstance(algo, dict) else None
        if t is None:
            continue
        for fam in families:
            for params in fam.library_instances(t):
                ks = fam.render(params, problem if fam.shape_specialized else None)
                if ks.hash in seen:
                    continue
                seen.add(ks.hash)
                out.append(Proposal(ks.text, "seed", (), f"{library}'s tile {t['TM']}x{t['TN']}, cluster "
                                    f"{t['CM']}x{t['CN']}, split {t['SPLIT']} as a {fam.name} instance"))
    return out
