"""Correctness: fresh random inputs at fresh addresses, poisoned output, guard bands, an fp32 reference.

Runs inside the GPU worker. A kernel is correct only if every check passes (docs/evaluator.md
says which cheat each one catches and which test proves it):

* ``seeds`` runs on fresh random-normal inputs, every buffer at its own address (all kept alive
  until the check ends): no NaN/unwritten element, relative Frobenius error <= rtol, every element
  within an elementwise bound;
* every buffer (A, B and C) is the middle of a larger allocation whose guard bands hold a sentinel:
  a write outside C, or into A or B, is caught after every run;
* a second run on the *same addresses* with new values (a result cached by pointer replays stale data);
* {0,1} inputs: every partial sum is an exact integer, the fp16 result must match bit for bit;
* "cancellation" inputs: integer halves along K that cancel, so partial sums grow far past fp16's
  exact range while the final result stays small: fp16 accumulation fails even for small K;
* "mantissa" inputs: fp16 values using all 10 mantissa bits times {-1,0,1}: the exact answer is
  representable in fp32, so any bf16/fp8/tf32 shortcut on the inputs changes the bits;
* on random inputs every element within the fp32-accumulation bound (evo.fresh.elem_bound), and an exact
  test on ordinary data (``compare_exact_ordinary``): inputs from the timed calls' generator, the result
  bit-exact wherever fp32 accumulation cannot move the rounding.
Timed calls are checked by evo.fresh.FreshInputs.
Every launch is followed by a full device synchronize (work queued anywhere must be done).
"""
from __future__ import annotations

from typing import Callable

import cupy

from .config import CheckConfig
from .problem import Problem
from .records import CheckResult

Kernel = Callable[[cupy.ndarray, cupy.ndarray, cupy.ndarray], None]

GUARD = 16384  # fp16 elements (32 KiB) of guard band on each side of every buffer; keeps 256-byte alignment
SENTINEL = 0x5A5A  # fp16 203.25: finite, so a kernel that merely reads past an edge is not punished twice


class Guarded:
    """A rows x cols fp16 matrix that is the middle of a larger allocation with sentinel-filled guard bands."""

    def __init__(self, rows: int, cols: int):
        n = rows * cols
        self.buf = cupy.empty(n + 2 * GUARD, dtype=cupy.float16)
        self.buf.view(cupy.uint16)[:GUARD] = SENTINEL
        self.buf.view(cupy.uint16)[GUARD + n:] = SENTINEL
        self.arr = self.buf[GUARD:GUARD + n].reshape(rows, cols)

    def intact(self) -> bool:
        u = self.buf.view(cupy.uint16)
        n = self.arr.size
        return bool(cupy.all(u[:GUARD] == SENTINEL)) and bool(cupy.all(u[GUARD + n:] == SENTINEL))


def sync() -> None:
    """Wait for all work on the device (every stream), then surface any launch or kernel error."""
    cupy.cuda.runtime.deviceSynchronize()


