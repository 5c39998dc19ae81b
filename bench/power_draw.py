"""Speed and power under sustained load: each contender runs back to back alone for a few seconds while nvidia-smi
samples the GPU's clock and power.

    python -m bench.power_draw --shape 16384x16384x4096 [--shape ...] [--table kernels_out/NVIDIA_H200]
        [--seconds 2] [--rounds 2] [--rest 1] [--family wgmma_sm90 --instance '{"BM": 128, ...}' ...]

For the engineer asking why a large shape's ratio moves between harnesses. At a few milliseconds a call the board
runs into its power cap and the driver lowers the SM clock; a kernel that spends more energy per FLOP then loses
more speed than one that spends less, and a timing whose calls sit between lighter work (fresh inputs, checks) sees
less of it than a sustained loop does (16384^2 x 4096 on an H200: 0.966x the autotune in bench.compare, 0.995x in
the worker's timing a minute later; docs/perf-hopper.md Run 63). The contenders are the table's evo kernel for the
shape (checked against an fp32 reference first), cuBLAS, and cuBLASLt's heuristic and autotuned algorithms (chosen
as bench.compare chooses them), on random-normal inputs; `--family F --instance JSON` (repeatable) adds instances of
one family rendered from templates/ as bench.template_ab renders them, each checked the same way, so that kernels
can be compared at the cap, where the judge's largest shapes run (docs/perf-hopper.md Run 66). Each round runs every
contender once, in a fresh random order, `--seconds` of calls queued in batches of ~50 ms with `--rest` idle seconds
before each; the table gives per contender the medians over rounds of: µs per call, the SM clock and the board's
power nvidia-smi read (every 50 ms), the energy of one call (power x time), the SM cycles of one call (time x
clock), the speed against the fastest library under the same load, and the ratio per cycle against the library of
fewest cycles: what a harness that interleaves the contenders, so that they share one clock, would see. At the cap
the board holds its power, so a call's time follows its energy: a kernel that takes more cycles but less power per
cycle can be the faster one under sustained load (16384^2 x 4096 on an H200: evo 1.007x the autotune back to back,
0.967x per cycle; docs/perf-hopper.md Run 64).
"""
from __future__ import annotations

import argparse
import random
import time

from evo.errors import EvoError, cli_entry
from evo.records import LIBRARIES
from evo.sustained import Sustained, per_contender, windows


def summarize_rounds(windows: list[Sustained]) -> list[dict]:
    """Per contender, the medians over its rounds (evo.sustained.per_contender); speed against the fastest library
    (by median µs per call), and cycles per call against the library of fewest (the fastest at one shared clock)."""
    rows = [{"contender": r.contender, "rounds": r.rounds, "us": r.us, "sm_mhz": r.sm_mhz, "power_w": r.power_w,
             "mj": r.mj, "kcycles": r.kcycles} for r in per_contender(windows)]
    libs = [r for r in rows if r["contender"] in LIBRARIES]
    best = min(libs, key=lambda r: r["us"]) if libs else None
    # at one shared clock (an interleaved harness at the cap) the fastest library is the one of fewest cycles
    counted = [r for r in libs if r["kcycles"] > 0]
    fewest = min(r["kcycles"] for r in counted) if counted else 0.0
    for r in rows:
        r["vs_best_lib"] = best["us"] / r["us"] if best and r["us"] > 0 else 0.0
        r["vs_best_lib_per_cycle"] = fewest / r["kcycles"] if fewest and r["kcycles"] > 0 else 0.0
    return sorted(rows, key=lambda r: r["us"])


