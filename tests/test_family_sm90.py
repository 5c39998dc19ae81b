"""The wgmma_sm90 family: renders, launch rules, and (with nvcc) its CI instances compile cleanly for sm_90a."""
import re

import pytest

from evo.families import load_families
from evo.problem import Problem

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent



@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    return f


def test_ci_instances_are_few_and_valid(fam):
    inst = fam.instances_for_ci()
    assert 1 <= len(inst) <= 5  # CI has 2 cores (an instance of this family compiles in about a second)
    for p in inst:
        assert fam.valid(p)
        ks = fam.render(p)
        assert ks.meta.archs == ("sm_90a",)


def test_launch_rules(fam):
    ks = fam.render({})  # default: 128x256 tile, 2 consumers, persistent
    big = ks.launch(Problem(8192, 8192, 8192), num_sms=132)
    assert big.grid == (132, 1, 1) and big.block == (384, 1, 1)
    assert big.smem <= 232448 and big.workspace == 0
    assert [(t.operand, t.box_rows, t.box_cols, t.swizzle) for t in big.tensor_maps] == [("A", 128, 64, 128), ("B", 256, 64, 128)]
    assert ks.accepts(Problem(1000, 1000, 1000)) and not ks.accepts(Problem(64, 64, 100))  # TMA: K % 8 == 0

    sk = fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLIT_K": 8, "STAGES": 6})
    s = sk.launch(Problem(128, 128, 16384), num_sms=132)
    assert s.grid == (32, 1, 1) and s.block == (256, 1, 1)
    assert s.workspace >= 4 * 8 * 64 * 64 * 4  # 4 tiles x 8 splits of fp32 partials (+ counters)

    sw = fam.render({"BM": 128, "BN": 64, "SWAP_AB": 1, "SPLIT_K": 4, "STAGES": 6})
    l = sw.launch(Problem(64, 4096, 4096), num_sms=132)
    assert l.grid == (128, 1, 1)  # kernel rows over N (32 tiles) x cols over M (1 tile) x 4 splits
    assert [(t.operand, t.box_rows) for t in l.tensor_maps] == [("A", 64), ("B", 128)]

    pp = fam.render({"BM": 128, "BN": 128, "PINGPONG": 1, "PERSISTENT": 0, "STAGES": 6})
    l = pp.launch(Problem(4096, 4096, 1024), num_sms=132)
    assert l.grid == (512, 1, 1) and l.block == (384, 1, 1)  # 1024 tiles, two per CTA (one per consumer)
    assert fam.render({"BM": 128, "BN": 128, "PINGPONG": 1}).launch(Problem(4096, 4096, 1024), num_sms=132).grid == (132, 1, 1)


def test_ring_split_keeps_the_ring_and_needs_a_row_tile_in_it(fam):
    """RING_SPLIT lays the ring out as A's stages, then B's (CUTLASS's layout), or B's, then A's: the same bytes, so the
    same launch; with a panel the ring holds B only and there is nothing to split."""
    base = {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1}
    p = Problem(4096, 4096, 1024)
    for order in (1, 2):  # A's stages first, or B's
        split = fam.complete({**base, "RING_SPLIT": order})
        assert fam.valid(split) and f"constexpr int RING_SPLIT = {order};" in fam.render(split).text
        assert fam.render(split).launch(p, num_sms=132) == fam.render(fam.complete(base)).launch(p, num_sms=132)
    panel = {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "PANEL": 1, "GROUP": 1}
    assert fam.valid(fam.complete(panel))
    assert not any(fam.valid(fam.complete({**panel, "RING_SPLIT": order})) for order in (1, 2))


def test_constraints_reject_oversized(fam):
    assert not fam.valid(fam.complete({"BM": 128, "BN": 256, "STAGES": 5}))  # smem ring too large
    assert not fam.valid(fam.complete({"BM": 128, "BN": 256, "CONSUMERS": 1}))  # 256 accumulators / thread
    # ping-pong: a consumer owns the whole tile, so 128x256 would need 256 accumulators; no split-K
    assert not fam.valid(fam.complete({"BM": 128, "BN": 256, "STAGES": 4, "PINGPONG": 1}))
    assert not fam.valid(fam.complete({"BM": 64, "BN": 128, "PINGPONG": 1, "SPLIT_K": 2}))
    assert not fam.valid(fam.complete({"BM": 64, "BN": 128, "PINGPONG": 1, "CONSUMERS": 1}))
    assert fam.valid(fam.complete({"BM": 128, "BN": 128, "STAGES": 6, "PINGPONG": 1}))

