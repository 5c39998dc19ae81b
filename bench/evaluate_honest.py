"""Honest kernels must pass the evaluator: the stored champions on their shapes, every family's CI instances.

    python -m bench.evaluate_honest                                  # kernels_out/*/TN/*.cu + family CI instances
    python -m bench.evaluate_honest --champions 'kernels_out/NVIDIA_H200/TN/*.cu' --no-families --jobs 16

Compiles everything first (in parallel), then evaluates each kernel once through the GPU worker (check +
timing, exactly as the search does) and prints one line per kernel: ok with its time, or the rejection.
Exit code 1 when any honest kernel is rejected.
"""
from __future__ import annotations

import glob
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evo.cli import _Parser  # noqa: E402
from evo.errors import cli_entry  # noqa: E402


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.families import load_families
    from evo.gpu.worker import GpuWorker, WorkerFault
    from evo.kernel import KernelSource
    from evo.problem import parse_shape

    ap = _Parser(prog="python -m bench.evaluate_honest", description=__doc__.splitlines()[0])
    ap.add_argument("--champions", default=str(ROOT / "kernels_out" / "*" / "TN" / "*.cu"), help="glob of stored kernels")
    ap.add_argument("--only", default="", help="comma list of champion shapes (file stems) to take from the glob")
    ap.add_argument("--no-families", action="store_true", help="skip the families' CI instances")
    ap.add_argument("--family-shapes", default="1000x1000x1000,77x200x72,128x128x16384",
                    help="shapes the CI instances are evaluated on (those they accept)")
    ap.add_argument("--jobs", type=int, default=0, help="parallel nvcc processes (0 = CPUs)")
    ap.add_argument("--max-seconds", type=float, default=0, help="stop evaluating after this long (0 = never)")
    args = ap.parse_args(argv)
    cfg = load_config()
    comp = Compiler.from_config(cfg.compile)
    t0 = time.monotonic()
    with GpuWorker(cfg) as w:
        arch = w.info.arch
        items: list[tuple[str, KernelSource, object]] = []
        only = {x for x in args.only.split(",") if x}
        for path in sorted(glob.glob(args.champions)):
            if only and Path(path).stem not in only:
                continue
            ks = KernelSource.parse(Path(path).read_text())
            if arch in ks.meta.archs:
                items.append((f"champion {Path(path).stem}", ks, parse_shape(Path(path).stem)))
        if not args.no_families:
            for fam in load_families(arch=arch):
                for i, params in enumerate(fam.instances_for_ci()):
                    for shape in args.family_shapes.split(","):
                        p = parse_shape(shape)
                        ks = fam.render(params, p)
                        if ks.accepts(p, w.info.sm_count):
                            items.append((f"{fam.name}#{i} {shape}", ks, p))
        results = comp.compile_many([(ks, arch) for _, ks, _ in items], jobs=args.jobs)
        print(f"compiled {len(items)} kernels in {time.monotonic() - t0:.0f} s", flush=True)
        bad = 0
        for (name, ks, p), r in zip(items, results):
            if args.max_seconds and time.monotonic() - t0 > args.max_seconds:
                print(f"stopped after {args.max_seconds:.0f} s", flush=True)
                break
            if not r.ok:
                print(f"COMPILE FAIL {name}: {r.error}", flush=True)
                bad += 1
                continue
            try:
                ev = w.call("evaluate", timeout_s=300, problem=p, source=ks.text, cubin=r.cubin_path, h=ks.hash)
            except WorkerFault as e:
                print(f"REJECTED {name}: {e}", flush=True)
                bad += 1
                continue
            if ev.ok:
                print(f"ok {name}: {ev.time_us:.2f} us (cuBLAS {ev.cublas_us:.2f}), {ev.seconds:.2f} s", flush=True)
            else:
                print(f"REJECTED {name} at {ev.stage}: {ev.error}", flush=True)
                bad += 1
    print(f"{bad} rejected of {len(items)}; {time.monotonic() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
