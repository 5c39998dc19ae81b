"""CPU tests of the `simt` and `mma_sm80` kernel families (templates/simt, templates/mma_sm80).

* the parameter spaces and constraints are consistent (defaults and CI instances valid,
  random_params finds valid instances, every valid instance renders and launches sanely);
* the CI instances compile with nvcc for every arch the family claims, with no spills and
  no stack frame (skipped when nvcc is absent);
* a pure-Python model of the mma_sm80 index math (chunk loader, XOR swizzle, ldmatrix /
  mma fragment layouts, pipeline stage rotation, rasterization, split-K reduction) gives
  exact results on off-tile shapes. The model mirrors kernel.cu line by line: keep them in
  sync when the template's indexing changes.
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from evo.families import load_families
from evo.problem import Problem

FAMILIES = ("simt", "mma_sm80")
SMEM_MAX = 227 * 1024
SHAPES = [Problem(1, 1, 1), Problem(4096, 4096, 1024), Problem(128, 128, 16384), Problem(77, 1000, 333)]
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


def family(name):
    return load_families(names=[name])[0]


@pytest.mark.parametrize("name", FAMILIES)
def test_space_and_ci_instances_valid(name):
    fam = family(name)
    assert set(fam.archs) == {"sm_80", "sm_90a"}
    assert fam.valid(fam.default_params())
    ci = fam.instances_for_ci()
    assert 1 <= len(ci) <= 4
    for p in ci:
        assert fam.valid(p), p
    rng = random.Random(0)
    for _ in range(50):
        assert fam.random_params(rng) is not None


@pytest.mark.parametrize("name", FAMILIES)
def test_every_valid_instance_launches_sanely(name):
    fam = family(name)
    valid = list(fam.valid_instances())
    assert len(valid) >= 20
    rng = random.Random(1)
    for p in rng.sample(valid, min(60, len(valid))) + fam.instances_for_ci():
        ks = fam.render(p)
        assert ks.meta.family == name
        assert ks.meta.params == fam.complete(p)
        assert "{{" not in ks.text
        for prob in SHAPES:
            assert ks.accepts(prob)  # any shape: no `requires`
            ls = ks.launch(prob, num_sms=108)
            threads = ls.block[0] * ls.block[1] * ls.block[2]
            assert 64 <= threads <= 1024 and threads % 32 == 0
            assert ls.grid[0] * p["BN"] >= prob.n and ls.grid[1] * p["BM"] >= prob.m
            assert ls.grid[1] <= 65535 and ls.grid[2] <= 65535
            assert 0 <= ls.smem <= SMEM_MAX
            if name == "mma_sm80":
                assert threads == 32 * p["WARPS_M"] * p["WARPS_N"]
                assert ls.grid[2] == p["SPLIT_K"]
                assert ls.smem == p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2
                if p["SPLIT_K"] == 1:
                    assert ls.workspace == 0
                else:
                    tiles = ls.grid[0] * ls.grid[1]
                    assert ls.workspace == 4 * tiles * (p["SPLIT_K"] * p["BM"] * p["BN"] + 1)
            else:
                assert threads == (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])
                assert ls.grid[2] == 1 and ls.workspace == 0


# ---------------------------------------------------------------------------------------
# nvcc compile of the CI instances


def _nvcc():
    for cand in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).exists():
            return cand
    return None


def _compile_jobs():
    return [(name, i, arch) for name in FAMILIES for i in range(len(family(name).instances_for_ci()))
            for arch in family(name).archs]


@pytest.mark.nvcc
@pytest.mark.parametrize("name,idx,arch", _compile_jobs())
def test_ci_instances_compile_without_spills(name, idx, arch, tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    fam = family(name)
    ks = fam.render(fam.instances_for_ci()[idx])
    cu = tmp_path / "k.cu"
    cu.write_text(ks.text)
    code = arch.replace("sm_", "")
    cmd = [nvcc, "--cubin", "-O3", "-std=c++17", "-DNDEBUG", "-Xptxas", "-v",
           f"-gencode=arch=compute_{code},code=sm_{code}", "-o", str(tmp_path / "k.cubin"), str(cu)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert "warning" not in log.lower(), log
    stacks = _STACK.findall(log)
    assert stacks, log
    for frame, st, ld in stacks:
        assert (int(frame), int(st), int(ld)) == (0, 0, 0), log
    regs = [int(x) for x in _REGS.findall(log)]
    assert regs and max(regs) <= 255, log
    if name == "mma_sm80":  # the tensor-core path really is there
        ptx = subprocess.run([nvcc, "--ptx", "-O3", "-std=c++17", f"-arch=sm_{code}", "-o", "-", str(cu)],
                             capture_output=True, text=True, timeout=600).stdout
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
        assert "cp.async.cg.shared.global" in ptx


# ---------------------------------------------------------------------------------------
# Python model of templates/mma_sm80/kernel.cu (sequential; one "thread" at a time)


def _swz(L):
    return L ^ ((L >> 3) & 7)


def _ldmatrix_x4(smem, chunk_addrs):
    """ldmatrix .x4: lanes 8q..8q+7 give the row addresses of matrix q; lane t receives
    row t//4, columns 2*(t%4), +1 of every matrix. Returns [lane][q][2]."""
    out = np.zeros((32, 4, 2), np.float64)
    for q in range(4):
        for rr in range(8):
            row = smem[chunk_addrs[8 * q + rr] * 8: chunk_addrs[8 * q + rr] * 8 + 8]
            for cc in range(4):
                out[rr * 4 + cc, q] = row[2 * cc: 2 * cc + 2]
    return out


