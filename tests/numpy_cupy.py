"""A numpy stand-in for the part of CuPy that evo.check and evo.fresh use, so their logic runs in CI (no GPU).

Arrays are numpy arrays with CuPy's `.get()`; `cupy.random.RandomState` is numpy's Philox; `cupy.RawModule` of
evo.fresh's source gives numpy versions of its kernels (the same hash, fill, checksums, sampled references and
comparisons, on the host). Anything else is numpy's. The CUDA side itself is tested on a GPU (tests/test_cheats_gpu.py).
`installed(monkeypatch)` puts it in place of `cupy` and imports evo.check and evo.fresh on it; the modules as they
were come back after the test.
"""
from __future__ import annotations

import sys
import types

import numpy as np

MASK = (1 << 64) - 1


class Dev(np.ndarray):
    """A device array: a numpy array with CuPy's `.get()`."""

    def get(self, *args, **kwargs):
        return np.asarray(self)


def _dev(x) -> Dev:
    return np.asarray(x).view(Dev)


class RandomState:
    """cupy.random.RandomState's calls used by evo.check, on numpy's Philox (deterministic per seed)."""

    def __init__(self, seed=None, method=None):
        self.g = np.random.Generator(np.random.Philox(None if seed is None else int(seed)))

    def standard_normal(self, size=None, dtype=np.float64):
        return _dev(self.g.standard_normal(size, dtype=dtype))

    def random_sample(self, size=None):
        return _dev(self.g.random(size))

    def randint(self, low, high=None, size=None):
        return _dev(self.g.integers(low, high, size=size))


# --- evo.fresh's kernels, on the host -----------------------------------------------------------------------------
def _mix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _hash(seed: int, i) -> np.ndarray:
    return _mix(np.uint64(int(seed) & MASK) ^ _mix(np.asarray(i, dtype=np.uint64)))


def _sign(seed: int, i) -> np.ndarray:
    return np.where((_hash(seed, i) >> np.uint64(63)) != 0, -1.0, 1.0)


def _ulp16(x: np.ndarray) -> np.ndarray:
    ax = np.abs(x).astype(np.float32)
    _, e = np.frexp(ax)
    u = np.ldexp(np.float32(1.0), (e - 11).astype(np.int32)).astype(np.float32)
    return np.where(ax < np.float32(6.1035156e-5), np.float32(5.9604645e-8), u).astype(np.float32)


def _fill(grid, block, args):
    x, n, seed = args
    h = _hash(int(seed), np.arange(int(n), dtype=np.uint64))
    parts = [((h >> np.uint64(s)) & np.uint64(0xFFFF)).astype(np.float32) for s in (0, 16, 32, 48)]
    s = ((parts[0] + parts[1]) + parts[2]) + parts[3]
    x.reshape(-1)[:] = ((s * np.float32(1.0 / 65536.0) - np.float32(2.0)) * np.float32(1.7320508)).astype(np.float16)


def _colsum(grid, block, args):
    X, rows, K, seed, out = args
    out[:int(K)] += _sign(int(seed), np.arange(int(rows))) @ np.asarray(X, dtype=np.float64).reshape(int(rows), int(K))


def _dot(grid, block, args):
    x, y, n, out, slot = args
    out[int(slot)] = float(np.dot(np.asarray(x[:int(n)]), np.asarray(y[:int(n)])))


def _ctv(grid, block, args):
    C, M, N, su, sv, out, slot = args
    c = np.asarray(C, dtype=np.float64).reshape(int(M), int(N))
    out[int(slot)] += float(_sign(int(su), np.arange(int(M))) @ c @ _sign(int(sv), np.arange(int(N))))


