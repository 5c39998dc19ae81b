"""What TMA multicast buys on this GPU, measured without a GEMM (for the next engineer: docs/perf-hopper.md).

    python -m bench.multicast_probe [--reps 30] [--kblocks 64]

Compiles bench/multicast_probe.cu with nvcc (sm_90a) and times CTAs that only stream 16 KB k blocks of 128-row
panels through a shared-memory ring (the kernel's comment says how), in three arrangements: single CTAs, CTA pairs
that each load the whole shared panel, and CTA pairs that each load half of it with .multicast::cluster. Three
regimes: each CTA (pair) re-reading its own 128 KB panel, resident in L2 (no flush between launches); 16 panels in
L2, each read by 8 CTAs at once; one 1 MB panel per CTA (pair) with the L2 flushed (DRAM). Prints, per case, the
median device time (CUDA events around each launch) and the bytes delivered into shared memory per second. If
multicast raised what the SMs receive, the multicast pairs would beat the pairs that load the whole panel. On an
H100 they did not (docs/perf-hopper.md, Run 26). What L2 is asked for is not arithmetic: a pair's requests for the
same lines are merged before L2 whether it multicasts or not (Run 27); count it with ncu
(`lts__t_requests_srcunit_tex_op_read`, `--kernel-name regex:probe`).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE_BYTES = 128 * 64 * 2
SMEM = 8 * STAGE_BYTES + 1024


def compile_probe(cubin: Path) -> subprocess.CompletedProcess:
    """nvcc the probe's kernels into ``cubin`` (sm_90a)."""
    return subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-O3", "-o", str(cubin), str(ROOT / "bench/multicast_probe.cu")],
                          capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--kblocks", type=int, default=64, help="k blocks per CTA (16 KB each)")
    args = ap.parse_args(argv)
    try:
        import cupy as cp
        import numpy as np
        from evo.gpu.tensormap import encode_tensor_map
    except ImportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver / no device
        print(f"error: no GPU ({e})", file=sys.stderr)
        return 2
    if n == 0:
        print("error: no GPU", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "probe.cubin"
        r = compile_probe(cubin)
        if r.returncode:
            print(f"error: nvcc failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}", file=sys.stderr)
            return 2
        mod = cp.RawModule(path=str(cubin))
        single, pair = mod.get_function("probe_single"), mod.get_function("probe_pair")
        for f in (single, pair):  # (loads the module while the cubin exists)
            f.max_dynamic_shared_size_bytes = SMEM
    kb = args.kblocks
    cols = kb * 64
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"{props['name'].decode()}: {props['multiProcessorCount']} SMs; {kb} k blocks of 16 KB per CTA, 8-stage ring")
    flush = cp.empty(256 << 20, dtype=cp.uint8)

    def maps(groups: int, cols: int):
        x = cp.random.standard_normal((groups * 128, cols), dtype=cp.float32).astype(cp.float16)
        full = encode_tensor_map(x.data.ptr, groups * 128, cols, 128, 64, 128)  # passed by value
        half = encode_tensor_map(x.data.ptr, groups * 128, cols, 64, 64, 128)
        return x, full, half

    def run(kind: str, ctas: int, groups: int, cold: bool, wrap: int) -> tuple[float, float]:
        x, full, half = maps(groups, wrap * 64)
        if kind == "single":
            launch = lambda: single((ctas,), (64,), (full, np.int32(kb), np.int32(groups), np.int32(wrap)), shared_mem=SMEM)
        else:
            mc = 1 if kind == "pair, multicast" else 0
            launch = lambda: pair((ctas,), (64,), (full, half, np.int32(kb), np.int32(groups), np.int32(mc), np.int32(wrap)), shared_mem=SMEM)
        launch()
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(args.reps):
            if cold:
                flush.fill(1)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            launch()
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
        del x
        t = statistics.median(times)
        return t, ctas * kb * STAGE_BYTES / (t * 1e-6) / 1e12

    w = 8  # L2-resident own panels: 8 k blocks (128 KB) per CTA or pair, re-read kblocks / 8 times
    cases = [
        ("L2, own panel per CTA / pair", "single", 128, 128, False, w),
        ("L2, own panel per CTA / pair", "pair, whole panel each", 128, 64, False, w),
        ("L2, own panel per CTA / pair", "pair, multicast", 128, 64, False, w),
        ("L2, own panel per CTA / pair", "single", 64, 64, False, w),
        ("L2, 16 panels shared by 8 CTAs each", "single", 128, 16, False, kb),
        ("L2, 16 panels shared by 8 CTAs each", "pair, whole panel each", 128, 16, False, kb),
        ("L2, 16 panels shared by 8 CTAs each", "pair, multicast", 128, 16, False, kb),
        ("DRAM, one panel per CTA / pair", "single", 128, 128, True, kb),
        ("DRAM, one panel per CTA / pair", "pair, whole panel each", 128, 64, True, kb),
        ("DRAM, one panel per CTA / pair", "pair, multicast", 128, 64, True, kb),
        ("DRAM, one panel per CTA / pair", "single", 64, 64, True, kb),
    ]
    print("| regime | CTAs | arrangement | us | delivered TB/s | per SM GB/s |")
    print("|---|---|---|---|---|---|")
    for regime, kind, ctas, groups, cold, wrap in cases:
        t, d = run(kind, ctas, groups, cold, wrap)
        print(f"| {regime} | {ctas} | {kind} | {t:.2f} | {d:.2f} | {d * 1e3 / ctas:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
