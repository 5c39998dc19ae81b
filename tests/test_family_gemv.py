"""The gemv_sm80 family (templates/gemv_sm80): parameter space, launch geometry, `requires`, a model of its
fragment trick (16-byte loads fed to mma.sync m16n8k16 with a k permutation shared by both operands), and
on a GPU: correct on off-tile tiny-dimension shapes through the evaluator (poisoned C, fp32 reference).

The compile of its CI instances for sm_80 and sm_90a (with the spill / stack gates) is
tests/test_families_compile.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from evo.families import load_families
from evo.problem import Problem, parse_shape


@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(names=["gemv_sm80"])
    return f


def test_space_ci_and_starts_valid(fam):
    assert set(fam.archs) == {"sm_80", "sm_90a"}
    assert 1 <= len(fam.instances_for_ci()) <= 4
    for p in fam.instances_for_ci() + list(fam.start_instances()):
        assert fam.valid(p), p
    assert not fam.valid(fam.complete({"WARPS": 4, "KS": 8}))            # splits must divide the warps
    assert not fam.valid(fam.complete({"WN": 8, "UNROLL": 4}))            # register budget
    assert len(list(fam.valid_instances())) >= 100


@pytest.mark.parametrize("shape", ["16x4096x4096", "1x77x72", "13x1000x333", "16x28672x4096", "5x3x7"])
def test_launch_covers_the_streamed_rows(fam, shape):
    prob = parse_shape(shape)
    for p in fam.valid_instances():
        ks = fam.render(p)
        small, big = (prob.n, prob.m) if p["SWAP_AB"] else (prob.m, prob.n)
        assert ks.accepts(prob) == (small <= 16)
        if not ks.accepts(prob):
            continue
        l = ks.launch(prob, num_sms=132)
        rows_per_cta = 8 * p["WN"] * (p["WARPS"] // p["KS"])
        assert l.block == (32 * p["WARPS"], 1, 1)
        assert l.grid[0] * rows_per_cta >= big > (l.grid[0] - 1) * rows_per_cta
        assert l.smem == (0 if p["KS"] == 1 else p["WARPS"] * p["WN"] * 4 * 32 * 4) and l.workspace == 0


def test_requires_small_dimension(fam):
    plain, swap = fam.render({"SWAP_AB": 0}), fam.render({"SWAP_AB": 1})
    assert plain.accepts(Problem(16, 4096, 4096)) and not plain.accepts(Problem(17, 4096, 4096))
    assert swap.accepts(Problem(4096, 16, 4096)) and not swap.accepts(Problem(16, 17, 4096))


# ---- model of the fragment trick (mirrors kernel.cu: which lane loads what, which register feeds which slot)
def _mma_m16n8k16(d, a_regs, b_regs):
    """PTX ISA m16n8k16 .row.col f16 -> f32: rebuild A (16x16) and B (16x8, k x n) from the 32 lanes' registers.

    a_regs[lane] = 4 pairs: {a0,a1}: (row g, k 2t..2t+1), {a2,a3}: (g+8, 2t..), {a4,a5}: (g, 2t+8..), {a6,a7}: (g+8, 2t+8..)
    b_regs[lane] = 2 pairs: {b0,b1}: (k 2t..2t+1, col g), {b2,b3}: (k 2t+8.., col g)
    d[lane] = {c0,c1}: (row g, col 2t..2t+1), {c2,c3}: (row g+8, col 2t..)
    """
    A = np.zeros((16, 16), np.float64)
    B = np.zeros((16, 8), np.float64)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r, (row, k) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]):
            A[row, k:k + 2] = a_regs[lane][r]
        for r, k in enumerate([2 * t, 2 * t + 8]):
            B[k:k + 2, g] = b_regs[lane][r]
    D = A @ B
    for lane in range(32):
        g, t = lane // 4, lane % 4
        d[lane] += [D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1]]


def _model(X, Y, wn):
    """One warp: Y rows 0..8*wn-1 over all of K (K % 32 == 0), as the kernel's main loop + store."""
    K = X.shape[1]
    acc = [np.zeros((32, 4)) for _ in range(wn)]
    for kc in range(0, K, 32):
        u, v, w = {}, {}, {}
        for lane in range(32):
            g, t = lane // 4, lane % 4
            k = kc + 8 * t
            words = lambda row: [row[k + 2 * i:k + 2 * i + 2] for i in range(4)]  # noqa: E731
            u[lane], v[lane] = words(X[g]), words(X[g + 8])
            for j in range(wn):
                w[lane, j] = words(Y[8 * j + g])
        for j in range(wn):
            _mma_m16n8k16(acc[j], {l: [u[l][0], v[l][0], u[l][1], v[l][1]] for l in range(32)},
                          {l: [w[l, j][0], w[l, j][1]] for l in range(32)})
            _mma_m16n8k16(acc[j], {l: [u[l][2], v[l][2], u[l][3], v[l][3]] for l in range(32)},
                          {l: [w[l, j][2], w[l, j][3]] for l in range(32)})
    out = np.full((16, 8 * wn), np.nan)
    for j in range(wn):
        for lane in range(32):
            g, t = lane // 4, lane % 4
            y = 8 * j + 2 * t
            out[g, y], out[g, y + 1], out[g + 8, y], out[g + 8, y + 1] = acc[j][lane]
    return out


def test_fragment_permutation_gives_the_product():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 96))
    Y = rng.standard_normal((16, 96))
    got = _model(X, Y, wn=2)
    np.testing.assert_allclose(got, X @ Y.T, rtol=1e-12, atol=1e-12)


def test_model_detects_a_mismatched_permutation():
    # The test above can fail: feeding Y's words in another order than X's breaks the product.
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((16, 32)), rng.standard_normal((8, 32))
    Ys = Y.copy()
    Ys[:, 0:2], Ys[:, 2:4] = Y[:, 2:4], Y[:, 0:2].copy()
    assert not np.allclose(_model(X, Ys, wn=1), X @ Y.T)


# ---- on the GPU
@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    from conftest import gpu_worker_session

    yield from gpu_worker_session(tmp_path_factory.mktemp("gemv"), reps=10)


@pytest.mark.gpu
def test_correct_on_gpu(gpu, fam):
    """CI instances, starts and a few random instances on tiny-dimension shapes (off-tile, K % 8 != 0, N small)."""
    import random

    w, comp, _ = gpu
    rng = random.Random(3)
    instances = fam.instances_for_ci() + list(fam.start_instances()) + rng.sample(list(fam.valid_instances()), 6)
    shapes = ["16x4096x4096", "1x77x72", "13x1000x333", "7x200x1000", "4096x16x72", "1000x5x4096", "3x3x8"]
    failures, checked = [], 0
    for p in instances:
        ks = fam.render(p)
        r = comp.compile(ks, w.info.arch)
        assert r.ok, f"{p}: {r.error}"
        for shape in shapes:
            prob = parse_shape(shape)
            if not ks.accepts(prob):
                continue
            ev = w.call("evaluate", timeout_s=60, problem=prob, source=ks.text, cubin=r.cubin_path, h=ks.hash)
            checked += 1
            if not ev.ok:
                failures.append(f"{p} {shape}: {ev.error}")
    assert checked >= 30 and not failures, "\n".join(failures)