def _sample_ref(grid, block, args):
    A, B, M, N, K, seed, R, S, idx, ref, bnd, ulps, slack = args
    M, N, K, R, S = int(M), int(N), int(K), int(R), int(S)
    t = np.arange(R * N + S * M)
    rows = t < R * N
    u = np.maximum(t - R * N, 0)
    i = np.where(rows, (_hash(int(seed), t // N) % np.uint64(M)).astype(np.int64), u % M)
    j = np.where(rows, t % N, (_hash(int(seed) ^ 0x5BD1E995, u // M) % np.uint64(N)).astype(np.int64))
    a = np.asarray(A, dtype=np.float64).reshape(M, K)[i]
    b = np.asarray(B, dtype=np.float64).reshape(N, K)[j]
    r = np.sum(a * b, axis=1).astype(np.float32)
    na = np.sqrt(np.sum(a * a, axis=1)).astype(np.float32)
    nb = np.sqrt(np.sum(b * b, axis=1)).astype(np.float32)
    idx[0:2 * t.size:2], idx[1:2 * t.size:2] = i, j
    ref[:t.size] = r
    bnd[:t.size] = np.float32(ulps) * _ulp16(r) + np.float32(slack) * np.float32(5.9604645e-8) * na * nb


def _sample_cmp(grid, block, args):
    C, N, total, idx, ref, bnd, bad, info, slot = args
    total, slot = int(total), int(slot)
    i, j = np.asarray(idx[0:2 * total:2]), np.asarray(idx[1:2 * total:2])
    c = np.asarray(C).reshape(-1, int(N))[i, j].astype(np.float32)
    with np.errstate(invalid="ignore"):
        wrong = ~(np.abs(c - np.asarray(ref[:total])) <= np.asarray(bnd[:total]))
    if wrong.any():
        first = int(np.argmax(wrong))
        if bad[slot] == 0:
            info[4 * slot:4 * slot + 4] = (i[first], j[first], c[first], ref[first])
        bad[slot] += int(wrong.sum())


KERNELS = {"evo_fill": _fill, "evo_colsum": _colsum, "evo_dot": _dot, "evo_ctv": _ctv,
           "evo_sample_ref": _sample_ref, "evo_sample_cmp": _sample_cmp}


class RawModule:
    def __init__(self, code: str = "", options=()):
        self.code = code

    def get_function(self, name: str):
        if name not in KERNELS or f" {name}(" not in self.code:
            raise KeyError(f"no kernel {name} in the stand-in")
        return KERNELS[name]


def module() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__getattr__ = lambda name: getattr(np, name)  # anything not below is numpy's
    cp.ndarray = np.ndarray
    for name in ("empty", "zeros", "ones", "full", "empty_like", "zeros_like"):
        setattr(cp, name, (lambda f: lambda *a, **k: _dev(f(*a, **k)))(getattr(np, name)))
    cp.asarray = lambda x, dtype=None: _dev(np.asarray(x, dtype=dtype))
    cp.concatenate = lambda arrays, *a, **k: _dev(np.concatenate(arrays, *a, **k))
    cp.random = types.SimpleNamespace(RandomState=RandomState)
    cp.RawModule = RawModule
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None),
                                    curand=types.SimpleNamespace(CURAND_RNG_PSEUDO_PHILOX4_32_10=161))
    return cp


def installed(monkeypatch):
    """Import evo.check and evo.fresh on the stand-in (as `cupy`); returns (evo.check, evo.fresh). Generator: the
    modules as they were are restored after the test (for a pytest fixture's `yield from`)."""
    import evo
    import evo.fresh  # noqa: F401  (imports without CuPy: the real module, put back after)

    had = {name: hasattr(evo, name) for name in ("check", "fresh")}
    monkeypatch.setitem(sys.modules, "cupy", module())
    for name in had:
        monkeypatch.delitem(sys.modules, f"evo.{name}", raising=False)
        monkeypatch.delattr(evo, name, raising=False)
    import evo.check
    import evo.fresh

    yield evo.check, evo.fresh
    for name, there in had.items():
        if not there and hasattr(evo, name):
            delattr(evo, name)
