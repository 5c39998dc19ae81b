#!/usr/bin/env python3
"""Smoke test + timing of the mma_small_sm80 family on the small shapes (run on an H100/H200 machine, < 5 min).

    PYTHONUNBUFFERED=1 python3 bench/small_smoke.py [--shapes a,b] [--per-shape 10] [--deadline 200]

For every shape (default: the shapes of shapes/sample24.yaml and shapes/bench.yaml whose best library
took < 10 us in an earlier H200 grid run (not kept in this repository), the small shapes 64x128x128,
128x64x512 and 64x64x64 of shapes/small.yaml, and 128x128x16384):
1. picks instances of mma_small_sm80: the family's starts plus the best of a rough latency estimate
   (`estimate_us`, below; a ranking aid only, never reported as a measurement) plus two random ones;
2. compiles them all at once with the search's compiler (same flags and gates: spills / stack rejected);
3. evaluates each through the search's GPU worker (the same check and timing as `evo.search`: fresh
   inputs, NaN-poisoned C, fp32 reference, exact {0,1} run; L2-flushed CUDA-event median interleaved
   with cuBLAS);
4. times the libraries with the worker's baselines (cuBLAS, cuBLASLt heuristic, cuBLASLt autotune);
5. prints one row per shape: best library, best evo instance, speedup, correct/tried, and the floor
   max(2MNK / peak, bytes / bandwidth); writes $OUT/small_smoke.json with every result.
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo.cli import _Parser  # noqa: E402
from evo.datasheet import roofline_us as datasheet_roofline_us  # noqa: E402
from evo.errors import cli_entry  # noqa: E402
from evo.families import Family, load_families  # noqa: E402
from evo.problem import Problem, cdiv, parse_shape  # noqa: E402

FAMILY = "mma_small_sm80"
SHAPES = ["64x64x64", "64x128x128", "128x64x512", "64x128x2048", "128x64x4096", "2048x256x128", "1024x2048x64",
          "64x4096x512", "128x12288x256", "4096x512x256", "128x128x16384",
          "100x200x1000", "77x200x72"]  # off-tile M, N, K: correctness of the edge predicates
SMS = 132
FLOOR_GPU = "H200 SXM"  # the floor column only: the roofline at this GPU's datasheet peak and bandwidth


def estimate_us(p: dict, prob: Problem) -> float:
    """Rough latency of one instance on one shape: launch, waves of CTAs each streaming its K slice through one
    SM's share of L2 bandwidth or its tensor-core share, the split-K round trip and writing C. Ranks instances."""
    warps_mn, warps = p["WARPS_M"] * p["WARPS_N"], p["WARPS_M"] * p["WARPS_N"] * p["WARPS_K"]
    tiles = cdiv(prob.m, p["BM"]) * cdiv(prob.n, p["BN"])
    ctas = tiles * p["SPLIT_K"]
    smem = max(p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2, (p["WARPS_K"] - 1) * p["BM"] * p["BN"] * 4)
    per_sm = max(1, min(227 * 1024 // smem, 64 // warps, 32))
    waves = cdiv(ctas, SMS * per_sm)
    resident = min(per_sm, cdiv(ctas, SMS))
    kt = cdiv(prob.k, p["BK"]) // p["SPLIT_K"]
    load_ns = (p["BM"] + p["BN"]) * p["BK"] * 2 * kt * resident / 80.0            # ~80 B/ns per SM from L2
    mma_ns = 2.0 * p["BM"] * p["BN"] * p["BK"] * kt * resident / (4500.0 * min(warps, 4) / 4)  # ~4.5 TFLOP/s per SM
    lat_ns = 700.0 + kt * 40.0 / min(p["STAGES"] - 1, 4)                            # first load, per-tile latency
    split_ns = 0.0 if p["SPLIT_K"] == 1 else 800.0 + tiles * p["SPLIT_K"] * p["BM"] * p["BN"] * 8 / 3000.0
    epi_ns = prob.m * prob.n * 2 / 3000.0 + (0 if warps_mn * 32 >= 64 else 200.0)
    return 2.5 + (waves * (max(load_ns, mma_ns) + lat_ns) + split_ns + epi_ns) / 1000.0


# --cluster: tiles up to 128x128 with 8 warps, split-K inside thread-block clusters (DSMEM reduce) and/or across them;
# one wave of CTAs. The shapes the family lost or drew on before (long K on a small output, K = 256 mid shapes).
CLUSTER_SHAPES = ["128x128x16384", "64x128x2048", "128x64x4096", "256x1024x8192", "128x12288x256", "4096x512x256"]
GPCS, SMS_PER_GPC = 8, 16  # clusters are placed inside one GPC: ~8 GPCs of 16-18 SMs on an H100 / H200


# --cluster: instances timed on these shapes whatever the estimate says (the estimate is crude about the reduce);
# PUSH 0 where two CTAs per SM leave no room for the push reduce's receive slots
_CW8 = {"BK": 64, "WARPS_M": 2, "WARPS_N": 4, "WARPS_K": 1, "EPI": 0, "RED": 0, "OCC": 1}
_CW4 = {"BK": 64, "WARPS_M": 2, "WARPS_N": 2, "WARPS_K": 1, "EPI": 0, "RED": 0, "OCC": 1}
_CW2 = {"BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "EPI": 0, "RED": 0, "OCC": 1}
CLUSTER_PICKS = {
    "128x128x16384": [
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=16, CLK=8),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=16, CLK=8, OCC=2, PUSH=0),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=8, CLK=8),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=32, CLK=4, OCC=2, PUSH=0),
        dict(_CW8, BM=64, BN=128, STAGES=4, SPLIT_K=8, CLK=8, OCC=2, PUSH=0),
        dict(_CW8, BM=64, BN=128, STAGES=4, SPLIT_K=16, CLK=4, OCC=2, PUSH=0),
        dict(_CW4, BM=64, BN=64, STAGES=6, SPLIT_K=4, CLK=8),
        dict(_CW4, BM=32, BN=64, STAGES=6, SPLIT_K=2, CLK=8),
        dict(_CW2, BM=32, BN=32, STAGES=6, SPLIT_K=1, CLK=8),
        dict(_CW2, BM=32, BN=32, STAGES=6, SPLIT_K=2, CLK=4),
        dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=1, CLK=8),
        dict(_CW2, BM=32, BN=16, STAGES=6, SPLIT_K=1, CLK=8, WARPS_M=2, WARPS_N=1),
    ],
    "128x64x4096": [
        dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=1, CLK=8),
        dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=2, CLK=4),
        dict(_CW2, BM=32, BN=32, STAGES=6, SPLIT_K=2, CLK=8),
        dict(_CW4, BM=64, BN=64, STAGES=6, SPLIT_K=8, CLK=8),
    ],
    "64x128x2048": [
        dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=1, CLK=8),
        dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=1, CLK=4),
        dict(_CW2, BM=32, BN=32, STAGES=6, SPLIT_K=1, CLK=8),
        dict(_CW4, BM=64, BN=64, STAGES=6, SPLIT_K=4, CLK=8),
    ],
    "4096x512x256": [
        dict(_CW8, BM=128, BN=128, STAGES=5, SPLIT_K=1, CLK=1, EPI=1),   # a ring of 5 (160 KB): all 4 K tiles in flight
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=128, BK=32, STAGES=6, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=1, CLK=2),
        dict(_CW8, BM=128, BN=64, STAGES=4, SPLIT_K=1, CLK=1, EPI=1, OCC=2),
    ],
    "128x12288x256": [
        dict(_CW8, BM=128, BN=96, WARPS_M=4, WARPS_N=2, STAGES=5, SPLIT_K=1, CLK=1, EPI=1),   # ring of 5 (140 KB)
        dict(_CW8, BM=128, BN=128, STAGES=5, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=96, WARPS_M=4, WARPS_N=2, STAGES=3, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=96, WARPS_M=4, WARPS_N=2, STAGES=3, SPLIT_K=1, CLK=1, EPI=0),
        dict(_CW8, BM=128, BN=96, WARPS_M=4, WARPS_N=2, BK=32, STAGES=6, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=128, BK=32, STAGES=6, SPLIT_K=1, CLK=1, EPI=1),
        dict(_CW8, BM=128, BN=128, STAGES=3, SPLIT_K=1, CLK=2, OCC=2, PUSH=0),
        dict(_CW8, BM=128, BN=64, STAGES=4, SPLIT_K=1, CLK=1, EPI=1, OCC=2),
    ],
}


