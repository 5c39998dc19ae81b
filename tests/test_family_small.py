"""CPU tests of the `mma_small_sm80` family (templates/mma_small_sm80): small shapes, the shape compiled in.

* the parameter space, starts and CI instances are valid; the shape is pinned by `requires` (with the
  split-K rule cdiv(K, BK) % SPLIT_K == 0); launch geometry, shared memory and workspace are sane;
* a pure-Python model of the kernel's index math (chunk loader, XOR swizzle, ldmatrix / mma fragments,
  stage ring, WARPS_K shared-memory reduce, split-K fragment-order partials and the ticket's fixed-order
  sum, predicated epilogue) gives exact results on off-tile shapes in any CTA arrival order. It mirrors
  kernel.cu: keep them in sync;
* off-tile instances compile with nvcc without spills, and the first cp.async comes within the first
  few dozen PTX instructions of the entry.
"""
from __future__ import annotations

import functools
import random
import re
import subprocess

import numpy as np
import pytest

from evo.families import load_families
from evo.problem import parse_shape
from test_family_sm80 import _ldmatrix_x4, _mma_16816, _swz


def family():
    return load_families(names=["mma_small_sm80"])[0]


@functools.lru_cache(maxsize=1)
def _valid() -> tuple:
    """The family's valid instances (enumerated once per test session: ~90k points are checked)."""
    return tuple(family().valid_instances())


def test_space_starts_and_ci_instances():
    fam = family()
    assert set(fam.archs) == {"sm_80", "sm_90a"} and fam.shape_specialized
    assert fam.ci_problem().key == "128x64x512"
    for p in fam.instances_for_ci() + fam.start_instances():
        assert fam.valid(p), p
    assert len(fam.start_instances()) == 1 + len(fam.starts)
    valid = _valid()
    assert len(valid) >= 200
    assert any(p["CLK"] > 1 for p in valid)
    assert all(p["RED"] == 0 and p["EPI"] == 0 for p in valid if p["CLK"] > 1)
    for p in valid:
        threads = p["WARPS_M"] * p["WARPS_N"] * p["WARPS_K"] * 32
        assert 32 <= threads <= 128 or (threads == 256 and p["BM"] * p["BN"] >= 64 * 128)
        assert p["BM"] * p["BN"] // (32 * p["WARPS_M"] * p["WARPS_N"]) <= 64


def test_shape_is_pinned_and_split_k_divides_the_k_tiles():
    fam = family()
    p = {"BM": 16, "BN": 64, "BK": 32, "WARPS_M": 1, "WARPS_N": 1, "WARPS_K": 1, "STAGES": 4, "SPLIT_K": 4}
    ks = fam.render(p, parse_shape("128x64x512"))
    assert "constexpr int kM = 128;" in ks.text and "constexpr int kK = 512;" in ks.text
    assert ks.accepts(parse_shape("128x64x512"))
    assert not ks.accepts(parse_shape("128x64x1024")) and not ks.accepts(parse_shape("64x64x512"))
    # 16 K tiles of 32 split 4 ways: fine; K = 96 has 3 K tiles: not 4 ways; K = 100 is not a multiple of 8
    assert not fam.render(p, parse_shape("128x64x96")).accepts(parse_shape("128x64x96"))
    assert not fam.render(dict(p, SPLIT_K=1), parse_shape("128x64x100")).accepts(parse_shape("128x64x100"))
    assert fam.render(dict(p, SPLIT_K=1), parse_shape("77x33x104")).accepts(parse_shape("77x33x104"))
    big = parse_shape("4096x4096x1024")  # 2^34 multiply-adds: past the family's size cap
    assert not fam.render(dict(p, SPLIT_K=1), big).accepts(big)
    # the ring never outgrows a split's K tiles + 1 (K = 64 in BK 32: 2 tiles -> 3 stages, not 6)
    short = parse_shape("1024x2048x64")
    q = dict(p, BM=64, BN=64, WARPS_N=4, STAGES=6, SPLIT_K=1)
    assert fam.render(q, short).launch(short, 132).smem == 3 * (64 + 64) * 32 * 2
    assert fam.render(q, parse_shape("1024x2048x512")).launch(parse_shape("1024x2048x512"), 132).smem == 6 * 128 * 64