# Compiling the CI instances through evo.compile (with its gates) is tests/test_families_compile.py.


def test_every_tile_width_has_its_wgmma(fam):
    # BN is wgmma's N: each value the family declares needs its mma_async specialization (a missing one fails only
    # at compile time, on the GPU machine, for the instances that draw it)
    src = fam.template
    # (one EVO_WGMMA(N, groups, da, db, scale_d) line each: N / 16 groups of eight accumulators, then the operands)
    specialized = set()
    for n, g, da, db, sc in re.findall(r"^EVO_WGMMA\((\d+), (\d+), (\d+), (\d+), (\d+)\)$", src, re.M):
        n = int(n)
        assert (int(g), int(da), int(db), int(sc)) == (n // 16, n // 2, n // 2 + 1, n // 2 + 2), n
        specialized.add(n)
    widths = set(fam.space["BN"])
    assert widths <= specialized, sorted(widths - specialized)
    assert all(n % 16 == 0 for n in widths)  # the epilogue writes 16-column chunks
    assert '"wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16 {" EVO_RS##G' in src


@pytest.mark.nvcc
def test_swap_without_split_compiles_unserialized(fam, tmp_path):
    # Regression: scalar fp32->fp16 converts in the swap-AB epilogue made ptxas serialize every wgmma
    # (C7514) whenever SPLIT_K == 1, so the gate rejected that whole sub-space (100 of 100 on an H200 search).
    from evo.compile import Compiler
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    p = {"BM": 64, "BN": 16, "CONSUMERS": 1, "SPLIT_K": 1, "SWAP_AB": 1, "STAGES": 7}
    r = comp.compile(fam.render(p), "sm_90a")
    assert r.ok, r.error
    assert "C7514" not in r.log and "C7510" not in r.log


def test_split_cluster_launch_and_constraints(fam):
    # a tile's K splits as one cluster, reduced in distributed smem: one unit per CTA, no workspace,
    # the receive slots (BM x BN fp32) beside the ring
    p = {"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 4}
    assert fam.valid(fam.complete(p))
    l = fam.render(p).launch(Problem(512, 2048, 4096), num_sms=132)
    assert l.grid == (128, 1, 1) and l.workspace == 0  # 64 tiles x 2 splits, pairs of CTAs
    plain = fam.render({**p, "SPLIT_CLUSTER": 0}).launch(Problem(512, 2048, 4096), num_sms=132)
    assert l.smem - plain.smem == 128 * 128 * 4 and plain.workspace > 0
    assert not fam.valid(fam.complete({**p, "PERSISTENT": 1}))  # one unit per CTA
    assert not fam.valid(fam.complete({**p, "SPLIT_K": 1}))  # nothing to reduce
    assert not fam.valid(fam.complete({**p, "BN": 96, "SPLIT_K": 8}))  # 12 column chunks do not deal out to 8
    assert not fam.valid(fam.complete({**p, "STAGES": 5}))  # ring + slots past the 227 KB


@pytest.mark.nvcc
def test_split_cluster_ptx(fam, tmp_path):
    # the partials travel as st.async, their bytes completing the owner's receive mbarrier (armed once at init): never
    # per-thread mbarrier arrivals on another CTA, which serialise (20x slower on an H100, docs/perf-hopper.md Run 9),
    # and no cluster barrier between the sends and the sums (the exit barrier arrives relaxed)
    from evo.testing.ptx import ptx_of

    text = ptx_of(fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLIT_K": 4, "SPLIT_CLUSTER": 1, "PERSISTENT": 0,
                              "STAGES": 6, "SWAP_AB": 1}).text, tmp_path)
    assert ".reqnctapercluster 4, 1, 1" in text or ".explicitcluster" in text
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32" in text and "mapa.shared::cluster.u32" in text
    assert "st.shared::cluster" not in text
    assert "barrier.cluster.arrive.relaxed" in text and "barrier.cluster.arrive.release" not in text
    assert "mbarrier.arrive.release.cluster.shared::cluster" not in text
    assert "atom.add" not in text  # no split-K ticket


