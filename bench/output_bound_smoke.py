#!/usr/bin/env python3
"""Output-bound GEMMs (K <= 256, large M x N): wgmma_sm90's ordinary epilogue (EPI=0) against its TMA-store
epilogue (EPI=1, 2), side by side with cuBLAS / cuBLASLt (run on an H100/H200 machine, < 3 min).

    python3 -m bench.output_bound_smoke [--shapes a,b] [--instances label,label] [--deadline 200] [--out DIR]

1. renders the INSTANCES below (wgmma_sm90; labels say tile, ping-pong or cooperative, stages, EPI) and compiles
   them all at once with the search's compiler (same flags and gates) on every core;
2. for every shape (CHECK_ONLY first: off-tile M and N, boxes past the edge of C; they are not timed): checks each
   instance with the search's evaluator (GPU worker `evaluate`: fresh inputs, NaN-poisoned C inside sentinel guard
   bands, fp32 reference, exact tests); an instance that crashes or hangs (--eval-timeout) is dropped;
3. times the correct instances and the libraries in ONE interleaved measurement (worker `baselines` with the
   instances as extra kernels: L2 flushed, CUDA events, median; every timed call verified);
4. prints one row per (shape, instance) and a summary per shape (best library, best EPI=0, best EPI>0);
   writes $OUT/output_bound_smoke.json;
5. --profile SHAPE: Nsight Compute metrics (evo.profile: DRAM / L2 throughput, tensor pipe, stalls) of the best
   EPI>0 and best EPI=0 instance on that timed shape, while time is left before --profile-deadline.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo.cli import _Parser  # noqa: E402
from evo.errors import EvoError, cli_entry  # noqa: E402
from evo.families import load_families  # noqa: E402
from evo.problem import parse_shape  # noqa: E402

FAMILY = "wgmma_sm90"
# label -> params (family defaults for the rest: persistent, GROUP 8, no split, no swap)
INSTANCES: dict[str, dict] = {
    "pp128x128 s6 epi0": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6},              # today's start for these shapes
    "co128x256 s4 epi0": {"BM": 128, "BN": 256, "STAGES": 4},                             # the family default
    "pp128x128 s4 epi2": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2},
    "pp128x128 s5 epi1": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 5, "EPI": 1},
    "pp128x128 s6 epi1": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1},   # K-short large outputs (K 512-1024)
    "pp128x128 s6 epi1 ring": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "RING_SPLIT": 2},   # B's stages, then A's
    "pp64x256 s4 epi1": {"BM": 64, "BN": 256, "PINGPONG": 1, "STAGES": 4, "EPI": 1},
    "co256x128 s3 epi2": {"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2},
    "co256x128 s4 epi1": {"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1},
    "co128x256 s3 epi1": {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1},
    "pp128x128 s4 epi2 hint": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_HINT": 1},
    "co256x128 s4 epi1 hint": {"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1, "EPI_HINT": 1},
    "co256x128 s4 epi1 cl2": {"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1, "CLUSTER": 2},   # A multicast in CTA pairs
    "pp128x128 s4 epi2 cl2": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "CLUSTER": 2},
    "co256x128 s4 epi0 cl2": {"BM": 256, "BN": 128, "STAGES": 4, "CLUSTER": 2},
    "co256x128 s3 epi2 hint": {"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2, "EPI_HINT": 1},
    "co128x256 s3 epi1 hint": {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1},
    "co128x64 s4 epi2": {"BM": 128, "BN": 64, "STAGES": 4, "EPI": 2},                      # K = 256 mid shapes
    "co128x96 s6 epi1 g4 np": {"BM": 128, "BN": 96, "STAGES": 6, "EPI": 1, "GROUP": 4, "PERSISTENT": 0},   # 64 x 32 boxes
    "pp128x176 s4 epi1 g16": {"BM": 128, "BN": 176, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 16},   # 64 x 16 boxes
    "pp128x160 s4 epi1": {"BM": 128, "BN": 160, "PINGPONG": 1, "STAGES": 4, "EPI": 1},
    "pp128x192 s4 epi1 g16": {"BM": 128, "BN": 192, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 16},   # 192 accumulators
    "co256x192 s3 epi1 hint": {"BM": 256, "BN": 192, "STAGES": 3, "EPI": 1, "EPI_HINT": 1},   # each consumer 128 x 192
    "co128x128 one consumer s4 epi1 np": {"BM": 128, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 4, "EPI": 1},
    "co128x128 one consumer s4 epi1 np early": {"BM": 128, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 4, "EPI": 1,
                                                "EARLY_STORE": 2},   # its slices stored as their wgmmas end
    "pp128x64 s8 epi1": {"BM": 128, "BN": 64, "PINGPONG": 1, "STAGES": 8, "EPI": 1},   # K <= 256 skinny / mid outputs
    "co64x128 one consumer s8 epi1 np": {"BM": 64, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 8, "EPI": 1},   # mid outputs, long K
    "co128x112 s6 epi1 np": {"BM": 128, "BN": 112, "STAGES": 6, "PERSISTENT": 0, "EPI": 1},   # one wave of 128-row tiles, long K
    # raster group around the best two (untimed before the final measurement)
    "co128x256 s3 epi1 hint g16": {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1, "GROUP": 16},
    "co128x256 s3 epi1 hint g4": {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1, "GROUP": 4},
    "co256x128 s3 epi2 hint g16": {"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2, "EPI_HINT": 1, "GROUP": 16},
    "co256x128 s3 epi2 g16": {"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2, "GROUP": 16},   # the table's 2048x12288x128
    "panel256x128 s5 epi2 hint": {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1},   # K = 128 only (the panel)
    "panel128x256 s4 epi1 hint": {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1},   # K = 128 only
    # each 64-row slice stored as soon as its own wgmmas end (EARLY_STORE; the family's starts)
    "pp128x128 s4 epi2 hint early": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_HINT": 1, "EARLY_STORE": 2},
    "panel256x128 s5 epi2 hint early": {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1,
                                        "EARLY_STORE": 2},   # K = 128 only
    # C in 64 x 128 boxes (EPI_WIDE; N % 64 == 0 only, so the off-tile check shapes are skipped for them)
    "panel128x256 s4 epi1 hint wide": {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1,
                                       "EPI_WIDE": 1},   # K = 128 only
    "panel256x128 s5 epi2 hint early wide": {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1,
                                             "GROUP": 1, "EARLY_STORE": 1, "EPI_WIDE": 1},   # K = 128 only
    "panel256x128 s5 epi2 hint wide": {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1,
                                       "EPI_WIDE": 1},   # K = 128 only
    # an eighth of the units claimed at run time (DYN), so the SMs whose stores drain slower do fewer
    "panel128x256 s4 epi1 hint wide dyn1": {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1,
                                            "GROUP": 1, "EPI_WIDE": 1, "DYN": 1},   # K = 128 only
    "pp128x128 s4 epi2 hint early dyn1": {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_HINT": 1,
                                          "EARLY_STORE": 2, "DYN": 1},
    # C^T (swap-AB) stored through TMA: tall, narrow outputs, short K (a start)
    "swap pp128x96 s6 epi2": {"BM": 128, "BN": 96, "PINGPONG": 1, "SWAP_AB": 1, "STAGES": 6, "EPI": 2},
}
# what a run measures by default: the old epilogue (the family default, the old start), the family's TMA-store starts,
# the runners-up of the first H200 run, the raster variants and one CTA-pair instance (--instances all: every entry above)
DEFAULT = ["pp128x128 s6 epi0", "co128x256 s4 epi0", "co128x256 s3 epi1 hint", "co256x128 s3 epi2 hint",
           "pp128x128 s4 epi2 hint", "co256x128 s3 epi2", "pp64x256 s4 epi1", "co256x128 s4 epi1 hint",
           "co128x256 s3 epi1 hint g16", "co128x256 s3 epi1 hint g4", "co256x128 s3 epi2 hint g16",
           "co256x128 s4 epi1 cl2", "co128x96 s6 epi1 g4 np", "pp128x176 s4 epi1 g16", "pp128x160 s4 epi1",
           "pp128x192 s4 epi1 g16", "co256x192 s3 epi1 hint",
           "co128x128 one consumer s4 epi1 np", "co128x128 one consumer s4 epi1 np early", "pp128x64 s8 epi1", "co64x128 one consumer s8 epi1 np", "co128x112 s6 epi1 np", "panel256x128 s5 epi2 hint",
           "panel128x256 s4 epi1 hint", "pp128x128 s6 epi1", "pp128x128 s6 epi1 ring", "pp128x128 s4 epi2 hint early",
           "panel256x128 s5 epi2 hint early", "panel256x128 s5 epi2 hint wide", "panel256x128 s5 epi2 hint early wide",
           "panel128x256 s4 epi1 hint wide dyn1",
           "pp128x128 s4 epi2 hint early dyn1", "swap pp128x96 s6 epi2"]  # the multicast loss, with how many of its clusters fit at once
TIMED = ["16384x16384x128", "2048x12288x128", "8192x8192x128", "4096x16384x256", "4096x4096x256"]
CHECK_ONLY = ["2000x12000x128", "200x136x72"]  # off-tile M and N (TMA clips partial and whole boxes), partial K block


def plan(labels: list[str], shapes: list[str]) -> list[tuple[str, dict, object]]:
    """(label, params, KernelSource) for every requested instance; one line and exit 2 on a bad label or instance."""
    (fam,) = load_families(ROOT / "templates", names=[FAMILY])
    # CLUSTER = 2 is out of the family's search space (measured slow) but still built: the bench may time it
    fam = dataclasses.replace(fam, space={**fam.space, "CLUSTER": tuple(sorted(set(fam.space["CLUSTER"]) | {1, 2}))})
    unknown = [x for x in labels if x not in INSTANCES]
    if unknown:
        raise EvoError(f"unknown instance {', '.join(unknown)}; known: {'; '.join(INSTANCES)}")
    out = []
    for label in labels:
        p = fam.complete(INSTANCES[label])
        if not fam.valid(p):
            raise EvoError(f"instance {label} violates the family's constraints")
        out.append((label, p, fam.render(p)))
    for s in shapes:
        parse_shape(s)
    return out


def max_active_clusters(cubin: str, smem: int, threads: int, grid: int) -> str:
    """How many thread-block clusters of this kernel (compile-time cluster dims) the GPU holds at once
    (cuOccupancyMaxActiveClusters): a persistent grid of more clusters runs the rest as a second wave.
    A diagnostic: any failure comes back as text, never as an exception."""
    try:
        from cuda.bindings import driver as cu

        def ok(r):
            err, *rest = r if isinstance(r, tuple) else (r,)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise RuntimeError(getattr(err, "name", str(err)))
            return rest[0] if len(rest) == 1 else None

        ok(cu.cuInit(0))
        dev = ok(cu.cuDeviceGet(0))
        ok(cu.cuCtxSetCurrent(ok(cu.cuDevicePrimaryCtxRetain(dev))))
        mod = ok(cu.cuModuleLoad(cubin.encode()))
        try:
            fn = ok(cu.cuModuleGetFunction(mod, b"evo_gemm"))
            ok(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
            cfg = cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
            cfg.sharedMemBytes = smem
            cfg.numAttrs = 0  # the cluster size is compiled in (__cluster_dims__)
            return str(ok(cu.cuOccupancyMaxActiveClusters(fn, cfg)))
        finally:
            cu.cuModuleUnload(mod)
    except Exception as e:  # noqa: BLE001 - a diagnostic line, whatever went wrong
        return f"query failed: {type(e).__name__}: {e}"[:200]


def profile(a, items, results, summary, out: dict, t0: float) -> None:
    """ncu metrics of the best EPI>0 and EPI=0 instances on --profile's shape (evo.profile), deadline permitting."""
    from evo.profile import Profiler, describe

    row = next((r for r in summary if r[0] == a.profile), None)
    if row is None:
        print(f"profile: {a.profile} was not timed", flush=True)
        return
    prof = Profiler(timeout_s=45.0, say=lambda s: print(s, flush=True))
    by_label = {lb: ks for lb, _, ks in items}
    for _, label in (row[4], row[3]):
        if label not in by_label:
            continue
        if time.monotonic() - t0 > a.profile_deadline:
            print(f"profile {label}: skipped, past {a.profile_deadline:.0f} s", flush=True)
            continue
        ks = by_label[label]
        res = prof.profile_kernel(ks.text, results[ks.hash].cubin_path, parse_shape(a.profile))
        out.setdefault("profile", {})[label] = {"ok": res.ok, "metrics": res.metrics, "detail": res.detail}
        print(f"\nncu {label} on {a.profile} ({res.seconds:.0f} s): " + ("" if res.ok else res.detail), flush=True)
        for line in describe(res.metrics):
            print("  " + line, flush=True)
    (Path(a.out) / "output_bound_smoke.json").write_text(json.dumps(out, indent=1, default=str))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="python -m bench.output_bound_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(TIMED), help="timed shapes (checked first)")
    ap.add_argument("--check-shapes", default=",".join(CHECK_ONLY), help="shapes only checked, not timed")
    ap.add_argument("--instances", default=",".join(DEFAULT), help="comma-separated labels of INSTANCES, or all")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per contender (median)")
    ap.add_argument("--deadline", type=float, default=150.0, help="skip shapes not started after this many seconds")
    ap.add_argument("--eval-timeout", type=float, default=40.0, help="seconds one check may take (a hang costs this)")
    ap.add_argument("--profile", default="", help="a timed shape: ncu metrics of its best EPI>0 and EPI=0 instances")
    ap.add_argument("--profile-deadline", type=float, default=170.0, help="start no ncu run after this many seconds")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    ap.add_argument("--plan-only", action="store_true", help="render and list the instances; no compile, no GPU")
    a = ap.parse_args(argv)
    if a.profile and a.profile not in a.shapes.split(","):
        raise EvoError(f"--profile {a.profile}: not one of the timed shapes")
    labels = list(INSTANCES) if a.instances == "all" else [x for x in a.instances.split(",") if x]
    timed = [s for s in a.shapes.split(",") if s]
    check_only = [s for s in a.check_shapes.split(",") if s]
    items = plan(labels, timed + check_only)
    if a.plan_only:
        for label, p, ks in items:
            print(f"{label:<24} {ks.hash}  " + " ".join(f"{k}={v}" for k, v in p.items()))
        return 0

    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.worker import GpuWorker, WorkerFault

    t0 = time.monotonic()
    cfg = load_config(overrides={"compile": {"cache_dir": "/tmp/evo_ob_cache"},
                                 "paths": {"db": "/tmp/evo_ob.db", "out": "/tmp/evo_ob_out"}})
    comp = Compiler.from_config(cfg.compile)
    results = {r.hash: r for r in comp.compile_many([(ks, "sm_90a") for _, _, ks in items], 0)}
    for label, _, ks in items:
        r = results[ks.hash]
        print(f"compiled {label:<24} {'ok' if r.ok else 'FAILED ' + r.error[:150]}  {r.registers} regs, "
              f"{ks.launch(parse_shape(timed[0] if timed else '4096x4096x128'), 132).smem} B dyn smem", flush=True)
    print(f"compile: {time.monotonic() - t0:.0f} s", flush=True)

    w = GpuWorker(cfg)
    info = w.start()
    print(f"GPU: {info.name} ({info.arch}, {info.sm_count} SMs), driver {info.driver}", flush=True)
    out: dict = {"gpu": info.name, "instances": {lb: p for lb, p, _ in items}, "shapes": {}}
    summary = []
    dropped: dict[str, str] = {}  # label -> why: crashed or hung once, not tried again

    def save() -> None:  # after every shape: a run cut short keeps what it measured
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "output_bound_smoke.json").write_text(json.dumps(out, indent=1, default=str))

    try:
        for shape in check_only + timed:
            save()
            if time.monotonic() - t0 > a.deadline:
                print(f"{shape}: skipped, past the {a.deadline:.0f} s deadline", flush=True)
                continue
            prob = parse_shape(shape)
            rows: dict = {}
            for label, p, ks in items:
                r = results[ks.hash]
                if not r.ok:
                    rows[label] = {"ok": False, "error": "compile: " + r.error[:150]}
                    continue
                if not ks.accepts(prob, info.sm_count):
                    rows[label] = {"ok": False, "error": "requires rejects the shape"}
                    continue
                if label in dropped:
                    rows[label] = {"ok": False, "error": "dropped: " + dropped[label]}
                    continue
                try:
                    ev = w.call("evaluate", timeout_s=a.eval_timeout, problem=prob, source=ks.text, cubin=r.cubin_path,
                                h=ks.hash)
                    rows[label] = {"ok": ev.ok, "check_us": round(ev.time_us, 2), "error": ev.error[:200],
                                   "seconds": round(ev.seconds, 1)}
                    if ev.stage in ("crash", "timeout"):
                        dropped[label] = f"{ev.stage} on {shape}"
                except WorkerFault as e:
                    rows[label] = {"ok": False, "error": f"worker: {e}"[:200]}
                    dropped[label] = f"worker fault on {shape}"

                if not rows[label]["ok"]:
                    print(f"{shape:>16} {label:<24} FAIL {rows[label]['error']}", flush=True)
            good = [lb for lb, _, _ in items if rows[lb].get("ok")]
            print(f"{shape:>16} correct {len(good)}/{len(items)} ({time.monotonic() - t0:.0f} s)", flush=True)
            entry = {"instances": rows}
            out["shapes"][shape] = entry
            if shape in check_only or not good:
                continue
            src = {lb: (ks.text, results[ks.hash].cubin_path) for lb, _, ks in items if lb in good}
            try:
                timed_res = w.call("baselines", timeout_s=600, problem=prob, extra=src, reps=a.reps)["results"]
            except WorkerFault as e:
                print(f"{shape:>16} timing failed: {e}", flush=True)
                continue
            libs = {k: v.time_us for k, v in timed_res.items() if k not in src and v.time_us > 0}
            best_lib = min(libs, key=libs.get) if libs else ""
            entry["libraries"] = libs
            print(f"\n{shape}: median of {a.reps} L2-flushed calls, libraries and instances interleaved")
            print(f"| contender | us | TFLOP/s | best library / it |")
            print("|---|---|---|---|")
            for name, b in sorted(timed_res.items(), key=lambda kv: kv[1].time_us):
                sp = f"{libs[best_lib] / b.time_us:.3f}x" if best_lib and b.time_us > 0 else "-"
                wrong = f" {b.detail}" if b.detail.startswith("WRONG") else ""
                print(f"| {name} | {b.time_us:.2f} | {prob.tflops(b.time_us):.0f} | {sp}{wrong} |")
                if name in rows:
                    rows[name].update(us=round(b.time_us, 2), spread=round(b.spread, 4), wrong=bool(wrong))
            print(flush=True)

            def best(epi_pred):
                c = [(rows[lb]["us"], lb) for lb, p, _ in items
                     if epi_pred(p["EPI"]) and rows[lb].get("us") and not rows[lb].get("wrong")]
                return min(c) if c else (0.0, "-")
            e0, e1 = best(lambda e: e == 0), best(lambda e: e > 0)
            summary.append((shape, best_lib, libs.get(best_lib, 0.0), e0, e1))
    finally:
        w.stop()
        save()
    for label, p, ks in items:  # CLUSTER > 1: are all of the persistent grid's clusters resident at once?
        if p.get("CLUSTER", 1) > 1 and results[ks.hash].ok:
            spec = ks.launch(parse_shape(timed[0] if timed else "16384x16384x128"), info.sm_count)
            n = max_active_clusters(results[ks.hash].cubin_path, spec.smem, spec.block[0], spec.grid[0])
            out.setdefault("max_active_clusters", {})[label] = n
            print(f"{label}: at most {n} clusters of {p['CLUSTER']} resident; its grid has {spec.grid[0] // p['CLUSTER']}",
                  flush=True)
    save()
    if a.profile:
        profile(a, items, results, summary, out, t0)
    print("| shape | best library | us | best EPI=0 | us | x lib | best EPI>0 | us | x lib |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, lib, lib_us, (u0, l0), (u1, l1) in summary:
        x0 = f"{lib_us / u0:.3f}" if u0 else "-"
        x1 = f"{lib_us / u1:.3f}" if u1 else "-"
        print(f"| {shape} | {lib} | {lib_us:.2f} | {l0} | {u0:.2f} | {x0} | {l1} | {u1:.2f} | {x1} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
