"""The per-element bound and the ordinary-data exact test (evo/fresh.py), on numpy models of kernels (no GPU).

Honest fp32 accumulation (sequential: the worst order for rounding) must pass both; fp16 accumulation and B
rounded to bf16 must fail the bound at K >= 256; an output truncated instead of rounded passes the bound
(1 ulp) but fails the exact test; the per-call checksum tolerance holds an honest kernel's noise.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from evo.config import load_config
from evo.fresh import EPS32, FreshInputs, acc_units, compare_bound, elem_bound, exact_ordinary, ulp16

CFG = load_config().check


def data(m, n, k, seed=0):
    rs = np.random.default_rng(seed)
    return (rs.standard_normal((m, k)).astype(np.float16), rs.standard_normal((n, k)).astype(np.float16))


def fp32_sequential(a, b):
    acc = np.zeros((a.shape[0], b.shape[0]), dtype=np.float32)
    for k in range(a.shape[1]):
        acc += np.outer(a[:, k].astype(np.float32), b[:, k].astype(np.float32))  # fp16 products are exact in fp32
    return acc


def fp16_accumulate(a, b):
    acc = np.zeros((a.shape[0], b.shape[0]), dtype=np.float16)
    for k in range(a.shape[1]):
        acc = (acc.astype(np.float32) + np.outer(a[:, k].astype(np.float32), b[:, k].astype(np.float32))).astype(np.float16)
    return acc


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)  # round to nearest even
    return u.view(np.float32).astype(np.float16)


def tensor_core_truncating(a, b, step=16):
    """A model of tensor-core accumulation: each k16 step's products summed exactly, added to the fp32 accumulator and
    the sum truncated toward zero (adders that drop the bits past fp32 instead of rounding them)."""
    acc = np.zeros((a.shape[0], b.shape[0]), dtype=np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for k0 in range(0, a.shape[1], step):
        s = acc.astype(np.float64) + a64[:, k0:k0 + step] @ b64[:, k0:k0 + step].T
        x = s.astype(np.float32)
        acc = np.where(np.abs(x.astype(np.float64)) > np.abs(s), np.nextafter(x, np.float32(0)), x)
    return acc


def truncate16(c32):
    h = c32.astype(np.float16)
    up = np.abs(h.astype(np.float32)) > np.abs(c32)
    return np.where(up, np.nextafter(h, np.float16(0)), h)


def ref32(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.float32)


def passes_bound(c, a, b):
    r = ref32(a, b)
    return compare_bound(c, r, elem_bound(r, a, b, CFG, xp=np), "t", xp=np) == ""


def test_ulp16_is_the_fp16_spacing():
    x = np.array([1.0, 1.5, 2.0, 1000.0, 1e-6, 0.0], dtype=np.float32)
    got = ulp16(x, xp=np)
    assert list(got[:4]) == [2.0 ** -10, 2.0 ** -10, 2.0 ** -9, 0.5]
    assert got[4] == got[5] == np.float32(EPS32)


@pytest.mark.parametrize("k", [16, 256, 1024, 4096])
def test_honest_fp32_accumulation_passes(k):
    a, b = data(24, 40, k)
    c = fp32_sequential(a, b).astype(np.float16)
    assert passes_bound(c, a, b)
    wrong, decided, _, _ = exact_ordinary(c, a, b, CFG, xp=np)
    assert not wrong.any()
    assert decided.mean() > 0.5, decided.mean()  # most elements are held to the bit


@pytest.mark.parametrize("k", [256, 4096])
def test_fp16_accumulation_fails(k):
    a, b = data(24, 40, k, seed=1)
    c = fp16_accumulate(a, b)
    assert not passes_bound(c, a, b)
    assert exact_ordinary(c, a, b, CFG, xp=np)[0].any()


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_b_rounded_to_bf16_fails(k):
    a, b = data(24, 40, k, seed=2)
    c = fp32_sequential(a, to_bf16(b)).astype(np.float16)
    assert not passes_bound(c, a, b)
    assert exact_ordinary(c, a, b, CFG, xp=np)[0].any()


def test_truncated_output_passes_the_bound_but_not_the_exact_test():
    a, b = data(24, 40, 512, seed=3)
    c = truncate16(fp32_sequential(a, b))
    assert passes_bound(c, a, b)
    assert exact_ordinary(c, a, b, CFG, xp=np)[0].any()


def test_nan_and_gross_errors_fail_the_bound():
    a, b = data(8, 8, 64, seed=4)
    c = fp32_sequential(a, b).astype(np.float16)
    c[3, 4] = np.nan
    assert not passes_bound(c, a, b)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (64, 48, 1024)])
def test_checksum_tolerance_holds_honest_noise_and_not_a_skipped_row(shape):
    m, n, k = shape
    cfg = SimpleNamespace(**{**vars(CFG)})
    fake = SimpleNamespace(p=SimpleNamespace(m=m, n=n, k=k), cfg=cfg, off=frozenset())
    tol = FreshInputs.checksum_tol(fake)
    rs = np.random.default_rng(5)
    worst = 0.0
    for seed in range(20):
        a, b = data(m, n, k, seed=seed)
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        c = fp32_sequential(a, b).astype(np.float16).astype(np.float64)
        u, v = rs.choice([-1.0, 1.0], m), rs.choice([-1.0, 1.0], n)
        worst = max(worst, abs(u @ (c - exact) @ v))
        if m > 1:
            c[0, :] = 0.0  # a row never written (zeros): far outside the tolerance
            assert abs(u @ (c - exact) @ v) > tol
    assert worst < tol / 4, (worst, tol)


def test_checked_calls_are_random_timed_calls():
    from evo.fresh import checked_calls

    seen_counts, seen_positions = set(), set()
    for seed in range(200):
        calls = checked_calls(np.random.default_rng(seed), CFG, warmup=5, reps=30)
        assert CFG.full_checks_min <= len(calls) <= CFG.full_checks_max
        assert all(5 <= c < 35 for c in calls) and calls == sorted(set(calls))
        seen_counts.add(len(calls))
        seen_positions.update(calls)
    assert seen_counts == set(range(CFG.full_checks_min, CFG.full_checks_max + 1))
    assert seen_positions == set(range(5, 35))  # every timed call can be a checked one
    assert checked_calls(np.random.default_rng(0), CFG, 5, 2) and len(checked_calls(np.random.default_rng(0), CFG, 5, 2)) <= 2
    assert all(c < 5 for c in checked_calls(np.random.default_rng(0), CFG, 5, 30, frozenset({"random_checks"})))


def test_truncating_adders_at_long_k_stay_inside_the_bound():
    # an honest wgmma kernel on 2048x3584x18944 (H100) had 1 of 2.8 M decided outputs a rounding off: its fp32
    # result sat past acc_slack alone (docs/evaluator.md). Truncating adders drift toward zero by a random walk of
    # K / 16 steps: in this model 17.3 units of 2^-24 ||a|| ||b|| at K = 18944, past acc_slack's 16
    a, b = data(256, 256, 18944, seed=18944)
    c32 = tensor_core_truncating(a, b)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    units = np.abs(c32 - ref) / (EPS32 * np.linalg.norm(a.astype(np.float64), axis=1)[:, None]
                                 * np.linalg.norm(b.astype(np.float64), axis=1)[None, :])
    assert CFG.acc_slack < units.max() < acc_units(CFG, 18944) / 1.5
    c = c32.astype(np.float16)
    assert passes_bound(c, a, b)
    wrong, decided, _, _ = exact_ordinary(c, a, b, CFG, xp=np)
    assert not wrong.any() and decided.mean() > 0.05
    # and what still fails at that K: an output truncated instead of rounded, B rounded to bf16
    assert exact_ordinary(truncate16(c32), a, b, CFG, xp=np)[0].any()
    a2, b2 = data(24, 40, 18944, seed=5)
    assert not passes_bound(fp32_sequential(a2, to_bf16(b2)).astype(np.float16), a2, b2)


def test_acc_units_grow_with_the_k16_steps():
    assert acc_units(CFG, 0) == CFG.acc_slack
    assert acc_units(CFG, 16384) == pytest.approx(CFG.acc_slack + CFG.trunc_slack * 32.0)
