"""Bring your own kernel: check and time any .cu that follows the ABI against the libraries.

    python -m evo.evaluate FILE.cu --shape MxNxK [--shape ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

from .cli import config_from_args, parser
from .compile import Compiler
from .errors import CompileError, EvoError, cli_entry
from .gpu.worker import GpuWorker, WorkerFault
from .kernel import KernelSource
from .problem import parse_shape


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = parser("python -m evo.evaluate", "Check and time one kernel file against cuBLAS and cuBLASLt.")
    ap.add_argument("kernel", help="a .cu file following the evo kernel ABI (see README)")
    ap.add_argument("--shape", action="append", required=True, help="MxNxK; repeat for several shapes")
    ap.add_argument("--reps", type=int, default=50, help="flushed repetitions of the side-by-side timing")
    args = ap.parse_args(argv)
    problems = [parse_shape(s) for s in args.shape]
    path = Path(args.kernel)
    try:
        text = path.read_text()
    except OSError as e:
        raise EvoError(f"cannot read {path}: {e.strerror}") from None
    ks = KernelSource.parse(text)
    cfg = config_from_args(args)
    compiler = Compiler.from_config(cfg.compile)
    with GpuWorker(cfg) as worker:
        info = worker.info
        assert info is not None
        if info.arch not in ks.meta.archs:
            raise EvoError(f"{path} claims {', '.join(ks.meta.archs)}; this GPU ({info.name}) needs {info.arch}")
        res = compiler.compile(ks, info.arch)
        if not res.ok:
            raise CompileError(f"{path} does not compile for {info.arch}: {res.error}")
        print(f"{path}: family {ks.meta.family}, {res.registers} registers, {res.smem_static} B static smem; "
              f"GPU {info.name} ({info.arch}), driver {info.driver}, CUDA {info.cuda_runtime}")
        # the roofline bound, as in the search: a time below it is a measurement or a kernel that is wrong
        ceil = worker.call("ceilings", timeout_s=300)
        print(f"ceilings: {ceil['peak_tflops']:.0f} TFLOP/s, {ceil['bw_gbs']:.0f} GB/s ({ceil['detail']})")
        failed = 0
        for p in problems:
            bound = p.roofline_us(ceil["peak_tflops"], ceil["bw_gbs"])
            try:
                ev = worker.call("evaluate", timeout_s=cfg.timing.timeout_s, problem=p, source=text, cubin=res.cubin_path,
                                 h=ks.hash, bound_us=bound)
            except WorkerFault as e:
                print(f"{p.key}: REJECTED ({e})")
                failed += 1
                continue
            if not ev.ok:
                print(f"{p.key}: REJECTED at {ev.stage}: {ev.error}")
                failed += 1
                continue
            timed = worker.call("baselines", timeout_s=900, problem=p, extra={"kernel": (text, res.cubin_path)}, reps=args.reps,
                                bound_us=bound)
            t = timed["results"]
            k_us = t["kernel"].time_us
            print(f"\n{p.key}: correct (max rel err {ev.check.rel_err:.1e} over {ev.check.checks} checks); "
                  f"median of {args.reps} L2-flushed repetitions, side by side")
            print(f"{'':<22}{'us':>10}{'TFLOP/s':>10}{'kernel speedup':>16}")
            for name, b in sorted(t.items(), key=lambda kv: kv[0] != "kernel"):
                sp = "" if name == "kernel" else f"{b.time_us / k_us:.3f}x"
                print(f"{name:<22}{b.time_us:>10.2f}{p.tflops(b.time_us):>10.1f}{sp:>16}")
            lib = min((b for n, b in t.items() if n != "kernel"), key=lambda b: b.time_us, default=None)
            print(f"noise: kernel spread (p90-min)/median {100 * t['kernel'].spread:.1f}% over {args.reps} reps"
                  + (f", {lib.library} {100 * lib.spread:.1f}%" if lib else "")
                  + f"; evaluation timing {100 * ev.spread:.1f}%; differences below ~2% are not speedups (python -m bench.noise)")
            if t["kernel"].detail.startswith("WRONG"):
                print(f"{p.key}: REJECTED: {t['kernel'].detail}")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
