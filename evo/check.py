"""Correctness: fresh random inputs every call, poisoned output, an fp32 reference.

Runs inside the GPU worker. A kernel is correct only if every check passes:
* ``seeds`` runs on fresh random-normal inputs at fresh addresses: no NaN/unwritten
  element, relative Frobenius error <= rtol, every element within an elementwise bound;
* one run on {0,1}-valued inputs, where every partial sum is an exact integer in fp32,
  so the fp16 result must equal the fp16-rounded exact answer bit for bit.
"""
from __future__ import annotations

from typing import Callable

import cupy

from .config import CheckConfig
from .problem import Problem
from .records import CheckResult

Kernel = Callable[[cupy.ndarray, cupy.ndarray, cupy.ndarray], None]


def random_inputs(problem: Problem, rs: cupy.random.RandomState) -> tuple[cupy.ndarray, cupy.ndarray]:
    a = rs.standard_normal((problem.m, problem.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((problem.n, problem.k), dtype=cupy.float32).astype(cupy.float16)
    return a, b


def reference(a: cupy.ndarray, b: cupy.ndarray) -> cupy.ndarray:
    """fp32 reference C = A @ B^T (fp32 cuBLAS SGEMM; TF32 is off in the worker)."""
    return a.astype(cupy.float32) @ b.astype(cupy.float32).T


def poisoned_output(problem: Problem) -> cupy.ndarray:
    return cupy.full((problem.m, problem.n), cupy.nan, dtype=cupy.float16)


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


def check_kernel(kernel: Kernel, problem: Problem, cfg: CheckConfig, seed: int) -> CheckResult:
    rs = cupy.random.RandomState(seed)
    worst = CheckResult(True)
    n = 0
    for s in range(cfg.seeds):
        a, b = random_inputs(problem, rs)  # fresh values at fresh addresses every time
        a_copy, b_copy = a.copy(), b.copy()
        c = poisoned_output(problem)
        kernel(a, b, c)
        cupy.cuda.get_current_stream().synchronize()
        if not (cupy.array_equal(a, a_copy) and cupy.array_equal(b, b_copy)):
            return CheckResult(False, "the kernel modified its inputs A or B")
        r = compare(c, reference(a, b), cfg, f"random inputs #{s}")
        n += 1
        if not r.correct:
            r.checks = n
            return r
        worst = r if r.rel_err >= worst.rel_err else worst
    if cfg.exact:
        a = (rs.random_sample((problem.m, problem.k)) < 0.5).astype(cupy.float16)
        b = (rs.random_sample((problem.n, problem.k)) < 0.5).astype(cupy.float16)
        c = poisoned_output(problem)
        kernel(a, b, c)
        cupy.cuda.get_current_stream().synchronize()
        exact = reference(a, b).astype(cupy.float16)
        n += 1
        ok = cupy.isfinite(c) & (c == exact)
        wrong = int(c.size - int(cupy.count_nonzero(ok)))
        if wrong:
            idx = int(cupy.argmin(ok.ravel()))
            i, j = divmod(idx, problem.n)
            return CheckResult(False, f"exact {{0,1}} inputs: {wrong} outputs differ from the exact sum, "
                               f"e.g. C[{i},{j}]={float(c[i, j])} vs {float(exact[i, j])} (fp16 accumulation?)",
                               worst.rel_err, worst.max_abs_err, n)
    worst.checks = n
    return worst