@pytest.mark.parametrize("shape", ["64x64x64", "128x64x512", "77x1000x336", "128x128x16384", "16x8x8"])
def test_launch_geometry(shape):
    fam = family()
    prob = parse_shape(shape)
    rng = random.Random(3)
    valid = list(_valid())
    clustered = [p for p in valid if p["CLK"] > 1]
    n_ok = 0
    for p in rng.sample(valid, 80) + rng.sample(clustered, 40) + fam.start_instances():
        ks = fam.render(p, prob)
        S, CK = p["SPLIT_K"], p["CLK"]
        if not ks.accepts(prob):
            assert -(-prob.k // p["BK"]) % (S * CK) != 0
            continue
        n_ok += 1
        spec = ks.launch(prob, 132)
        assert spec.grid == (-(-prob.n // p["BN"]), -(-prob.m // p["BM"]), S * CK)
        assert spec.block == (p["WARPS_M"] * p["WARPS_N"] * p["WARPS_K"] * 32, 1, 1)
        push = p["BM"] * p["BN"] * 4 if CK > 1 and p["PUSH"] else 0   # the receive slots of the push reduce
        assert 0 < spec.smem - push <= (160 if p["OCC"] == 1 and p["BM"] * p["BN"] >= 8192 else 112) * 1024
        assert spec.smem <= (220 if p["OCC"] == 1 else 112) * 1024
        if CK > 1:  # the staged fp32 partial of the cluster reduce fits (and, pushing, the slots beside it)
            assert spec.smem >= p["BM"] * (p["BN"] + 8) * 4 + push
        tiles = spec.grid[0] * spec.grid[1]
        # sm_80: S * CK partials + (tile, group) and tile tickets; sm_90a: S slices per tile + (tile, rank) tickets
        assert spec.workspace == (0 if S * CK == 1 else
                                  (S * CK + p["RED"] * S // 4) * tiles * p["BM"] * p["BN"] * 4 + tiles * (S * CK // 4 + 1 + CK) * 4)
        if S * CK > 1:
            assert spec.workspace >= tiles * (S * CK * p["BM"] * p["BN"] * 4 + 2 * 4)
            assert spec.workspace >= tiles * (S * p["BM"] * p["BN"] * 4 + CK * 4)
    assert n_ok > 0


# ---------------------------------------------------------------------------------------
# Python model of templates/mma_small_sm80/kernel.cu (one "thread" at a time)


def _model_small(p, M, N, K, seed, clusters=True):
    """clusters: the sm_90a build (CLK CTAs reduce on chip); False: the sm_80 build (they are global splits)."""
    BM, BN, BK = p["BM"], p["BN"], p["BK"]
    WARPS_M, WARPS_N, WARPS_K, STAGES, SPLIT_K = p["WARPS_M"], p["WARPS_N"], p["WARPS_K"], p["STAGES"], p["SPLIT_K"]
    CLK = p.get("CLK", 1)
    SPLITS = SPLIT_K * CLK                 # CTAs along K (grid z)
    CL = CLK if clusters else 1
    GSPLIT = SPLITS // CL                        # splits reduced through the workspace ticket
    WARPS_MN = WARPS_M * WARPS_N
    THREADS = WARPS_MN * WARPS_K * 32
    WM, WN = BM // WARPS_M, BN // WARPS_N
    MI, NI, CPR, KSTEPS = WM // 16, WN // 8, BK // 8, BK // 16
    KS_PER_WARP = KSTEPS // WARPS_K
    KT = -(-K // BK)
    assert K % 8 == 0 and KT % SPLITS == 0
    KT_PER = KT // SPLITS
    STAGES = min(STAGES, max(2, KT_PER + 1))  # the ring never outgrows a split's K tiles + 1
    TILES_M, TILES_N = -(-M // BM), -(-N // BN)
    FRAG4 = WARPS_MN * MI * NI * 32
    rng = np.random.default_rng(seed)
    A = rng.integers(-3, 4, size=(M, K)).astype(np.float64)
    B = rng.integers(-3, 4, size=(N, K)).astype(np.float64)
    C = np.full((M, N), np.nan)
    written = np.zeros((M, N), np.int64)
    part = np.full((TILES_M * TILES_N, GSPLIT, FRAG4, 4), np.nan)  # fp32 partials in fragment order
    ticket = np.zeros(TILES_M * TILES_N, np.int64)
    gticket = np.zeros((TILES_M * TILES_N, GSPLIT), np.int64)
    gpart = np.full((TILES_M * TILES_N, GSPLIT, FRAG4, 4), np.nan)  # group sums (RED)

    def load_tile(smem, base, G, row0g, rows_left, k0, ROWS):
        CHUNKS = ROWS * CPR
        for tid in range(THREADS):
            for it in range(-(-CHUNKS // THREADS)):
                L = tid + it * THREADS
                if L >= CHUNKS:
                    break
                r, gk = L // CPR, k0 + (L % CPR) * 8
                ok = r < rows_left and gk < K
                vals = G[row0g + r, gk:gk + 8] if ok else np.zeros(8)
                smem[base + _swz(L) * 8: base + _swz(L) * 8 + 8] = vals

    def cta_acc(bx, by, bz):  # main loop + WARPS_K reduce of one CTA: its fp32 fragments
        m0, n0, kt0 = by * BM, bx * BN, bz * KT_PER
        sA = np.full(STAGES * BM * BK, np.nan)  # NaN: a never-written chunk shows up
        sB = np.full(STAGES * BN * BK, np.nan)
        acc = np.zeros((WARPS_K * WARPS_MN, MI, NI, 32, 4))

        def load(stage, t):
            k0 = (kt0 + t) * BK
            load_tile(sA, stage * BM * BK, A, m0, M - m0, k0, BM)
            load_tile(sB, stage * BN * BK, B, n0, N - n0, k0, BN)

        for s in range(STAGES - 1):
            if s < KT_PER:
                load(s, s)
        for t in range(KT_PER):
            rs = t % STAGES
            if t + STAGES - 1 < KT_PER:
                assert (t + STAGES - 1) % STAGES != rs
                load((t + STAGES - 1) % STAGES, t + STAGES - 1)
            for w in range(WARPS_K * WARPS_MN):
                wk, wmn = w // WARPS_MN, w % WARPS_MN
                wm, wn = wmn // WARPS_N, wmn % WARPS_N
                a_chunk = [_swz((wm * WM + (ln & 15)) * CPR + (ln >> 4)) for ln in range(32)]
                b_chunk = [_swz((wn * WN + ((ln >> 4) << 3) + (ln & 7)) * CPR + ((ln >> 3) & 1)) for ln in range(32)]
                for kk in range(KS_PER_WARP):
                    ks = wk * KS_PER_WARP + kk
                    af = [_ldmatrix_x4(sA, [rs * BM * CPR + (a_chunk[ln] ^ (2 * ks)) + i * 16 * CPR for ln in range(32)])
                          for i in range(MI)]
                    bf = []
                    for j in range(NI // 2):
                        r = _ldmatrix_x4(sB, [rs * BN * CPR + (b_chunk[ln] ^ (2 * ks)) + j * 16 * CPR for ln in range(32)])
                        bf += [(r[:, 0], r[:, 1]), (r[:, 2], r[:, 3])]
                    for i in range(MI):
                        for j in range(NI):
                            _mma_16816(acc[w, i, j], af[i], *bf[j])
        if WARPS_K > 1:  # smem [WARPS_K-1][WARPS_MN][MI][NI][32] float4, summed by warp group 0 in order
            red = np.full(((WARPS_K - 1) * WARPS_MN * MI * NI * 32, 4), np.nan)
            for w in range(WARPS_MN, WARPS_K * WARPS_MN):
                wk, wmn = w // WARPS_MN, w % WARPS_MN
                for i in range(MI):
                    for j in range(NI):
                        for ln in range(32):
                            red[(((wk - 1) * WARPS_MN + wmn) * MI + i) * NI * 32 + j * 32 + ln] = acc[w, i, j, ln]
            for wmn in range(WARPS_MN):
                for wk in range(1, WARPS_K):
                    for i in range(MI):
                        for j in range(NI):
                            for ln in range(32):
                                acc[wmn, i, j, ln] += red[(((wk - 1) * WARPS_MN + wmn) * MI + i) * NI * 32 + j * 32 + ln]
        return acc

    def stage_fragments(acc, pitch):  # a CTA's fp32 fragments -> smem tile [BM][pitch] (padding never written)
        s = np.full(BM * pitch, np.nan)
        for wmn in range(WARPS_MN):
            wm, wn = wmn // WARPS_N, wmn % WARPS_N
            for ln in range(32):
                for i in range(MI):
                    for j in range(NI):
                        r, c = wm * WM + i * 16 + (ln >> 2), wn * WN + j * 8 + (ln & 3) * 2
                        s[r * pitch + c: r * pitch + c + 2] = acc[wmn, i, j, ln, 0:2]
                        s[(r + 8) * pitch + c: (r + 8) * pitch + c + 2] = acc[wmn, i, j, ln, 2:4]
        return s

    def finish(bx, by, bz, acc):  # global split-K ticket (GSPLIT > 1) and the epilogue
        m0, n0 = by * BM, bx * BN
        if GSPLIT > 1:  # tickets: per (tile, group), then per tile over the group sums (RED)
            GS = 4 if p.get("RED", 0) and GSPLIT >= 8 else GSPLIT
            GROUPS = GSPLIT // GS
            tile, grp, mem = by * TILES_N + bx, bz // GS, bz % GS

            def publish(slots, idx):
                for wmn in range(WARPS_MN):
                    for i in range(MI):
                        for j in range(NI):
                            for ln in range(32):
                                slots[tile, idx, wmn * MI * NI * 32 + (i * NI + j) * 32 + ln] = acc[wmn, i, j, ln]

            def sum_slots(slots, first, count, own):
                for wmn in range(WARPS_MN):
                    for i in range(MI):
                        for j in range(NI):
                            for ln in range(32):
                                s = np.zeros(4)
                                for z in range(count):
                                    s += acc[wmn, i, j, ln] if z == own else slots[tile, first + z, wmn * MI * NI * 32 + (i * NI + j) * 32 + ln]
                                acc[wmn, i, j, ln] = s

            publish(part, bz)
            prev = gticket[tile, grp]
            gticket[tile, grp] += 1
            if prev != GS - 1:
                return
            sum_slots(part, grp * GS, GS, mem)
            gticket[tile, grp] = 0
            if GROUPS > 1:
                publish(gpart, grp)
                prev = ticket[tile]
                ticket[tile] += 1
                if prev != GROUPS - 1:
                    return
                sum_slots(gpart, 0, GROUPS, grp)
                ticket[tile] = 0
        if p.get("EPI", 0) == 1 and N % 8 == 0:  # staged: fragments -> sC[BM][BN + 8] -> 16-byte row chunks
            SC_LD = BN + 8
            sC = stage_fragments(acc, SC_LD)
            banks = [((ln >> 2) * SC_LD + (ln & 3) * 2) // 2 % 32 for ln in range(32)]
            assert len(set(banks)) == 32, "half2 fragment stores hit 32 distinct banks"
            for idx in range(BM * BN // 8):
                r, c = idx // (BN // 8), (idx % (BN // 8)) * 8
                if m0 + r >= M or n0 + c >= N:
                    continue
                C[m0 + r, n0 + c: n0 + c + 8] = sC[r * SC_LD + c: r * SC_LD + c + 8]
                written[m0 + r, n0 + c: n0 + c + 8] += 1
            return
        for wmn in range(WARPS_MN):  # warp group 0 stores
            wm, wn = wmn // WARPS_N, wmn % WARPS_N
            for ln in range(32):
                row0 = m0 + wm * WM + (ln >> 2)
                col0 = n0 + wn * WN + (ln & 3) * 2
                for i in range(MI):
                    for j in range(NI):
                        for h in range(2):
                            row = row0 + i * 16 + h * 8
                            for e in range(2):
                                col = col0 + j * 8 + e
                                if row < M and col < N:
                                    C[row, col] = acc[wmn, i, j, ln, 2 * h + e]
                                    written[row, col] += 1

    if CL == 1:
        ctas = [(x, y, z) for z in range(SPLITS) for y in range(TILES_M) for x in range(TILES_N)]
        random.Random(seed).shuffle(ctas)  # any arrival order
        for bx, by, bz in ctas:
            finish(bx, by, bz, cta_acc(bx, by, bz))
    else:  # clusters of CL CTAs (consecutive z) in any order; inside one, every partial is staged before any reduce
        RS, RP, ITEMS = BM // CL, BN + 8, BM // CL * BN // 4
        slices = np.full((TILES_M * TILES_N, CL, GSPLIT, ITEMS, 4), np.nan)  # [tile][rank][g] fp32 slices
        cticket = np.zeros((TILES_M * TILES_N, CL), np.int64)
        clusters_ = [(x, y, g) for g in range(GSPLIT) for y in range(TILES_M) for x in range(TILES_N)]
        random.Random(seed).shuffle(clusters_)
        for bx, by, g in clusters_:
            m0, n0, tile = by * BM, bx * BN, by * TILES_N + bx
            red = []  # each rank's smem: [BM][RP] fp32, padding never written
            for rank in range(CL):
                acc = cta_acc(bx, by, g * CL + rank)
                red.append(stage_fragments(acc, RP))
            banks = [((ln >> 2) * RP + (ln & 3) * 2) % 32 for ln in range(16)]  # float2: a half-warp per wavefront
            assert len(set(banks)) == 16, "float2 partial stores: conflict-free half-warps"

            def store4(row, col, v):
                for e in range(4):
                    if row < M and col + e < N:
                        C[row, col + e] = v[e]
                        written[row, col + e] += 1

            if p.get("PUSH", 1):  # every rank sends each owner its rows into slot `rank`; bytes must match expect_tx
                recv = [np.full(CL * RS * BN, np.nan) for _ in range(CL)]
                got = [0] * CL
                senders = list(range(CL))
                random.Random(seed + 3 * bx + 5 * by + 11 * g).shuffle(senders)
                for src in senders:
                    for q in range(BM * BN // 4):
                        lr, c4 = q // (BN // 4), q % (BN // 4)
                        owner, dst = lr // RS, ((src * RS + lr % RS) * BN + 4 * c4)
                        assert np.isnan(recv[owner][dst:dst + 4]).all(), "a receive slot written twice"
                        recv[owner][dst:dst + 4] = red[src][lr * RP + 4 * c4: lr * RP + 4 * c4 + 4]
                        got[owner] += 16
                assert got == [CL * RS * BN * 4] * CL, "each owner receives exactly what its barrier expects"

                def part_of(j, lr, c, rank, idx):
                    return recv[rank][j * RS * BN + idx * 4: j * RS * BN + idx * 4 + 4]
            else:
                def part_of(j, lr, c, rank, idx):
                    return red[j][lr * RP + c: lr * RP + c + 4]

            ranks = list(range(CL))
            random.Random(seed + bx + 7 * by + 31 * g).shuffle(ranks)
            for rank in ranks:
                for idx in range(ITEMS):
                    lr, c = rank * RS + idx // (BN // 4), (idx % (BN // 4)) * 4
                    v = np.zeros(4)
                    for j in range(CL):  # fixed order 0..CL-1
                        v = v + part_of(j, lr, c, rank, idx)
                    if GSPLIT == 1:
                        store4(m0 + lr, n0 + c, v)
                    else:
                        slices[tile, rank, g, idx] = v
                if GSPLIT > 1:
                    prev = cticket[tile, rank]
                    cticket[tile, rank] += 1
                    if prev == GSPLIT - 1:
                        cticket[tile, rank] = 0
                        for idx in range(ITEMS):
                            lr, c = rank * RS + idx // (BN // 4), (idx % (BN // 4)) * 4
                            v = np.zeros(4)
                            for q in range(GSPLIT):  # fixed order g = 0..GSPLIT-1 (an unwritten slice is NaN)
                                v = v + slices[tile, rank, q, idx]
                            store4(m0 + lr, n0 + c, v)
        assert (cticket == 0).all(), "cluster slice tickets back at zero"
    assert (written == 1).all(), "every C element written exactly once"
    assert np.array_equal(C, A @ B.T)
    assert (ticket == 0).all() and (gticket == 0).all(), "split-K tickets back at zero"


_S = dict(BM=32, BN=64, BK=64, WARPS_M=1, WARPS_N=1, WARPS_K=2, STAGES=4, SPLIT_K=1, EPI=0, RED=0, CLK=1, OCC=1, PUSH=1)


@pytest.mark.parametrize("p,M,N,K", [
    (dict(_S, BM=16, BN=64, BK=32, WARPS_K=1), 40, 70, 104),                      # off-tile M, N and K
    (dict(_S, BM=16, BN=32, WARPS_K=4, STAGES=2), 17, 33, 256),                  # 4 warps split k16 steps
    (dict(_S, BM=32, BN=32, WARPS_M=2, WARPS_N=1, WARPS_K=2, SPLIT_K=4, STAGES=3), 33, 31, 512),
    (dict(_S, BM=64, BN=16, BK=32, WARPS_M=2, WARPS_N=1, WARPS_K=1, SPLIT_K=2, STAGES=6), 64, 24, 120),
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, SPLIT_K=2, EPI=1), 40, 72, 256),   # staged epilogue
    (dict(_S, BM=16, BN=16, BK=32, WARPS_M=1, WARPS_N=1, WARPS_K=1, SPLIT_K=16, RED=1), 17, 20, 512),  # two-level
    (dict(_S, BM=64, BN=128, BK=32, WARPS_M=2, WARPS_N=4, WARPS_K=1, STAGES=3, EPI=1), 70, 136, 96),    # 8 warps
    (dict(_S, BM=16, BN=32, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=2, SPLIT_K=8, RED=1, EPI=1), 16, 40, 256),
    (dict(_S, BM=16, BN=32, WARPS_M=1, WARPS_N=2, WARPS_K=1, EPI=1), 20, 33, 64),              # N % 8 != 0: direct
    (dict(_S, BM=32, BN=96, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=2, STAGES=3, EPI=1), 40, 200, 96),   # 96-col tiles
])
def test_index_model(p, M, N, K):
    assert family().valid(p)
    assert family().render(p, parse_shape(f"{M}x{N}x{K}")).accepts(parse_shape(f"{M}x{N}x{K}"))
    for seed in range(2):
        _model_small(p, M, N, K, seed)


@pytest.mark.parametrize("p,M,N,K", [
    (dict(_S, BM=32, BN=32, BK=32, WARPS_M=2, WARPS_N=1, WARPS_K=2, STAGES=3, CLK=4), 40, 36, 256),   # on chip only
    (dict(_S, BM=16, BN=64, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=1, STAGES=2, SPLIT_K=2, CLK=8), 20, 70, 512),
    (dict(_S, BM=64, BN=32, BK=64, WARPS_M=2, WARPS_N=2, WARPS_K=1, STAGES=4, SPLIT_K=4, CLK=2), 64, 32, 1024),
    (dict(_S, BM=32, BN=16, BK=32, WARPS_M=2, WARPS_N=1, WARPS_K=1, STAGES=3, CLK=2), 33, 18, 64),    # N % 4 != 0
    (dict(_S, BM=16, BN=96, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=1, STAGES=2, SPLIT_K=2, CLK=2), 16, 100, 128),
    (dict(_S, BM=32, BN=32, BK=32, WARPS_M=2, WARPS_N=1, WARPS_K=2, STAGES=3, CLK=4, PUSH=0), 40, 36, 256),   # the pull
    (dict(_S, BM=16, BN=64, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=1, STAGES=2, SPLIT_K=2, CLK=8, PUSH=0), 20, 70, 512),
])
def test_index_model_cluster(p, M, N, K):
    """The cluster reduce (sm_90a build) and the same instance built for sm_80 (its CTAs as global splits)."""
    prob = parse_shape(f"{M}x{N}x{K}")
    ks = family().render(p, prob)
    assert family().valid(p) and ks.accepts(prob)
    spec = ks.launch(prob, 132)
    assert spec.grid[2] == p["SPLIT_K"] * p["CLK"]
    for seed in range(2):
        _model_small(p, M, N, K, seed, clusters=True)
        _model_small(p, M, N, K, seed, clusters=False)


# ---------------------------------------------------------------------------------------
# nvcc: off-tile instances compile clean; loads start in the first instructions

_COMPILE = [
    (dict(_S, BM=16, BN=64, BK=32, WARPS_K=1), "40x70x104", "sm_80"),
    (dict(_S, BM=32, BN=32, WARPS_M=2, WARPS_N=1, WARPS_K=2, SPLIT_K=4, STAGES=3), "33x31x512", "sm_90a"),
    (dict(_S, BM=64, BN=128, BK=32, WARPS_M=4, WARPS_N=1, WARPS_K=1, STAGES=3), "64x128x16384", "sm_90a"),
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, SPLIT_K=2, EPI=1), "40x72x256", "sm_90a"),
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, STAGES=6, SPLIT_K=32, RED=1), "128x128x16384", "sm_90a"),
    # off-tile N with 16 K tiles: fully unrolled, ptxas kept every tile's row predicates live and spilled (H200 run)
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=1, STAGES=6), "100x200x1000", "sm_90a"),
    (dict(_S, BM=64, BN=64, BK=32, WARPS_M=1, WARPS_N=2, WARPS_K=1, STAGES=2, EPI=1), "100x200x1000", "sm_90a"),
    # cluster split-K (DSMEM reduce) with a global split on top, off-tile; built for sm_80 it has no cluster
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, STAGES=3, SPLIT_K=2, CLK=4), "100x200x1024", "sm_90a"),
    (dict(_S, BM=32, BN=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, STAGES=3, SPLIT_K=2, CLK=4), "100x200x1024", "sm_80"),
    (dict(_S, BM=128, BN=128, WARPS_M=2, WARPS_N=4, WARPS_K=1, STAGES=3, SPLIT_K=8, CLK=8), "128x128x16384", "sm_90a"),
    (dict(_S, BM=128, BN=96, WARPS_M=4, WARPS_N=2, WARPS_K=1, STAGES=3, EPI=1), "128x12288x256", "sm_90a"),
]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    from evo.compile import Compiler
    from evo.config import load_config

    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path_factory.mktemp("small-cache"))}})
    return Compiler.from_config(cfg.compile)


