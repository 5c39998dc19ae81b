"""A/B of a kernel-template change on a GPU: each instance rendered from an older templates folder ("old") and
from templates/ ("new"), both checked, then timed interleaved with the libraries in one measurement.

    git archive HEAD~1 templates | tar -x -C .ab-old          # the templates before the change (untracked)
    python -m bench.template_ab --family wgmma_sm90 --old .ab-old/templates \\
        --shapes 2048x12288x128,16384x16384x128 '{"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2}' ...

Every instance is checked on --check shapes (off-tile) and on the timed shapes (fp32 reference, NaN-poisoned C);
one that fails is reported and left out of the timing. Timing: the worker's side-by-side measurement (median of
--reps L2-flushed calls, libraries and instances interleaved); each instance's line names its verdict against the
best library, win / tie / loss beyond the noise band of the two spreads (evo.noise, at least dispatch.noise_floor).
--new-only times the current templates alone (a sweep of instances); --plan-only renders and lists, without a GPU;
--compile-only compiles into --cache-dir (no GPU), so that slow instances (CUTLASS: 30-45 s each of nvcc) are built
on a CPU machine and the folder, inside the tree, travels to the GPU machine, whose run then compiles nothing.
An instance may set a value outside its family's declared space (e.g. a parameter kept out of the search): the space
is widened for this run only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_instances(texts: list[str]) -> list[dict]:
    """The command line's instances, each a JSON object of parameters; anything else is one EvoError line."""
    from evo.errors import EvoError

    try:
        instances = [json.loads(x) for x in texts]
    except ValueError as e:
        raise EvoError(f"an instance is not a JSON object: {e}") from None
    if not all(isinstance(x, dict) for x in instances):
        raise EvoError("every instance must be a JSON object of parameters, e.g. '{\"BM\": 128}'")
    return instances


def plan(family: str, old_root: str | None, instances: list[dict], shapes: list[str] = ()) -> list[tuple[str, object]]:
    """(label, KernelSource) for every instance and side; a family that compiles the shape in gets one rendering
    per timed shape (each accepts only its own shape, so it is checked and timed on that shape alone)."""
    from evo.families import load_families
    from evo.problem import parse_shape

    sides = [("new", load_families(ROOT / "templates", names=[family])[0])]
    if old_root:
        sides.insert(0, ("old", load_families(Path(old_root), names=[family])[0]))
    items = []
    for p in instances:
        tag = "/".join(f"{k}{v}" for k, v in p.items())
        for side, fam in sides:
            fam.admit(p)  # values outside the declared space (e.g. a parameter kept out of the search)
            if fam.shape_specialized:
                items += [(f"{side} {tag}", fam.render(fam.complete(p), parse_shape(sh))) for sh in shapes]
            else:
                items.append((f"{side} {tag}", fam.render(fam.complete(p))))
    return items


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True)
    ap.add_argument("--old", help="an older templates folder (git archive REF templates | tar -x -C DIR)")
    ap.add_argument("--new-only", action="store_true", help="time the current templates alone")
    ap.add_argument("--shapes", required=True, help="comma-separated timed shapes")
    ap.add_argument("--check", default="200x136x72,130x260x1000", help="comma-separated shapes only checked")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--eval-timeout", type=float, default=60.0)
    ap.add_argument("--profile", metavar="SHAPE", help="one of --shapes: after timing, Nsight Compute metrics of every "
                    "checked instance, of cuBLAS and of the cuBLASLt autotune kernel on it (evo.profile)")
    ap.add_argument("--plan-only", action="store_true")
    ap.add_argument("--compile-only", action="store_true", help="compile into --cache-dir and stop (no GPU): compiled "
                    "on a CPU machine, the folder travels with the tree and the GPU machine's run finds every instance")
    ap.add_argument("--cache-dir", default="/tmp/evo_ab_cache", help="the compile cache (default %(default)s)")
    ap.add_argument("instances", nargs="+", help="JSON parameter dicts")
    a = ap.parse_args(argv)
    from evo.errors import EvoError
    from evo.problem import parse_shape

    if not a.old and not a.new_only:
        raise EvoError("give --old DIR (the templates before the change) or --new-only")
    instances = parse_instances(a.instances)
    shapes = [s for s in a.shapes.split(",") if s]
    checks = [s for s in a.check.split(",") if s]
    for s in shapes + checks:
        parse_shape(s)
    if a.profile and a.profile not in shapes:
        raise EvoError(f"--profile {a.profile} is not one of --shapes")
    items = plan(a.family, None if a.new_only else a.old, instances, shapes)
    if a.plan_only:
        for label, ks in items:
            print(f"{ks.hash}  {label}")
        return 0

    from evo.compile import Compiler
    from evo.config import load_config
    from evo.gpu.worker import GpuWorker, WorkerFault

    cfg = load_config(overrides={"compile": {"cache_dir": a.cache_dir},
                                 "paths": {"db": "/tmp/evo_ab.db", "out": "/tmp/evo_ab_out"}})
    comp = Compiler.from_config(cfg.compile)
    res = {r.hash: r for r in comp.compile_many([(ks, "sm_90a" if "sm_90a" in ks.meta.archs else ks.meta.archs[0])
                                                 for _, ks in items], 0)}
    for label, ks in items:
        r = res[ks.hash]
        print(f"compiled {label} [{ks.hash}]: {'ok' if r.ok else 'FAILED ' + r.error[:300]} ({r.registers} regs, "
              f"{r.spill_bytes} B spilled)", flush=True)
    if a.compile_only:
        return 0 if all(res[ks.hash].ok for _, ks in items) else 2
    w = GpuWorker(cfg)
    info = w.start()
    print(f"GPU: {info.name}, driver {info.driver}", flush=True)
    bad = check_instances(w, items, res, checks + shapes, info.sm_count, a.eval_timeout)
    for shape in shapes:
        prob = parse_shape(shape)
        src = {lb: (ks.text, res[ks.hash].cubin_path) for lb, ks in items
               if ks.hash not in bad and res[ks.hash].ok and ks.accepts(prob, info.sm_count)}
        try:
            t = w.call("baselines", timeout_s=600, problem=prob, extra=src, reps=a.reps)["results"]
        except WorkerFault as e:
            print(f"\n{shape}: timing hung or crashed the GPU worker ({e}); shape left out", flush=True)
            continue
        libs = {k: v for k, v in t.items() if k not in src and v.time_us > 0}
        lib = min(libs.values(), key=lambda v: v.time_us) if libs else None
        print(f"\n{shape} on {info.name}: median of {a.reps} L2-flushed calls, interleaved; best library "
              f"{lib.time_us if lib else 0.0:.2f} us")
        for name, b in sorted(t.items(), key=lambda kv: kv[1].time_us):
            print(timing_line(name, b, lib, name in src, cfg.dispatch.noise_floor), flush=True)
    if a.profile:
        profile(parse_shape(a.profile), [(lb, ks, res[ks.hash].cubin_path) for lb, ks in items
                                         if ks.hash not in bad and res[ks.hash].ok and ks.accepts(parse_shape(a.profile), info.sm_count)])
    return 0


