"""How noisy is our timing? One kernel's repeated-measurement spread, and the ratio of two IDENTICAL kernels.

    python -m bench.noise --shape 4096x4096x1024 [--kernel FILE.cu] [--reps 100]

The same cubin is loaded twice (two files, two separately loaded modules) and the two are timed side
by side, interleaved in shuffled order with L2 flushes, exactly as the evaluator times a candidate
against cuBLAS. Their median ratio should be 1.00 within ~0.02: anything further is noise the search
would mistake for a speedup. Prints the spread of each, the ratio of medians and the spread of the
per-repetition ratios, and the same for cuBLAS timed twice.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from evo.errors import EvoError, cli_entry
from evo.problem import parse_shape


def default_kernel(arch: str):
    from evo.families import load_families

    order = ["wgmma_sm90", "mma_sm80", "simt"] if arch == "sm_90a" else ["mma_sm80", "simt"]
    fams = {f.name: f for f in load_families(arch=arch)}
    for name in order:
        if name in fams and fams[name].instances_for_ci():
            return fams[name].render(fams[name].instances_for_ci()[0])
    raise EvoError(f"no kernel family for {arch}")


def ratio_line(name: str, a: list[float], b: list[float]) -> str:
    a_, b_ = np.asarray(a), np.asarray(b)
    r = a_ / b_
    lo, hi = np.percentile(r, [5, 95])
    return (f"{name:<34} median ratio {np.median(a_) / np.median(b_):.4f}  per-rep ratio median {np.median(r):.4f} "
            f"[p5 {lo:.4f}, p95 {hi:.4f}]")


def spread_line(name: str, t) -> str:
    return (f"{name:<34} median {t.median_us:9.2f} us  min {t.min_us:9.2f}  p90 {t.p90_us:9.2f}  "
            f"spread (p90-min)/median {100 * t.spread:5.2f}%  over {t.reps} reps")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.noise", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x4096x1024")
    ap.add_argument("--kernel", help="a .cu file following the ABI (default: the first CI instance of the best family)")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args(argv)
    p = parse_shape(args.shape)
    if args.reps < 5:
        raise EvoError("--reps must be at least 5")
    from evo.gpu.device import require_gpu

    require_gpu()
    import cupy

    from evo.compile import Compiler, host_library
    from evo.config import load_config
    from evo.gpu.host_launch import load_kernel
    from evo.gpu.session import Session
    from evo.kernel import KernelSource

    cfg = load_config()
    s = Session(cfg)
    info = s.info
    if args.kernel:
        try:
            ks = KernelSource.parse(Path(args.kernel).read_text())
        except OSError as e:
            raise EvoError(f"cannot read {args.kernel}: {e.strerror}") from None
    else:
        ks = default_kernel(info.arch)
    res = Compiler.from_config(cfg.compile).compile(ks, info.arch)
    if not res.ok:
        raise EvoError(f"the kernel does not compile for {info.arch}: {res.error}")
    if not ks.accepts(p, info.sm_count):
        raise EvoError(f"the kernel ({ks.meta.family}) does not accept {p.key}")
    tmp = Path(tempfile.mkdtemp())
    second = tmp / "copy.cubin"
    shutil.copy(res.cubin_path, second)  # a second file: a second, separately loaded module
    if ks.meta.launch == "host":  # its host library travels beside it
        shutil.copy(host_library(res.cubin_path), host_library(str(second)))
    k1 = load_kernel(ks, res.cubin_path, p, info.sm_count, info.smem_per_block_optin)
    k2 = load_kernel(ks, str(second), p, info.sm_count, info.smem_per_block_optin)
    rs = cupy.random.RandomState(7)
    a = rs.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
    c1, c2, c3, c4 = (cupy.empty((p.m, p.n), dtype=cupy.float16) for _ in range(4))
    t = s.timer.measure({"kernel": lambda: k1(a, b, c1), "kernel (2nd module)": lambda: k2(a, b, c2),
                         "cublas": lambda: s.cublas(a, b, c3), "cublas (again)": lambda: s.cublas(a, b, c4)},
                        args.reps, cfg.timing.warmup)
    print(f"{p.key} on {info.name} ({info.arch}), driver {info.driver}; kernel {ks.meta.family} {ks.meta.params}; "
          f"{args.reps} L2-flushed repetitions, 4 contenders interleaved in shuffled order")
    for name in t:
        print(spread_line(name, t[name]))
    print(ratio_line("identical kernels (1st / 2nd)", t["kernel"].samples, t["kernel (2nd module)"].samples))
    print(ratio_line("cuBLAS vs itself", t["cublas"].samples, t["cublas (again)"].samples))
    r = np.median(t["kernel"].samples) / np.median(t["kernel (2nd module)"].samples)
    verdict = "within" if abs(r - 1) <= 0.02 else "OUTSIDE"
    print(f"noise: identical kernels differ by {100 * abs(r - 1):.2f}% ({verdict} the 2% a speedup must clear); "
          f"one kernel's spread {100 * t['kernel'].spread:.2f}%")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
