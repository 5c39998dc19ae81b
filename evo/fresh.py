"""Fresh inputs in every timed call, and a check of every call that no kernel can tell from timing.

Runs inside the GPU worker. Before every call of the candidate (warm-up and timed alike, outside the
event window, before the L2 flush), on the device:

* ``evo_fill`` writes new A and B values from a counter-based hash seeded per call (normal-ish,
  full fp16 mantissa): an input set never repeats, so nothing keyed on input values can replay;
* C is poisoned with NaN.

After every call, nothing of which existed while the kernel ran: ``u^T C v`` in fp64 with random +-1 vectors u, v;
C copied to a snapshot buffer (the snapshot of a *checked* call is kept, the others overwrite a scratch one); A and
B made again from the call's seeds, and from them the expected checksum ``(A^T u).(B^T v)`` (two column sums and
a dot in fp64: exact for fp16 data) and the fp64 reference of ``sample_rows`` random rows and ``sample_cols``
random columns of C with each element's bound, compared (a count of failures per call). The call's verdict (both
checksums, the failures, the first failure) is copied to the host before anything else is launched, so no later
call can rewrite it. Identical work, buffers and flush for every call; which 2-4 of the timed calls are compared
in full, elementwise, is drawn at random and known to the host only. The full comparisons run after timing: the
checked call's A and B are generated again from its seed.

Per-element bound (check.ulps, check.acc_slack, check.trunc_slack): ``|C - ref| <= ulps * ulp16(ref) + acc *
2^-24 * ||a_i|| * ||b_j||`` with ``acc = acc_slack + trunc_slack * sqrt(K / 16)`` (``acc_units``): the fp16 rounding
of the output plus fp32 accumulation (Cauchy-Schwarz bounds every partial sum by ||a_i||*||b_j||; tensor cores
truncate once per k16 step, a drift that grows like sqrt(K / 16) on random data). fp16 accumulation or inputs
rounded to bf16 exceed it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

try:
    import cupy
except ImportError:  # without a GPU: the CUDA source and the bounds (numpy, xp=np) are still usable and tested
    cupy = None

from .config import CheckConfig
from .problem import Problem

EPS32 = 2.0 ** -24  # unit roundoff of fp32

SOURCE = r"""
#include <cuda_fp16.h>

__device__ __forceinline__ unsigned long long evo_mix(unsigned long long x) {   // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
__device__ __forceinline__ unsigned long long evo_hash(unsigned long long seed, unsigned long long i) {
    return evo_mix(seed ^ evo_mix(i));
}
// +-1 from a hash
__device__ __forceinline__ double evo_sign(unsigned long long seed, long long i) {
    return (evo_hash(seed, (unsigned long long)i) >> 63) ? -1.0 : 1.0;
}

// x[i] = normal-ish (sum of four 16-bit uniforms, mean 0, variance 1, |x| < 3.47), rounded to fp16
extern "C" __global__ void evo_fill(__half* __restrict__ x, long long n, unsigned long long seed) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned long long h = evo_hash(seed, (unsigned long long)i);
        const float s = (float)(h & 0xffffull) + (float)((h >> 16) & 0xffffull) + (float)((h >> 32) & 0xffffull)
                        + (float)(h >> 48);
        x[i] = __float2half_rn((s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f);
    }
}

// out[k] += sum_i sign(seed, i) * X[i, k] over a block of 64 rows (fp64: exact for fp16 data); out zeroed before
extern "C" __global__ void evo_colsum(const __half* __restrict__ X, int rows, int K, unsigned long long seed,
                                      double* __restrict__ out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    const int r0 = blockIdx.y * 64, r1 = min(rows, r0 + 64);
    double acc = 0.0;
    for (int r = r0; r < r1; ++r) acc += evo_sign(seed, r) * (double)__half2float(X[(size_t)r * K + k]);
    atomicAdd(out + k, acc);
}

__device__ __forceinline__ double evo_block_sum(double v) {
    __shared__ double part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;   // valid in thread 0
}