def render(shape: str, rows: list[dict], flops: float) -> str:
    """One shape's markdown table, fastest first."""
    out = [f"\n### {shape}\n", "| contender | µs per call | TFLOP/s | SM clock MHz | power W | mJ per call | k SM cycles per call "
           "| vs best library | vs best library per cycle |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def num(x: float, fmt: str) -> str:
            return format(x, fmt) if x >= 0 else "-"
        out.append(f"| {r['contender']} | {r['us']:.2f} | {flops / (r['us'] * 1e-6) / 1e12:.1f} | {num(r['sm_mhz'], '.0f')} | "
                   f"{num(r['power_w'], '.0f')} | {num(r['mj'], '.2f')} | {num(r['kcycles'], '.1f')} | "
                   f"{r['vs_best_lib']:.3f} | {num(r['vs_best_lib_per_cycle'] if r['vs_best_lib_per_cycle'] > 0 else -1.0, '.3f')} |")
    return "\n".join(out) + "\n"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.power_draw", description=__doc__.split("\n")[0])
    ap.add_argument("--shape", action="append", required=True, help="MxNxK (repeatable)")
    ap.add_argument("--table", default="", help="the kernel table whose evo kernel runs (default kernels_out/<GPU>)")
    ap.add_argument("--seconds", type=float, default=2.0, help="seconds of back-to-back calls per contender and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rest", type=float, default=1.0, help="idle seconds before each contender's window")
    ap.add_argument("--family", default="", help="the family of --instance")
    ap.add_argument("--instance", action="append", default=[],
                    help="a JSON object of --family's parameters: one more contender, rendered from templates/ (repeatable)")
    ap.add_argument("--config")
    args = ap.parse_args(argv)
    if not (0 < args.seconds <= 60 and 1 <= args.rounds <= 10 and 0 <= args.rest <= 60):
        raise EvoError("--seconds must be in (0, 60], --rounds 1 to 10, --rest 0 to 60")
    if args.instance and not args.family:
        raise EvoError("--instance needs --family (the family whose parameters it sets)")

    from bench.template_ab import parse_instances, plan as render_instances
    from evo.problem import parse_shape

    problems = [parse_shape(s) for s in args.shape]  # a malformed shape is one line before the GPU is touched
    instances = parse_instances(args.instance)  # so is an instance that is not JSON, or a family not in templates/
    rendered = {p.key: render_instances(args.family, None, instances, [p.key]) if instances else [] for p in problems}
    from evo.gpu.device import gpu_info

    info = gpu_info()
    import cupy

    from bench.compare import checked_kernel, precompile, table_kernels
    from evo.baselines import LtPlan, select_across
    from evo.check import random_inputs
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.session import Session
    from evo.gpu.state_sampler import reasons_field, sample_states
    from evo.kernel import KernelSource

    cfg = load_config(args.config)
    published = table_kernels(args.table or f"kernels_out/{info.key}")
    session, compiler = Session(cfg), Compiler.from_config(cfg.compile)
    extra = "".join([f" --family {args.family}"] + [f" --instance '{x}'" for x in args.instance]) if instances else ""
    bus, field = str(info.extra.get("pci_bus_id", "")), reasons_field()
    if field is None:
        print("nvidia-smi gave no reading here: speeds only, no clock or power")
    print(f"# Sustained load on {info.name} (driver {info.driver}, CUDA {info.cuda_runtime})\n\n"
          f"Command: `python -m bench.power_draw {' '.join('--shape ' + s for s in args.shape)}"
          f"{' --table ' + args.table if args.table else ''} --seconds {args.seconds:g} --rounds {args.rounds} "
          f"--rest {args.rest:g}{extra}`", flush=True)
    kernels = {p.key: ([("evo", KernelSource.parse(published[p.key]["source"]))] if p.key in published else [])
               + [(f"{args.family} {label.removeprefix('new ')}", ks) for label, ks in rendered[p.key]]
               for p in problems}  # per shape: (contender, source)
    built = precompile(compiler, [ks for pairs in kernels.values() for _, ks in pairs], info.arch)
    rng = random.Random(0)
    sync = cupy.cuda.get_current_stream().synchronize
    for p in problems:
        a, b = random_inputs(p, cupy.random.RandomState(1))
        c = cupy.empty((p.m, p.n), dtype=cupy.float16)
        plan = LtPlan(a, b, cfg.baselines)
        select_across([plan], session.timer, 30)
        calls = {"cublas": lambda: session.cublas(a, b, c), "cublaslt_heuristic": plan.call(plan.heuristic),
                 "cublaslt_autotune": plan.call(plan.tuned)}
        if p.key not in published:
            print(f"{p.key}: no evo kernel in the table; libraries only")
        for name, ks in kernels[p.key]:
            what = "the table's kernel" if name == "evo" else name
            r = built[ks.hash]
            if not r.ok:
                raise EvoError(f"{what} for {p.key} does not compile here: {r.error}")
            k, (c_k,), why = checked_kernel(ks, r.cubin_path, p, info, [(a, b)], cfg.check)
            if why:
                raise EvoError(f"{what} for {p.key} is wrong here: {why}")
            calls[name] = lambda k=k, c_k=c_k: k(a, b, c_k)
        def told(rnd, w, s):
            print(f"  round {rnd + 1} {w.contender:>18}: {w.us_per_call:9.2f} us per call over {w.calls} calls"
                  + (f"; {s.describe()}" if s else ""), flush=True)

        got = windows(calls, args.seconds, args.rounds, args.rest, sync, rng, lambda: sample_states(bus, field),
                      time.sleep, time.perf_counter, told)
        plan.close()
        print(render(p.key, summarize_rounds(got), 2.0 * p.m * p.n * p.k), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
