#!/usr/bin/env python3
"""Smoke test + timing of the cutlass_sm90 family against cuBLAS / cuBLASLt (run on an H100/H200 machine).

    python -m bench.cutlass_smoke [--shapes 4096x4096x1024,512x2048x4096] [--instances default,coop256]
                                  [--jobs 16] [--reps 50] [--out DIR]

1. renders the instances below (compile-time variants), compiles them in parallel through evo.compile
   (one nvcc run per instance: host .so + cubin; the seconds per instance are printed);
2. per shape, one side-by-side run in the GPU worker (evo.gpu.session.handle_baselines): cuBLAS, cuBLASLt
   heuristic and autotuned, and every instance with each of its runtime variants (host_args: decomposition,
   splits, raster), all on inputs generated anew per call, every timed call checked, L2 flushed;
3. prints one table per shape (us, TFLOP/s, speedup against the best library) and writes cutlass_smoke.json.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo.cli import _Parser  # noqa: E402
from evo.compile import Compiler  # noqa: E402
from evo.config import load_config  # noqa: E402
from evo.errors import EvoError, cli_entry  # noqa: E402
from evo.families import load_families  # noqa: E402
from evo.problem import parse_shape  # noqa: E402
from evo.records import LIBRARIES as LIBS  # noqa: E402

SHAPES = ["4096x4096x1024", "512x2048x4096", "256x1024x8192", "64x4096x4096", "8192x8192x8192"]

PP, COOP, WS = 2, 1, 0
# name -> compile-time parameters (the rest default); runtime variants below
INSTANCES: dict[str, dict] = {
    "pp128x128c21": dict(),  # the family default: ping-pong 128x128x64, cluster 2x1, persistent, TMA store
    "pp64x256c12": dict(TILE_M=64, TILE_N=256, CLUSTER_M=1, CLUSTER_N=2),
    "pp128x64k128": dict(TILE_N=64, TILE_K=128, CLUSTER_M=1),
    "coop128x256c21": dict(SCHEDULE=COOP, TILE_N=256),
    "coop256x128c21": dict(SCHEDULE=COOP, TILE_M=256),
    "coop128x256sk": dict(SCHEDULE=COOP, TILE_N=256, SCHEDULER=1, CLUSTER_M=1),
    "coop128x128sk": dict(SCHEDULE=COOP, SCHEDULER=1, CLUSTER_M=1),
    "coop128x64swap": dict(SCHEDULE=COOP, TILE_N=64, SWAP_AB=1, SCHEDULER=1, CLUSTER_M=1),
    "coop128x64swapns": dict(SCHEDULE=COOP, TILE_N=64, SWAP_AB=1, SCHEDULER=1, CLUSTER_M=1, EPI=0),
    "coop128x32swap": dict(SCHEDULE=COOP, TILE_N=32, SWAP_AB=1, SCHEDULER=1, CLUSTER_M=1),
    "coop128x64swapk128": dict(SCHEDULE=COOP, TILE_N=64, TILE_K=128, SWAP_AB=1, SCHEDULER=1, CLUSTER_M=1),
    "ws128x128": dict(SCHEDULE=WS, CLUSTER_M=1),
}
# runtime variants (host_args) tried for a stream-K instance; persistent ones run with their defaults
STREAMK_VARIANTS = {"dp": dict(DECOMP=1), "sk": dict(DECOMP=2), "split2": dict(SPLITS=2), "split4": dict(SPLITS=4),
                    "split8": dict(SPLITS=8)}
RASTER_VARIANTS = {"rN": dict(RASTER=2), "sw4": dict(SWIZZLE=4)}


def variants(name: str, params: dict) -> dict[str, dict]:
    out = {name: params}
    extra = STREAMK_VARIANTS if params.get("SCHEDULER") == 1 else RASTER_VARIANTS
    for suffix, v in extra.items():
        out[f"{name}.{suffix}"] = {**params, **v}
    return out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.cutlass_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--instances", default=",".join(INSTANCES))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--cache", default=None, help="nvcc cubin cache (default: the config's compile.cache_dir)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    names = [n for n in args.instances.split(",") if n]
    unknown = [n for n in names if n not in INSTANCES]
    if unknown:
        raise EvoError(f"unknown instance {', '.join(unknown)}; known: {', '.join(INSTANCES)}")
    shapes = [parse_shape(s) for s in args.shapes.split(",") if s]
    fam = load_families(names=["cutlass_sm90"])[0]
    cfg = load_config(overrides={"compile": {"cache_dir": args.cache, "timeout_s": 900, "memory_mb": 0},
                                 "timing": {"reps": args.reps}})
    comp = Compiler.from_config(cfg.compile)

    # 1. compile (instances differing only in runtime arguments share one nvcc run)
    kernels: dict[str, tuple] = {}
    for n in names:
        for vname, params in variants(n, INSTANCES[n]).items():
            kernels[vname] = (params, fam.render(params))
    distinct = {ks.code_hash: ks for _, ks in kernels.values()}
    print(f"compiling {len(distinct)} cutlass_sm90 instances with {args.jobs} jobs ({os.cpu_count()} CPUs)", flush=True)
    t0 = time.monotonic()
    results = {r.hash: r for r in comp.compile_many([(ks, "sm_90a") for ks in distinct.values()], jobs=args.jobs)}
    wall = time.monotonic() - t0
    by_code = {ks.code_hash: results[ks.hash] for ks in distinct.values()}
    for n in names:
        r = by_code[kernels[n][1].code_hash]
        print(f"  {n:<18} {'ok' if r.ok else 'FAILED'} {r.seconds:6.1f} s  regs {r.registers:>3}"
              f"{'' if r.ok else '  ' + r.error}", flush=True)
    secs = [r.seconds for r in results.values() if not r.cached]
    print(f"compile wall {wall:.1f} s for {len(distinct)} instances"
          + (f", {sum(secs) / len(secs):.1f} s per instance" if secs else " (all cached)"), flush=True)

    # 2. time every instance side by side with the libraries, per shape
    from evo.gpu.worker import GpuWorker

    report: dict = {"compile_wall_s": wall, "compile_s": {n: by_code[kernels[n][1].code_hash].seconds for n in names},
                    "shapes": {}}
    with GpuWorker(cfg) as w:
        print(f"GPU: {w.info.name}", flush=True)
        for p in shapes:
            extra = {}
            for vname, (params, ks) in kernels.items():
                r = by_code[ks.code_hash]
                if r.ok and ks.accepts(p):
                    extra[vname] = (ks.text, r.cubin_path)
            t1 = time.monotonic()
            try:
                out = w.call("baselines", timeout_s=600, problem=p, extra=extra, reps=args.reps)
            except Exception as e:  # noqa: BLE001  a crashed kernel: report the shape, go on
                print(f"\n{p.key}: FAILED {type(e).__name__}: {e}", flush=True)
                report["shapes"][p.key] = {"error": str(e)}
                continue
            res = out["results"]
            libs = {k: v.time_us for k, v in res.items() if k in LIBS}
            best_lib = min(libs.values())
            print(f"\n{p.key}  ({time.monotonic() - t1:.0f} s)  best library {best_lib:.2f} us "
                  f"({min(libs, key=libs.get)})", flush=True)
            print(f"  {'kernel':<26} {'us':>9} {'TFLOP/s':>8} {'vs best lib':>11}  note")
            rows = sorted(res.values(), key=lambda b: (b.detail.startswith("WRONG"), b.time_us))
            for b in rows:
                print(f"  {b.library:<26} {b.time_us:9.2f} {p.tflops(b.time_us):8.1f} {best_lib / b.time_us:10.3f}x  "
                      f"{b.detail[:80]}")
            report["shapes"][p.key] = {b.library: {"us": b.time_us, "spread": b.spread, "note": b.detail} for b in rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cutlass_smoke.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