def timing_line(name: str, b, lib, instance: bool, floor: float) -> str:
    """One contender's line: its median, its ratio to the best library (lib, a Timing or None) and, for an instance,
    the verdict against that library beyond the noise band of the two spreads (evo.noise, at least `floor`)."""
    from evo import noise

    ratio = f"{lib.time_us / b.time_us:6.3f}x" if lib and b.time_us > 0 else "      -"
    wrong = " WRONG" if b.detail.startswith("WRONG") else ""
    verdict = ""
    if instance and lib and b.time_us > 0 and not wrong:
        band = noise.band(b.spread, lib.spread, floor=floor)
        verdict = f"  {noise.verdict(lib.time_us, b.time_us, band)} ({100 * band:.1f} %)"
    return f"  {b.time_us:9.2f} us  {ratio}  spread {b.spread:.3f}  {name}{wrong}{verdict}"


def check_instances(worker, items: list[tuple[str, object]], compiled: dict, shapes: list[str], sm_count: int,
                    timeout_s: float, say=lambda s: print(s, flush=True)) -> set[str]:
    """Check every compiled instance on every shape that accepts it (fp32 reference, poisoned C), shape by shape; the
    hashes of those that failed, or hung or crashed the GPU worker (which restarts it: the others go on), are
    returned and left out of the timing."""
    from evo.gpu.worker import WorkerFault
    from evo.problem import parse_shape

    bad: set[str] = set()
    for shape in shapes:
        prob = parse_shape(shape)
        for label, ks in items:
            r = compiled[ks.hash]
            if not r.ok or ks.hash in bad or not ks.accepts(prob, sm_count):
                continue
            try:
                ev = worker.call("evaluate", timeout_s=timeout_s, problem=prob, source=ks.text, cubin=r.cubin_path,
                                 h=ks.hash)
            except WorkerFault as e:
                bad.add(ks.hash)
                say(f"{shape} {label}: FAILED, hung or crashed the GPU worker ({e}); left out")
                continue
            if not ev.ok:
                bad.add(ks.hash)
                say(f"{shape} {label}: FAILED at {ev.stage}: {ev.error[:200]}")
        say(f"{shape}: checked")
    return bad


def profile(problem, items: list[tuple[str, object, str]]) -> None:
    """Print evo.profile's metrics (duration, tensor pipe, L2, DRAM, stalls) of each instance, of cuBLAS and of the
    kernel cuBLASLt's autotune picks."""
    from evo.profile import Profiler

    prof = Profiler(timeout_s=120.0, say=lambda s: print(s, flush=True))
    runs = [(label, lambda ks=ks, cubin=cubin: prof.profile_kernel(ks.text, cubin, problem)) for label, ks, cubin in items]
    runs += [(lib, lambda lib=lib: prof.profile_library(problem, lib)) for lib in ("cublas", "cublaslt_autotune")]
    for label, run in runs:
        r = run()
        print(f"\nncu {problem.m}x{problem.n}x{problem.k} {label}: " + (r.kernel if r.ok else f"failed: {r.detail}"), flush=True)
        for line in r.lines() if r.ok else []:
            print(f"  {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from evo.errors import cli_entry

    return cli_entry(_main)(argv)


if __name__ == "__main__":
    sys.exit(main())
