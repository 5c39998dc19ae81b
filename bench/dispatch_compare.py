"""evo.dispatch side by side with the libraries: is what dispatch serves at least 0.99x the best library, per shape?

    python -m bench.dispatch_compare --shapes shapes/llm.yaml --shape 257x14336x4096 --shape 100x18944x3584 \\
        [--reps 100] [--max-reps 400] [--target-noise 0.005] [--out-dir DIR] [--decisions FILE]

Per shape: the dispatcher chooses first (a shape not in the table may have borrowed kernels checked and timed
against the libraries, a table tie whose evo kernel led may have that kernel timed so; the decision persisted), then ``Dispatcher.matmul``, the very same call again (an A/A
control), cuBLAS, cuBLASLt's heuristic top-1 and cuBLASLt autotuned on this shape here (nvmath autotune over the
planned algorithms, as the baselines do) are timed side by side: interleaved in shuffled order, L2 flushed before
every call, CUDA events, a spin that hides the host (evo.timing.Timer, the search's timer).

The ratio is paired: per round (every contender once, shuffled) best library µs / dispatch µs, the median over
rounds (the best library is the one with the lowest median); pairing cancels clock drift between rounds. The
noise of a shape is the larger of the A/A control's distance from 1 (two identical calls) and the half-width of
a bootstrap 95 % interval of the ratio's median; rounds are added in blocks of --reps until it is under
--target-noise or --max-reps rounds were run. A shape is below only when its ratio is under --min-ratio (0.99)
AND beyond its noise (ratio < 1 - noise). Prints a markdown table (µs, ratio ± noise, A/A, rounds, what served
and why) and writes it to DIR/dispatch-<GPU>.md; exit code 1 if a shape is below.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from evo.errors import EvoError, cli_entry
from evo.noise import paired_ratio
from evo.problem import parse_shape
from evo.records import LIBRARIES as LIBS



def paired_stats(samples: dict[str, list[float]], seed: int = 0, resamples: int = 500) -> dict[str, Any]:
    """samples: µs per round for dispatch, dispatch_again and the LIBS (index i = round i, every contender timed
    once per round). Returns {best, ratio, aa, ci, noise, rounds}: the library with the lowest median, the median
    over rounds of best / dispatch, the A/A median of dispatch_again / dispatch, the bootstrap 95 % half-width of
    the ratio's median, noise = max(|aa - 1|, ci)."""
    import numpy as np

    d = np.asarray(samples["dispatch"], dtype=np.float64)
    libs = [x for x in LIBS if samples.get(x)]
    best = min(libs, key=lambda x: float(np.median(samples[x])))
    ratio, ci = paired_ratio(samples[best], d, seed=seed, resamples=resamples)
    aa = float(np.median(np.asarray(samples["dispatch_again"], dtype=np.float64) / d)) if samples.get("dispatch_again") else 1.0
    return {"best": best, "ratio": ratio, "aa": aa, "ci": ci, "noise": max(abs(aa - 1.0), ci), "rounds": len(d)}


def is_below(ratio: float, noise: float, min_ratio: float) -> bool:
    """Below the bar: under min_ratio and beyond the measured noise (the bar itself is never widened)."""
    return ratio < min_ratio and ratio < 1.0 - noise


