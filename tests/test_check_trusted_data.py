"""What judges a kernel is out of its reach (no GPU: evo.check and evo.fresh on tests/numpy_cupy.py).

A kernel can read and write any device memory it can find, and the evaluator's own arrays sit in the same memory
pool as its buffers. The stand-in kernels below find them the way Python can (the callers' frames), and do what a
memory-scanning kernel would: rewrite every copy of their inputs and their output to agree (all zeros, whose
product is zero), or hide a timed call whose work they skipped by rewriting its checks."""
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
        run(kernel, rot)
        rot.after()
    return rot.verify()


def run(kernel, self):  # the candidate's call, from a frame that holds the evaluator's object (as a kernel finds it)
    kernel(*self.args())


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


def test_a_kernel_that_hides_a_skipped_call_in_the_evaluators_arrays_is_rejected(evo_check):
    """It skips the work in one timed call that is not compared in full (the stand-in peeks at which; a kernel could
    only guess), widens every sampled element's bound to infinity during it, and in the next call rewrites that
    call's checksums and failure count on the device. Each call's verdict is on the host before the next launch, and
    its bounds and expected checksum are made after it ran: the skipped call is still caught."""
    _, fresh = evo_check
    state = {"call": 0}

    def hides(a, b, c):
        rot = next(f.frame.f_locals["self"] for f in inspect.stack()[1:]
                   if isinstance(f.frame.f_locals.get("self"), fresh.FreshInputs))
        call = len(rot.log) - 1
        if not state["call"] and call >= rot.warmup and call not in rot.checked and call + 1 < rot.calls_max:
            state["call"] = call
            c[...] = 0
            rot.bnd[...] = np.inf
            return
        _honest(a, b, c)
        if state["call"] and call == state["call"] + 1:
            j = state["call"]
            rot.expect[j] = rot.got[j] = 0.0
            rot.bad[j] = 0
    why = _timed(fresh, hides)
    assert state["call"] and f"call #{state['call']}" in why, why
