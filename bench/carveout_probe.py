"""Does the shared-memory carveout a kernel asks for change its event-timed window?

    python -m bench.carveout_probe --shape 128x4096x8192 --family wgmma_sm90 '{"BM": 64, ...}' [--table FILE.cu] ...

Each instance (a family's JSON parameters, or a kernel file with --table) is loaded twice, into two modules: once as
evo launches it (the driver picks the carveout for its shared memory) and once with
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT at each --carveout percentage. Both are timed interleaved with
cuBLAS (evo.timing.Timer: L2 flushed, medians), after evo.check's comparison with an fp32 reference.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9


def kernels(family: str, instances: list[str], tables: list[str], shapes: list[str] = ()) -> list[tuple[str, "KernelSource"]]:
    """(label, source) of each instance to probe: the family's JSON parameters rendered as bench.template_ab renders
    them (each must be a valid instance), then the kernel files."""
    from bench.template_ab import plan
    from evo.errors import EvoError
    from evo.families import load_families
    from evo.kernel import KernelSource

    params = [json.loads(js) for js in instances]
    if params:
        fam = load_families(ROOT / "templates", names=[family])[0]
        for js, q in zip(instances, params):
            if not fam.valid(fam.complete(q)):
                raise EvoError(f"{js} is not a valid {family} instance")
    items = plan(family, None, params, list(shapes)) if params else []
    return items + [(Path(f).name, KernelSource.parse(Path(f).read_text())) for f in tables]


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.carveout_probe", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--family", default="wgmma_sm90")
    ap.add_argument("--table", action="append", default=[], help="a kernel file (front matter + source)")
    ap.add_argument("--carveout", type=int, action="append", help="percent (default: 100)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("instances", nargs="*")
    a = ap.parse_args(argv)
    items = kernels(a.family, a.instances, a.table, a.shape)
    import cupy

    from evo.baselines import cublas_gemm
    from evo.check import compare, poisoned_output, random_inputs, reference
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.launch import LoadedKernel
    from evo.shapes import parse_shape
    from evo.timing import Timer

    cfg = load_config(overrides={"compile": {"cache_dir": "/tmp/evo_ab_cache"}})
    comp = Compiler.from_config(cfg.compile)
    cubins = {}
    for label, ks in items:
        r = comp.compile(ks, "sm_90a")
        if not r.ok:
            print(f"{label}: compile failed {r.error[:200]}")
            continue
        cubins[label] = r.cubin_path
    dev = cupy.cuda.Device()
    attrs = cupy.cuda.runtime.getDeviceProperties(dev.id)
    sms, l2 = attrs["multiProcessorCount"], attrs["l2CacheSize"]
    smem_limit = attrs["sharedMemPerBlockOptin"]
    print(f"GPU: {attrs['name'].decode()}, {sms} SMs")
    timer = Timer(l2, sms=sms)
    pcts = a.carveout or [100]
    for shape in a.shape:
        prob = parse_shape(shape)
        A, B = random_inputs(prob, cupy.random.RandomState(1))
        ref = reference(A, B)
        lib = cublas_gemm()
        Cl = cupy.empty((prob.m, prob.n), cupy.float16)
        calls = {"cublas": (lambda: lib(A, B, Cl))}
        loaded = []
        for label, ks in items:
            if label not in cubins or not ks.accepts(prob, sms):
                continue
            for pct in [None] + pcts:
                k = LoadedKernel(ks, cubins[label], prob, sms, smem_limit, fresh=True)
                if pct is not None:
                    cupy.cuda.driver.funcSetAttribute(k.fn.fn.ptr, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, pct)
                C = poisoned_output(prob)
                k(A, B, C)
                name = f"{label[:60]} carveout {pct if pct is not None else 'driver'}"
                res = compare(C, ref, cfg.check, name)
                print(f"{shape} {name}: {'checked' if res.correct else res.error}")
                if not res.correct:
                    continue
                loaded.append(k)
                calls[name] = (lambda k=k, C=C: k(A, B, C))
        t = timer.measure(calls, a.reps)
        print(f"\n{shape}: median of {a.reps} L2-flushed calls, interleaved")
        for name, x in sorted(t.items(), key=lambda kv: kv[1].median_us):
            print(f"  {x.median_us:9.2f} us  spread {x.spread:.3f}  {name}")
        for k in loaded:
            k.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    from evo.errors import cli_entry

    return cli_entry(_main)(argv)


if __name__ == "__main__":
    sys.exit(main())
