#!/usr/bin/env python3
"""Standalone smoke test + timing for the wgmma_skinny_sm90 family (run on an H100/H200 machine).

    PYTHONUNBUFFERED=1 python3 bench/skinny_smoke.py [--instances a,b] [--reps 50]

1. renders every instance in INSTANCES and compiles it with nvcc (-O3 -DNDEBUG, sm_90a) to a cubin,
   rejecting spills, stack frames, C7510 (serialized wgmma);
2. per instance, in a child process (a hung kernel cannot stop the rest):
   * correctness on CHECK_SHAPES (off-tile M, N, K; empty K splits) and on its timed shapes:
     C poisoned with NaN inside a guard band of sentinel values, fresh random-normal inputs,
     compared with an fp32 reference (relative Frobenius error < 1e-2, no NaN), guard band
     untouched (no writes outside C), split-K counters back at zero, a second launch bitwise
     identical (deterministic reduce);
   * timing on its timed shapes: CUDA events around one launch, L2 flushed (4 x L2 bytes
     written) and a 20 us spin kernel queued before every call (launch queued ahead, host
     overhead outside the window), interleaved with cupy.matmul (cuBLAS) on the same inputs;
     median of --reps calls;
3. prints a compact table: shape, instance, us, TFLOP/s, cuBLAS us, speedup, % of HBM floor.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo.families import Family  # noqa: E402
from evo.kernel import KernelSource  # noqa: E402
from evo.problem import Problem  # noqa: E402

NVCC_FLAGS = ["--cubin", "-O3", "-std=c++17", "-DNDEBUG", "-Xptxas", "-v", "-gencode=arch=compute_90a,code=sm_90a"]
FAMILY = "wgmma_skinny_sm90"

T1, T2, T3, T4 = "128x128x16384", "64x4096x4096", "256x1024x16384", "128x12288x4096"
TARGETS = [T1, T2, T3, T4]
CHECK_SHAPES = ["100x200x1000", "77x1000x4096", "130x260x16392", "64x64x64", "3x40x72"]

# name -> (params, timed shapes)
INSTANCES: dict[str, tuple[dict, list[str]]] = {
    # 128x128x16384: one output tile, K over ~128 CTAs (cluster x global splits)
    "t64x128k8g8": (dict(BM=64, BN=128, CONSUMERS=1, CLK=8, G=8, STAGES=4), [T1]),
    "t64x128k8g8i": (dict(BM=64, BN=128, CONSUMERS=1, CLK=8, G=8, STAGES=4, KI=1), [T1]),
    "t64x128k4g16": (dict(BM=64, BN=128, CONSUMERS=1, CLK=4, G=16, STAGES=4), [T1]),
    "t64x128k2g32": (dict(BM=64, BN=128, CONSUMERS=1, CLK=2, G=32, STAGES=4), [T1]),
    "t64x128g64": (dict(BM=64, BN=128, CONSUMERS=1, CLK=1, G=64, STAGES=4), [T1]),
    "t64x128k8g4": (dict(BM=64, BN=128, CONSUMERS=1, CLK=8, G=4, STAGES=8), [T1]),
    "t128k8g16": (dict(BM=128, BN=128, CONSUMERS=2, CLK=8, G=16, STAGES=2), [T1]),
    "t64k8g4": (dict(BM=64, BN=64, CONSUMERS=1, CLK=8, G=4, STAGES=8, SWAP_AB=0), [T1]),
    "t64x32k8g2": (dict(BM=64, BN=32, CONSUMERS=1, CLK=8, G=2, STAGES=8), [T1]),
    # 64x4096x4096 (swap: kernel rows over N, the 64 rows of A in wgmma N)
    "s64x64k2": (dict(BM=64, BN=64, CONSUMERS=1, CLK=2, G=1, STAGES=8), [T2]),
    "s64x64k2i": (dict(BM=64, BN=64, CONSUMERS=1, CLK=2, G=1, STAGES=8, KI=1), [T2]),
    "s64x64g2": (dict(BM=64, BN=64, CONSUMERS=1, CLK=1, G=2, STAGES=8), [T2]),
    "s64x64k2st12": (dict(BM=64, BN=64, CONSUMERS=1, CLK=2, G=1, STAGES=12), [T2]),
    "s64x64k4st4": (dict(BM=64, BN=64, CONSUMERS=1, CLK=4, G=1, STAGES=4), [T2]),
    "s64x64k4st4i": (dict(BM=64, BN=64, CONSUMERS=1, CLK=4, G=1, STAGES=4, KI=1), [T2]),
    "s64x64k2st5": (dict(BM=64, BN=64, CONSUMERS=1, CLK=2, G=1, STAGES=5), [T2]),
    "s128x64k4i": (dict(BM=128, BN=64, CONSUMERS=2, CLK=4, G=1, STAGES=6, KI=1), [T2]),
    "s128x64k2g2": (dict(BM=128, BN=64, CONSUMERS=2, CLK=2, G=2, STAGES=6), [T2]),
    "s256x64k8": (dict(BM=256, BN=64, CONSUMERS=2, CLK=8, G=1, STAGES=4), [T2]),
    # 256x1024x16384 (swap: rows over N=1024, cols over M=256)
    "s128x128k8": (dict(BM=128, BN=128, CONSUMERS=2, CLK=8, G=1, STAGES=6), [T3]),
    "s128x128k8i": (dict(BM=128, BN=128, CONSUMERS=2, CLK=8, G=1, STAGES=6, KI=1), [T3]),
    "s128x128k2g4": (dict(BM=128, BN=128, CONSUMERS=2, CLK=2, G=4, STAGES=6), [T3]),
    "s128x128g8": (dict(BM=128, BN=128, CONSUMERS=2, CLK=1, G=8, STAGES=6), [T3]),
    "s128x128k4g2": (dict(BM=128, BN=128, CONSUMERS=2, CLK=4, G=2, STAGES=6), [T3]),
    "s128x256k2g8": (dict(BM=128, BN=256, CONSUMERS=2, CLK=2, G=8, STAGES=4), [T3]),
    "s128x256k8g2": (dict(BM=128, BN=256, CONSUMERS=2, CLK=8, G=2, STAGES=4), [T3]),
    "n256x128k8g2": (dict(BM=256, BN=128, CONSUMERS=2, CLK=8, G=2, STAGES=4, SWAP_AB=0), [T3]),
    "n256x128k2g8": (dict(BM=256, BN=128, CONSUMERS=2, CLK=2, G=8, STAGES=4, SWAP_AB=0), [T3]),
    # 128x12288x4096 (swap: rows over N=12288, cols over M=128)
    "s128x128": (dict(BM=128, BN=128, CONSUMERS=2, CLK=1, G=1, STAGES=6), [T4]),
    "s64x128": (dict(BM=64, BN=128, CONSUMERS=1, CLK=1, G=1, STAGES=4), [T4]),
    "s64x128st3": (dict(BM=64, BN=128, CONSUMERS=1, CLK=1, G=1, STAGES=3), [T4]),
    "s256x128k2": (dict(BM=256, BN=128, CONSUMERS=2, CLK=2, G=1, STAGES=4), [T4]),
    "s128x128k2st3": (dict(BM=128, BN=128, CONSUMERS=2, CLK=2, G=1, STAGES=3), [T4]),
    "s128x128k2st3i": (dict(BM=128, BN=128, CONSUMERS=2, CLK=2, G=1, STAGES=3, KI=1), [T4]),
    "n128x96": (dict(BM=128, BN=96, CONSUMERS=2, CLK=1, G=1, STAGES=6, SWAP_AB=0), [T4]),
    "s128x128m2": (dict(BM=128, BN=128, CONSUMERS=2, CLK=1, MC=2, G=1, STAGES=6), [T4]),
}


def shape_of(s: str) -> tuple[int, int, int]:
    m, n, k = (int(x) for x in s.lower().split("x"))
    return m, n, k


def compile_one(name: str, outdir: Path) -> dict:
    params, _ = INSTANCES[name]
    fam = Family.load(ROOT / "templates" / FAMILY)
    ks = fam.render(params)
    cu, cubin = outdir / f"{name}.cu", outdir / f"{name}.cubin"
    cu.write_text(ks.text)
    t0 = time.time()
    r = subprocess.run(["nvcc", *NVCC_FLAGS, str(cu), "-o", str(cubin)], capture_output=True, text=True)
    log = r.stdout + r.stderr
    info = {"name": name, "ok": r.returncode == 0, "secs": round(time.time() - t0, 2), "cubin": str(cubin), "cu": str(cu)}
    m = re.search(r"Used (\d+) registers", log)
    info["regs"] = int(m.group(1)) if m else None
    info["bad"] = [w for w, pat in (("spills", r"[1-9]\d* bytes spill"), ("stack", r"[1-9]\d* bytes stack frame"),
                                    ("C7510", "C7510"), ("C7508", "C7508")) if re.search(pat, log)]
    if not info["ok"]:
        info["log"] = log[-3000:]
    return info


SPIN = r"""
extern "C" __global__ void evo_spin(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < (unsigned long long)ns);
}
"""


TIMED_ONLY = False


def worker(name: str, cubin: str, cu: str, reps: int) -> None:
    import cupy as cp
    import numpy as np

    from evo.gpu.tensormap import encode_maps

    ks = KernelSource.parse(Path(cu).read_text())
    timed = INSTANCES[name][1]
    props = cp.cuda.runtime.getDeviceProperties(0)
    num_sms, l2 = props["multiProcessorCount"], props["l2CacheSize"]
    fn = cp.RawModule(path=cubin).get_function("evo_gemm")
    spin = cp.RawKernel(SPIN, "evo_spin")
    flush = cp.empty(4 * l2 // 4, dtype=cp.int32)
    GUARD = 4096

    try:  # how many clusters of this kernel fit on the GPU at once (1 CTA = 1 cluster without __cluster_dims__)
        from cuda.bindings import driver as cu
        spec0 = ks.launch(Problem(*shape_of(timed[0])), num_sms)
        fn.max_dynamic_shared_size_bytes = spec0.smem
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = spec0.grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = spec0.block
        cfg.sharedMemBytes = spec0.smem
        err, nclu = cu.cuOccupancyMaxActiveClusters(cu.CUfunction(getattr(fn, 'kernel', fn).ptr), cfg)
        p = ks.meta.params
        print("RESULT " + json.dumps({"instance": name, "shape": "maxclusters", "ok": True, "err_code": int(err),
                                      "max_clusters": int(nclu), "cluster": p["CLK"] * p["MC"], "grid": spec0.grid}), flush=True)
    except Exception as e:  # diagnostics only
        print("RESULT " + json.dumps({"instance": name, "shape": "maxclusters", "ok": True, "error": repr(e)[:200]}), flush=True)

    for s in ([] if TIMED_ONLY else CHECK_SHAPES) + timed:
        m, n, k = shape_of(s)
        prob = Problem(m, n, k)
        if not ks.accepts(prob, num_sms):
            continue
        res = {"instance": name, "shape": s}
        try:
            spec = ks.launch(prob, num_sms)
            fn.max_dynamic_shared_size_bytes = spec.smem
            rng = cp.random.default_rng(abs(hash((s, name))) % 2**31)
            A = rng.standard_normal((m, k), dtype=cp.float32).astype(cp.float16)
            B = rng.standard_normal((n, k), dtype=cp.float32).astype(cp.float16)
            buf = cp.empty(m * n + 2 * GUARD, dtype=cp.float16)
            C = buf[GUARD:GUARD + m * n].reshape(m, n)
            ws = cp.zeros(max(spec.workspace, 16) // 4 + 1, dtype=cp.float32)
            maps = encode_maps(spec.tensor_maps, A, B, C, m, n, k)
            args = (A, B, C, np.int32(m), np.int32(n), np.int32(k), ws, *maps)

            def launch():
                fn(spec.grid, spec.block, args, shared_mem=spec.smem)

            ref = A.astype(cp.float32) @ B.astype(cp.float32).T
            outs = []
            for _ in range(2):
                buf.fill(1024.0)
                C.fill(cp.nan)
                launch()
                cp.cuda.runtime.deviceSynchronize()
                outs.append(C.copy())
            c32 = outs[0].astype(cp.float32)
            res["nan"] = int(cp.isnan(c32).sum())
            res["err"] = float(cp.linalg.norm(cp.nan_to_num(c32) - ref) / max(float(cp.linalg.norm(ref)), 1e-30))
            res["det"] = bool(cp.array_equal(outs[0].view(cp.int16), outs[1].view(cp.int16)))
            res["guard"] = bool((buf[:GUARD] == 1024.0).all() and (buf[GUARD + m * n:] == 1024.0).all())
            ws_i = ws.view(cp.int32)
            res["counters0"] = True
            if spec.workspace:
                p = ks.meta.params
                rows_k, cols_k = (n, m) if p["SWAP_AB"] else (m, n)
                tiles = p["MC"] * -(-(-(-rows_k // p["BM"])) // p["MC"]) * -(-cols_k // p["BN"])
                res["counters0"] = bool((ws_i[:tiles * p["CLK"]] == 0).all())
            res["ok"] = res["nan"] == 0 and res["err"] < 1e-2 and res["det"] and res["guard"] and res["counters0"]
            res["grid"], res["block"], res["smem"], res["ws"] = spec.grid, spec.block, spec.smem, spec.workspace
            if s in timed and reps > 0:
                Cb = cp.empty((m, n), dtype=cp.float16)
                Bt = B.T
                for _ in range(3):
                    cp.matmul(A, Bt, out=Cb)
                    launch()
                evs = [cp.cuda.Event() for _ in range(4 * reps)]
                spin_ns = np.int64(20000)
                for r in range(reps):
                    order = (0, 1) if r % 2 == 0 else (1, 0)
                    for o in order:
                        flush.fill(2 * r + o)
                        spin((1,), (1,), (spin_ns,))
                        evs[4 * r + 2 * o].record()
                        if o == 0:
                            launch()
                        else:
                            cp.matmul(A, Bt, out=Cb)
                        evs[4 * r + 2 * o + 1].record()
                cp.cuda.runtime.deviceSynchronize()
                tk = sorted(cp.cuda.get_elapsed_time(evs[4 * r], evs[4 * r + 1]) * 1e3 for r in range(reps))
                tb = sorted(cp.cuda.get_elapsed_time(evs[4 * r + 2], evs[4 * r + 3]) * 1e3 for r in range(reps))
                res["us"], res["us_p10"], res["us_p90"] = tk[reps // 2], tk[reps // 10], tk[reps * 9 // 10]
                res["cublas_us"] = tb[reps // 2]
                # the last timed output is still right
                c_last = C.astype(cp.float32)
                res["ok_after"] = bool(cp.array_equal(C.view(cp.int16), outs[0].view(cp.int16)))
                res["ok"] = res["ok"] and res["ok_after"]
                del Cb, c_last
            del A, B, C, buf, ref, outs, c32, ws
        except Exception as e:
            res["ok"] = False
            res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print("RESULT " + json.dumps(res), flush=True)
        cp.get_default_memory_pool().free_all_blocks()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", default=",".join(INSTANCES))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per instance child")
    ap.add_argument("--deadline", type=int, default=180, help="skip instances not started within this many seconds")
    ap.add_argument("--bw", type=float, default=3.0e12, help="HBM bytes/s for the floor column (H100 copy ~3.0 TB/s)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--worker", nargs=3, metavar=("NAME", "CUBIN", "CU"))
    ap.add_argument("--timed-only", action="store_true", help="worker: skip the check shapes (for ncu)")
    ap.add_argument("--compile-only", action="store_true")
    a = ap.parse_args()
    if a.worker:
        global TIMED_ONLY
        TIMED_ONLY = a.timed_only
        worker(*a.worker, a.reps)
        return 0

    names = [x for x in a.instances.split(",") if x]
    outdir = Path("/tmp/evo_skinny")
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        gpu = "?"
    print(f"GPU: {gpu}")
    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 2)) as ex:
        builds = list(ex.map(lambda nm: compile_one(nm, outdir), names))
    for b in builds:
        print(f"build {b['name']:16s} ok={b['ok']} {b['secs']}s regs={b['regs']} bad={b['bad']}")
        if not b["ok"]:
            print(b["log"])
    if a.compile_only:
        return 0
    results = []
    t_start = time.time()
    for b in builds:
        if not b["ok"] or b["bad"]:
            continue
        if time.time() - t_start > a.deadline:
            print(f"skipped {b['name']}: past the deadline")
            continue
        cmd = [sys.executable, __file__, "--worker", b["name"], b["cubin"], b["cu"], "--reps", str(a.reps)]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            out, err = p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = "TIMEOUT (hang?)"
        got = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
        bad = [r for r in got if not r.get("ok")]
        print(f"ran {b['name']} in {time.time() - t0:.1f}s: {len(got)} shapes, {len(bad)} failed"
              + ("" if not err.strip() else f"; stderr: {err.strip()[-300:]}"))
        for r in bad:
            print("  FAIL " + json.dumps(r))
        for r in got:
            if r["shape"] == "maxclusters":
                print(f"  occupancy: {r}")
        got = [r for r in got if r["shape"] != "maxclusters"]
        expected = CHECK_SHAPES + INSTANCES[b["name"]][1]
        done = {r["shape"] for r in got}
        for s in expected:
            if s not in done:
                got.append({"instance": b["name"], "shape": s, "ok": False, "error": "no result (crash/hang)"})
                print(f"  FAIL {b['name']} {s}: no result (crash/hang)")
        results.extend(got)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "skinny_smoke.json").write_text(json.dumps({"gpu": gpu, "builds": builds, "results": results}, indent=1))

    nchk = sum(1 for r in results if "us" not in r)
    nbad = sum(1 for r in results if not r.get("ok"))
    print(f"\ncorrectness: {len(results)} (instance, shape) results, {nbad} failed ({nchk} check-only)")
    print(f"{'shape':>16} {'instance':>16} {'ok':>3} {'err':>8} {'us':>7} {'p10-p90':>13} {'TFLOP/s':>7} {'cuBLAS':>7} {'speedup':>7} {'floor%':>6}")
    for s in TARGETS:
        m, n, k = shape_of(s)
        floor_us = 2.0 * (m * k + n * k + m * n) / a.bw * 1e6
        rows = sorted((r for r in results if r["shape"] == s and "us" in r), key=lambda r: r["us"])
        for r in rows:
            tf = 2.0 * m * n * k / (r["us"] * 1e-6) / 1e12
            print(f"{s:>16} {r['instance']:>16} {'Y' if r['ok'] else 'N':>3} {r['err']:8.1e} {r['us']:7.2f} "
                  f"{r['us_p10']:6.2f}-{r['us_p90']:6.2f} {tf:7.1f} {r['cublas_us']:7.2f} {r['cublas_us'] / r['us']:7.2f} "
                  f"{100 * floor_us / r['us']:5.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
