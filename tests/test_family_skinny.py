"""The wgmma_skinny_sm90 family: renders, constraints, launch geometry (cluster-divisible grids, workspace),
and (with nvcc) its CI instances compile for sm_90a without spills, stack frames or serialized wgmma."""
import re
from pathlib import Path

import pytest

from evo.families import load_families
from evo.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(128, 128, 16384), (64, 4096, 4096), (256, 1024, 16384), (128, 12288, 4096),
          (100, 200, 1000), (77, 1000, 4096), (3, 40, 72), (130, 260, 16392)]


@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(ROOT / "templates", names=["wgmma_skinny_sm90"])
    return f


def cdiv(a, b):
    return -(-a // b)


def test_ci_instances_are_few_and_valid(fam):
    inst = fam.instances_for_ci()
    assert 1 <= len(inst) <= 3  # CI has 2 cores
    for p in inst:
        assert fam.valid(p)
        ks = fam.render(p)
        assert ks.meta.archs == ("sm_90a",)
        assert "__cluster_dims__(CS, 1, 1)" in ks.text


def test_launch_rules(fam):
    # 128x128x16384: swap 64x128 tiles (2), cluster of 8 K ranks x 8 global splits = 128 CTAs
    ks = fam.render({"BM": 64, "BN": 128, "CONSUMERS": 1, "CLK": 8, "G": 8})
    l = ks.launch(Problem(128, 128, 16384), num_sms=132)
    assert l.grid == (128, 1, 1) and l.block == (160, 1, 1)  # 1 consumer warpgroup + 1 producer warp
    assert [(t.operand, t.box_rows, t.box_cols, t.swizzle) for t in l.tensor_maps] == [("A", 128, 64, 128), ("B", 64, 64, 128)]
    assert l.workspace == 256 + 2 * 8 * 64 * 128 * 4  # counters (2 tiles x 8 ranks, padded) + fp32 slices
    # 64x4096x4096: swap 64x64, cluster 2, no global split: no workspace
    l = fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 2, "G": 1, "STAGES": 8}).launch(Problem(64, 4096, 4096), 132)
    assert l.grid == (128, 1, 1) and l.workspace == 0 and l.smem == 8 * 128 * 128 + 64 * 64 * 4 + 1024  # + PUSH's slots
    l0 = fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 2, "G": 1, "STAGES": 8, "PUSH": 0}).launch(Problem(64, 4096, 4096), 132)
    assert l0.smem == 8 * 128 * 128 + 1024  # the pull reduce reads the peers' staged tiles in place
    # multicast: the column operand's box is BN / MC rows; row tiles padded to a multiple of MC
    l = fam.render({"CLK": 1, "MC": 4, "G": 1, "STAGES": 5}).launch(Problem(128, 12288 - 128, 4096), 132)
    assert l.grid == (96, 1, 1)  # 95 row tiles -> 24 groups of 4
    assert [(t.operand, t.box_rows) for t in l.tensor_maps] == [("A", 32), ("B", 128)]
    assert fam.render({}).accepts(Problem(100, 200, 1000)) and not fam.render({}).accepts(Problem(64, 64, 100))


def test_grids_are_whole_clusters_and_workspace_covers_the_slices(fam):
    for clk, mc, g, swap in [(8, 1, 1, 1), (4, 2, 2, 1), (2, 4, 4, 0), (1, 2, 8, 0), (8, 1, 16, 0), (16, 1, 2, 0)]:
        p = fam.complete({"BM": 128, "BN": 64, "CLK": clk, "MC": mc, "G": g, "SWAP_AB": swap})
        assert fam.valid(p), p
        ks = fam.render(p)
        for m, n, k in SHAPES:
            l = ks.launch(Problem(m, n, k), 132)
            assert l.grid[0] % (clk * mc) == 0
            rows, cols = (n, m) if swap else (m, n)
            tiles = mc * cdiv(cdiv(rows, 128), mc) * cdiv(cols, 64)
            assert l.grid[0] == tiles * clk * g
            if g > 1:
                assert l.workspace >= tiles * clk * 4 + tiles * g * 128 * 64 * 4
            else:
                assert l.workspace == 0
            # the reduce tile (fp32, C orientation, padded rows) fits in the dynamic smem with the ring
            r, cc, pitch = (64, 128, 132) if swap else (128, 64, 72)
            assert l.smem >= r * pitch * 4 + 1024 and l.smem >= p["STAGES"] * (128 + 64) * 128 + 1024