// out[slot] = x . y (one block)
extern "C" __global__ void evo_dot(const double* __restrict__ x, const double* __restrict__ y, int n,
                                   double* __restrict__ out, int slot) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i] * y[i];
    acc = evo_block_sum(acc);
    if (threadIdx.x == 0) out[slot] = acc;
}

// out[slot] += sum_ij sign(su, i) sign(sv, j) C[i, j] (NaN and inf propagate); out[slot] zeroed before
extern "C" __global__ void evo_ctv(const __half* __restrict__ C, int M, int N, unsigned long long su,
                                   unsigned long long sv, double* __restrict__ out, int slot) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    double acc = 0.0;
    if (j < N) {
        const int r0 = blockIdx.y * 64, r1 = min(M, r0 + 64);
        for (int r = r0; r < r1; ++r) acc += evo_sign(su, r) * (double)__half2float(C[(size_t)r * N + j]);
        acc *= evo_sign(sv, j);
    }
    acc = evo_block_sum(acc);
    if (threadIdx.x == 0) atomicAdd(out + slot, acc);
}

__device__ __forceinline__ float evo_ulp16(float x) {   // spacing of fp16 numbers at |x| (normal range), 2^-24 below
    int e;
    frexpf(fabsf(x), &e);                                // |x| = m 2^e, m in [0.5, 1)
    return fabsf(x) < 6.1035156e-5f ? 5.9604645e-8f : ldexpf(1.0f, e - 11);
}

// One warp per sampled element: samples t < R*N are row r_t/N (random), column t%N; the rest are column
// c (random), row t'%M. Writes the element's index, its fp64 reference and its bound.
extern "C" __global__ void evo_sample_ref(const __half* __restrict__ A, const __half* __restrict__ B, int M, int N,
                                          int K, unsigned long long seed, int R, int S, int* __restrict__ idx,
                                          float* __restrict__ ref, float* __restrict__ bnd, float ulps, float slack) {
    const long long t = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const long long total = (long long)R * N + (long long)S * M;
    if (t >= total) return;
    int i, j;
    if (t < (long long)R * N) {
        i = (int)(evo_hash(seed, (unsigned long long)(t / N)) % (unsigned long long)M);
        j = (int)(t % N);
    } else {
        const long long u = t - (long long)R * N;
        j = (int)(evo_hash(seed ^ 0x5bd1e995ull, (unsigned long long)(u / M)) % (unsigned long long)N);
        i = (int)(u % M);
    }
    const __half* a = A + (size_t)i * K;
    const __half* b = B + (size_t)j * K;
    double dot = 0.0;
    float na = 0.f, nb = 0.f;
    for (int k = lane; k < K; k += 32) {
        const float x = __half2float(a[k]), y = __half2float(b[k]);
        dot += (double)x * (double)y;
        na += x * x;
        nb += y * y;
    }
    for (int o = 16; o > 0; o >>= 1) {
        dot += __shfl_down_sync(0xffffffffu, dot, o);
        na += __shfl_down_sync(0xffffffffu, na, o);
        nb += __shfl_down_sync(0xffffffffu, nb, o);
    }
    if (lane == 0) {
        const float r = (float)dot;
        idx[2 * t] = i;
        idx[2 * t + 1] = j;
        ref[t] = r;
        bnd[t] = ulps * evo_ulp16(r) + slack * 5.9604645e-8f * sqrtf(na) * sqrtf(nb);
    }
}

