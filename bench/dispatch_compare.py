"""evo.dispatch side by side with the libraries: is what dispatch serves at least 0.99x the best library, per shape?

    python -m bench.dispatch_compare --shapes shapes/llm.yaml --shape 257x14336x4096 --shape 100x18944x3584 \\
        [--reps 30] [--out-dir DIR] [--decisions FILE]

Per shape: the dispatcher chooses first (a shape not in the table may have borrowed kernels checked and timed
against the libraries, the decision persisted), then ``Dispatcher.matmul``, cuBLAS, cuBLASLt's heuristic top-1 and
cuBLASLt autotuned on this shape here (nvmath autotune over the planned algorithms, as the baselines do) are timed
side by side: interleaved in shuffled order, L2 flushed before every call, CUDA events, a spin that hides the host
(evo.timing.Timer, the search's timer). Prints a markdown table (µs, dispatch / best library, what served and why)
and writes it to DIR/dispatch-<GPU>.md; exit code 1 if a shape is below --min-ratio (0.99).
"""
from __future__ import annotations

import sys
from pathlib import Path

from evo.errors import EvoError, cli_entry
from evo.problem import parse_shape

LIBS = ("cublas", "cublaslt_heuristic", "cublaslt_autotune")


def summarize(results: list[dict], min_ratio: float, gpu: str) -> tuple[str, list[str]]:
    """results: {shape, dispatch, cublas, cublaslt_heuristic, cublaslt_autotune (µs), explain} per shape.
    Returns (markdown, shapes below min_ratio)."""
    lines = [f"# evo.dispatch against the best library on {gpu}", "",
             "Device time per call (CUDA events, L2 flushed, interleaved; median). ratio = best library µs / dispatch µs.",
             "", "| shape | dispatch µs | cuBLAS µs | cuBLASLt heur. µs | cuBLASLt autotuned µs | ratio | served by |",
             "|---|---|---|---|---|---|---|"]
    below = []
    ratios = []
    for r in results:
        best = min(r[x] for x in LIBS if r.get(x))
        ratio = best / r["dispatch"] if r["dispatch"] else 0.0
        ratios.append(ratio)
        flag = "" if ratio >= min_ratio else " **below**"
        if flag:
            below.append(r["shape"])
        lines.append(f"| {r['shape']} | {r['dispatch']:.2f} | " + " | ".join(f"{r[x]:.2f}" for x in LIBS)
                     + f" | {ratio:.3f}{flag} | {r['explain']} |")
    if ratios:
        import math

        gm = math.exp(sum(math.log(x) for x in ratios if x > 0) / len(ratios))
        lines += ["", f"{len(results)} shapes: geomean ratio {gm:.3f}, min {min(ratios):.3f}; "
                      f"{len(below)} below {min_ratio}: {', '.join(below) or 'none'}."]
    return "\n".join(lines) + "\n", below


def measure_one(s: str, d, be, timer, reps: int) -> dict:
    import cupy

    from evo.ltgemm import LtGemm

    p = parse_shape(s)
    rs = cupy.random.RandomState(11)
    a = rs.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
    cs = {name: cupy.empty((p.m, p.n), dtype=cupy.float16) for name in ("dispatch", *LIBS)}
    d.matmul(a, b, out=cs["dispatch"])  # the choice (and any measurement behind it) happens here, untimed
    explain = d.explain(p.m, p.n, p.k).split(": ", 1)[1]
    lt = LtGemm(p.m, p.n, p.k)
    heuristic = lt.heuristic
    tuned = lt.autotune()
    calls = {"cublas": be.cublas(), "cublaslt_heuristic": lt.bind(heuristic), "cublaslt_autotune": lt.bind(tuned)}
    contenders = {"dispatch": lambda: d.matmul(a, b, out=cs["dispatch"])}
    contenders.update({name: (lambda fn=fn, c=cs[name]: fn(a, b, c)) for name, fn in calls.items()})
    t = timer.measure(contenders, reps, warmup=3)
    want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
    err = float(cupy.linalg.norm(cs["dispatch"].astype(cupy.float32) - want) / cupy.linalg.norm(want))
    if not err < 1e-2:
        raise EvoError(f"{s}: dispatch result is wrong (relative error {err:.2e}); {explain}")
    return {"shape": s, "explain": explain, **{name: t[name].median_us for name in contenders}}


def measure(shapes: list[str], reps: int, decisions: str | None) -> tuple[str, list[dict]]:
    import os

    if decisions:
        os.environ["EVO_DISPATCH_DECISIONS"] = decisions
    import cupy

    from evo.dispatch import CupyBackend, Dispatcher
    from evo.timing import Timer

    be = CupyBackend()
    d = Dispatcher.load(backend=be)
    timer = Timer(be.l2_bytes, flush=True, flush_mode="read", sms=be.num_sms)
    out = []
    for s in shapes:
        row = measure_one(s, d, be, timer, reps)
        out.append(row)
        print(f"{s:>18}  dispatch {row['dispatch']:9.2f} us  best lib {min(row[x] for x in LIBS):9.2f} us  "
              f"({row['explain']})", flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    return be.gpu_key, out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from evo.cli import _Parser
    from evo.shapes import load_shapes

    ap = _Parser(prog="python -m bench.dispatch_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", action="append", default=[], help="shape set file (repeatable)")
    ap.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--min-ratio", type=float, default=0.99)
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--decisions", help="decisions file (default: dispatch.decisions / ~/.cache/evo/dispatch.json)")
    args = ap.parse_args(argv)
    shapes = [p.key for f in args.shapes for p in load_shapes(f)] + [parse_shape(s).key for s in args.shape]
    shapes = list(dict.fromkeys(shapes))
    if not shapes:
        raise EvoError("give --shapes FILE and/or --shape MxNxK")
    from evo.gpu.device import require_gpu

    require_gpu()
    gpu, results = measure(shapes, args.reps, args.decisions)
    md, below = summarize(results, args.min_ratio, gpu)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(args.out_dir) / f"dispatch-{gpu}.md").write_text(md)
    print(md)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
