"""A shape-aware estimate of an instance's time, from the instance and the shape alone (nothing compiled).

The estimate is a roofline of one work unit per SM slot, with the things that decide which tile wins on a given
shape: waves of work units over the SMs (the last wave's idle SMs), tile padding (work on rows and columns past
the shape's edge), resident CTAs per SM (shared memory, threads, an accumulator-based register guess) and
resident clusters, bytes moved (DRAM once, L2 per tile, split-K partial sums), the bandwidth a few CTAs can draw,
the rate a narrow wgmma reaches on operands read from shared memory, and fixed costs (launch, pipeline fill per
wave, split-K fix-up). It ranks instances before anything is compiled; the cost model (evo.cost_model) learns what
it gets wrong from the archive's measurements.

Parameter names it understands (where a family has them): BM, BN or TILE_M, TILE_N (tile, kernel view), TILE
(square tile), SWAP_AB (the kernel computes C^T), SPLIT_K, G, CLK, SPLITS (K splits over CTAs), MC, NC, CLK, CLUSTER_M,
CLUSTER_N, CLUSTER (cluster size), SPLIT_CLUSTER (the K splits form the cluster), BK or TILE_K; gemv_sm80's WN/WARPS/KS give its tile. Anything else leaves the estimate to the launch geometry.
"""
from __future__ import annotations

import itertools
import math
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .families import Family
from .problem import GpuInfo, Problem, cdiv
from .space import Enumerations, FamilySpace, Geometry, params_key

# share of the tensor-core peak a family's main loop reaches on large tiles (the cost model corrects the rest)
FAMILY_EFFICIENCY = {"wgmma_sm90": 1.0, "cutlass_sm90": 1.0, "wgmma_skinny_sm90": 0.9, "mma_sm80": 0.62,
                     "mma_small_sm80": 0.62, "cute_sm80": 0.6, "gemv_sm80": 0.5, "simt": 0.06}
SPLIT_PARAMS = ("SPLIT_K", "G", "CLK", "SPLITS")  # K splits over CTAs (KS of gemv splits inside one CTA)
CLUSTER_PARAMS = ("CLK", "MC", "NC", "CLUSTER_M", "CLUSTER_N", "CLUSTER")  # thread-block cluster size
# resident clusters of 4 and more: a GPC's SMs do not divide into them (cuOccupancyMaxActiveClusters on an H100's 132
# SMs: 66 of 2, 30 of 4, 15 of 8; docs/perf-hopper.md Run 9)
CLUSTER_PACKING = 0.91
DEFAULT_EFFICIENCY = 0.5
WGMMA_FAMILIES = ("wgmma", "cutlass")  # name prefixes of the Hopper families: wgmma from shared memory, BK 64
INTENSITY_K = 2.0  # main-loop efficiency of a tile = intensity / (intensity + INTENSITY_K) (flops per byte of a k step)


