"""Per-candidate evaluation time (check + timing in the GPU worker), for one or more source trees side by side.

    python -m bench.eval_overhead                                  # this tree
    python -m bench.eval_overhead --repo .old-eval --repo .        # another tree (e.g. before a change) against this one
    python -m bench.eval_overhead --families cutlass_sm90,wgmma_sm90 --repo .old-eval --repo .   # host-launched too

The kernels (each family's first CI instance that accepts the shape, rendered and compiled by *this* tree; by
default every family but simt and those launched by their own host code, else the families named) are
evaluated by each tree's own worker (``evo`` imported from that tree), in rounds that alternate the trees,
after one warm-up evaluation per tree (NVRTC and cuBLAS start-up). Reported: the median seconds per
candidate per tree and the ratio to the first tree. An old tree is made with
``mkdir .old-eval && git archive COMMIT evo | tar -x -C .old-eval`` (only its ``evo`` package is used;
untracked, so it travels to a GPU machine with the working tree).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prepare(shapes: list[str], per_shape: int, cache: str, families: list[str] | None = None) -> list[dict]:
    """Render and compile (with this tree) up to per_shape family instances per shape, of `families` where named."""
    from evo.compile import Compiler
    from evo.config import load_config
    from evo.families import load_families
    from evo.gpu.device import gpu_info
    from evo.problem import parse_shape

    arch = gpu_info(0).arch
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": cache}}).compile)
    out = []
    for shape in shapes:
        p = parse_shape(shape)
        n = 0
        for fam in load_families(names=families, arch=arch):
            if (fam.name == "simt" and not families) or n >= per_shape:  # simt: the slow floor, not what a search times most
                continue
            for params in fam.instances_for_ci()[:1]:
                ks = fam.render(params, p)
                if (ks.meta.launch == "host" and not families) or not ks.accepts(p):
                    continue  # host-launched kernels only where named: a tree before 2026-11-25 cannot load them
                r = comp.compile(ks, arch)
                if r.ok:
                    out.append({"shape": shape, "name": f"{fam.name}", "source": ks.text, "cubin": r.cubin_path,
                                "hash": ks.hash})
                    n += 1
    return out


def worker_main(spec_path: str, rounds: int, result_path: str) -> int:
    """Inside one tree: evaluate every kernel of the spec `rounds` times; write seconds per kernel."""
    from evo.config import load_config
    from evo.gpu.worker import GpuWorker
    from evo.problem import parse_shape

    spec = json.loads(Path(spec_path).read_text())
    cfg = load_config()
    out: dict[str, list] = {}
    with GpuWorker(cfg) as w:
        first = spec[0]
        w.call("evaluate", timeout_s=600, problem=parse_shape(first["shape"]), source=first["source"],
               cubin=first["cubin"], h=first["hash"])  # warm-up: NVRTC, cuBLAS handles
        for _ in range(rounds):
            for k in spec:
                t0 = time.perf_counter()
                ev = w.call("evaluate", timeout_s=600, problem=parse_shape(k["shape"]), source=k["source"],
                            cubin=k["cubin"], h=k["hash"])
                wall = time.perf_counter() - t0
                key = f"{k['shape']} {k['name']}"
                out.setdefault(key, []).append({"wall": wall, "seconds": ev.seconds, "ok": ev.ok,
                                                "error": ev.error[:160], "time_us": ev.time_us})
    Path(result_path).write_text(json.dumps(out))
    return 0


def run_tree(repo: str, spec_path: str, rounds: int, tmp: str, tag: int) -> dict:
    result = os.path.join(tmp, f"result{tag}.json")
    # the tree's evo first, then this tree (for bench), then what was there (installed wheels)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        x for x in [str(Path(repo).resolve()), str(ROOT), os.environ.get("PYTHONPATH", "")] if x))
    proc = subprocess.run([sys.executable, "-m", "bench.eval_overhead", "--worker", spec_path, "--rounds", str(rounds),
                           "--result", result], env=env, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: the worker of {repo} failed: {(proc.stdout + proc.stderr)[-1500:]}")
    return json.loads(Path(result).read_text())


def main(argv: list[str] | None = None) -> int:
    from evo.cli import _Parser  # this tree's evo only here: --worker runs inside another tree

    ap = _Parser(prog="python -m bench.eval_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--repo", action="append", default=[], help="a source tree whose evo package evaluates (repeat)")
    ap.add_argument("--shapes", default="4096x4096x1024,1024x1024x1024,128x128x16384")
    ap.add_argument("--per-shape", type=int, default=3, help="family instances per shape")
    ap.add_argument("--families", help="comma-separated families to take instances of (host-launched ones included)")
    ap.add_argument("--rounds", type=int, default=3, help="evaluations of every kernel per tree and round")
    ap.add_argument("--alternations", type=int, default=2, help="rounds in which the trees take turns")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.rounds, args.result)
    repos = args.repo or [str(ROOT)]
    for r in repos:
        if not (Path(r) / "evo" / "__init__.py").is_file():
            print(f"error: {r} has no evo package", file=sys.stderr)
            return 2
    from evo.errors import EvoError
    from evo.families import load_families
    from evo.problem import parse_shape

    with tempfile.TemporaryDirectory() as tmp:
        try:
            shapes = [s for s in args.shapes.split(",") if s]
            for s in shapes:
                parse_shape(s)  # a malformed shape ends here, before the GPU is looked at
            families = [f for f in (args.families or "").split(",") if f] or None
            load_families(names=families)  # so does an unknown family
            spec = prepare(shapes, args.per_shape, os.path.join(tmp, "cache"), families)
        except EvoError as e:  # no GPU, a malformed shape: one line
            print(f"error: {e}", file=sys.stderr)
            return 2
        if not spec:
            print("error: no family instance accepts these shapes", file=sys.stderr)
            return 2
        spec_path = os.path.join(tmp, "spec.json")
        Path(spec_path).write_text(json.dumps(spec))
        merged: list[dict] = [{} for _ in repos]
        for alt in range(args.alternations):
            order = list(range(len(repos)))
            if alt % 2:
                order.reverse()
            for i in order:
                for key, runs in run_tree(repos[i], spec_path, args.rounds, tmp, i).items():
                    merged[i].setdefault(key, []).extend(runs)
    keys = list(merged[0])
    head = f"{'kernel':<40}" + "".join(f"{Path(r).resolve().name[:14]:>16}" for r in repos) + \
        "".join(f"{'ratio ' + str(i + 1):>10}" for i in range(1, len(repos)))
    print("median seconds per candidate evaluation (check + timing, in the worker)")
    print(head)
    totals = [0.0] * len(repos)
    for key in keys:
        meds = [statistics.median(x["seconds"] for x in m.get(key, [])) if m.get(key) else float("nan") for m in merged]
        oks = ["" if all(x["ok"] for x in m.get(key, [])) else "!" for m in merged]
        for i, v in enumerate(meds):
            totals[i] += v
        print(f"{key[:40]:<40}" + "".join(f"{v:>15.3f}{o or ' '}" for v, o in zip(meds, oks))
              + "".join(f"{meds[i] / meds[0]:>10.3f}" for i in range(1, len(repos))))
    print(f"{'total':<40}" + "".join(f"{t:>15.3f} " for t in totals)
          + "".join(f"{totals[i] / totals[0]:>10.3f}" for i in range(1, len(repos))))
    bad = [(r, k, x["error"]) for r, m in zip(repos, merged) for k, xs in m.items() for x in xs if not x["ok"]]
    for r, k, e in bad[:10]:
        print(f"! {r}: {k}: {e}")
    if args.json:
        Path(args.json).write_text(json.dumps({"repos": repos, "results": merged}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