@pytest.mark.nvcc
@pytest.mark.parametrize("p,shape,arch", _COMPILE, ids=[s for _, s, _ in _COMPILE])
def test_off_tile_instances_compile_clean(compiler, p, shape, arch):
    ks = family().render(p, parse_shape(shape))
    r = compiler.compile(ks, arch)
    assert r.ok, r.error + r.log[-2000:]
    assert r.spill_bytes == 0 and r.stack_bytes == 0


@pytest.mark.nvcc
def test_first_cp_async_within_the_first_instructions(tmp_path):
    fam = family()
    cu = tmp_path / "k.cu"
    cu.write_text(fam.render(fam.starts[0], parse_shape("128x64x512")).text)
    ptx = tmp_path / "k.ptx"
    r = subprocess.run(["nvcc", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-o", str(ptx), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    body = ptx.read_text().split(".entry evo_gemm", 1)[1].split("{", 1)[1]
    instrs = [l.strip() for l in body.splitlines()
              if l.strip() and not l.strip().startswith(("//", ".reg", "$", "{", "}"))]
    first = next(i for i, l in enumerate(instrs) if l.startswith("cp.async.cg"))
    assert first < 48, instrs[:first + 1]
    assert not any(re.match(r"(div|rem)\.", l) for l in instrs), "a runtime division in the kernel"


_CLUSTER = dict(_S, BM=64, BN=128, WARPS_M=2, WARPS_N=4, WARPS_K=1, STAGES=4, SPLIT_K=8, CLK=8)


def _ptx(tmp_path, text, arch):
    cu = tmp_path / f"k_{arch}.cu"
    cu.write_text(text)
    ptx = tmp_path / f"k_{arch}.ptx"
    code = arch.replace("sm_", "")
    r = subprocess.run(["nvcc", "-ptx", f"-gencode=arch=compute_{code},code=sm_{code}", "-O3", "-o", str(ptx), str(cu)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return ptx.read_text()


@pytest.mark.nvcc
def test_cluster_reduce_ptx(tmp_path):
    """sm_90a: a compile-time cluster of CLK CTAs along z, release/acquire cluster barriers around the
    distributed-shared-memory reads, the acq_rel ticket for the global split, no sequentially consistent fence.
    sm_80: the same instance has no cluster instruction at all (its CTAs are global splits)."""
    text = family().render(dict(_CLUSTER, PUSH=0), parse_shape("128x128x16384")).text
    ptx = _ptx(tmp_path, text, "sm_90a")
    assert re.search(r"\.reqnctapercluster\s+1,\s*1,\s*8", ptx)
    assert ptx.count("barrier.cluster.arrive.release") == 2 and ptx.count("barrier.cluster.wait.acquire") == 2
    assert "barrier.cluster.arrive.relaxed" not in ptx
    assert re.search(r"mapa\.shared::cluster", ptx) and re.search(r"ld\.shared::cluster\.v4\.f32", ptx)
    assert re.search(r"atom\.add\.acq_rel\.gpu\.global\.u32", ptx)
    assert not re.search(r"\bmembar\.(gl|sys)\b|\bfence\.sc\b|\bfence\.(gpu|sys)\b", ptx)
    ptx80 = _ptx(tmp_path, text, "sm_80")
    assert not re.search(r"cluster", ptx80), "an sm_80 build must not see clusters"
    assert re.search(r"atom\.add\.acq_rel\.gpu\.global\.u32", ptx80)
    # without a global split on top no partial goes through global memory: no ticket at all
    ptx1 = _ptx(tmp_path, family().render(dict(_CLUSTER, SPLIT_K=1, PUSH=0), parse_shape("128x128x1024")).text, "sm_90a")
    assert "ld.shared::cluster" in ptx1 and "atom." not in ptx1


@pytest.mark.nvcc
def test_cluster_push_reduce_ptx(tmp_path):
    """PUSH (the default): no release barrier before the sums; slices go out with st.async completing the owner's
    receive mbarrier (initialised, armed and fenced for the cluster), no remote loads; two relaxed arrives (the
    barrier's publication, the exit) each matched by an acquire wait; the global split keeps its acq_rel ticket.
    sm_80: still no cluster instruction."""
    text = family().render(_CLUSTER, parse_shape("128x128x16384")).text
    ptx = _ptx(tmp_path, text, "sm_90a")
    assert re.search(r"st\.async\.shared::cluster\.mbarrier::complete_tx::bytes\.v4\.b32", ptx)
    assert "mbarrier.arrive.expect_tx" in ptx and "fence.mbarrier_init.release.cluster" in ptx
    assert "mbarrier.try_wait.parity" in ptx
    assert "ld.shared::cluster" not in ptx and "barrier.cluster.arrive.release" not in ptx
    assert ptx.count("barrier.cluster.arrive.relaxed") == 2 and ptx.count("barrier.cluster.wait.acquire") == 2
    assert re.search(r"atom\.add\.acq_rel\.gpu\.global\.u32", ptx)
    assert not re.search(r"\bmembar\.(gl|sys)\b|\bfence\.sc\b|\bfence\.(gpu|sys)\b", ptx)
    assert not re.search(r"cluster|st\.async|mbarrier", _ptx(tmp_path, text, "sm_80"))


# ---------------------------------------------------------------------------------------
# bench/small_smoke.py: what it plans and the SC-fenced variant of its ordering experiment


def _smoke():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "small_smoke.py"
    spec = importlib.util.spec_from_file_location("small_smoke", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_smoke_plans_accepted_instances_and_a_faithful_sc_variant():
    from evo.kernel import KernelSource

    smoke = _smoke()
    fam = family()
    prob = parse_shape("128x64x512")
    picked = smoke.pick_instances(fam, prob, 4, random.Random(0))
    assert len(picked) >= 5 and all(fam.render(p, prob).accepts(prob) for p in picked)
    assert all(s in picked for s in fam.start_instances() if fam.render(s, prob).accepts(prob))
    fams = {f.name: f for f in load_families()}
    for name, params, shape in smoke.ORDERING + smoke.EXTRA:
        ks = fams[name].render(params, parse_shape(shape))
        assert ks.accepts(parse_shape(shape)), (name, shape)
    for name, params, shape in smoke.ORDERING:
        ks = fams[name].render(params, parse_shape(shape))
        sc = KernelSource.parse(smoke.sc_variant(ks.text))
        from evo.kernel import strip_comments

        code = strip_comments(sc.text)
        assert "atom.add.acq_rel" not in code and code.count("__threadfence()") == 2 and sc.hash != ks.hash
    assert smoke.floor_us(parse_shape("16384x16384x128")) == pytest.approx(2 * (2 * 16384 * 128 + 16384 ** 2) / 4.8e6)


def test_smoke_cluster_instances_make_about_one_wave():
    smoke = _smoke()
    fam = family()
    valid = list(_valid())
    for shape in ("128x128x16384", "4096x512x256"):
        prob = parse_shape(shape)
        got = smoke.cluster_instances(fam, prob, 20)
        assert 10 <= len(got) <= 20
        assert all(fam.complete(q) in got for q in smoke.CLUSTER_PICKS[shape][:10])
        for q in got:
            ks = fam.render(q, prob)
            assert fam.valid(q) and ks.accepts(prob, 132)
            grid = ks.launch(prob, 132).grid
            assert 64 <= grid[0] * grid[1] * grid[2] <= 264
        assert len({tuple(sorted(q.items())) for q in got}) == len(got)
    for q, shape in smoke.CLUSTER_CHECKS:  # the off-tile correctness checks of --cluster
        assert fam.valid(fam.complete(q)) and fam.render(q, parse_shape(shape)).accepts(parse_shape(shape), 132)
    prob = parse_shape("128x128x16384")
    with_cluster = smoke.pick_instances(fam, prob, 2, random.Random(0), valid, cluster=12)
    assert sum(p["CLK"] > 1 for p in with_cluster) >= 8
    plain = smoke.pick_instances(fam, prob, 2, random.Random(0), valid)  # starts, 2 ranked, 2 random
    assert not any(p["CLK"] > 1 for p in plain[:-2] if p not in fam.start_instances())
