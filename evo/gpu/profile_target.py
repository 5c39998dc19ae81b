"""The process Nsight Compute profiles (evo.profile): one launch of a candidate, or of the library, on one shape.

    python -m evo.gpu.profile_target --shape 4096x4096x1024 --source k.cu --cubin k.cubin
    python -m evo.gpu.profile_target --shape 4096x4096x1024 --library cublas
    python -m evo.gpu.profile_target --shape 4096x4096x1024 --library cublaslt_autotune

Inputs are random normal fp16; the kernel runs twice unprofiled (module load, lazy loading, tensor-map
encoding, cuBLAS heuristics), then once between cudaProfilerStart and cudaProfilerStop, which is the only
launch ``ncu --profile-from-start off`` measures. cuBLASLt: the heuristic's first algorithm, or nvmath's autotune
winner (chosen before the profiled launch, as the baselines choose it). Exit 0 when the launch completed, 2 (one
line) otherwise.
"""
from __future__ import annotations

import argparse
import sys

from ..cli import _Parser

LIBRARIES = ("cublas", "cublaslt_heuristic", "cublaslt_autotune")  # what --library can profile


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m evo.gpu.profile_target")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--source")
    ap.add_argument("--cubin")
    ap.add_argument("--library", choices=LIBRARIES)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    if args.library is None and not (args.source and args.cubin):
        ap.error("give --source and --cubin, or --library cublas")
    try:
        return _run(args)
    except Exception as e:  # noqa: BLE001 - one line for the profiler's log
        print(f"error: profile target: {type(e).__name__}: {' '.join(str(e).split())[:300]}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import cupy

    rt = cupy.cuda.runtime
    start = getattr(rt, "profilerStart", None) or __import__("cupy.cuda.profiler", fromlist=["start"]).start
    stop = getattr(rt, "profilerStop", None) or __import__("cupy.cuda.profiler", fromlist=["stop"]).stop

    from ..check import random_inputs
    from ..kernel import KernelSource
    from ..problem import parse_shape
    from .device import gpu_info

    problem = parse_shape(args.shape)
    rs = cupy.random.RandomState(1)
    a, b = random_inputs(problem, rs)
    c = cupy.empty((problem.m, problem.n), dtype=cupy.float16)
    if args.library == "cublas":
        from ..baselines import cublas_gemm

        call = cublas_gemm()
        run = lambda: call(a, b, c)  # noqa: E731
    elif args.library:
        from ..ltgemm import LtGemm

        lt = LtGemm(problem.m, problem.n, problem.k)
        call = lt.bind(lt.autotune() if args.library == "cublaslt_autotune" else lt.heuristic)
        run = lambda: call(a, b, c)  # noqa: E731
    else:
        from .host_launch import load_kernel  # the launcher the candidate's ABI asks for, as the worker loads it

        info = gpu_info(0)
        with open(args.source) as f:
            ks = KernelSource.parse(f.read())
        kernel = load_kernel(ks, args.cubin, problem, info.sm_count, info.smem_per_block_optin)
        run = lambda: kernel(a, b, c)  # noqa: E731
    for _ in range(max(0, args.warmup)):
        run()
    rt.deviceSynchronize()
    start()  # cudaProfilerStart: ncu --profile-from-start off measures only what follows
    run()
    rt.deviceSynchronize()
    stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