# --cluster also checks (and times) the cluster reduce on off-tile shapes: row / column predicates, N % 4 != 0, off-tile K
CLUSTER_CHECKS = [
    (dict(_CW4, BM=32, BN=64, STAGES=3, SPLIT_K=2, CLK=4), "100x200x1000"),
    (dict(_CW2, BM=16, BN=32, STAGES=6, SPLIT_K=1, CLK=8), "77x202x1024"),
    (dict(_CW8, BM=64, BN=128, STAGES=4, SPLIT_K=4, CLK=2, OCC=2, PUSH=0), "130x250x4096"),
    (dict(_CW8, BM=128, BN=96, WARPS_M=4, WARPS_N=2, STAGES=3, SPLIT_K=1, CLK=1, EPI=1), "200x1000x256"),
]


def cluster_estimate_us(p: dict, prob: Problem) -> float:
    """Rough latency of an instance with its L2 -> SM operand traffic, DRAM time, resident clusters, the cluster
    (DSMEM) and global reduce. A ranking aid for which --cluster instances the smoke compiles, not a measurement."""
    bm, bn, bk, cl, sk = p["BM"], p["BN"], p["BK"], p.get("CLK", 1), p["SPLIT_K"]
    warps = p["WARPS_M"] * p["WARPS_N"] * p["WARPS_K"]
    tiles = cdiv(prob.m, bm) * cdiv(prob.n, bn)
    ctas = tiles * sk * cl
    kt = cdiv(prob.k, bk) // (sk * cl)
    stages = min(p["STAGES"], max(2, kt + 1))
    smem = max(stages * (bm + bn) * bk * 2, (p["WARPS_K"] - 1) * bm * bn * 4, (cl > 1) * bm * (bn + 8) * 4, 1)
    per_sm = max(1, min(227 * 1024 // smem, 64 // warps, 1 if warps == 8 and p.get("OCC", 1) == 1 else 32))
    capacity = SMS * per_sm if cl == 1 else GPCS * (SMS_PER_GPC * per_sm // cl) * cl
    waves = cdiv(ctas, capacity)
    per_sm_ctas = min(per_sm, cdiv(ctas, SMS))
    load_ns = (bm + bn) * bk * 2 * kt * per_sm_ctas / 80.0                       # ~80 B/ns per SM from L2
    dram_ns = 2 * (prob.m + prob.n) * prob.k / 4000.0 / waves                     # A + B once, ~4 TB/s
    mma_ns = 2.0 * bm * bn * bk * kt * per_sm_ctas / (4500.0 * min(warps, 4) / 4)
    lat_ns = 700.0 + kt * 40.0 / min(stages - 1, 4)
    cluster_ns = 0.0 if cl == 1 else 400.0 + bm * bn * 4 / 100.0                  # barrier + CL slices over DSMEM
    global_ns = 0.0 if sk == 1 else 800.0 + sk * bm * bn * 4 / cl / 80.0          # ticket + the last reads SPLIT_K slices
    epi_ns = prob.m * prob.n * 2 / 3000.0
    return 2.5 + (waves * (max(load_ns, dram_ns, mma_ns) + lat_ns) + cluster_ns + global_ns + epi_ns) / 1000.0


def cluster_instances(fam: Family, prob: Problem, n: int) -> list[dict]:
    """Up to n instances with tiles of 32x32..128x128 (8 warps from 64x128), CLK / SPLIT_K such that the CTAs
    make about one wave: CLUSTER_PICKS, then the best of cluster_estimate_us (rings within 112 KB); one per
    (tile, BK, CLK, SPLIT_K, OCC, ring, warps, EPI)."""
    kt_all = cdiv(prob.k, 64)
    out = []
    for bm in (32, 64, 128):
        for bn in (32, 64, 96, 128):
            if bm > 2 * max(prob.m, 16) or bn > 2 * max(prob.n, 16):
                continue
            if bn % 32 and cdiv(prob.n, bn) * bn > 1.25 * prob.n:  # 96-col tiles only where they pad little
                continue
            tiles = cdiv(prob.m, bm) * cdiv(prob.n, bn)
            layouts = [(2, 4, 1), (4, 2, 1)] if bm * bn >= 8192 else []
            layouts += [(2, 2, 1)] if bm * bn >= 2048 else [(1, 2, 2), (2, 1, 2)]
            for wm, wn, wk in layouts:
                for cl in (1, 2, 4, 8):
                    for sk in (1, 2, 4, 8, 16, 32):
                        ctas = tiles * cl * sk
                        if not (min(64, tiles) <= ctas <= 264) or kt_all % (cl * sk):
                            continue
                        for occ in ((1, 2) if wm * wn * wk == 8 and ctas > SMS // 2 else (1,)):
                            base = {"BM": bm, "BN": bn, "BK": 64, "WARPS_M": wm, "WARPS_N": wn, "WARPS_K": wk,
                                    "SPLIT_K": sk, "CLK": cl, "OCC": occ, "EPI": int(cl == 1 and sk == 1), "RED": 0}
                            for stages in (8, 6, 4, 3, 2):  # the deepest ring that fits in 112 KB (two CTAs per SM)
                                q = fam.complete(dict(base, STAGES=stages))
                                if fam.valid(q) and stages * (bm + bn) * 64 * 2 <= 112 * 1024:
                                    out.append(q)
                                    break
    out.sort(key=lambda q: cluster_estimate_us(q, prob))
    picked, seen = [], set()
    for q in [fam.complete(q) for q in CLUSTER_PICKS.get(prob.key, [])] + out:
        key = (q["BM"], q["BN"], q["BK"], q["CLK"], q["SPLIT_K"], q["OCC"], q["STAGES"], q["WARPS_M"], q["EPI"])
        if key not in seen and fam.render(q, prob).accepts(prob, SMS):
            seen.add(key)
            picked.append(q)
    return picked[:n]


def pick_instances(fam: Family, prob: Problem, n: int, rng: random.Random, valid: list[dict] | None = None,
                   cluster: int = 0) -> list[dict]:
    """The family's starts, the n best of estimate_us (one per tile, depth, split and warp split), two random
    instances and, with cluster > 0, that many cluster_instances; valid: the family's valid instances (enumerated
    once by the caller: the space has ~90k points to check)."""
    # the family's `requires` without rendering each instance (checked on the rendered kernels below)
    valid = list(fam.valid_instances()) if valid is None else valid
    ok = [p for p in valid if prob.k % 8 == 0 and cdiv(prob.k, p["BK"]) % (p["SPLIT_K"] * p["CLK"]) == 0]
    ranked, seen = [], set()
    for p in sorted((p for p in ok if p["CLK"] == 1), key=lambda p: estimate_us(p, prob)):  # diverse: one per tile, depth, split and warp split
        key = (p["BM"], p["BN"], p["BK"], p["SPLIT_K"], p["WARPS_K"])
        if key not in seen:
            seen.add(key)
            ranked.append(p)
    out: list[dict] = []
    extra = cluster_instances(fam, prob, cluster) if cluster else []
    for p in fam.start_instances() + ranked[:n] + rng.sample(ok, min(2, len(ok))) + extra:
        if p not in out:
            out.append(p)
    return [p for p in out if fam.render(p, prob).accepts(prob, SMS)]


# split-K ordering experiment: each family's split-K instance on its shape, as committed (acq_rel ticket) and with
# the ticket's atomic wrapped in __threadfence() (the sequentially consistent ordering it replaced)
ORDERING = [
    ("mma_small_sm80", {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 6, "SPLIT_K": 16},
     "128x128x16384"),
    ("mma_sm80", {"BM": 64, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 4, "SPLIT_K": 16, "GROUP_M": 1},
     "128x128x16384"),
    ("wgmma_sm90", {"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 6, "SPLIT_K": 16}, "128x128x16384"),
    ("wgmma_skinny_sm90", {"BM": 64, "BN": 48, "CLK": 8, "CONSUMERS": 1, "G": 2, "STAGES": 8}, "128x128x16384"),
]
# --extra: correctness of the other split-K / cluster paths touched by the ordering change (off-tile shapes, the
# skinny family's relaxed cluster arrive with MC > 1) and the output-bound K = 128 shapes
EXTRA = [
    ("wgmma_skinny_sm90", {"BM": 128, "BN": 128, "CLK": 1, "MC": 2, "G": 1, "STAGES": 5, "KI": 1}, "128x12288x4096"),
    ("wgmma_skinny_sm90", {"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 8, "G": 8, "SWAP_AB": 0, "STAGES": 4}, "100x200x1000"),
    ("wgmma_sm90", {"BM": 128, "BN": 64, "SWAP_AB": 1, "SPLIT_K": 4, "STAGES": 6}, "77x200x72"),
    ("mma_sm80", {"BM": 64, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3, "SPLIT_K": 4, "GROUP_M": 1}, "77x200x72"),
    ("mma_sm80", {"BM": 64, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3, "SPLIT_K": 4, "GROUP_M": 1}, "77x200x71"),
    ("mma_small_sm80", {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 8, "SPLIT_K": 16},
     "128x128x16384"),
    ("mma_small_sm80", {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 8, "SPLIT_K": 16,
                        "EPI": 1}, "128x128x16384"),
    ("mma_small_sm80", {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 6, "SPLIT_K": 16,
                        "RED": 1}, "128x128x16384"),
    ("mma_small_sm80", {"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 6, "SPLIT_K": 32,
                        "RED": 1}, "128x128x16384"),
    ("mma_small_sm80", {"BM": 64, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2, "WARPS_K": 1, "STAGES": 6, "SPLIT_K": 32,
                        "RED": 1}, "128x128x16384"),
    ("mma_small_sm80", {"BM": 32, "BN": 16, "BK": 64, "WARPS_M": 2, "WARPS_N": 1, "WARPS_K": 2, "STAGES": 6, "SPLIT_K": 8,
                        "RED": 1}, "128x64x4096"),
    ("mma_small_sm80", {"BM": 32, "BN": 16, "BK": 64, "WARPS_M": 2, "WARPS_N": 1, "WARPS_K": 2, "STAGES": 6, "SPLIT_K": 16,
                        "RED": 1}, "128x64x4096"),
    ("wgmma_sm90", {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4}, "2048x12288x128"),
    ("wgmma_sm90", {"BM": 64, "BN": 256, "PINGPONG": 1, "STAGES": 5}, "2048x12288x128"),
    ("mma_small_sm80", {"BM": 64, "BN": 128, "BK": 64, "WARPS_M": 1, "WARPS_N": 4, "STAGES": 2, "EPI": 1}, "2048x12288x128"),
    ("mma_small_sm80", {"BM": 64, "BN": 64, "BK": 32, "WARPS_M": 1, "WARPS_N": 4, "STAGES": 4, "EPI": 1}, "2048x12288x128"),
    ("wgmma_sm90", {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4}, "16384x16384x128"),
    ("wgmma_sm90", {"BM": 64, "BN": 256, "PINGPONG": 1, "STAGES": 5}, "16384x16384x128"),
]
_TICKET = re.compile(r'asm volatile\("atom\.add\.acq_rel\.gpu\.global\.[us]32 %0, \[%1\], 1;(?:\\n)?" : "=r"\(old\) : '
                     r'"l"\(p\) : "memory"\);')


def sc_variant(text: str) -> str:
    """The same kernel with its split-K ticket ordered by SC fences (__threadfence + atomicAdd + __threadfence)."""
    out, n = _TICKET.subn("__threadfence(); old = atomicAdd(p, 1); __threadfence();", text)
    if n != 1:
        raise SystemExit(f"ordering experiment: expected one acq_rel ticket, found {n}")
    return out.replace("/*---evo\n", "/*---evo\n# variant: SC-fenced ticket\n", 1)


def params_short(name: str, params: dict) -> list[tuple[str, object]]:
    given = next((p for n, p, _ in EXTRA + ORDERING if n == name and all(params.get(k) == v for k, v in p.items())), params)
    return list(given.items())


def floor_us(prob: Problem) -> float:
    return datasheet_roofline_us(FLOOR_GPU, prob.flops, prob.min_bytes)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.small_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--per-shape", type=int, default=8, help="instances from the estimate's ranking per shape (plus starts)")
    ap.add_argument("--deadline", type=float, default=200.0, help="stop evaluating after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--plan-only", action="store_true", help="print the chosen instances and estimates; no compile, no GPU")
    ap.add_argument("--ordering", action="store_true", help="also time each family's split-K with acq_rel vs SC-fenced ticket")
    ap.add_argument("--extra", action="store_true", help="also check/time the EXTRA instances (other split-K paths, K = 128)")
    ap.add_argument("--cluster", type=int, default=0, metavar="N",
                    help="also N instances per shape from cluster_instances (8-warp tiles, split-K in clusters / across them)")
    ap.add_argument("--top", type=int, default=1, help="print this many fastest instances per shape")
    ap.add_argument("--eval-timeout", type=float, default=120.0, help="seconds one evaluation may take (a hung kernel)")
    a = ap.parse_args(argv)

    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.worker import GpuWorker, WorkerFault

    t0 = time.monotonic()
    cfg = load_config(overrides={"compile": {"cache_dir": "/tmp/evo_small_cache"},
                                 "paths": {"db": "/tmp/evo_small.db", "out": "/tmp/evo_small_out"}})
    fam = load_families(names=[FAMILY])[0]
    rng = random.Random(12)
    problems = [parse_shape(s) for s in a.shapes.split(",") if s]
    if a.per_shape < 0 or a.cluster < 0 or a.top < 1 or a.eval_timeout <= 0:
        ap.error("--per-shape and --cluster take a count >= 0, --top >= 1, --eval-timeout > 0")
    valid = list(fam.valid_instances())
    plan = {prob.key: [(p, fam.render(p, prob)) for p in pick_instances(fam, prob, a.per_shape, rng, valid, a.cluster)]
            for prob in problems}
    if a.plan_only:
        for key, rows in plan.items():
            print(f"{key} ({len(rows)}): " + "; ".join(
                f"{cluster_estimate_us(p, parse_shape(key)):.1f} us " + ",".join(str(v) for v in p.values()) for p, _ in rows))
        return 0
    comp = Compiler.from_config(cfg.compile)
    items = [(ks, "sm_90a") for rows in plan.values() for _, ks in rows]
    ordering = []
    if a.ordering:
        from evo.kernel import KernelSource

        fams = {f.name: f for f in load_families()}
        for name, params, shape in ORDERING:
            ks = fams[name].render(params, parse_shape(shape))
            ordering.append((name, shape, ks, KernelSource.parse(sc_variant(ks.text))))
        items += [(k, "sm_90a") for _, _, ks, sc in ordering for k in (ks, sc)]
    extra = []
    if a.cluster:  # the cluster paths on off-tile shapes (edge predicates, N % 4 != 0, 96-col tiles): correctness
        fams = {f.name: f for f in load_families()}
        extra += [(FAMILY, shape, fams[FAMILY].render(params, parse_shape(shape))) for params, shape in CLUSTER_CHECKS]
    if a.extra:
        fams = {f.name: f for f in load_families()}
        extra += [(name, shape, fams[name].render(params, parse_shape(shape))) for name, params, shape in EXTRA]
    items += [(ks, "sm_90a") for _, _, ks in extra]
    results = {r.hash: r for r in comp.compile_many(items, 0)}
    bad = [r for r in results.values() if not r.ok]
    print(f"compiled {len(results)} instances for {len(problems)} shapes in {time.monotonic() - t0:.0f} s, {len(bad)} failed",
          flush=True)
    for r in bad[:5]:
        print(f"  compile failed {r.hash}: {r.error[:200]}")

    def save(result: dict) -> None:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        tmp = Path(a.out) / "small_smoke.json.tmp"
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(Path(a.out) / "small_smoke.json")

    w = GpuWorker(cfg)
    info = w.start()
    print(f"GPU: {info.name} ({info.arch}, {info.sm_count} SMs), driver {info.driver}", flush=True)
    out: dict = {"gpu": info.name, "shapes": {}}
    print(f"{'shape':>15} {'library':>8} {'best lib':>9} {'evo':>8} {'speedup':>7} {'ok/tried':>8} {'floor':>6}  evo instance",
          flush=True)
    try:
        for prob in problems:
            if time.monotonic() - t0 > a.deadline:
                print(f"{prob.key:>15} skipped: past the {a.deadline:.0f} s deadline")
                continue
            rows = []
            for p, ks in plan[prob.key]:
                r = results[ks.hash]
                row = {"params": p, "hash": ks.hash, "estimate_us": round(estimate_us(p, prob), 2), "registers": r.registers}
                if not r.ok:
                    row.update(ok=False, error="compile: " + r.error[:200])
                else:
                    try:
                        ev = w.call("evaluate", timeout_s=a.eval_timeout, problem=prob, source=ks.text, cubin=r.cubin_path, h=ks.hash)
                        row.update(ok=ev.ok, us=ev.time_us, cublas_us=ev.cublas_us, error=ev.error[:200])
                    except WorkerFault as e:
                        row.update(ok=False, error=f"worker: {e}"[:200])
                rows.append(row)
            libs = w.call("baselines", timeout_s=600, problem=prob)["results"]
            lib_us = {k: v.time_us for k, v in libs.items() if v.time_us > 0}
            best_lib = min(lib_us, key=lib_us.get) if lib_us else ""
            good = sorted((r for r in rows if r["ok"]), key=lambda r: r["us"])
            best = good[0] if good else None
            out["shapes"][prob.key] = {"libraries": lib_us, "instances": rows, "floor_us": floor_us(prob)}
            save(out)  # after every shape: a run stopped at its time limit keeps what it measured
            sp = f"{lib_us[best_lib] / best['us']:.3f}x" if best and best_lib else "-"
            inst = " ".join(f"{k}={v}" for k, v in best["params"].items()) if best else "(none correct)"
            print(f"{prob.key:>15} {best_lib[:8]:>8} {lib_us.get(best_lib, 0):9.2f} {best['us'] if best else 0:8.2f} {sp:>7} "
                  f"{len(good):>3}/{len(rows):<4} {floor_us(prob):6.2f}  {inst}", flush=True)
            for r in good[1:a.top]:
                print(f"{'':>15} {'':>8} {'':>9} {r['us']:8.2f} {lib_us[best_lib] / r['us'] if best_lib else 0:6.3f}x "
                      f"{'':>8} {'':>6}  " + " ".join(f"{k}={v}" for k, v in r["params"].items()), flush=True)
            for r in rows:
                if not r["ok"]:
                    print(f"    FAIL {r['params']}: {r['error']}", flush=True)
        for name, shape, ks, sc in ordering:
            prob, times = parse_shape(shape), {}
            for label, k in (("acq_rel", ks), ("sc", sc)):
                r = results[k.hash]
                if not r.ok:
                    times[label] = "compile: " + r.error[:100]
                    continue
                try:
                    ev = w.call("evaluate", timeout_s=a.eval_timeout, problem=prob, source=k.text, cubin=r.cubin_path, h=k.hash)
                    times[label] = round(ev.time_us, 2) if ev.ok else "FAIL " + ev.error[:100]
                    times[label + "_cublas"] = round(ev.cublas_us, 2)
                except WorkerFault as e:
                    times[label] = f"worker: {e}"[:100]
            out.setdefault("ordering", []).append({"family": name, "shape": shape, "params": ks.meta.params, **times})
            print(f"split-K ordering {name:<18} {shape}: acq_rel {times.get('acq_rel')} us, SC fences {times.get('sc')} us "
                  f"(cuBLAS {times.get('acq_rel_cublas')} / {times.get('sc_cublas')} us)", flush=True)
        for name, shape, ks in extra:
            prob, r = parse_shape(shape), results[ks.hash]
            row = {"family": name, "shape": shape, "params": ks.meta.params}
            if not r.ok:
                row["error"] = "compile: " + r.error[:150]
            elif not ks.accepts(prob):
                row["error"] = "requires rejects the shape"
            else:
                try:
                    ev = w.call("evaluate", timeout_s=a.eval_timeout, problem=prob, source=ks.text, cubin=r.cubin_path, h=ks.hash)
                    row.update(ok=ev.ok, us=round(ev.time_us, 2), cublas_us=round(ev.cublas_us, 2), error=ev.error[:150])
                except WorkerFault as e:
                    row["error"] = f"worker: {e}"[:150]
            out.setdefault("extra", []).append(row)
            sp = f"{row['cublas_us'] / row['us']:.3f}x" if row.get("ok") else row.get("error", "")
            print(f"extra {name:<18} {shape:>16} {row.get('us', '-')} us, cuBLAS {row.get('cublas_us', '-')} us: {sp}  "
                  + " ".join(f"{k}={v}" for k, v in params_short(name, ks.meta.params)), flush=True)
    finally:
        w.stop()
        save(out)
    speedups = []
    for key, s in out["shapes"].items():
        good = [r["us"] for r in s["instances"] if r["ok"]]
        if good and s["libraries"]:
            speedups.append(min(s["libraries"].values()) / min(good))
    if speedups:
        g = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        print(f"geomean speedup over the best library: {g:.3f}x on {len(speedups)} shapes; min {min(speedups):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
