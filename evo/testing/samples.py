"""Small valid candidates and proposal contexts for tests that run without a GPU."""
from __future__ import annotations

import random

from ..kernel import KernelSource
from ..problem import GpuInfo, Problem
from ..proposers.base import ProposalContext
from ..records import BaselineResult, Individual

SIMT_KERNEL = """/*---evo
family: {family}
archs: [sm_80, sm_90a]
params: {{TILE: {tile}}}
block: [TILE, TILE, 1]
grid: ["cdiv(N, TILE)", "cdiv(M, TILE)", 1]
smem: 0
workspace: 0
---*/
#include <cuda_fp16.h>

#define TILE {tile}

extern "C" __global__ void evo_gemm(const __half* A, const __half* B, __half* C,
                                    int M, int N, int K, float* workspace) {{
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {{
        acc += __half2float(A[row * K + k]) * __half2float(B[col * K + k]);
    }}
    C[row * N + col] = __float2half(acc);
}}
"""


def simt_kernel(tile: int = 16, family: str = "simt") -> str:
    """A naive but valid candidate following the kernel ABI."""
    return SIMT_KERNEL.format(tile=tile, family=family)


def individual(text: str, *, time_us: float = 0.0, correct: bool | None = True, compiled: bool | None = True,
               proposer: str = "mutate", parent: str = "", error: str = "", compile_log: str = "",
               registers: int = 40, smem: int = 0, idea: str = "") -> Individual:
    ks = KernelSource.parse(text)
    return Individual(hash=ks.hash, family=ks.meta.family, params=dict(ks.meta.params), source=text, parent=parent,
                      proposer=proposer, idea=idea, compiled=compiled, correct=correct, time_us=time_us,
                      error=error, registers=registers, smem=smem, compile_log=compile_log)


def gpu(name: str = "NVIDIA H100 80GB HBM3") -> GpuInfo:
    return GpuInfo(name=name, arch="sm_90a", cc=(9, 0), sm_count=132, l2_bytes=50 << 20,
                   smem_per_block_optin=232448, driver="580.00", cuda_runtime="13.0",
                   extra={"peak_tflops_fp16": 989.0, "mem_bw_gbs": 3350.0})


def context(population: list[Individual], *, problem: Problem | None = None, seed: int = 0,
            failures: list[Individual] | None = None, baselines: list[BaselineResult] | None = None) -> ProposalContext:
    return ProposalContext(
        problem=problem or Problem(4096, 4096, 1024),
        arch="sm_90a",
        gpu=gpu(),
        families=[],
        population=sorted(population, key=lambda i: -i.fitness),
        baselines=baselines if baselines is not None else [BaselineResult("cublas", 100.0), BaselineResult("cublaslt_autotune", 95.0)],
        rng=random.Random(seed),
        failures=failures or [],
    )