def test_push_needs_k_ranks_and_room_for_the_receive_slots(fam):
    # without K ranks there is nothing to send: one value of PUSH only (the default), and no receive slots
    assert fam.valid(fam.complete({"CLK": 1, "MC": 2})) and not fam.valid(fam.complete({"CLK": 1, "MC": 2, "PUSH": 0}))
    l = fam.render({"CLK": 1, "MC": 2, "G": 1, "STAGES": 5}).launch(Problem(128, 4096, 4096), 132)
    assert l.smem == max(5 * 256 * 128, 128 * 132 * 4) + 1024
    # 128 x 256 tiles, 3 stages: the ring (144 KB) has no room beside 128 KB of receive slots; the pull reduce fits
    assert not fam.valid(fam.complete({"BM": 128, "BN": 256, "CONSUMERS": 2, "CLK": 2, "STAGES": 3, "PUSH": 1}))
    assert fam.valid(fam.complete({"BM": 128, "BN": 256, "CONSUMERS": 2, "CLK": 2, "STAGES": 3, "PUSH": 0}))


def _k_blocks(sidx, S, kblocks, ki):  # the kernel's k-block assignment of split sidx of S
    if ki:
        nk = (kblocks - 1 - sidx) // S + 1 if sidx < kblocks else 0
        return [sidx + i * S for i in range(nk)]
    kb0, kb1 = sidx * kblocks // S, (sidx + 1) * kblocks // S
    return list(range(kb0, kb1))


@pytest.mark.parametrize("ki", [0, 1])
def test_k_splits_partition_the_k_blocks(ki):
    for kblocks in (1, 2, 7, 64, 256, 257):
        for S in (1, 2, 8, 64, 128):
            got = sorted(b for s in range(S) for b in _k_blocks(s, S, kblocks, ki))
            assert got == list(range(kblocks))


def test_constraints_reject(fam):
    ok = {"BM": 128, "BN": 128, "STAGES": 4}
    assert fam.valid(fam.complete(ok))
    assert not fam.valid(fam.complete({**ok, "CLK": 8, "MC": 2}))                 # cluster of 16: non-portable
    assert not fam.valid(fam.complete({**ok, "BN": 48, "MC": 4}))                  # 12-row multicast pieces
    assert not fam.valid(fam.complete({**ok, "BM": 256, "BN": 256}))               # 256 accumulators / thread
    assert not fam.valid(fam.complete({**ok, "BM": 256, "BN": 256, "STAGES": 6}))  # smem
    assert not fam.valid(fam.complete({**ok, "CONSUMERS": 2, "BM": 64}))           # a consumer owns >= 64 rows
    assert not fam.valid(fam.complete({**ok, "CLK": 4, "MC": 2, "NC": 2}))         # cluster of 16
    assert fam.valid(fam.complete({**ok, "BM": 64, "CONSUMERS": 1, "CLK": 1, "NC": 4}))  # 16-row row-operand pieces


def test_two_way_multicast_launch(fam):
    # 128x128x16384 as one 2x2 cluster of 64x64 tiles, both operands multicast, 2 K ranks on chip, 16 global splits
    ks = fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 2, "MC": 2, "NC": 2, "G": 16, "SWAP_AB": 0})
    l = ks.launch(Problem(128, 128, 16384), num_sms=132)
    assert l.grid == (128, 1, 1)
    assert [(t.operand, t.box_rows) for t in l.tensor_maps] == [("A", 32), ("B", 32)]  # half of each tile per CTA
    assert l.workspace == 256 + 4 * 16 * 64 * 64 * 4
    # off-tile: 3 row tiles padded to 4 (MC 2), 4 column tiles (NC 4): 2 x 1 cluster groups
    ks = fam.render({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 1, "MC": 2, "NC": 4, "G": 2, "SWAP_AB": 0})
    assert ks.launch(Problem(130, 200, 1000), 132).grid == (2 * 4 * 2 * 2 * 1, 1, 1)