@dataclass(frozen=True)
class GpuSpec:
    """What the prior needs of a GPU (H100/H200 SXM by default)."""

    sms: int = 132
    smem_per_sm: int = 233472  # 228 KB
    threads_per_sm: int = 2048
    ctas_per_sm: int = 32
    regs_per_sm: int = 65536
    peak_tflops: float = 700.0  # measured 8192^3 cuBLAS rate is used when known
    bw_gbs: float = 4000.0  # measured copy bandwidth is used when known
    # launch_us, fill_us and INTENSITY_K: fitted to the 34 evo kernels of the committed H200 table (their measured
    # times against the estimate: RMS log error 0.24 before, 0.095 after; docs/perf-search.md); a persistent grid fills
    # once, and launch + fill refitted on the 37 rows of the table as of docs/perf-hopper.md Run 6 (4.5 + 1.6 -> 4.0 + 1.0
    # us: RMS 0.200 with a fill per wave, 0.145 with one per persistent grid, 0.111 refitted; docs/perf-search.md)
    launch_us: float = 4.0  # event window of a kernel beyond its work (empty kernel 3.4 us + prologue/epilogue)
    fill_us: float = 1.0  # first loads of a wave (DRAM latency + pipeline fill)
    fixup_us: float = 1.5  # serial split-K reduction step (the last arrival sums the partials)
    onchip_fixup_us: float = 0.7  # split-K summed inside a cluster (DSMEM): 0.7 us traced (staged -> stored), docs/perf-skinny.md
    # wgmma_sm90 STREAMK's cost beyond its balanced share of k blocks: ping-pong 128 x 128 on 4096^2 x 1024 ran 54.22 us
    # with it against 49.52 without, where the balance alone predicts ~1.5 us less (H200, docs/perf-hopper.md Run 40);
    # on long-K tiles it grows with the tile: cooperative 128 x 256 cost 0.5 (4096^3, 8192^3, 16384^2 x 4096) to 1.5
    # (8192x2048x12288) tiles' time beyond the balance (H200, docs/perf-hopper.md Run 47), so the larger of the two
    stream_k_us: float = 6.0
    stream_k_units: float = 0.5
    l2_gbs_per_sm: float = 150.0  # what one SM draws from L2
    # a CTA's ring keeps at most STAGES - 1 stages of loads in flight, so past its first fill it takes at least
    # ring_latency_us / (STAGES - 1) per k block: thin tiles with a long K are bound by it, not by DRAM (H200: mma_small
    # 16 x 16 s6 0.8-0.9 us a round trip, wgmma swap 64 x 16 s8 1.25, on 16x4096x14336 / 16x5120x5120 without a
    # split). 0.8 fitted on the 20412 H200 measurements shipped with the table (`python -m evo.cost_model
    # --measurements kernels_out/NVIDIA_H200/measurements.csv.gz`: prior alone, Spearman 0.727 -> 0.744, its first 6
    # over each shape's best 1.054 -> 1.050; docs/perf-search.md)
    ring_latency_us: float = 0.8
    # an m64nNk16 wgmma keeps an SM's tensor cores busy N / 2 clocks (tc_fma_per_clk) and reads 2 KB of A and 32 N
    # bytes of B from shared memory, so a narrow N waits on shared memory (wgmma_eff; at 120 bytes a clock N = 64
    # runs at 0.94 of the rate, 48 at 0.80, 32 at 0.62). Fitted on the measurements shipped with the tables, held
    # out by shape (`python -m evo.cost_model --measurements kernels_out/<GPU>/measurements.csv.gz`): every value
    # from 96 to 128 ranks better than none on both GPUs; 120 keeps a 128 x 80 tile at the full rate (one wave of
    # 128-row tiles, tests/test_prior.py), which 112 and below charge. docs/perf-search.md, last section
    wgmma_smem_bytes_per_clk: float = 120.0
    tc_fma_per_clk: float = 2048.0

    @staticmethod
    def from_info(info: GpuInfo | None, peak_tflops: float = 0.0, bw_gbs: float = 0.0) -> "GpuSpec":
        s = GpuSpec()
        if info is None:
            return s
        peak = peak_tflops or float(info.extra.get("peak_tflops", 0.0) or 0.0) or s.peak_tflops
        bw = bw_gbs or float(info.extra.get("bw_gbs", 0.0) or 0.0) or s.bw_gbs
        return GpuSpec(sms=info.sm_count, peak_tflops=peak, bw_gbs=bw)


@dataclass(frozen=True)
class Estimate:
    """The prior's estimate of one instance on one problem, with the terms it is made of (features for the cost model)."""

    us: float
    tile_m: int
    tile_n: int
    split: int  # K splits over CTAs
    units: int  # work units (tile x split)
    ctas: int
    threads: int
    smem: int
    resident: int  # CTAs per SM
    cluster: int
    waves: float  # units / concurrent slots
    wave_eff: float  # units / (ceil(waves) * slots)
    pad_eff: float  # useful / padded MNK
    compute_us: float
    memory_us: float
    overhead_us: float
    intensity: float  # tile flops per byte loaded
    ring_us: float = 0.0  # the k blocks a CTA streams past its first fill, at the ring's depth (GpuSpec.ring_latency_us)


