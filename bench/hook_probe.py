"""What the evaluator's fresh-input hooks cost the timed call: one kernel timed with and without them, side by side.

    python -m bench.hook_probe --shape 128x12288x256 [--family wgmma_sm90 '{"BM": 128, "BN": 96, ...}'] [--reps 40]

Before every timed call of an evo kernel the evaluator (evo.fresh.FreshInputs) writes new A and B on the device,
poisons C with NaN and computes the expected checksum; after it, it checks C. Those hooks run outside the event
window (before the L2 flush, after the stop event), but what they leave behind (dirty lines, DRAM state) may not
be. The libraries are timed on static buffers. This probe times, in one process and interleaved (evo.timing.Timer,
read flush), cuBLAS and optionally one instance of a family under: no hooks (static buffers), the full hooks,
and each half of `before` alone (A and B refilled; C poisoned), so that a difference is attributed to a hook. On an
H100 the hooks moved no call's time (docs/evaluator.md, "The libraries' side").
"""
from __future__ import annotations

import argparse
import itertools
import json

from evo.errors import cli_entry


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hook_probe", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", required=True, help="MxNxK (repeatable)")
    ap.add_argument("--family", help="a family whose instance is timed beside cuBLAS")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("params", nargs="?", help="the instance's JSON parameters (with --family)")
    args = ap.parse_args(argv)

    from evo.gpu.device import gpu_info, require_gpu
    from evo.problem import parse_shape

    problems = [parse_shape(s) for s in args.shape]  # bad input is refused before the GPU is looked for
    if args.params and not args.family:
        ap.error("instance parameters need --family")
    require_gpu()
    import cupy

    from evo.baselines import cublas_gemm
    from evo.check import random_inputs
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.families import load_families
    from evo.fresh import FreshInputs, fill
    from evo.gpu.launch import LoadedKernel
    from evo.timing import Contender, Timer

    cfg = load_config()
    info = gpu_info(0)
    print(f"GPU {info.name}, driver {info.driver}, CUDA {info.cuda_runtime}")
    gemm = cublas_gemm()
    kernel_source = None
    if args.family:
        (fam,) = load_families(names=[args.family])
        given = json.loads(args.params or "{}")
        fam.admit(given)  # a trial value outside the declared space, as bench.template_ab allows
        kernel_source = fam.render(fam.complete(given))
        r = Compiler.from_config(cfg.compile).compile(kernel_source, info.arch)
        if not r.ok:
            raise SystemExit(f"error: the instance does not compile: {r.error.splitlines()[0] if r.error else ''}")
        cubin = r.cubin_path
    timer = Timer(info.l2_bytes, True, flush_mode="read", seed=1, sms=info.sm_count)
    warmup = 3
    for p in problems:
        runners = {"cuBLAS": gemm}
        if kernel_source is not None:
            runners[args.family] = LoadedKernel(kernel_source, cubin, p, info.sm_count, info.smem_per_block_optin)
        a, b = random_inputs(p, cupy.random.RandomState(7))
        c = cupy.empty((p.m, p.n), dtype=cupy.float16)
        calls, fresh = {}, []
        for name, run in runners.items():
            calls[f"{name}, no hooks"] = lambda run=run, a=a, b=b, c=c: run(a, b, c)
            for variant in ("all hooks", "A, B refilled", "C poisoned"):
                rot = FreshInputs(p, cfg.check, 11 + len(fresh), warmup, args.reps, frozenset(), info.sm_count)
                fresh.append((f"{name}, {variant}", rot))
                if variant == "all hooks":
                    before, after = rot.before, rot.after
                elif variant == "A, B refilled":
                    def before(rot=rot, seeds=itertools.count(1)):  # new values every call, as the evaluator's
                        fill(rot.a.arr, next(seeds), rot.sms)
                        fill(rot.b.arr, next(seeds), rot.sms)
                    after = None
                else:  # A and B filled once: left as allocated (zeros) the tensor cores draw less power, and the
                    # call ran 6-10 % faster on an H100 for that reason alone
                    fill(rot.a.arr, 1, rot.sms)
                    fill(rot.b.arr, 2, rot.sms)

                    def before(rot=rot):
                        rot.c.arr.fill(cupy.nan)
                    after = None
                calls[f"{name}, {variant}"] = Contender(run=lambda run=run, rot=rot: run(*rot.args()),
                                                        before=before, after=after)
        res = timer.measure(calls, args.reps, warmup)
        for name, rot in fresh:
            if name.endswith("all hooks"):
                why = rot.verify(name)
                if why:
                    print(f"  {why}")
        print(f"\n{p.key}: median device time of {args.reps} L2-flushed calls (us), interleaved\n")
        print("| call | median us | spread |")
        print("|---|---|---|")
        for name, t in res.items():
            print(f"| {name} | {t.median_us:.2f} | {t.spread:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