def test_split_reduce_scatter_launch_and_constraints(fam):
    # a tile's K splits wait for each other and each sums one column slice: one unit per CTA, the whole grid in one
    # wave (a split waits for the others), two counters per tile beside the partials, up to 128 accumulators
    p = {"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 6}
    assert fam.valid(fam.complete(p))
    ks = fam.render(p)
    l = ks.launch(Problem(512, 2048, 4096), num_sms=132)
    plain = fam.render({**p, "SPLIT_RS": 0}).launch(Problem(512, 2048, 4096), num_sms=132)
    assert l.grid == plain.grid == (128, 1, 1)  # 64 tiles x 2 splits
    assert l.workspace >= plain.workspace and l.workspace - plain.workspace <= 256
    assert ks.accepts(Problem(512, 2048, 4096), num_sms=132)
    assert not ks.accepts(Problem(512, 2048, 4096), num_sms=100)  # two waves: a split could wait on one not yet run
    assert not ks.accepts(Problem(640, 1792, 4096), num_sms=132)  # 70 tiles x 2
    assert not fam.valid(fam.complete({**p, "PERSISTENT": 1}))
    assert not fam.valid(fam.complete({**p, "SPLIT_K": 1}))
    assert not fam.valid(fam.complete({**p, "SPLIT_K": 3}))  # 16 column chunks do not deal out to 3
    assert not fam.valid(fam.complete({**p, "SPLIT_CLUSTER": 1}))
    assert fam.valid(fam.complete({**p, "BN": 256, "SPLIT_K": 4, "STAGES": 4}))  # 128 accumulators per thread
    assert not fam.valid(fam.complete({**p, "BN": 256, "SPLIT_K": 4, "STAGES": 4, "SPLIT_RS": 0}))
    assert not fam.valid(fam.complete({**p, "BN": 256, "SPLIT_K": 16, "STAGES": 4}))  # 128 accumulators + 16 splits spill
    # two consumers' 128 x 256 tile over 4 splits spills with GROUP 1 and compiles clean with raster groups of 8; the
    # other 4-split tiles measured with GROUP 1 compiled clean
    assert not fam.valid(fam.complete({**p, "BN": 256, "SPLIT_K": 4, "STAGES": 3, "GROUP": 1}))
    assert fam.valid(fam.complete({**p, "BN": 256, "SPLIT_K": 4, "STAGES": 3, "GROUP": 8}))
    for q in ({"BN": 224}, {"BM": 256, "BN": 128}, {"BM": 64, "BN": 256, "CONSUMERS": 1}):
        assert fam.valid(fam.complete({**p, "SPLIT_K": 4, "STAGES": 3, "GROUP": 1, **q})), q


def test_split_owner_launch_and_constraints(fam):
    # split SPLIT_K-1 reduces from registers: same grid and workspace as the last-arrival reduce, split-K only, not
    # beside the other two reduces
    p = {"BM": 128, "BN": 128, "SPLIT_K": 2, "STAGES": 6, "SPLIT_OWNER": 1}
    assert fam.valid(fam.complete(p))
    shape = Problem(512, 2048, 4096)
    l, plain = fam.render(p).launch(shape, num_sms=132), fam.render({**p, "SPLIT_OWNER": 0}).launch(shape, num_sms=132)
    assert (l.grid, l.workspace) == (plain.grid, plain.workspace)
    assert not fam.valid(fam.complete({**p, "SPLIT_K": 1}))
    assert not fam.valid(fam.complete({**p, "SPLIT_RS": 1, "PERSISTENT": 0}))
    assert not fam.valid(fam.complete({**p, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 4}))
    assert fam.valid(fam.complete({**p, "SPLIT_RS": 1, "PERSISTENT": 0, "SPLIT_OWNER": 0}))


def test_instances_whose_ctas_wait_on_each_other_launch_cooperatively(fam):
    """A reduce-scatter split, a stream-K fix-up and a persistent owner reduce wait on CTAs that may not have been
    dispatched before them: those instances launch cooperatively (the whole grid resident, or refused). The others,
    a last-arrival reduce and a multi-wave owner reduce among them, wait on nothing or only on CTAs dispatched first."""
    shape = Problem(512, 2048, 4096)
    cases = [
        ({"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 6}, True),
        ({"BM": 128, "BN": 128, "STREAMK": 1, "PERSISTENT": 1, "STAGES": 5}, True),
        ({"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_OWNER": 1, "PERSISTENT": 1, "STAGES": 6}, True),
        ({"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_OWNER": 1, "PERSISTENT": 0, "STAGES": 6}, False),
        ({"BM": 128, "BN": 128, "SPLIT_K": 2, "PERSISTENT": 1, "STAGES": 6}, False),
        ({"BM": 128, "BN": 128, "PERSISTENT": 1, "STAGES": 5}, False),
    ]
    for p, coop in cases:
        q = fam.complete(p)
        assert fam.valid(q), p
        assert fam.render(q).launch(shape, num_sms=132).cooperative is coop, p


@pytest.mark.nvcc
def test_split_owner_ptx(fam, tmp_path):
    # the other splits arrive with a release reduction, the reducer polls with acquire loads; no acq_rel ticket, no
    # sequentially consistent fence
    from evo.testing.ptx import ptx_of

    text = ptx_of(fam.render({"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "SPLIT_OWNER": 1}).text, tmp_path)
    assert "red.release.gpu.global.add.s32" in text and "ld.acquire.gpu.global.s32" in text
    assert "acq_rel" not in text
    assert "fence.sc" not in text and "membar.gl" not in text


# Reduce-scatter instances compiled here and checked on the GPU by tests/test_gpu_pipeline.py (the family's CI
# instances stay at five): 128 accumulators per thread, and 8 splits with transposed slices
SPLIT_RS_INSTANCES = [
    {"BM": 128, "BN": 256, "SPLIT_K": 4, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 4},
    {"BM": 128, "BN": 64, "SPLIT_K": 8, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 6, "SWAP_AB": 1},
]


@pytest.mark.nvcc
@pytest.mark.parametrize("params", SPLIT_RS_INSTANCES, ids=["128x256-s4", "swap-128x64-s8"])
def test_split_reduce_scatter_compiles_clean(fam, tmp_path, params):
    from evo.compile import Compiler
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    r = comp.compile(fam.render(params), "sm_90a")
    assert r.ok, r.error
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers > 0


@pytest.mark.nvcc
def test_split_reduce_scatter_ptx(fam, tmp_path):
    # the barrier of a tile's splits: one count per tile, a relaxed read before arriving, a release arrival that
    # steps it (wrapping), acquire polls; no ticket round trip, no second word, no sequentially consistent fence
    from evo.testing.ptx import ptx_of

    text = ptx_of(fam.render({"BM": 128, "BN": 128, "SPLIT_K": 8, "SPLIT_RS": 1, "PERSISTENT": 0,
                              "STAGES": 6}).text, tmp_path)
    assert "ld.relaxed.gpu.global.s32" in text and "ld.acquire.gpu.global.s32" in text
    assert "red.release.gpu.global.inc.u32" in text
    assert "atom." not in text and "st.release" not in text
    assert "fence.sc" not in text and "membar.gl" not in text


# Every split-K reduce path with the register budget it runs under: the last arrival (RU divides SPLIT_K), the
# reducing split (SPLIT_K - 1 partials, RU need not divide), CTA pairs, swap-AB pairs, 3 splits. A guard on the
# reduce loop that the compiler could not fold once made the swap-AB pair spill 612 bytes (caught on the GPU only).
SPLIT_PATH_INSTANCES = [
    {"BM": 128, "BN": 128, "SPLIT_K": 4, "STAGES": 6, "PERSISTENT": 0, "SWAP_AB": 1, "CLUSTER": 2},
    {"BM": 128, "BN": 128, "SPLIT_K": 4, "STAGES": 6, "PERSISTENT": 0, "SWAP_AB": 1, "CLUSTER": 2, "SPLIT_OWNER": 1},
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "CLUSTER": 2},
    {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "CLUSTER": 2},
    {"BM": 128, "BN": 128, "SPLIT_K": 8, "STAGES": 6},
    {"BM": 64, "BN": 16, "SPLIT_K": 2, "STAGES": 7, "SWAP_AB": 1, "CONSUMERS": 1},
    {"BM": 128, "BN": 128, "SPLIT_K": 2, "STAGES": 6, "PERSISTENT": 0, "SPLIT_OWNER": 1, "SPLIT_SKEW": 2},
]
# Early slice stores: every path to the epilogue ends with one wgmma group per slice, so ptxas keeps the wgmmas
# asynchronous while slice 0 is staged (a loop whose last iteration issued the groups serialized them: C7514).
EARLY_STORE_PATH_INSTANCES = [
    {"BM": 256, "BN": 128, "STAGES": 6, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EARLY_STORE": 2},
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_HINT": 1, "EARLY_STORE": 1},
    {"BM": 128, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 4, "EPI": 1, "EARLY_STORE": 2},
    {"BM": 256, "BN": 64, "CONSUMERS": 1, "PANEL": 1, "GROUP": 1, "STAGES": 6, "EPI": 4, "EARLY_STORE": 2},
]

# The split ring (A's stages, then B's, or B's, then A's) on the paths that address it differently: the ping-pong, one
# consumer, the one-wave reduce-scatter, pairs multicasting half a row tile, swap-AB (ordinary stores and the
# reduce-scatter), a cooperative tile with two consumers' row offsets (compiled here; checked on a GPU by
# tests/test_gpu_pipeline.py).
_A_FIRST = [
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "EPI_HINT": 1, "RING_SPLIT": 1},
    {"BM": 64, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 8, "EPI": 1, "GROUP": 4, "RING_SPLIT": 1},
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "SPLIT_RS": 1, "SPLIT_MAJOR": 1, "PERSISTENT": 0, "STAGES": 8, "GROUP": 16,
     "RING_SPLIT": 1},
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "CLUSTER": 2, "RING_SPLIT": 1},
    {"BM": 64, "BN": 96, "CONSUMERS": 1, "SWAP_AB": 1, "STAGES": 8, "RING_SPLIT": 1},
    {"BM": 128, "BN": 64, "SWAP_AB": 1, "SPLIT_K": 8, "SPLIT_RS": 1, "SPLIT_MAJOR": 1, "PERSISTENT": 0, "STAGES": 8,
     "RING_SPLIT": 1},
    {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1, "RING_SPLIT": 1},
]
# B's stages first on the ping-pong, the reduce-scatter, pairs and swap-AB
RING_SPLIT_INSTANCES = _A_FIRST + [{**_A_FIRST[i], "RING_SPLIT": 2} for i in (0, 2, 3, 4)]


@pytest.mark.nvcc
def test_starts_and_split_paths_compile_without_spills(fam, tmp_path):
    """Every start of the family (what generation 0 times), every split-K reduce path and the early slice stores
    compile with no spill, no stack frame and no serialized wgmma: a start that fails the compile gate is silently
    missing from every search."""
    from evo.compile import Compiler
    from evo.config import load_config

    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path)}}).compile)
    paths = list(fam.starts) + SPLIT_PATH_INSTANCES + EARLY_STORE_PATH_INSTANCES + RING_SPLIT_INSTANCES
    items = [(fam.render(fam.complete(p)), "sm_90a") for p in paths]
    bad = [f"{ks.meta.params}: {r.error or f'{r.spill_bytes} B spilled, {r.stack_bytes} B stack'}"
           for (ks, _), r in zip(items, comp.compile_many(items, 0))
           if not r.ok or r.spill_bytes or r.stack_bytes]
    assert not bad, "\n".join(bad)
