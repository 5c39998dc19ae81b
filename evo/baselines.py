"""Library baselines, timed in the worker next to the candidates: cuBLAS and cuBLASLt.

* cublas: cublasGemmEx, fp16 in/out, CUBLAS_COMPUTE_32F, default algorithm.
* cublaslt_heuristic: cuBLASLt's heuristic top-1 algorithm (nvmath-python plan()[0]).
* cublaslt_autotune: the fastest of the planned algorithms (``baselines.autotune_algorithms``), each timed as
  its own contender in the interleaved, L2-flushed measurement; chosen on half the repetitions and reported by the
  other half (evo/autotune_pick.py). nvmath-python's own autotune (5 unflushed iterations) is not used: its pick
  changed from run to run on one shape.
"""
from __future__ import annotations

from typing import Callable

import cupy
import numpy as np

from .autotune_pick import pick_fastest
from .config import BaselineConfig
from .errors import EvoError, LibraryMissing
from .ltgemm import CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT, CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16F, algorithm_config, find_algorithm
from .placements import rotating, whole_rotations

Call = Callable[[cupy.ndarray, cupy.ndarray, cupy.ndarray], None]


def cublas_gemm() -> Call:
    """C[M,N] = A[M,K] B[N,K]^T, row-major, through cublasGemmEx (column-major view: C^T = B A^T)."""
    from cupy.cuda import cublas, device

    handle = device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)

    def call(a: cupy.ndarray, b: cupy.ndarray, c: cupy.ndarray) -> None:
        m, k = a.shape
        n = b.shape[0]
        cublas.gemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, one.ctypes.data, b.data.ptr, CUDA_R_16F, k,
                      a.data.ptr, CUDA_R_16F, k, zero.ctypes.data, c.data.ptr, CUDA_R_16F, n,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)

    return call


def pool_across(plans: list["LtPlan"]) -> dict[int, list]:
    """The autotune's pool over several input sets: index i of the first plan's algorithms -> its copy in every plan
    (by configuration, LtPlan.find), for the algorithms every plan has."""
    pool = {}
    for i, alg in enumerate(plans[0].mm.algorithms):
        copies = [alg] + [pl.find(alg) for pl in plans[1:]]
        if all(c is not None for c in copies):
            pool[i] = copies
    return pool


def call_across(plans: list["LtPlan"], algorithms: list) -> Callable[[], None]:
    """One contender: plan i's algorithms[i] on its input set, the sets in turn (evo.placements.rotating)."""
    return rotating([pl.call(alg) for pl, alg in zip(plans, algorithms)])


def select_across(plans: list["LtPlan"], timer, reps: int, warmup: int = 3):
    """The fastest planned algorithm over the plans' input sets: every algorithm of the pool (pool_across) is one
    contender over the sets in turn, all interleaved, L2 flushed, chosen without a winner's curse on whole rotations
    (evo.autotune_pick). Sets each plan's `tuned` to its own copy of the pick; returns (the first plan's,
    AutotunePick). Time it again to report it: that time then carries no winner's curse, and with several sets no fit
    to one set's placement either."""
    pool = pool_across(plans)
    if not pool:
        raise EvoError("no planned cuBLASLt algorithm was planned for every input set")
    named = {f"algorithm_{i}": copies for i, copies in pool.items()}
    t = timer.measure({n: call_across(plans, copies) for n, copies in named.items()}, whole_rotations(reps, len(plans)),
                      warmup)
    pick = pick_fastest({n: x.samples for n, x in t.items()}, sets=len(plans))
    for pl, alg in zip(plans, named[pick.name]):
        pl.tuned = alg
    return plans[0].tuned, pick


class LtPlan:
    """A cuBLASLt plan for one problem and one input set, via nvmath-python."""

    def __init__(self, a: cupy.ndarray, b: cupy.ndarray, cfg: BaselineConfig):
        try:
            from nvmath.linalg import advanced as adv
        except ImportError as e:
            raise LibraryMissing(f"cuBLASLt cannot be timed here: nvmath-python is not installed ({e}); install the GPU "
                                 "extras (pip install -e '.[gpu]'), or set baselines.cublaslt_heuristic and "
                                 "baselines.cublaslt_autotune to false to compare with cuBLAS alone") from None
        self.adv = adv
        self.mm = adv.Matmul(a, b.T, options={"compute_type": adv.MatmulComputeType.COMPUTE_32F})
        self.mm.plan(preferences=adv.MatmulPlanPreferences(limit=cfg.autotune_algorithms))
        self.heuristic = self.mm.algorithms[0]
        self.tuned = None
        self.n_algorithms = len(self.mm.algorithms)

    def select(self, timer, reps: int, warmup: int = 3):
        """The fastest planned algorithm by a measurement of its own (select_across with this one plan)."""
        return select_across([self], timer, reps, warmup)

    def find(self, algorithm):
        """This plan's algorithm with the configuration of `algorithm` (planned for another input set), or None."""
        return find_algorithm(self.mm.algorithms, algorithm_config(algorithm))

    def call(self, algorithm) -> Callable[[], None]:
        mm = self.mm

        def run() -> None:
            mm.execute(algorithm=algorithm)

        return run

    def close(self) -> None:
        try:
            self.mm.free()
        except Exception:
            pass
