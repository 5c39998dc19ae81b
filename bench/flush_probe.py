"""What the L2 flush costs the timed call: write-flush against read-flush, on the library and on plain reads.

    python -m bench.flush_probe [--shapes shapes/bench.yaml] [--reps 40]

The evaluator flushes L2 before every timed call. A *write* pass leaves L2 full of dirty lines of the
flush buffer; the timed call's own misses evict them, so their write-back to HBM lands in its event
window. A *read* pass leaves clean lines. This probe times, in one process and interleaved, under both
modes (and without a flush): an empty kernel (the window floor), a read of 32 MiB and 64 MiB (how cold
each mode leaves L2, and what the write-back adds), and cuBLAS on every shape of the set.
"""
from __future__ import annotations

import argparse

from evo.errors import cli_entry


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.flush_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="shapes/bench.yaml")
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args(argv)

    from evo.gpu.device import gpu_info, require_gpu
    from evo.shapes import load_shapes

    require_gpu()
    import cupy

    from evo.baselines import cublas_gemm
    from evo.timing import Timer

    info = gpu_info(0)
    print(f"GPU {info.name}, driver {info.driver}, CUDA {info.cuda_runtime}, L2 {info.l2_bytes >> 20} MiB")
    empty = cupy.RawKernel('extern "C" __global__ void evo_empty() {}', "evo_empty")
    reader = Timer(info.l2_bytes, False, sms=info.sm_count)  # its read kernel
    calls = {"empty kernel": lambda: empty((1,), (32,), ())}
    for mib in (32, 64):
        buf = cupy.ones(mib << 18, dtype=cupy.int32)
        calls[f"read {mib} MiB"] = lambda buf=buf: reader.read(buf, None)
    gemm = cublas_gemm()
    for p in load_shapes(args.shapes):
        a = cupy.random.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
        b = cupy.random.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
        c = cupy.empty((p.m, p.n), dtype=cupy.float16)
        calls[f"cuBLAS {p.key}"] = lambda a=a, b=b, c=c: gemm(a, b, c)
        calls[f"read A+B {p.key}"] = lambda a=a, b=b: reader.read(a, b)

    sms = info.sm_count
    timers = {"write flush": Timer(info.l2_bytes, True, flush_mode="write", seed=1, sms=sms),
              "read flush": Timer(info.l2_bytes, True, flush_mode="read", seed=2, sms=sms),
              "no flush": Timer(info.l2_bytes, False, seed=3, sms=sms)}
    res = {}
    for mode, timer in timers.items():
        res[mode] = timer.measure(calls, args.reps)
    modes = list(timers)
    print(f"\nmedian device time of {args.reps} calls (us); contenders interleaved in shuffled order\n")
    print("| call | " + " | ".join(modes) + " | write / read |")
    print("|---|" + "---|" * (len(modes) + 1))
    for name in calls:
        t = [res[m][name].median_us for m in modes]
        print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in t) + f" | {t[0] / t[1]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