def _mma_16816(acc, af, b0, b1):
    """mma.m16n8k16.row.col fragment layouts (PTX ISA), g = lane//4, c = lane%4."""
    a = np.zeros((16, 16))
    b = np.zeros((16, 8))
    for lane in range(32):
        g, c = lane // 4, lane % 4
        a[g, 2 * c:2 * c + 2], a[g + 8, 2 * c:2 * c + 2] = af[lane, 0], af[lane, 1]
        a[g, 2 * c + 8:2 * c + 10], a[g + 8, 2 * c + 8:2 * c + 10] = af[lane, 2], af[lane, 3]
        b[2 * c:2 * c + 2, g], b[2 * c + 8:2 * c + 10, g] = b0[lane], b1[lane]
    d = a @ b
    for lane in range(32):
        g, c = lane // 4, lane % 4
        acc[lane, 0:2] += d[g, 2 * c:2 * c + 2]
        acc[lane, 2:4] += d[g + 8, 2 * c:2 * c + 2]


def _model_mma_sm80(p, M, N, K, vec, order_seed):
    BM, BN, BK = p["BM"], p["BN"], p["BK"]
    WARPS_M, WARPS_N, STAGES, SPLIT_K, GROUP_M = p["WARPS_M"], p["WARPS_N"], p["STAGES"], p["SPLIT_K"], p["GROUP_M"]
    THREADS = WARPS_M * WARPS_N * 32
    WM, WN = BM // WARPS_M, BN // WARPS_N
    MI, NI, CPR, KSTEPS = WM // 16, WN // 8, BK // 8, BK // 16
    rng = np.random.default_rng(order_seed)
    A = rng.integers(-3, 4, size=(M, K)).astype(np.float64)
    B = rng.integers(-3, 4, size=(N, K)).astype(np.float64)
    C = np.full((M, N), np.nan)
    written = np.zeros((M, N), np.int64)
    tiles_m, tiles_n = -(-M // BM), -(-N // BN)
    tiles = tiles_m * tiles_n
    ws = np.zeros(SPLIT_K * tiles * BM * BN + tiles)  # fp32 partials, then u32 counters
    counters = SPLIT_K * tiles * BM * BN

    def load_tile(smem, base, G, row0g, rows_left, k0, ROWS):
        CHUNKS, ROW_STEP = ROWS * CPR, THREADS // CPR
        for tid in range(THREADS):
            c, r0, gk, dst0 = tid % CPR, tid // CPR, k0 + (tid % CPR) * 8, _swz(tid)
            for it in range(-(-CHUNKS // THREADS)):
                if tid + it * THREADS >= CHUNKS:
                    break
                r, dst = r0 + it * ROW_STEP, dst0 + it * THREADS
                assert dst == _swz(tid + it * THREADS) and r * CPR + c == tid + it * THREADS
                vals = np.zeros(8)
                for e in range(8):
                    ok = r < rows_left and (gk < K if vec else gk + e < K)
                    if ok:
                        vals[e] = G[row0g + r, gk + e]
                smem[base + dst * 8: base + dst * 8 + 8] = vals

    ctas = [(x, y, z) for z in range(SPLIT_K) for y in range(tiles_m) for x in range(tiles_n)]
    random.Random(order_seed).shuffle(ctas)  # any arrival order
    for bx, by, bz in ctas:
        pid = by * tiles_n + bx
        group_size = GROUP_M * tiles_n
        first_m = (pid // group_size) * GROUP_M
        group_m = min(tiles_m - first_m, GROUP_M)
        tile_m = first_m + (pid % group_size) % group_m
        tile_n = (pid % group_size) // group_m
        m0, n0 = tile_m * BM, tile_n * BN
        kt_total = -(-K // BK)
        kt_per = -(-kt_total // SPLIT_K)
        kt_begin = bz * kt_per
        n_tiles = max(0, min(kt_total, kt_begin + kt_per) - kt_begin)
        sA = np.full(STAGES * BM * BK, np.nan)  # NaN: reading a never-written chunk shows up
        sB = np.full(STAGES * BN * BK, np.nan)
        acc = np.zeros((THREADS // 32, MI, NI, 32, 4))

        def load(stage, t):
            k0 = (kt_begin + t) * BK
            load_tile(sA, stage * BM * BK, A, m0, M - m0, k0, BM)
            load_tile(sB, stage * BN * BK, B, n0, N - n0, k0, BN)

        for s in range(STAGES - 1):
            if s < n_tiles:
                load(s, s)
        rs, wst = 0, STAGES - 1
        for t in range(n_tiles):
            if t + STAGES - 1 < n_tiles:
                load(wst, t + STAGES - 1)  # issued before the compute on stage rs: must differ
            for w in range(THREADS // 32):
                wm, wn = w // WARPS_N, w % WARPS_N
                a_chunk = [_swz((wm * WM + (ln & 15)) * CPR + (ln >> 4)) for ln in range(32)]
                b_chunk = [_swz((wn * WN + ((ln >> 4) << 3) + (ln & 7)) * CPR + ((ln >> 3) & 1)) for ln in range(32)]
                for ks in range(KSTEPS):
                    af = [_ldmatrix_x4(sA, [rs * BM * CPR + (a_chunk[ln] ^ (2 * ks)) + i * 16 * CPR for ln in range(32)])
                          for i in range(MI)]
                    bf = []
                    for j in range(NI // 2):
                        r = _ldmatrix_x4(sB, [rs * BN * CPR + (b_chunk[ln] ^ (2 * ks)) + j * 16 * CPR for ln in range(32)])
                        bf += [(r[:, 0], r[:, 1]), (r[:, 2], r[:, 3])]
                    for i in range(MI):
                        for j in range(NI):
                            _mma_16816(acc[w, i, j], af[i], *bf[j])
            rs = 0 if rs + 1 == STAGES else rs + 1
            wst = 0 if wst + 1 == STAGES else wst + 1
        if SPLIT_K > 1:  # row-major [BM][BN] partial per split, last arrival reduces
            tile_id = tile_m * tiles_n + tile_n
            part = tile_id * SPLIT_K * BM * BN
            for tid in range(THREADS):
                w, ln = tid // 32, tid % 32
                prow = (w // WARPS_N) * WM + (ln >> 2)
                pcol = (w % WARPS_N) * WN + (ln & 3) * 2
                for i in range(MI):
                    for h in range(2):
                        for j in range(NI):
                            f = part + bz * BM * BN + (prow + i * 16 + h * 8) * BN + pcol + j * 8
                            ws[f:f + 2] = acc[w, i, j, ln, 2 * h:2 * h + 2]
            prev = ws[counters + tile_id]
            ws[counters + tile_id] += 1
            if prev != SPLIT_K - 1:
                continue
            for tid in range(THREADS):
                for idx in range(tid, BM * BN // 4, THREADS):
                    r, c = idx // (BN // 4), (idx % (BN // 4)) * 4
                    s = np.zeros(4)
                    for z in range(SPLIT_K):
                        f = part + z * BM * BN + r * BN + c
                        s += ws[f:f + 4]
                    row, col = m0 + r, n0 + c
                    if row >= M or col >= N:
                        continue
                    for e in range(4):
                        if col + e < N:
                            C[row, col + e] = s[e]
                            written[row, col + e] += 1
            ws[counters + tile_id] = 0
            continue
        for tid in range(THREADS):
            w, ln = tid // 32, tid % 32
            row0 = m0 + (w // WARPS_N) * WM + (ln >> 2)
            col0 = n0 + (w % WARPS_N) * WN + (ln & 3) * 2
            for i in range(MI):
                for h in range(2):
                    row = row0 + i * 16 + h * 8
                    if row >= M:
                        continue
                    for j in range(NI):
                        for e in range(2):
                            col = col0 + j * 8 + e
                            if col < N:
                                C[row, col] = acc[w, i, j, ln, 2 * h + e]
                                written[row, col] += 1
    assert (written == 1).all(), "every C element written exactly once"
    assert np.array_equal(C, A @ B.T)
    assert (ws[counters:] == 0).all(), "split-K counters back at zero"


_D = dict(BM=128, BN=128, BK=32, WARPS_M=2, WARPS_N=2, STAGES=4, SPLIT_K=1, GROUP_M=8)


@pytest.mark.parametrize("p,M,N,K,vec", [
    (dict(_D, BM=32, BN=32, WARPS_M=1, WARPS_N=2, STAGES=3), 1, 1, 8, True),
    (dict(_D, BM=32, BN=32, WARPS_M=1, WARPS_N=2, STAGES=3), 1, 1, 1, False),
    (dict(_D, BM=32, BN=32, WARPS_M=1, WARPS_N=2, STAGES=2, SPLIT_K=4, GROUP_M=4), 77, 70, 136, True),
    (dict(_D, BM=32, BN=32, WARPS_M=2, WARPS_N=1, STAGES=4, SPLIT_K=2, GROUP_M=8), 130, 40, 31, False),
    (dict(_D, BM=64, BN=32, BK=64, WARPS_M=2, WARPS_N=1, STAGES=5, SPLIT_K=16, GROUP_M=1), 65, 33, 200, True),
    (dict(_D, BM=32, BN=64, BK=64, WARPS_M=1, WARPS_N=2, STAGES=3, GROUP_M=16), 100, 130, 72, True),
])
def test_mma_sm80_index_model(p, M, N, K, vec):
    assert family("mma_sm80").valid(p)
    for seed in range(2):
        _model_mma_sm80(p, M, N, K, vec, seed)


def test_mma_sm80_swizzle_conflict_free():
    """Each 8-lane ldmatrix phase and each 8-thread cp.async phase hits 8 distinct 16-byte bank groups."""
    for BK in (32, 64):
        CPR = BK // 8
        for WX in (16, 32, 64, 128, 256):
            for wi in range(4):
                for ks in range(BK // 16):
                    a = [_swz((wi * WX + (ln & 15)) * CPR + (ln >> 4)) ^ (2 * ks) for ln in range(32)]
                    b = [_swz((wi * WX + ((ln >> 4) << 3) + (ln & 7)) * CPR + ((ln >> 3) & 1)) ^ (2 * ks)
                         for ln in range(32)]
                    for ln in range(32):  # the XOR shortcut equals the direct swizzle
                        assert a[ln] == _swz((wi * WX + (ln & 15)) * CPR + (ln >> 4) + 2 * ks)
                    for arr in (a, b):
                        for q in range(4):
                            assert len({x % 8 for x in arr[8 * q:8 * q + 8]}) == 8
        for t in range(0, 1024, 8):
            assert len({_swz(x) % 8 for x in range(t, t + 8)}) == 8
