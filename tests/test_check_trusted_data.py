"""What judges a kernel is out of its reach (no GPU: evo.check and evo.fresh on a numpy stand-in for CuPy).

A kernel can read and write any device memory it can find, and the evaluator's own arrays sit in the same memory
pool as its buffers. The stand-in kernel below finds them the way Python can (the callers' frames), and does what a
memory-scanning kernel would: it rewrites every copy of its inputs and its output to agree (all zeros, whose product
is zero). The check must still see that C is not A B^T."""
import inspect
import sys
import types

import numpy as np
import pytest

from evo.config import load_config
from evo.problem import parse_shape


class _RandomState:
    """cupy.random.RandomState's calls used by evo.check, on numpy's Philox (deterministic per seed)."""

    def __init__(self, seed, method=None):
        self.g = np.random.Generator(np.random.Philox(int(seed)))

    def standard_normal(self, size, dtype=np.float64):
        return self.g.standard_normal(size, dtype=dtype)

    def random_sample(self, size=None):
        return self.g.random(size)

    def randint(self, low, high=None, size=None):
        return self.g.integers(low, high, size=size)


def _numpy_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    for name in ("ndarray", "empty", "full", "float16", "float32", "uint16", "nan", "all", "array_equal",
                 "count_nonzero", "isfinite", "abs", "where", "argmax", "argmin", "linalg"):
        setattr(cp, name, getattr(np, name))
    cp.random = types.SimpleNamespace(RandomState=_RandomState)
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None),
                                    curand=types.SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10=161))
    return cp


@pytest.fixture
def check(monkeypatch):
    """evo.check (and evo.fresh) imported on the stand-in; the modules as they were are back after the test."""
    import evo
    import evo.fresh  # noqa: F401  (imports without CuPy: the real module, put back after)

    had = {name: hasattr(evo, name) for name in ("check", "fresh")}
    monkeypatch.setitem(sys.modules, "cupy", _numpy_cupy())
    for name in had:
        monkeypatch.delitem(sys.modules, f"evo.{name}", raising=False)
        monkeypatch.delattr(evo, name, raising=False)
    import evo.check

    yield evo.check
    for name, there in had.items():
        if not there and hasattr(evo, name):
            delattr(evo, name)


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


def test_an_honest_kernel_passes_on_the_regenerated_inputs(check):
    cfg = load_config(None).check
    r = check.check_kernel(_honest, parse_shape("48x40x64"), cfg, seed=3, off=frozenset({"tight_bound"}))
    assert r.correct, r.error
    assert r.checks == cfg.seeds + 1 + 3  # the random sets, the same buffers again, the three exact sets


def test_a_kernel_that_rewrites_the_evaluators_copies_is_rejected(check):
    cfg = load_config(None).check
    r = check.check_kernel(_rewrites_every_copy, parse_shape("48x40x64"), cfg, seed=3, off=frozenset({"tight_bound"}))
    assert not r.correct
    assert "modified its inputs" in r.error, r.error


def test_inputs_made_again_are_the_same_arrays(check):
    p = parse_shape("32x24x40")
    for make in (check.random_inputs, check.exact_inputs, check.cancellation_inputs, check.mantissa_inputs):
        inputs = check.seeded(make, p, 11)
        (a1, b1), (a2, b2) = inputs(), inputs()
        assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
        assert a1.shape == (32, 40) and b1.shape == (24, 40)


class _OnDevice:
    """A numpy array behind CuPy's slicing and .get()."""

    def __init__(self, x):
        self.x = np.asarray(x)

    def __getitem__(self, key):
        return _OnDevice(self.x[key])

    def get(self):
        return self.x


def test_a_timed_calls_expected_checksum_rewritten_to_nan_fails(check):
    """The expected checksum of a timed call is computed on the device before the call: a kernel that found it and
    wrote NaN there must not pass the comparison (NaN compares false both ways)."""
    from evo.fresh import CallLog, FreshInputs

    p = parse_shape("64x64x64")
    rot = FreshInputs.__new__(FreshInputs)
    rot.p, rot.cfg, rot.off, rot.samples, rot.checked = p, load_config(None).check, frozenset(), 0, []
    rot.log = [CallLog(1, 2, 3, 4, True, -1)]
    rot.a = rot.b = rot.c = types.SimpleNamespace(intact=lambda: True)
    rot.got, rot.bad, rot.info = _OnDevice([12.5]), _OnDevice([0]), _OnDevice([0.0] * 4)
    rot.expect = _OnDevice([12.5])
    assert rot.verify() == ""
    rot.expect = _OnDevice([float("nan")])
    assert "checksum" in rot.verify()