def random_inputs(problem: Problem, rs: cupy.random.RandomState) -> tuple[cupy.ndarray, cupy.ndarray]:
    a = rs.standard_normal((problem.m, problem.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((problem.n, problem.k), dtype=cupy.float32).astype(cupy.float16)
    return a, b


def reference(a: cupy.ndarray, b: cupy.ndarray) -> cupy.ndarray:
    """fp32 reference C = A @ B^T (fp32 cuBLAS SGEMM; TF32 is off in the worker)."""
    return a.astype(cupy.float32) @ b.astype(cupy.float32).T


def poisoned_output(problem: Problem) -> cupy.ndarray:
    return cupy.full((problem.m, problem.n), cupy.nan, dtype=cupy.float16)


def exact_inputs(problem: Problem, rs: cupy.random.RandomState) -> tuple[cupy.ndarray, cupy.ndarray]:
    """{0,1} values: every partial sum is an exact integer."""
    a = (rs.random_sample((problem.m, problem.k)) < 0.5).astype(cupy.float16)
    b = (rs.random_sample((problem.n, problem.k)) < 0.5).astype(cupy.float16)
    return a, b


def cancellation_inputs(problem: Problem, rs: cupy.random.RandomState) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Integers whose two K halves cancel: A = [X, X], B = [Y, D - Y] with X, Y in 1..v, D in {0,1}.

    The partial sum over the first half reaches h*v^2/4 (>> 2048, where fp16 stops holding integers)
    while the final result sum(X*D) stays small; every partial sum stays below 2^20, exact in fp32."""
    m, n, k = problem.m, problem.n, problem.k
    h = k // 2
    v = int(max(2, min(32, (2 ** 20 / max(h, 1)) ** 0.5)))
    a = cupy.empty((m, k), dtype=cupy.float16)
    b = cupy.empty((n, k), dtype=cupy.float16)
    x = rs.randint(1, v + 1, size=(m, h)).astype(cupy.float16)
    y = rs.randint(1, v + 1, size=(n, h)).astype(cupy.float16)
    d = (rs.random_sample((n, h)) < 0.25).astype(cupy.float16)
    a[:, :h], a[:, h:2 * h] = x, x
    b[:, :h], b[:, h:2 * h] = y, d - y
    if k % 2:
        a[:, -1] = rs.randint(0, 3, size=m).astype(cupy.float16)
        b[:, -1] = rs.randint(0, 3, size=n).astype(cupy.float16)
    return a, b


def mantissa_inputs(problem: Problem, rs: cupy.random.RandomState) -> tuple[cupy.ndarray, cupy.ndarray]:
    """A: fp16 values 1 + j/1024 (all 10 mantissa bits used); B: sparse {-1, 0, 1}.

    Each product is exact, each partial sum is a multiple of 2^-10 below 2^11 in magnitude (at most
    1024 nonzeros per row of B), so the fp32 sum is exact and the fp16 result is fixed bit for bit;
    rounding A or B to bf16 (8 bits), fp8 or tf32-with-truncation changes it."""
    m, n, k = problem.m, problem.n, problem.k
    a = ((1024 + rs.randint(0, 1024, size=(m, k))).astype(cupy.float32) / 1024.0)
    a *= cupy.where(rs.random_sample((m, k)) < 0.5, -1.0, 1.0).astype(cupy.float32)
    p = min(0.5, 1024.0 / k / 1.25)
    u = rs.random_sample((n, k))
    b = cupy.where(u < p / 2, -1.0, cupy.where(u < p, 1.0, 0.0)).astype(cupy.float16)
    return a.astype(cupy.float16), b


def compare(c: cupy.ndarray, ref: cupy.ndarray, cfg: CheckConfig, what: str) -> CheckResult:
    cf = c.astype(cupy.float32)
    bad = int(cupy.count_nonzero(~cupy.isfinite(cf)))
    if bad:
        return CheckResult(False, f"{what}: {bad} of {c.size} outputs unwritten or not finite")
    diff = cupy.abs(cf - ref)
    ref_norm = float(cupy.linalg.norm(ref))
    rel = float(cupy.linalg.norm(cf - ref)) / ref_norm if ref_norm > 0 else float(cupy.linalg.norm(cf))
    max_abs = float(diff.max()) if diff.size else 0.0
    if rel > cfg.rtol:
        return CheckResult(False, f"{what}: relative error {rel:.2e} > {cfg.rtol:.0e}", rel, max_abs)
    rms = ref_norm / (ref.size ** 0.5) if ref.size else 0.0
    bound = cfg.atol_elem * rms + 4e-3 * cupy.abs(ref)  # fp16 rounding is 2^-11 relative
    over = int(cupy.count_nonzero(diff > bound))
    if over:
        idx = int(cupy.argmax(diff - bound))
        i, j = divmod(idx, c.shape[1])
        return CheckResult(False, f"{what}: {over} elements off, e.g. C[{i},{j}]={float(cf[i, j]):.4g} vs {float(ref[i, j]):.4g}",
                           rel, max_abs)
    return CheckResult(True, "", rel, max_abs)


def compare_exact(c: cupy.ndarray, ref: cupy.ndarray, what: str, hint: str) -> CheckResult:
    exact = ref.astype(cupy.float16)
    ok = cupy.isfinite(c) & (c == exact)
    wrong = int(c.size - int(cupy.count_nonzero(ok)))
    if wrong:
        idx = int(cupy.argmin(ok.ravel()))
        i, j = divmod(idx, c.shape[1])
        return CheckResult(False, f"{what}: {wrong} outputs differ from the exact result, "
                           f"e.g. C[{i},{j}]={float(c[i, j])} vs {float(exact[i, j])} ({hint})")
    return CheckResult(True)


Inputs = Callable[[], tuple[cupy.ndarray, cupy.ndarray]]  # makes the same A, B every call (from a seed)


def seeded(make: Callable[[Problem, cupy.random.RandomState], tuple[cupy.ndarray, cupy.ndarray]], problem: Problem,
           seed: int) -> Inputs:
    """A maker of one input set: ``make`` on a generator of its own, seeded, so that calling it again gives the
    same arrays (cuRAND's generators are deterministic; Philox, counter-based, sets up without a kernel)."""
    return lambda: make(problem, cupy.random.RandomState(seed, method=cupy.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10))


class Run:
    """One call of the kernel on guarded buffers, with every post-condition checked.

    Nothing that judges the kernel is on the device while it runs: its inputs are copied into the guarded buffers
    and dropped, and after it has ended (a full synchronize) they are made again from their seed, and the unchanged
    inputs and the reference are checked against those. A kernel that finds the evaluator's own arrays in device
    memory (they sit in the same pool) and rewrites its inputs, their copies and its output to agree, e.g. all
    zeros, has nothing to rewrite."""

    def __init__(self, problem: Problem):
        self.a = Guarded(problem.m, problem.k)
        self.b = Guarded(problem.n, problem.k)
        self.c = Guarded(problem.m, problem.n)

    def __call__(self, kernel: Kernel, inputs: Inputs,
                 what: str) -> tuple[cupy.ndarray | None, cupy.ndarray | None, cupy.ndarray | None, str]:
        """Fill the guarded inputs, poison C, run, synchronize; return (C, A, B, "") with A and B made again after
        the run, or (None, None, None, why)."""
        a, b = inputs()
        self.a.arr[...] = a
        self.b.arr[...] = b
        self.c.arr.fill(cupy.nan)
        del a, b
        sync()
        kernel(self.a.arr, self.b.arr, self.c.arr)
        sync()  # the whole device: nothing may still be running when C is read
        if not (self.a.intact() and self.b.intact()):
            return None, None, None, f"{what}: the kernel wrote into the guard band around A or B (out-of-bounds write)"
        if not self.c.intact():
            return None, None, None, f"{what}: the kernel wrote outside C (guard band modified)"
        a, b = inputs()
        if not (cupy.array_equal(self.a.arr, a) and cupy.array_equal(self.b.arr, b)):
            return None, None, None, f"{what}: the kernel modified its inputs A or B"
        return self.c.arr, a, b, ""


def compare_exact_ordinary(c: cupy.ndarray, a: cupy.ndarray, b: cupy.ndarray, cfg: CheckConfig, what: str) -> CheckResult:
    """Bit-exact on ordinary data (evo.fresh.exact_ordinary): every element whose rounding fp32 accumulation cannot
    change must be the correctly rounded fp16 of the exact value. No cheat can tell these inputs from timed ones:
    they come from the same generator (evo.fresh.fill); truncation, bf16 or fp16 shortcuts fail."""
    from .fresh import exact_ordinary

    wrong, decided, ref, h = exact_ordinary(c, a, b, cfg)
    n_wrong, n_decided = int(cupy.count_nonzero(wrong)), int(cupy.count_nonzero(decided))
    if n_wrong:
        i, j = divmod(int(cupy.argmax(wrong.ravel())), c.shape[1])
        return CheckResult(False, f"{what}: {n_wrong} of {n_decided} outputs whose rounding fp32 accumulation cannot "
                                  f"change differ from the correctly rounded result, e.g. C[{i},{j}]={float(c[i, j])!r} vs "
                                  f"{float(h[i, j])!r} (exact {float(ref[i, j]):.8g}): fp16 accumulation, rounded inputs "
                                  f"or truncated output?")
    return CheckResult(True)


def check_kernel(kernel: Kernel, problem: Problem, cfg: CheckConfig, seed: int,
                 off: frozenset = frozenset()) -> CheckResult:
    """Every check on the exact shape; off: defences switched off by name (evo.defences; tests only)."""
    from .fresh import compare_bound, elem_bound, fresh_pair

    tight = "tight_bound" not in off
    rs = cupy.random.RandomState(seed)
    worst = CheckResult(True)
    n = 0
    runs = []  # kept alive: every run gets buffers at addresses no earlier run used

    def fail(r: CheckResult) -> CheckResult:
        r.checks = n
        if not r.rel_err:
            r.rel_err, r.max_abs_err = worst.rel_err, worst.max_abs_err
        return r

    def draw() -> int:
        return int(rs.randint(1, 2**31 - 1))

    for s in range(cfg.seeds):
        run = Run(problem)
        runs.append(run)
        c, a, b, why = run(kernel, seeded(random_inputs, problem, draw()), f"random inputs #{s}")
        n += 1
        if c is None:
            return fail(CheckResult(False, why))
        ref = reference(a, b)
        r = compare(c, ref, cfg, f"random inputs #{s}")
        if not r.correct:
            return fail(r)
        if tight:
            why = compare_bound(c, ref, elem_bound(ref, a, b, cfg), f"random inputs #{s}")
            if why:
                return fail(CheckResult(False, why, r.rel_err, r.max_abs_err))
        worst = r if r.rel_err >= worst.rel_err else worst
    # the same addresses again, new values: a result cached by pointer (or by shape) is stale now
    c, a, b, why = runs[-1](kernel, seeded(random_inputs, problem, draw()), "same buffers, new values")
    n += 1
    if c is None:
        return fail(CheckResult(False, why))
    r = compare(c, reference(a, b), cfg, "same buffers, new values (result cached across calls?)")
    if not r.correct:
        return fail(r)
    if tight:  # bit-exact where fp32 accumulation decides the rounding, on data made like the timed calls'
        fresh_seed = int(rs.randint(1, 2**62))
        c, a, b, why = runs[-1](kernel, lambda: fresh_pair(problem, fresh_seed), "ordinary-data exact test")
        n += 1
        if c is None:
            return fail(CheckResult(False, why))
        r = compare_exact_ordinary(c, a, b, cfg, "ordinary-data exact test")
        if not r.correct:
            return fail(r)
    if cfg.exact:
        for name, make, hint in (
                ("exact {0,1} inputs", exact_inputs, "fp16 accumulation?"),
                ("cancelling integer inputs", cancellation_inputs,
                 "partial sums grow past fp16's range and cancel: fp16 accumulation?"),
                ("full-mantissa fp16 inputs", mantissa_inputs, "inputs rounded to bf16/fp8/tf32?")):
            c, a, b, why = runs[-1](kernel, seeded(make, problem, draw()), name)
            n += 1
            if c is None:
                return fail(CheckResult(False, why))
            r = compare_exact(c, reference(a, b), name, hint)
            if not r.correct:
                return fail(r)
    worst.checks = n
    return worst