def summarize(results: list[dict], min_ratio: float, gpu: str) -> tuple[str, list[str]]:
    """results: {shape, dispatch, cublas, cublaslt_heuristic, cublaslt_autotune (median µs), explain} per shape, with
    the paired {ratio, noise, aa, rounds} where measured (else ratio = best median / dispatch median, noise 0).
    Returns (markdown, shapes below: ratio < min_ratio and beyond the noise)."""
    lines = [f"# evo.dispatch against the best library on {gpu}", "",
             "Device time per call (CUDA events, L2 flushed, interleaved in shuffled rounds; medians). ratio = median "
             "over rounds of best library µs / dispatch µs (paired); ± = measured noise: max(|A/A - 1|, bootstrap 95 % "
             "half-width of the ratio); A/A = the same dispatch call timed twice per round. below = ratio < "
             f"{min_ratio} and beyond the noise.",
             "", "| shape | dispatch µs | cuBLAS µs | cuBLASLt heur. µs | cuBLASLt autotuned µs | ratio | ± noise | A/A "
                 "| rounds | served by |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    below = []
    ratios = []
    noises = []
    for r in results:
        best = min(r[x] for x in LIBS if r.get(x))
        ratio = r.get("ratio") or (best / r["dispatch"] if r["dispatch"] else 0.0)
        noise = float(r.get("noise") or 0.0)
        ratios.append(ratio)
        noises.append(noise)
        flag = " **below**" if is_below(ratio, noise, min_ratio) else ""
        if flag:
            below.append(r["shape"])
        aa = f"{r['aa']:.4f}" if r.get("aa") else "-"
        lines.append(f"| {r['shape']} | {r['dispatch']:.2f} | " + " | ".join(f"{r[x]:.2f}" for x in LIBS)
                     + f" | {ratio:.3f}{flag} | {100 * noise:.2f}% | {aa} | {r.get('rounds', '-')} | {r['explain']} |")
    if ratios:
        import math

        gm = math.exp(sum(math.log(x) for x in ratios if x > 0) / len(ratios))
        under = [r["shape"] for r, x in zip(results, ratios) if x < min_ratio and r["shape"] not in below]
        lines += ["", f"{len(results)} shapes: geomean ratio {gm:.3f}, min {min(ratios):.3f}; noise median "
                      f"{100 * sorted(noises)[len(noises) // 2]:.2f}%, max {100 * max(noises):.2f}%; "
                      f"{len(below)} below {min_ratio} beyond noise: {', '.join(below) or 'none'}"
                      + (f"; under {min_ratio} but inside their noise: {', '.join(under)}" if under else "") + "."]
    return "\n".join(lines) + "\n", below


def measure_one(s: str, d, be, timer, reps: int, max_reps: int = 400, target: float = 0.005) -> dict:
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
    contenders["dispatch_again"] = contenders["dispatch"]  # the A/A control: the identical call
    contenders.update({name: (lambda fn=fn, c=cs[name]: fn(a, b, c)) for name, fn in calls.items()})
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    while True:  # blocks of rounds until identical calls agree and the ratio is pinned down, or max_reps
        t = timer.measure(contenders, reps, warmup=3)
        for name in contenders:
            samples[name] += t[name].samples
        st = paired_stats(samples)
        if st["noise"] <= target or st["rounds"] + reps > max_reps:
            break
    want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
    err = float(cupy.linalg.norm(cs["dispatch"].astype(cupy.float32) - want) / cupy.linalg.norm(want))
    if not err < 1e-2:
        raise EvoError(f"{s}: dispatch result is wrong (relative error {err:.2e}); {explain}")
    import numpy as np

    return {"shape": s, "explain": explain, **{name: float(np.median(samples[name])) for name in ("dispatch", *LIBS)},
            "ratio": st["ratio"], "noise": st["noise"], "aa": st["aa"], "rounds": st["rounds"], "best": st["best"]}


def measure(shapes: list[str], reps: int, decisions: str | None, max_reps: int = 400,
            target: float = 0.005, on_row: Any = None) -> tuple[str, list[dict]]:
    """on_row(gpu, rows so far) after every shape (the markdown is rewritten then: a killed run keeps its shapes)."""
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
        row = measure_one(s, d, be, timer, reps, max_reps, target)
        out.append(row)
        print(f"{s:>18}  dispatch {row['dispatch']:9.2f} us  best lib {min(row[x] for x in LIBS):9.2f} us  "
              f"ratio {row['ratio']:.4f} ±{100 * row['noise']:.2f}% (A/A {row['aa']:.4f}, {row['rounds']} rounds)  "
              f"({row['explain']})", flush=True)
        if on_row is not None:
            on_row(be.gpu_key, out)
        cupy.get_default_memory_pool().free_all_blocks()
    return be.gpu_key, out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from evo.cli import _Parser
    from evo.shapes import load_shapes

    ap = _Parser(prog="python -m bench.dispatch_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", action="append", default=[], help="shape set file (repeatable)")
    ap.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable)")
    ap.add_argument("--reps", type=int, default=100, help="rounds per block (every contender once per round)")
    ap.add_argument("--max-reps", type=int, default=400, help="stop adding blocks after this many rounds")
    ap.add_argument("--target-noise", type=float, default=0.005, help="stop when the measured noise is under this")
    ap.add_argument("--min-ratio", type=float, default=0.99)
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--decisions", help="decisions file (default: dispatch.decisions / ~/.cache/evo/dispatch.json)")
    args = ap.parse_args(argv)
    shapes = [p.key for f in args.shapes for p in load_shapes(f)] + [parse_shape(s).key for s in args.shape]
    shapes = list(dict.fromkeys(shapes))
    if not shapes:
        raise EvoError("give --shapes FILE and/or --shape MxNxK")
    if args.reps < 5 or args.max_reps < args.reps or not 0 < args.target_noise < 0.5:
        raise EvoError("need --reps >= 5, --max-reps >= --reps and 0 < --target-noise < 0.5")
    from evo.gpu.device import require_gpu

    require_gpu()
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)

    def write(gpu: str, rows: list[dict]) -> str:
        md, _ = summarize(rows, args.min_ratio, gpu)
        if len(rows) < len(shapes):
            md += f"\n(partial: {len(rows)} of {len(shapes)} shapes measured so far)\n"
        (Path(args.out_dir) / f"dispatch-{gpu}.md").write_text(md)
        return md

    gpu, results = measure(shapes, args.reps, args.decisions, args.max_reps, args.target_noise, on_row=write)
    md, below = summarize(results, args.min_ratio, gpu)
    write(gpu, results)
    print(md)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
