"""Does a GEMM's time depend on where its buffers lie? cuBLAS and the table's kernel over several input sets, in one window.

    python -m bench.placement_probe --shape 512x2048x4096 [--shape S ...] [--table kernels_out/NVIDIA_H200]
        [--sets 6] [--windows 2] [--reps 30]

Per shape: `--sets` input sets (A, B, C), each allocated after a gap of its own size, so they lie at different
addresses; cuBLAS on every set and, where the table has a kernel for the shape, that kernel on every set, all as
contenders of one interleaved, L2-flushed window (evo.timing, the search's timer). The window is repeated; then A of
every set is filled with new values and cuBLAS timed once more. A set whose time repeats across windows and across
new values while the sets differ says the address, not the GPU's state or the data, moves the time. One buffer set
per window (what the search's runoff and `bench.compare --placements 1` time on) is then one draw of that spread.
"""
from __future__ import annotations

import argparse

from evo.placements import MAX_PLACEMENTS
from evo.errors import EvoError, cli_entry


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.placement_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", required=True, help="MxNxK (repeatable)")
    ap.add_argument("--table", default="kernels_out/NVIDIA_H200", help="take evo's kernel from this table folder")
    ap.add_argument("--sets", type=int, default=6)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    if not 2 <= args.sets <= MAX_PLACEMENTS:
        raise EvoError(f"--sets must be 2 to {MAX_PLACEMENTS}, not {args.sets}")
    from evo.problem import parse_shape

    problems = [parse_shape(s) for s in args.shape]  # a malformed shape: one line before the GPU

    from evo.gpu.device import require_gpu

    require_gpu()
    import cupy

    from bench.compare import precompile, table_kernels
    from evo.placements import input_sets
    from evo.check import random_inputs
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.host_launch import load_kernel
    from evo.gpu.session import Session
    from evo.kernel import KernelSource

    cfg = load_config(None, {})
    s = Session(cfg)
    print(f"GPU {s.info.name}, driver {s.info.driver}, CUDA {s.info.cuda_runtime}")
    published = table_kernels(args.table)
    sources = {p.key: KernelSource.parse(published[p.key]["source"]) for p in problems if p.key in published}
    compiled = precompile(Compiler.from_config(cfg.compile), list(sources.values()), s.info.arch)
    for p in problems:
        sets, gaps = input_sets(p, list(range(args.sets)))
        contenders = {f"cublas{i}": (lambda a=a, b=b, c=c: s.cublas(a, b, c)) for i, (a, b, c) in enumerate(sets)}
        ks = sources.get(p.key)
        if ks is not None and compiled[ks.hash].ok:
            k = load_kernel(ks, compiled[ks.hash].cubin_path, p, s.info.sm_count, s.info.smem_per_block_optin)
            contenders.update({f"evo{i}": (lambda a=a, b=b, c=c: k(a, b, c)) for i, (a, b, c) in enumerate(sets)})
        names = sorted({n.rstrip("0123456789") for n in contenders})
        for w in range(args.windows):
            t = s.timer.measure(contenders, args.reps, 3)
            for name in names:
                print(f"{p.key} window {w} {name:>6} us per set: "
                      + " ".join(f"{t[f'{name}{i}'].median_us:.2f}" for i in range(args.sets)), flush=True)
        for i, (a, _, _) in enumerate(sets):  # same addresses, new values in A
            a[...] = random_inputs(p, cupy.random.RandomState(100 + i))[0]
        cub = {n: f for n, f in contenders.items() if n.startswith("cublas")}
        t = s.timer.measure(cub, args.reps, 3)
        print(f"{p.key} new A  cublas us per set: " + " ".join(f"{t[f'cublas{i}'].median_us:.2f}" for i in range(args.sets)),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