INFEASIBLE = float("inf")


def tile_of(params: dict[str, Any], problem: Problem) -> tuple[int, int, int, int, bool]:
    """(tile rows, tile cols, rows, cols) in the kernel's view, and whether it is swapped."""
    swap = bool(params.get("SWAP_AB", 0))
    m, n = (problem.n, problem.m) if swap else (problem.m, problem.n)
    if "BM" in params and "BN" in params:
        return int(params["BM"]), int(params["BN"]), m, n, swap
    if "TILE_M" in params and "TILE_N" in params:
        return int(params["TILE_M"]), int(params["TILE_N"]), m, n, swap
    if "TILE" in params:
        return int(params["TILE"]), int(params["TILE"]), m, n, swap
    if "WN" in params and "WARPS" in params:  # gemv: the small dimension in one m16 slice, WN n8 groups per warp
        ks = max(1, int(params.get("KS", 1)))
        return 16, 8 * int(params["WN"]) * max(1, int(params["WARPS"]) // ks), m, n, swap
    return m, n, m, n, swap


def split_of(params: dict[str, Any]) -> int:
    """K splits over CTAs (the product of the family's split parameters)."""
    split = 1
    for k in SPLIT_PARAMS:
        split *= max(1, int(params.get(k, 1)))
    return split


def onchip_split_of(params: dict[str, Any]) -> int:
    """The K splits summed inside a thread-block cluster through distributed shared memory (no partials in DRAM):
    CLK K ranks (wgmma_skinny_sm90, mma_small_sm80), or all of SPLIT_K with SPLIT_CLUSTER (wgmma_sm90)."""
    if int(params.get("SPLIT_CLUSTER", 0)):
        return split_of(params)
    return max(1, int(params.get("CLK", 1)))


def estimate(family: str, params: dict[str, Any], geo: Geometry, problem: Problem, gpu: GpuSpec) -> Estimate:
    tm, tn, m, n, _ = tile_of(params, problem)
    split = split_of(params)
    global_split = max(1, split // onchip_split_of(params))  # the splits whose partials go through the workspace
    cluster = 1
    for k in CLUSTER_PARAMS:
        cluster *= max(1, int(params.get(k, 1)))
    if int(params.get("SPLIT_CLUSTER", 0)):  # the K splits of a tile are one cluster
        cluster *= split
    tiles = cdiv(m, tm) * cdiv(n, tn)
    units = tiles * split
    bk = int(params.get("BK", params.get("TILE_K", 64 if family.startswith(WGMMA_FAMILIES) else 32)))
    k_per = cdiv(cdiv(problem.k, split), bk) * bk
    pad_eff = (m * n * problem.k) / float(tiles * tm * tn * k_per * split)
    # residency: shared memory (1 KB reserved per CTA), threads, and registers guessed from the accumulators. One
    # CTA always fits by registers: a kernel that needs more than an SM holds does not pass the compile gate
    # (launch bounds cap ptxas, spills are refused), and warp-specialized kernels move registers from the producer
    # to the consumers (setmaxnreg: 256 x 192 accumulators over two consumers, 384 threads, run at 168 per thread)
    threads = max(1, geo.threads)
    acc = tm * tn / threads
    regs = min(255, int(acc) + 48)
    by_regs = max(1, gpu.regs_per_sm // (threads * (cdiv(regs, 8) * 8)))
    by_smem = gpu.smem_per_sm // (geo.smem + 1024) if geo.smem else gpu.ctas_per_sm
    by_threads = gpu.threads_per_sm // threads
    resident = min(by_smem, by_threads, by_regs, gpu.ctas_per_sm)
    if resident < 1:
        return _infeasible(tm, tn, split, units, geo, cluster, pad_eff)
    sms = gpu.sms
    if cluster > 2:  # clusters are packed inside GPCs
        slot_sms = max(cluster, int(CLUSTER_PACKING * sms / cluster) * cluster)
    else:
        slot_sms = sms // cluster * cluster
    slots = slot_sms * resident
    waves = units / slots
    wave_eff = units / (math.ceil(waves) * slots)
    # compute: every busy SM shares its tensor-core rate among its resident units
    intensity = tm * tn / (tm + tn) / 2.0  # flops per byte of one k step's A and B tile loads
    eff = FAMILY_EFFICIENCY.get(family, DEFAULT_EFFICIENCY) * intensity / (intensity + INTENSITY_K)
    warps = resident * threads / 32
    eff *= min(1.0, 0.5 + warps / 16.0) * wgmma_eff(family, tn, gpu)
    sm_rate = gpu.peak_tflops * 1e6 / sms * eff  # flop per us
    unit_flops = 2.0 * tm * tn * k_per
    per_sm_units = math.ceil(units / slot_sms) if units > slot_sms else 1
    busy_units_per_sm = min(resident, max(1, math.ceil(units / slot_sms)))
    compute_us = per_sm_units * unit_flops / sm_rate if per_sm_units > 1 else unit_flops * busy_units_per_sm / sm_rate
    stream_us = 0.0
    if int(params.get("STREAMK", 0)) and units % slot_sms:
        # stream-K (a persistent grid on every SM): whole waves, then the rest's k blocks dealt out evenly, at the
        # stream's measured cost, at least half a tile's time (it pays only where a partial wave costs more than that)
        compute_us = units / slot_sms * unit_flops / sm_rate
        stream_us = max(gpu.stream_k_us, gpu.stream_k_units * unit_flops / sm_rate)
    # memory: A, B and C through DRAM once, split-K partials written and read, tile loads through L2; a few
    # busy SMs cannot draw the full bandwidth
    dram = problem.min_bytes + (8.0 * problem.m * problem.n * global_split if global_split > 1 else 0.0)
    l2 = units * (tm + tn) * k_per * 2.0
    busy_sms = min(slot_sms, units)
    bw = gpu.bw_gbs * 1e3 * min(1.0, busy_sms / (0.5 * sms))  # bytes per us
    memory_us = max(dram / bw, l2 / (busy_sms * gpu.l2_gbs_per_sm * 1e3))
    # a grid of fewer CTAs than units is persistent: its producers run ahead across units, so the pipeline fills
    # once per CTA; a grid of one CTA per unit fills once per wave
    fills = 1 if geo.ctas < units else math.ceil(waves)
    overhead_us = gpu.launch_us + fills * gpu.fill_us + fixup_us(params, split, global_split, gpu) + stream_us
    ring_us = ring_floor_us(params, k_per // bk, waves, gpu)
    us = max(compute_us, memory_us, ring_us) + overhead_us
    return Estimate(us, tm, tn, split, units, geo.ctas, threads, geo.smem, resident, cluster, waves, wave_eff, pad_eff,
                    compute_us, memory_us, overhead_us, intensity, ring_us)


def wgmma_eff(family: str, tn: int, gpu: GpuSpec) -> float:
    """The share of the tensor-core rate a Hopper family's wgmma stream reaches with an N of tn (the tile's columns
    in the kernel's view): an m64nNk16 runs N / 2 clocks at the SM's rate but reads 2 KB of A and 32 N bytes of B
    from shared memory, so a narrow N is bound by shared memory. 1 for other families."""
    if not family.startswith(WGMMA_FAMILIES) or gpu.wgmma_smem_bytes_per_clk <= 0:
        return 1.0
    mma_clk = 64.0 * tn * 16.0 / gpu.tc_fma_per_clk
    return min(1.0, mma_clk * gpu.wgmma_smem_bytes_per_clk / (2048.0 + 32.0 * tn))


def ring_floor_us(params: dict[str, Any], steps: int, waves: float, gpu: GpuSpec) -> float:
    """The least time a CTA's ring takes to stream its k blocks: STAGES - 1 in flight per load latency, past the
    first fill (counted in the overhead); a CTA runs ceil(waves) units one after another. 0 without a STAGES
    parameter, or with STAGES 0 (the family picks its depth)."""
    stages = int(params.get("STAGES", 0) or 0)
    if stages < 2 or gpu.ring_latency_us <= 0:
        return 0.0
    depth = min(stages, steps + 1)  # a ring deeper than the k blocks holds all of them at once
    return math.ceil(max(waves, 1.0)) * max(0, steps - depth + 1) * gpu.ring_latency_us / max(1, depth - 1)


def fixup_us(params: dict[str, Any], split: int, global_split: int, gpu: GpuSpec) -> float:
    """The split-K reduction's exposed time. The last arrival of a tile reads every split's fp32 partial (the fitted
    step, gpu.fixup_us); when the splits reduce-scatter instead (SPLIT_RS), each writes and reads 2 (split - 1) /
    split of a tile's partials through one SM, so its step is charged in that proportion (128x128 split 8: 0.22 of
    it; measured 2.8-3.1 us faster than the last-arrival reduce, docs/perf-hopper.md Run 11). Splits summed inside a
    cluster alone (global_split 1: CLK K ranks, SPLIT_CLUSTER) cost the on-chip step, gpu.onchip_fixup_us. A reducing
    split that keeps its own partial (SPLIT_OWNER) reads split - 1 of them and writes none: (split - 1) / split of the
    step (128 x 128 in 2 splits on 512x2048x4096: 21.22 -> 19.95 us, docs/perf-hopper.md Run 23)."""
    if split <= 1:
        return 0.0
    if global_split <= 1:  # every split summed on chip (DSMEM), no serial pass
        return gpu.onchip_fixup_us
    if int(params.get("SPLIT_RS", 0)):
        return gpu.fixup_us * 2.0 * (split - 1) / (split * split)
    if int(params.get("SPLIT_OWNER", 0)):
        return gpu.fixup_us * (split - 1) / split
    return gpu.fixup_us


def _infeasible(tm, tn, split, units, geo, cluster, pad_eff) -> Estimate:
    return Estimate(INFEASIBLE, tm, tn, split, units, geo.ctas, geo.threads, geo.smem, 0, cluster, 0.0, 0.0, pad_eff,
                    INFEASIBLE, INFEASIBLE, 0.0, 0.0)


@dataclass(frozen=True)
class Ranked:
    family: str
    params: dict[str, Any]
    est: Estimate


class Prior:
    """Ranks the instances of the families for a problem by the estimate (a sample of each large space)."""

    def __init__(self, families: list[Family], gpu: GpuSpec, sample: int = 1000, seed: int = 0,
                 enumerations: Enumerations | None = None):
        """enumerations: the families' valid instances, shared with other priors (a sweep's shapes)."""
        enumerations = enumerations if enumerations is not None else Enumerations()
        self.spaces = {f.name: FamilySpace(f, enumerations) for f in families}
        self.gpu = gpu
        self.sample = sample
        self.seed = seed
        self._ranked: dict[str, list[Ranked]] = {}
        self._rank_lock = threading.Lock()  # a search ranks on its compile-ahead thread while the seeds are timed
        self._claimant: threading.Thread | None = None  # the thread a claim_rank is for
        self._fits: dict[tuple, Any] = enumerations.fits  # fit's answers and the refits' order, per shape (a sweep's)

    def space(self, family: str) -> FamilySpace | None:
        return self.spaces.get(family)

    def estimate(self, family: str, params: dict[str, Any], problem: Problem) -> Estimate | None:
        sp = self.spaces.get(family)
        if sp is None:
            return None
        geo = sp.geometry(params, problem, self.gpu.sms)
        return None if geo is None else estimate(family, params, geo, problem, self.gpu)

    def rank(self, problem: Problem) -> list[Ranked]:
        """Every sampled instance that accepts the problem, best estimate first (computed once per problem; asked
        while another thread computes it or holds its claim, it waits for that answer)."""
        if self._claimant is threading.current_thread():  # the claiming thread itself, before its computation
            return self._rank_once(problem)
        with self._rank_lock:
            return self._rank_once(problem)

    def _rank_once(self, problem: Problem) -> list[Ranked]:
        if problem.key not in self._ranked:
            self._ranked = {problem.key: self._rank(problem)}  # one problem at a time: the search's
        return self._ranked[problem.key]

    def claim_rank(self, problem: Problem, thread: threading.Thread) -> Callable[[], None]:
        """Claim the problem's ranking for `thread` (a search's compile-ahead thread, while the seeds are timed),
        which calls the returned function, exactly once. Until it has, rank() asked from any other thread waits for
        its answer. A failure there is left to rank(), which computes again and raises it."""
        self._rank_lock.acquire()  # released by the function, once its answer is in
        self._claimant = thread

        def compute() -> None:
            try:
                self._rank_once(problem)
            except Exception:  # noqa: BLE001
                pass
            finally:
                self._claimant = None
                self._rank_lock.release()

        return compute

    def _rank(self, problem: Problem) -> list[Ranked]:
        rng = random.Random(self.seed * 1000003 + problem.m * 31 + problem.n * 17 + problem.k)
        out = []
        for name, sp in self.spaces.items():
            for params in sp.sample(rng, self.sample):
                geo = sp.geometry(params, problem, self.gpu.sms)
                if geo is None:
                    continue
                e = estimate(name, params, geo, problem, self.gpu)
                if e.us < INFEASIBLE:
                    out.append(Ranked(name, params, e))
        out.sort(key=lambda r: (r.est.us, r.family, str(sorted(r.params.items()))))
        return out

    def fit(self, family: str, params: dict[str, Any], problem: Problem, margin: float = 0.03,
            order: Callable[[list[dict[str, Any]]], Sequence[float]] | None = None, ties: float = 0.0) -> Ranked | None:
        """A known-good start refitted to this shape: its tile (BM x BN or TILE_M x TILE_N) and its K split (the
        first split parameter the family has) moved to the values with the best estimate, the ring depth lowered
        only where the new tile needs it, everything else kept. None where the start's own estimate is within
        ``margin`` of the best (or nothing fits). Starts are measured winners of one shape; this carries them to
        the shapes of their class (a swap-AB start's column tile to M = 96, a split to the SM count's wave).
        Candidates within ``ties`` of the best estimate are a tie: ``order`` (the cost model's times for a list of
        parameter sets) picks among them where given, else the fewest moved parameters do. Answers are kept per
        (start, shape, margin, ties, whether `order` is given) in the enumerations' `fits`, which a sweep shares between
        its searches: the first answer stands (the search that compiled the start ahead for this shape, whose `order`
        was an older model), so the shape's own search times what compiled ahead."""
        key = (family, tuple(sorted(params.items())), problem.key, problem.layout, margin, ties, order is not None)
        return self.kept(key, lambda: self._fit(family, params, problem, margin, order, ties))

    def kept(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """compute()'s answer for key in the enumerations' `fits` (a sweep's), the first answer standing: what a
        start is refitted to and the order the model gives the refitted starts (evo.proposers.mutate), so that a
        shape's own search picks the starts an earlier search compiled ahead for it."""
        if key not in self._fits:
            self._fits.setdefault(key, compute())
        return self._fits[key]

    def _fit(self, family: str, params: dict[str, Any], problem: Problem, margin: float,
             order: Callable[[list[dict[str, Any]]], Sequence[float]] | None, ties: float) -> Ranked | None:
        sp = self.spaces.get(family)
        if sp is None:
            return None
        fam = sp.family
        space = fam.space
        base = fam.complete(params)
        axes = [names for names in (("BM", "BN"), ("TILE_M", "TILE_N")) if all(n in space for n in names)][:1]
        axes = list(axes[0]) if axes else []
        split = next((n for n in SPLIT_PARAMS if n in space), None)
        if split is not None:
            axes.append(split)
        if not axes:
            return None
        # a new tile may need a shallower ring: the deepest valid one up to the start's (else the shallowest)
        stages = list(space.get("STAGES", ()))
        depth = int(base.get("STAGES", 0))
        tries = sorted((v for v in stages if v <= depth), reverse=True) + sorted(v for v in stages if v > depth)
        own = self.estimate(family, base, problem) if fam.valid(base) else None
        cands: list[tuple[tuple, Ranked]] = []
        for combo in itertools.product(*(list(space[a]) for a in axes)):
            cand = {**base, **dict(zip(axes, combo))}
            if not fam.valid(cand):
                cand = next(({**cand, "STAGES": v} for v in tries if fam.valid({**cand, "STAGES": v})), None)
                if cand is None:
                    continue
            e = self.estimate(family, cand, problem)
            if e is None or e.us >= INFEASIBLE:
                continue
            changed = sum(cand[k] != base[k] for k in cand)
            cands.append(((round(e.us, 3), changed, str(sorted(cand.items()))), Ranked(family, cand, e)))
        if not cands:
            return None
        cands.sort(key=lambda c: c[0])
        best = cands[0][1]
        tied = [r for _, r in cands if r.est.us <= best.est.us * (1.0 + ties)] if order is not None and ties > 0 else []
        if len(tied) > 1:  # the first run of order_ties, predicted for its members only
            best = tied[order_ties([r.est.us for r in tied], list(order([r.params for r in tied])), ties)[0]]
        if best.params == base:
            return None
        if own is not None and own.us < INFEASIBLE and cands[0][1].est.us > own.us * (1 - margin):
            return None
        return best


def order_ties(us: list[float], preds: list[float] | None, tol: float) -> list[int]:
    """Indices of ``us`` (estimates, in an order that already breaks exact ties) best first, where each run of
    estimates within ``tol`` of its first is a tie ordered by ``preds`` (the cost model's times); without preds or
    tolerance, the estimates' order. The prior's terms are floors: on a DRAM-bound shape every one-wave instance
    gets the same estimate, and on the H200's measurements the held-out cost model picks the faster of such ties
    (docs/perf-search.md)."""
    order = sorted(range(len(us)), key=lambda i: us[i])
    if not preds or tol <= 0:
        return order
    out: list[int] = []
    run: list[int] = []
    for i in order:
        if run and us[i] > us[run[0]] * (1.0 + tol):
            out += sorted(run, key=lambda j: preds[j])
            run = []
        run.append(i)
    return out + sorted(run, key=lambda j: preds[j])


def diverse_top(ranked: list[Ranked], n: int, per_family: int = 1, competitive: float = 3.0) -> list[Ranked]:
    """The top n of a ranking, kept diverse: each family's best ``per_family`` first (families whose best estimate
    is within ``competitive`` x the overall best), then the ranking in order, skipping instances with the same
    (family, tile, split) as one already taken."""
    if not ranked or n <= 0:
        return []
    best = ranked[0].est.us
    out: list[Ranked] = []
    taken: set[tuple] = set()
    sig: set[tuple] = set()
    per: dict[str, int] = {}

    def take(r: Ranked) -> None:
        out.append(r)
        taken.add((r.family, params_key(r.params)))
        sig.add((r.family, r.est.tile_m, r.est.tile_n, r.est.split))
        per[r.family] = per.get(r.family, 0) + 1

    for r in ranked:
        if len(out) >= n:
            break
        if per.get(r.family, 0) < per_family and r.est.us <= competitive * best:
            if (r.family, r.est.tile_m, r.est.tile_n, r.est.split) not in sig:
                take(r)
    for r in ranked:
        if len(out) >= n:
            break
        if (r.family, params_key(r.params)) in taken or (r.family, r.est.tile_m, r.est.tile_n, r.est.split) in sig:
            continue
        take(r)
    for r in ranked:  # fewer distinct signatures than n: fill with the rest in order
        if len(out) >= n:
            break
        if (r.family, params_key(r.params)) not in taken:
            take(r)
    out.sort(key=lambda r: r.est.us)
    return out


def competitive_families(ranked: list[Ranked], factor: float = 2.0) -> list[str]:
    """Families whose best estimate is within ``factor`` x the overall best (optuna searches only these)."""
    if not ranked:
        return []
    best = ranked[0].est.us
    fams: list[str] = []
    for r in ranked:
        if r.family not in fams and r.est.us <= factor * best:
            fams.append(r.family)
    return fams