// After the call: every sampled element within its bound and finite; failures counted in bad[slot], the first
// one's (i, j, C, ref) in info[4 slot ...]. bad[slot] zeroed before.
extern "C" __global__ void evo_sample_cmp(const __half* __restrict__ C, int N, long long total,
                                          const int* __restrict__ idx, const float* __restrict__ ref,
                                          const float* __restrict__ bnd, int* __restrict__ bad,
                                          float* __restrict__ info, int slot) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= total) return;
    const int i = idx[2 * t], j = idx[2 * t + 1];
    const float c = __half2float(C[(size_t)i * N + j]);
    const float d = fabsf(c - ref[t]);
    if (!(d <= bnd[t])) {   // NaN-safe
        if (atomicAdd(bad + slot, 1) == 0) {
            info[4 * slot] = (float)i;
            info[4 * slot + 1] = (float)j;
            info[4 * slot + 2] = c;
            info[4 * slot + 3] = ref[t];
        }
    }
}
"""

_MODULE: dict = {}


def kernels() -> cupy.RawModule:
    """The module of the fresh-input kernels (compiled by NVRTC once per process, cached by cupy)."""
    if "m" not in _MODULE:
        _MODULE["m"] = cupy.RawModule(code=SOURCE, options=("-std=c++17",))
    return _MODULE["m"]


def fill(x: cupy.ndarray, seed: int, sms: int = 132) -> None:
    """Normal-ish fp16 values from a hash of (seed, index): the same seed gives the same values."""
    if "fill" not in _MODULE:
        _MODULE["fill"] = kernels().get_function("evo_fill")
    n = x.size
    grid = max(1, min(8 * sms, (n + 255) // 256))
    _MODULE["fill"]((grid,), (256,), (x, np.int64(n), np.uint64(seed & (2**64 - 1))))


def fresh_pair(problem: Problem, seed: int, sms: int = 132) -> tuple[cupy.ndarray, cupy.ndarray]:
    """A and B as evo_fill makes them for a timed call (ordinary data: normal-ish, full mantissa)."""
    a = cupy.empty((problem.m, problem.k), dtype=cupy.float16)
    b = cupy.empty((problem.n, problem.k), dtype=cupy.float16)
    fill(a, seed, sms)
    fill(b, seed ^ 0x2545F4914F6CDD1D, sms)
    return a, b


def ulp16(x, xp=None):
    """Spacing of fp16 numbers at |x| (fp32 array in, fp32 out), 2^-24 in the subnormal range."""
    xp = xp or cupy
    ax = xp.abs(x).astype(xp.float32)
    _, e = xp.frexp(ax)
    u = xp.ldexp(xp.ones_like(ax), (e - 11).astype(xp.int32))
    return xp.where(ax < 2.0 ** -14, xp.float32(EPS32), u).astype(xp.float32)


def acc_units(cfg: CheckConfig, k: int) -> float:
    """How far fp32 accumulation over K may move an element, in units of 2^-24 x ||a_i|| ||b_j||: acc_slack
    (any summation order) plus trunc_slack * sqrt(K / 16) (adders that truncate once per k16 step drift toward
    zero; on random data the drift grows like sqrt(K / 16): 17 units at K = 18944 in a numpy model of such adders,
    and an honest wgmma kernel on 2048x3584x18944 was 1 element past acc_slack alone, docs/evaluator.md)."""
    return float(cfg.acc_slack) + float(cfg.trunc_slack) * math.sqrt(max(int(k), 0) / 16.0)


def elem_bound(ref, a, b, cfg: CheckConfig, xp=None):
    """ulps * ulp16(ref) + acc_units(K) * 2^-24 * ||a_i|| ||b_j|| for every element of ref (M x N fp32)."""
    xp = xp or cupy
    na = xp.linalg.norm(a.astype(xp.float32), axis=1)
    nb = xp.linalg.norm(b.astype(xp.float32), axis=1)
    acc = xp.float32(acc_units(cfg, a.shape[1]) * EPS32)
    return (cfg.ulps * ulp16(ref, xp) + acc * na[:, None] * nb[None, :]).astype(xp.float32)


def exact_ordinary(c, a, b, cfg: CheckConfig, xp=None):
    """The ordinary-data exact test: (wrong, decided, ref64, h) where ``decided`` marks the elements whose exact
    value (fp64) lies farther from an fp16 rounding boundary than fp32 accumulation can move it
    (acc_units(K) * 2^-24 * ||a_i|| ||b_j||), ``h`` the correctly rounded fp16 result and ``wrong`` the decided
    elements of c that differ from it."""
    xp = xp or cupy
    a64, b64 = a.astype(xp.float64), b.astype(xp.float64)
    ref = a64 @ b64.T
    h = ref.astype(xp.float16)
    hf = h.astype(xp.float64)
    m, e = xp.frexp(xp.abs(hf))
    ulp = xp.ldexp(xp.ones_like(hf), (e - 11).astype(xp.int32))
    ulp = xp.where(m == 0.5, ulp / 2, ulp)  # at a power of two the spacing below is half the one above
    ulp = xp.where(xp.abs(hf) < 2.0 ** -14, 2.0 ** -24, ulp)  # subnormal spacing
    delta = acc_units(cfg, a.shape[1]) * EPS32 * xp.linalg.norm(a64, axis=1)[:, None] * xp.linalg.norm(b64, axis=1)[None, :]
    decided = xp.abs(ref - hf) + delta < ulp / 2
    wrong = decided & ~(c == h)
    return wrong, decided, ref, h


def compare_bound(c, ref, bound, what: str, xp=None) -> str:
    """'' when every element of c is finite and within its bound of ref, else one line saying where not."""
    xp = xp or cupy
    cf = c.astype(xp.float32)
    ok = xp.abs(cf - ref) <= bound  # False for NaN/inf
    bad = int(c.size - int(xp.count_nonzero(ok)))
    if not bad:
        return ""
    excess = xp.where(ok, -xp.inf, xp.nan_to_num(xp.abs(cf - ref) - bound, nan=xp.inf))
    i, j = divmod(int(xp.argmax(excess)), c.shape[1])
    return (f"{what}: {bad} of {c.size} elements outside the fp32-accumulation bound, e.g. C[{i},{j}]="
            f"{float(cf[i, j]):.6g} vs {float(ref[i, j]):.6g} (bound {float(bound[i, j]):.3g}): "
            f"fp16 accumulation or rounded inputs?")


def checked_calls(rng: np.random.Generator, cfg: CheckConfig, warmup: int, reps: int,
                  off: frozenset = frozenset()) -> list[int]:
    """Which calls (0-based, warm-up first) are compared in full: full_checks_min..max of them (a random count)
    at random positions among the timed calls. random_checks off: the first warm-up calls (the old, telling
    layout)."""
    n_full = int(rng.integers(cfg.full_checks_min, cfg.full_checks_max + 1))
    if "random_checks" in off:
        return list(range(min(n_full, warmup)))
    return sorted(int(x) for x in rng.choice(np.arange(warmup, warmup + reps), size=min(n_full, reps), replace=False))


@dataclass
class CallLog:
    """What the host remembers of one call: its seeds, and whether (and where) it is compared in full."""

    seed_a: int
    seed_b: int
    seed_u: int
    seed_v: int
    timed: bool
    snapshot: int  # index of the kept snapshot, -1 for the scratch one


@dataclass(frozen=True)
class Verdict:
    """One call's checks, as copied to the host right after it: the expected and measured checksum, the sampled
    elements outside their bound and the first of them (row, column, value, reference)."""

    expect: float
    got: float
    bad: int
    first: tuple[float, float, float, float]


class FreshInputs:
    """The candidate's buffers during timing, refilled with new values before every call and checked after it.

    ``before``/``args``/``after`` plug into evo.timing.Contender; ``verify`` (one synchronize) says whether
    every call was right. ``off``: defences switched off by name (evo.defences), for the tests only."""

    def __init__(self, problem: Problem, cfg: CheckConfig, seed: int, warmup: int, reps: int,
                 off: frozenset = frozenset(), sms: int = 132):
        from .check import Guarded  # the guard-banded buffers of the check

        self.p, self.cfg, self.off, self.sms = problem, cfg, off, sms
        p = problem
        self.rng = np.random.default_rng(seed)
        self.a, self.b, self.c = Guarded(p.m, p.k), Guarded(p.n, p.k), Guarded(p.m, p.n)
        self.calls_max = warmup + reps
        self.warmup = warmup
        self.checked = checked_calls(self.rng, cfg, warmup, reps, off)
        self.snaps = [cupy.empty((p.m, p.n), dtype=cupy.float16) for _ in range(len(self.checked) + 1)]
        tight = "tight_bound" not in off
        self.rows = cfg.sample_rows if tight else 0
        self.cols = cfg.sample_cols if tight else 0
        self.samples = self.rows * p.n + self.cols * p.m
        self.acc = acc_units(cfg, p.k)  # the bound's accumulation term, the same for every call of the shape
        s = max(self.samples, 1)
        self.idx = cupy.zeros(2 * s, dtype=cupy.int32)
        self.ref = cupy.zeros(s, dtype=cupy.float32)
        self.bnd = cupy.zeros(s, dtype=cupy.float32)
        n = self.calls_max + 8
        self.expect = cupy.zeros(n, dtype=cupy.float64)
        self.got = cupy.zeros(n, dtype=cupy.float64)
        self.bad = cupy.zeros(n, dtype=cupy.int32)
        self.info = cupy.zeros(4 * n, dtype=cupy.float32)
        self.ua = cupy.zeros(p.k, dtype=cupy.float64)
        self.vb = cupy.zeros(p.k, dtype=cupy.float64)
        self.sets = [self._seeds() for _ in range(3)]  # only used with fresh_inputs off
        self.log: list[CallLog] = []
        self.verdicts: list[Verdict] = []  # on the host, one per call, taken before the next launch
        self.mod = kernels()
        self.f = {name: self.mod.get_function(name) for name in
                  ("evo_fill", "evo_colsum", "evo_dot", "evo_ctv", "evo_sample_ref", "evo_sample_cmp")}

    def _seeds(self) -> tuple[int, int, int, int]:
        return tuple(int(x) for x in self.rng.integers(1, 2**63 - 1, size=4))  # type: ignore[return-value]

    # --- the three hooks around a call ------------------------------------------------------------
    def before(self) -> None:
        call = len(self.log)
        if call >= self.calls_max + 8:
            raise RuntimeError("FreshInputs: more calls than planned")
        sa, sb, su, sv = self._seeds() if "fresh_inputs" not in self.off else \
            self.sets[int(self.rng.integers(len(self.sets)))]
        snap = self.checked.index(call) if call in self.checked else -1
        self.log.append(CallLog(sa, sb, su, sv, call >= self.warmup, snap))
        fill(self.a.arr, sa, self.sms)
        fill(self.b.arr, sb, self.sms)
        self.c.arr.fill(cupy.nan)

    def args(self) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray]:
        return self.a.arr, self.b.arr, self.c.arr

    def after(self) -> None:
        """The call's checks, on data made after it ended, and its verdict copied to the host (synchronizes)."""
        p, f = self.p, self.f
        call = len(self.log) - 1
        lg = self.log[call]
        f["evo_ctv"](((p.n + 255) // 256, (p.m + 63) // 64), (256,),
                     (self.c.arr, np.int32(p.m), np.int32(p.n), np.uint64(lg.seed_u), np.uint64(lg.seed_v), self.got,
                      np.int32(call)))
        self.snaps[lg.snapshot].__setitem__(Ellipsis, self.c.arr)  # -1: the scratch snapshot
        # A and B as the call was given them (whatever the kernel did to its buffers), then what C must be
        fill(self.a.arr, lg.seed_a, self.sms)
        fill(self.b.arr, lg.seed_b, self.sms)
        self.ua.fill(0)
        self.vb.fill(0)
        gk = ((p.k + 255) // 256, (p.m + 63) // 64)
        f["evo_colsum"](gk, (256,), (self.a.arr, np.int32(p.m), np.int32(p.k), np.uint64(lg.seed_u), self.ua))
        gk = ((p.k + 255) // 256, (p.n + 63) // 64)
        f["evo_colsum"](gk, (256,), (self.b.arr, np.int32(p.n), np.int32(p.k), np.uint64(lg.seed_v), self.vb))
        f["evo_dot"]((1,), (256,), (self.ua, self.vb, np.int32(p.k), self.expect, np.int32(call)))
        if self.samples:
            warps = self.samples
            f["evo_sample_ref"](((warps * 32 + 255) // 256,), (256,),
                                (self.a.arr, self.b.arr, np.int32(p.m), np.int32(p.n), np.int32(p.k),
                                 np.uint64(lg.seed_a ^ lg.seed_b), np.int32(self.rows), np.int32(self.cols), self.idx,
                                 self.ref, self.bnd, np.float32(self.cfg.ulps), np.float32(self.acc)))
            f["evo_sample_cmp"](((self.samples + 255) // 256,), (256,),
                                (self.c.arr, np.int32(p.n), np.int64(self.samples), self.idx, self.ref, self.bnd,
                                 self.bad, self.info, np.int32(call)))
        row = cupy.concatenate((self.expect[call:call + 1], self.got[call:call + 1],  # one copy to the host
                                self.bad[call:call + 1].astype(cupy.float64),
                                self.info[4 * call:4 * call + 4].astype(cupy.float64))).get()
        self.verdicts.append(Verdict(float(row[0]), float(row[1]), int(row[2]), tuple(float(x) for x in row[3:7])))

    # --- after timing -----------------------------------------------------------------------------
    def checksum_tol(self) -> float:
        """Tolerance of u^T C v for an honest kernel: sigmas x sqrt(M N) x the per-element error's standard
        deviation (fp16 output rounding, <= 2^-10 |C| / sqrt(12) with E[C^2] = K, plus fp32 accumulation), plus
        as much again for one element's worst case (small shapes, where the sum is no Gaussian)."""
        p, cfg = self.p, self.cfg
        if "tight_bound" in self.off:  # the old loose tolerance: 4 x rtol of the checksum's scale
            return 4 * cfg.rtol * math.sqrt(p.m * p.n * p.k)
        acc = acc_units(cfg, p.k) * EPS32 * p.k
        sigma = math.sqrt(2.0 ** -20 * p.k / 12.0 + acc * acc)
        worst = 2.0 ** -11 * 12.0 * math.sqrt(p.k) + acc * 12.0
        return cfg.checksum_sigmas * (math.sqrt(p.m * p.n) * sigma + worst)

    def verify(self, what: str = "timed call") -> str:
        """'' if every call was right, else one line saying which and why. Synchronizes the device."""
        from .check import reference, sync

        sync()
        n = len(self.log)
        if not n:
            return ""
        for buf in (self.a, self.b, self.c):
            if not buf.intact():
                return f"{what}s: the kernel wrote outside its buffers (guard band modified)"
        if len(self.verdicts) < n:
            return f"{what}s: call #{len(self.verdicts)} was never checked (its after-call hook did not run)"
        tol = self.checksum_tol()
        for i, v in enumerate(self.verdicts[:n]):
            if not np.isfinite(v.got):
                return f"{what}s: call #{i} left unwritten (NaN) or non-finite outputs (work skipped or deferred?)"
            if v.bad:
                r, c, x, ref = v.first
                return (f"{what}s: call #{i}: {v.bad} of {self.samples} sampled elements outside the fp32-accumulation "
                        f"bound, e.g. C[{int(r)},{int(c)}]={x:.6g} vs {ref:.6g} (fp16 accumulation, rounded inputs, "
                        f"or work skipped?)")
            if not abs(v.got - v.expect) <= tol:  # NaN-safe: a non-finite expected value fails too
                return (f"{what}s: call #{i}: checksum u^T C v = {v.got:.6g}, expected {v.expect:.6g} "
                        f"(tolerance {tol:.3g}): wrong or cached result")
        tight = "tight_bound" not in self.off
        for call in self.checked:
            if call >= n:
                continue
            lg = self.log[call]
            fill(self.a.arr, lg.seed_a, self.sms)
            fill(self.b.arr, lg.seed_b, self.sms)
            ref = reference(self.a.arr, self.b.arr)
            snap = self.snaps[lg.snapshot]
            if tight:
                why = compare_bound(snap, ref, elem_bound(ref, self.a.arr, self.b.arr, self.cfg),
                                    f"{what}s: call #{call} (compared in full)")
            else:
                from .check import compare

                why = compare(snap, ref, self.cfg, f"{what}s: call #{call} (compared in full)").error
            del ref
            if why:
                return why
        return ""
