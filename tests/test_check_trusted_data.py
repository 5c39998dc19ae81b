"""What judges a kernel is out of its reach (no GPU: evo.check and evo.fresh on tests/numpy_cupy.py).

A kernel can read and write any device memory it can find, and the evaluator's own arrays sit in the same memory
pool as its buffers. The stand-in kernels below find them the way Python can (the callers' frames), and do what a
memory-scanning kernel would: rewrite every copy of their inputs and their output to agree (all zeros, whose
product is zero), or write NaN where the expected checksum of a timed call is kept."""
import inspect

import numpy as np
import pytest

import numpy_cupy
from evo.config import load_config
from evo.problem import parse_shape


@pytest.fixture
def evo_check(monkeypatch):
    yield from numpy_cupy.installed(monkeypatch)


def _honest(a, b, c):
    c[...] = (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)


def _rewrites_every_copy(a, b, c):
    """Skips the work: zeroes every array in the callers' frames that holds its inputs' values, its own inputs,
    and writes C = 0 (the product of zero inputs)."""
    for frame in inspect.stack()[1:]:
        for v in list(frame.frame.f_locals.values()):
            if isinstance(v, np.ndarray) and v is not a and v is not b:
                if (v.shape == a.shape and np.array_equal(v, a)) or (v.shape == b.shape and np.array_equal(v, b)):
                    v[...] = 0
    a[...] = 0
    b[...] = 0
    c[...] = 0


@pytest.mark.parametrize("off", [frozenset(), frozenset({"tight_bound"})])
def test_an_honest_kernel_passes_on_the_regenerated_inputs(evo_check, off):
    check, _ = evo_check
    cfg = load_config(None).check
    r = check.check_kernel(_honest, parse_shape("48x40x64"), cfg, seed=3, off=off)
    assert r.correct, r.error
    # the random sets, the same buffers again, (with the tight bound) the ordinary-data exact test, the exact sets
    assert r.checks == cfg.seeds + 1 + (0 if off else 1) + 3


def test_a_kernel_that_rewrites_the_evaluators_copies_is_rejected(evo_check):
    check, _ = evo_check
    cfg = load_config(None).check
    r = check.check_kernel(_rewrites_every_copy, parse_shape("48x40x64"), cfg, seed=3, off=frozenset({"tight_bound"}))
    assert not r.correct
    assert "modified its inputs" in r.error, r.error


def test_inputs_made_again_are_the_same_arrays(evo_check):
    check, fresh = evo_check
    p = parse_shape("32x24x40")
    for make in (check.random_inputs, check.exact_inputs, check.cancellation_inputs, check.mantissa_inputs):
        inputs = check.seeded(make, p, 11)
        (a1, b1), (a2, b2) = inputs(), inputs()
        assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
        assert a1.shape == (32, 40) and b1.shape == (24, 40)
    (a1, b1), (a2, b2) = fresh.fresh_pair(p, 5), fresh.fresh_pair(p, 5)
    assert np.array_equal(a1, a2) and not np.array_equal(a1, fresh.fresh_pair(p, 6)[0])


def _timed(fresh, kernel, shape="64x48x96", warmup=2, reps=8, seed=1):
    """The candidate's side of a timing window: every call prepared, run and checked as evo.timing runs it."""
    rot = fresh.FreshInputs(parse_shape(shape), load_config(None).check, seed, warmup, reps)
    for _ in range(warmup + reps):
        rot.before()
        kernel(*rot.args())
        rot.after()
    return rot.verify()


def test_an_honest_kernel_passes_every_timed_call(evo_check):
    _, fresh = evo_check
    assert _timed(fresh, _honest) == ""


def test_a_timed_call_with_work_skipped_fails_its_checksum(evo_check):
    _, fresh = evo_check
    calls = []

    def skips_one(a, b, c):
        calls.append(1)
        _honest(a, b, c)
        if len(calls) == 6:
            c[:8] = 0  # rows no sample may happen to read: the checksum sees them
    why = _timed(fresh, skips_one)
    assert "call #5" in why and ("checksum" in why or "sampled" in why), why


def test_fp16_accumulation_in_timed_calls_is_outside_the_bound(evo_check):
    _, fresh = evo_check

    def fp16_acc(a, b, c):
        acc = np.zeros(c.shape, dtype=np.float16)
        for k in range(a.shape[1]):
            acc = (acc + np.outer(a[:, k], b[:, k]).astype(np.float16)).astype(np.float16)
        c[...] = acc
    why = _timed(fresh, fp16_acc, shape="32x32x512", reps=4)
    assert "outside the fp32-accumulation bound" in why or "checksum" in why, why


def test_a_kernel_that_writes_nan_into_its_expected_checksum_fails(evo_check):
    """The expected checksum of a timed call is computed on the device before the call: a kernel that found it and
    wrote NaN there must not pass the comparison (NaN compares false both ways)."""
    _, fresh = evo_check

    def nan_expected(a, b, c):
        _honest(a, b, c)
        for frame in inspect.stack()[1:]:
            rot = frame.frame.f_locals.get("rot")
            if isinstance(rot, fresh.FreshInputs):
                rot.expect[len(rot.log) - 1] = np.nan
    why = _timed(fresh, nan_expected)
    assert "checksum" in why, why