@pytest.mark.parametrize("clk,mc,nc,g", [(1, 2, 4, 2), (2, 2, 2, 3), (2, 1, 4, 1), (1, 4, 2, 1), (8, 1, 1, 2)])
def test_cluster_index_model_covers_every_tile_and_split_once(clk, mc, nc, g):
    # the kernel's block -> (row tile, column tile, K split) map, and its multicast groups: CTAs that share a row
    # tile (same nr, kr) and a column tile (same nc, kr) are in one cluster and take the same K range
    tiles_m, tiles_n = 5, 7
    tmg_count, tng_count = cdiv(tiles_m, mc), cdiv(tiles_n, nc)
    cs = clk * mc * nc
    grid = cs * g * tmg_count * tng_count
    seen, clusters = {}, {}
    for b in range(grid):
        rank, cid = b % cs, b // cs
        kr, nr, ncx = rank % clk, (rank // clk) % mc, rank // (clk * mc)
        gg, cid2 = cid % g, cid // g
        tm, tn = (cid2 % tmg_count) * mc + nr, (cid2 // tmg_count) * nc + ncx
        key = (tm, tn, gg * clk + kr)
        assert key not in seen
        seen[key] = b
        clusters.setdefault(cid, []).append((rank, tm, tn, kr))
    assert len(seen) == mc * tmg_count * nc * tng_count * g * clk  # padded tiles x K splits, each once
    for members in clusters.values():
        by_rank = {r: (tm, tn, kr) for r, tm, tn, kr in members}
        for r, (tm, tn, kr) in by_rank.items():
            nr, ncx = (r // clk) % mc, r // (clk * mc)
            row_group = [(j * mc + nr) * clk + kr for j in range(nc)]   # the kernel's row_mask
            col_group = [(ncx * mc + j) * clk + kr for j in range(mc)]  # its mask
            assert {by_rank[x][0] for x in row_group} == {tm} and {by_rank[x][2] for x in row_group} == {kr}
            assert {by_rank[x][1] for x in col_group} == {tn} and {by_rank[x][2] for x in col_group} == {kr}
            assert len(set(row_group) | set(col_group)) == mc + nc - 1  # PEERS: the empty barrier's arrivals / 4


@pytest.mark.nvcc
def test_ptx_two_way_multicast(fam, tmp_path):
    from evo.testing.ptx import ptx_of

    def ptx(params):
        return ptx_of(fam.render(params).text, tmp_path)

    base = {"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 2, "MC": 2, "G": 16, "SWAP_AB": 0}
    both, cols = ptx({**base, "NC": 2}), ptx({**base, "NC": 1})
    assert re.search(r"\.reqnctapercluster\s+8,\s*1,\s*1", both) and re.search(r"\.reqnctapercluster\s+4,\s*1,\s*1", cols)
    loads = lambda t: len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::complete_tx::bytes\.multicast::cluster", t))
    assert loads(cols) > 0 and loads(both) > loads(cols)  # the row piece is multicast too
    assert "mbarrier.arrive.shared::cluster.b64" in both and "arrive.release.cluster" not in both


def test_sixteen_k_ranks_only_without_multicast(fam):
    """A cluster of 16 CTAs (non-portable) is 16 K ranks of one tile; multicast groups stay within 8 CTAs."""
    assert fam.valid(fam.complete({"BM": 64, "BN": 48, "CONSUMERS": 1, "CLK": 16, "G": 1, "STAGES": 8}))
    for extra in ({"MC": 2}, {"NC": 2}):
        assert not fam.valid(fam.complete({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 16, "G": 1, **extra}))
    assert not fam.valid(fam.complete({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 8, "MC": 2, "G": 1}))
    ks = fam.render(fam.complete({"BM": 64, "BN": 48, "CONSUMERS": 1, "CLK": 16, "G": 1, "STAGES": 8}))
    assert ks.launch(Problem(128, 128, 16384), 132).grid == (96, 1, 1)  # 2 x 3 tiles x 16 K ranks
