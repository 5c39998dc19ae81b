"""Side-by-side benchmark: the best stored kernel per shape against cuBLAS and cuBLASLt, in one process.

    python -m bench.compare --shapes shapes/bench.yaml [--db .evo/evo.db | --table kernels_out/NVIDIA_H200 |
        --family wgmma_sm90 --instance '{"BM": 128, ...}'] [--modes cold,b2b,server] [--out-dir DIR]

evo's contender per shape is the archive's vetted champion, or with --table the kernel the committed kernel table
publishes for the shape (its exported source, what programs load): a benchmark of the table itself. With --family F
--instance JSON it is that one instance of a family, rendered from templates/, on every shape that it accepts: a
candidate timed in the judge's conditions before it goes into a table.

Ceilings P (8192^3 cuBLAS) and BW (1 GiB copy) are measured at the start of the run on the same GPU;
the roofline bound of a shape is max(2MNK/P, 2(MK+NK+MN)/BW). Three timing modes:
  cold    L2 flushed (4x its size read, or written: timing.flush_mode) before every call, device time of that call;
  b2b     back to back: R calls queued without gaps, total device time / R (warm L2 where it fits);
  server  a random idle gap (0-2 ms) on the host before every call, then its device time.
Every mode interleaves the contenders in a fresh random order per repetition and reports medians. Each table
also shows what merely reading A and B once costs in the same window (a floor no GEMM on these inputs beats).
Placements (--placements P, cold and server modes; default 4): a GEMM's time can depend on where its buffers lie
(cuBLAS on 512x2048x4096: 17.6 to 20.1 us over six buffer sets of one process, each set's time repeatable;
docs/perf-flush.md), so one set of buffers is one draw. Every contender runs on P input sets, each allocated after a
gap of its own size, in turn (call i on set i mod P; evo checked on every set), and its median is over all of them;
the cuBLASLt autotune's algorithm is chosen over the P sets in turn too (evo.baselines.select_across), not tuned to
one set's placement; b2b runs on the first set. --placements 1 is the one-set method of the judges before 2026-11-29.
While a shape's cold window runs, nvidia-smi samples the GPU (evo.gpu.state_sampler): the page lists the SM clock,
power and any clock limit (a power cap) per shape, so a ratio taken while the board was held back says so.
Writes <out-dir>/bench-<GPU>.md and bench-<GPU>.png (with --name NAME: bench-NAME-<GPU>.*; --note puts a line of
provenance under the command); prints the markdown.
"""
from __future__ import annotations

import argparse
import math
import random
import re
import shlex
import sys
import time
from pathlib import Path

from evo.errors import EvoError, cli_entry
from evo.gpu.state_sampler import INTERVAL_MS as STATE_INTERVAL_MS
from evo.placements import MAX_PLACEMENTS, input_sets, rotating
from evo.records import LIBRARIES as LIBS
from evo.stats import geomean


def _time_b2b(contenders, reps: int, inner: int, rng: random.Random) -> tuple[dict[str, float], set[str]]:
    """Median device time per call of `inner` calls queued back to back, and the contenders whose host side
    could not keep the GPU fed (enqueueing took >= 90% of the device time: that is host time, not the kernel)."""
    import cupy
    import numpy as np

    samples = {n: [] for n in contenders}
    host_bound: dict[str, int] = {n: 0 for n in contenders}
    for _ in range(reps):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            cupy.cuda.runtime.deviceSynchronize()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            t0 = time.perf_counter()
            for _ in range(inner):
                contenders[name]()
            host_us = (time.perf_counter() - t0) * 1e6
            end.record()
            end.synchronize()
            dev_us = cupy.cuda.get_elapsed_time(start, end) * 1000.0
            samples[name].append(dev_us / inner)
            host_bound[name] += host_us >= 0.9 * dev_us
    return ({n: float(np.median(s)) for n, s in samples.items()},
            {n for n, k in host_bound.items() if 2 * k > reps})


def _time_server(contenders, reps: int, timer, rng: random.Random) -> dict[str, float]:
    import cupy
    import numpy as np

    samples = {n: [] for n in contenders}
    spin_ns = timer.warm_up(contenders, 3)  # outlasts the host side of every call (nvmath's execute is slow)
    for _ in range(reps):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            cupy.cuda.get_current_stream().synchronize()
            time.sleep(rng.uniform(0.0, 0.002))  # the GPU idles, as between inference requests
            timer.spin((1,), (1,), (spin_ns,))  # lets the host queue the call: device time only
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            contenders[name]()
            end.record()
            end.synchronize()
            samples[name].append(cupy.cuda.get_elapsed_time(start, end) * 1000.0)
    return {n: float(np.median(s)) for n, s in samples.items()}


def table_kernels(table_dir: str) -> dict[str, dict[str, str]]:
    """shape -> {"source", "family"} of every row of a kernel table that carries a kernel file."""
    from evo.export import read_table

    base = Path(table_dir)
    _, rows = read_table(base)
    out = {}
    for r in rows:
        if not r.kernel_path:
            continue
        path = base.parent / r.kernel_path
        try:
            out[r.shape] = {"source": path.read_text(), "family": r.family}
        except OSError:
            raise EvoError(f"the table's kernel for {r.shape} is missing: {path}") from None
    return out


def row_verdict(r: dict, noise_floor: float) -> tuple[str, float]:
    """evo against the fastest library of one row, as a table publishes it (evo.noise): "win", "tie" or "loss" and
    the band (half the two timings' mean spread, at least noise_floor); ("", 0) where a spread or evo's time is missing."""
    from evo.noise import band, verdict

    evo, spreads = r.get("evo", 0.0), r.get("spread") or {}
    best = min(LIBS, key=lambda x: r[x])
    if not evo or "evo" not in spreads or best not in spreads:
        return "", 0.0
    b = band(spreads["evo"], spreads[best], floor=noise_floor)
    return verdict(r[best], evo, b), b


def render_markdown(header: str, results: dict[str, list[dict]], noise_floor: float = 0.02) -> str:
    """The benchmark's markdown: one table per mode (µs, TFLOP/s, speedups, % of roofline, the verdict against the
    best library beyond the noise band where the mode measured spreads) and geomean rows."""
    md = [header]
    for mode in results:
        md.append(f"\n## {mode}\n")
        if mode == "b2b":
            md.append("† host-bound: enqueueing the calls took at least 90% of their device time (Python-side launch cost, "
                      "e.g. nvmath's execute), so the figure is the host's, not the kernel's.\n")
        md.append("| shape | family | evo µs | TFLOP/s | cuBLAS µs | Lt heur µs | Lt auto µs | read A+B µs | vs cuBLAS | vs Lt heur | vs Lt auto | vs best lib | verdict (band) | % roofline |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        sp = {x: [] for x in LIBS + ("best",)}
        counts: dict[str, int] = {}
        for r in results[mode]:
            evo = r.get("evo", 0.0)
            bl = min(r[x] for x in LIBS)
            s = {x: (r[x] / evo if evo else 0.0) for x in LIBS}
            s["best"] = bl / evo if evo else 0.0
            for x in s:
                if evo:
                    sp[x].append(s[x])
            shown = evo or bl
            p_flops = 2.0 * math.prod(int(v) for v in r["shape"].split("x"))
            def us(name: str) -> str:
                return f"{r[name]:.2f}" + ("†" if name in r["host_bound"] else "")

            v, b = row_verdict(r, noise_floor)
            if v:
                counts[v] = counts.get(v, 0) + 1
            md.append(f"| {r['shape']} | {r['family']} | {us('evo') if evo else '-'} | {p_flops / (shown * 1e-6) / 1e12:.1f} | "
                      f"{us('cublas')} | {us('cublaslt_heuristic')} | {us('cublaslt_autotune')} | {r['read_ab']:.2f} | "
                      f"{s['cublas']:.3f} | {s['cublaslt_heuristic']:.3f} | {s['cublaslt_autotune']:.3f} | {s['best']:.3f} | "
                      f"{f'{v} ({100 * b:.1f} %)' if v else '-'} | {100 * r['roof'] / shown:.1f} |")
        md.append(f"| **geomean** | | | | | | | | {geomean(sp['cublas']):.3f} | {geomean(sp['cublaslt_heuristic']):.3f} | "
                  f"{geomean(sp['cublaslt_autotune']):.3f} | {geomean(sp['best']):.3f} | | |")
        if counts:
            md.append(f"\nAgainst the best library beyond the noise band (half the two timings' mean spread, (p90 - min) / "
                      f"median, at least {100 * noise_floor:.0f} %): {counts.get('win', 0)} wins, {counts.get('tie', 0)} ties, "
                      f"{counts.get('loss', 0)} losses.")
    algos = [r for r in next(iter(results.values()), []) if r.get("lt_algorithms")]
    if algos:  # which algorithm each library ran, so two pages' library times can be told apart: a pick or a speed
        md.append("\n## cuBLASLt's algorithms\n")
        md.extend(f"- {r['shape']}: heuristic {algorithm_text(r['lt_algorithms'].get('cublaslt_heuristic'))}; "
                  f"autotune {algorithm_text(r['lt_algorithms'].get('cublaslt_autotune'))}" for r in algos)
    states = [r for r in results.get("cold", []) if r.get("gpu_state") is not None]
    if states:  # a 3 ms shape draws the board to its power limit; the clock it then runs at differs by kernel
        held = [r["shape"] for r in states if r["gpu_state"].held_back()]
        md.append("\n## The GPU while timing (cold)\n")
        md.append(f"nvidia-smi sampled the GPU every {STATE_INTERVAL_MS} ms over each shape's cold window (every contender and "
                  "the L2 flushes between them). Under a power cap the driver lowers the SM clock, and kernels that "
                  "spend energy differently slow down by different amounts. These samples do not see the clock "
                  "inside a kernel of tens of microseconds: on an H100 whose samples read 1980 MHz, evo's kernels "
                  "ran at 1.58-1.74 GHz (`python -m bench.phase_trace --waits`, docs/perf-hopper.md Run 117). "
                  + (f"Clock held back on {len(held)} of {len(states)} shapes: {', '.join(held)}.\n" if held
                     else f"No clock limit on any of the {len(states)} shapes.\n"))
        md.extend(f"- {r['shape']}: {r['gpu_state'].describe()}" for r in states)
    return "\n".join(md) + "\n"


def algorithm_text(cfg: dict | None) -> str:
    """A cuBLASLt algorithm's configuration (evo.ltgemm.algorithm_config) in one short phrase."""
    if not cfg:
        return "-"
    def dims(v) -> str:
        return "x".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)
    names = (("algorithm_id", "id"), ("tile", "tile"), ("cluster_shape", "cluster"), ("stages", "stages"),
             ("split_k", "split-k"), ("reduction_scheme", "reduction"), ("cta_swizzling", "swizzle"),
             ("custom_option", "option"), ("inner_shape", "inner"))
    return ", ".join(f"{label} {dims(cfg[k])}" for k, label in names if k in cfg)


def instance_kernels(family: str, text: str, shapes: list[str]) -> dict[str, dict[str, str]]:
    """shape -> {"source", "family"}: one instance of a family (a JSON object of its parameters, rendered from
    templates/ as bench.template_ab renders it) as evo's contender on every shape, in place of the table's or the
    archive's kernel: a candidate timed in the judge's own conditions. A bad instance is one EvoError line."""
    from bench.template_ab import parse_instances, plan

    (params,) = parse_instances([text])
    rendered = [ks for _, ks in plan(family, None, [params], shapes)]
    if len(rendered) == 1:  # a shape-independent rendering serves every shape
        rendered = rendered * len(shapes)
    return {sh: {"source": ks.text, "family": family} for sh, ks in zip(shapes, rendered)}


def checked_kernel(ks, cubin_path: str, p, info, inputs: list[tuple], check_cfg) -> tuple:
    """evo's kernel loaded and checked on every input set (A, B) it will be timed on: each output NaN-poisoned, then
    compared with the fp32 reference. Returns (kernel, one output buffer per set, why it failed: "" if it did not)."""
    import cupy

    from evo.check import compare, reference
    from evo.gpu.host_launch import load_kernel

    k = load_kernel(ks, cubin_path, p, info.sm_count, info.smem_per_block_optin)
    outs = [cupy.full((p.m, p.n), cupy.nan, dtype=cupy.float16) for _ in inputs]
    why = ""
    for (a, b), c in zip(inputs, outs):
        k(a, b, c)
        chk = compare(c, reference(a, b), check_cfg, "bench check")
        why = why or ("" if chk.correct else chk.error or "wrong output")
    return k, outs, why


def precompile(compiler, sources: list, arch: str) -> dict:
    """Compile every contender's source on all cores before the first timing; {source hash: CompileResult}. A table
    of SM90 kernels compiles in minutes one after another, in seconds side by side. A source given more than once (one
    kernel serving several shapes) compiles once."""
    unique = list({ks.hash: ks for ks in sources}.values())
    if not unique:
        return {}
    t0 = time.monotonic()
    print(f"compiling {len(unique)} kernels before timing ...", flush=True)
    res = compiler.compile_many([(ks, arch) for ks in unique])
    print(f"compiled {sum(r.ok for r in res)} of {len(unique)} in {time.monotonic() - t0:.0f} s", flush=True)
    return {r.hash: r for r in res}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", required=True, help="a shape set YAML (shapes/bench.yaml), a kernel table's folder, "
                    "or the shapes themselves (4096x4096x1024,512x2048x4096)")
    ap.add_argument("--db", help="the archive (default: paths.db of the config, .evo/evo.db)")
    ap.add_argument("--table", help="take evo's kernels from this kernel table folder (kernels_out/<GPU>), not the archive")
    ap.add_argument("--config")
    ap.add_argument("--modes", default="cold,b2b,server")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out-dir", default="docs")
    ap.add_argument("--name", default="", help="the page's name: bench-NAME-<GPU>.md and .png (default bench-<GPU>.md), "
                    "e.g. large for shapes/large.yaml")
    ap.add_argument("--note", default="", help="a line printed under the command: where and on what the page was measured")
    ap.add_argument("--placements", type=int, default=4,
                    help="input sets at different offsets each contender runs on in turn (cold, server); 1 (one set) to 11, "
                         "default 4")
    ap.add_argument("--family", default="", help="the family of --instance")
    ap.add_argument("--instance", default="", help="a JSON object of --family's parameters: evo's kernel on every shape, "
                    "rendered from templates/, in place of the table's or the archive's (a candidate in the judge's conditions)")
    args = ap.parse_args(argv)
    if args.instance and not args.family:
        raise EvoError("--instance needs --family (the family whose parameters it sets)")
    if args.instance and args.table:
        raise EvoError("--instance replaces the table's kernel: give --table or --instance, not both")
    if args.name and not re.fullmatch(r"[A-Za-z0-9_-]+", args.name):
        raise EvoError(f"--name must be letters, digits, - or _ (it names a file), not {args.name!r}")
    if not 1 <= args.placements <= MAX_PLACEMENTS:
        raise EvoError(f"--placements must be 1 to {MAX_PLACEMENTS}, not {args.placements}")
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"cold", "b2b", "server"}:
        raise EvoError(f"unknown mode in {args.modes!r}; choose from cold, b2b, server")

    from evo.compile import Compiler
    from evo.config import load_config
    from evo.kernel import KernelSource
    from evo.shapes import load_shapes
    from evo.store import Store

    problems = load_shapes(args.shapes)
    published = table_kernels(args.table) if args.table else {}  # read before the GPU: a bad path is one line
    if args.instance:  # rendered before the GPU too: a bad instance or family is one line
        published = instance_kernels(args.family, args.instance, [p.key for p in problems])
    cfg = load_config(args.config, {"paths": {"db": args.db}})
    from evo.gpu.device import gpu_info

    info = gpu_info()
    import cupy

    from evo.baselines import LtPlan, select_across
    from evo.ltgemm import algorithm_config
    from evo.gpu.session import Session
    from evo.gpu.state_sampler import reasons_field, sample_states

    session = Session(cfg)
    bus, smi_field = str(info.extra.get("pci_bus_id", "")), reasons_field()  # None: no nvidia-smi, nothing sampled
    store = None if args.table or args.instance else Store(cfg.paths.db)
    compiler = Compiler.from_config(cfg.compile)
    ceil = session.handle_ceilings()
    peak, bw = ceil["peak_tflops"], ceil["bw_gbs"]
    rng = random.Random(0)
    header = (f"# Side-by-side HGEMM benchmark on {info.name}\n\n"
              f"Driver {info.driver}, CUDA runtime {info.cuda_runtime}, cupy {info.extra.get('cupy')}; "
              f"{info.sm_count} SMs. Ceilings measured in this run: P = {peak:.0f} TFLOP/s (8192³ cuBLAS fp16), "
              f"BW = {bw:.0f} GB/s (1 GiB copy). Medians of {args.reps} repetitions per mode, contenders interleaved"
              + (f", each over {args.placements} placements of its buffers in turn (b2b: the first).\n"
                 if args.placements > 1 else ".\n") +
              f"Command: `python -m bench.compare --shapes {args.shapes}{' --table ' + args.table if args.table else ''} "
              f"{'--family ' + args.family + ' --instance ' + shlex.quote(args.instance) + ' ' if args.instance else ''}"
              f"--modes {args.modes} --reps {args.reps} --placements {args.placements}"
              f"{' --name ' + args.name if args.name else ''}`\n" + (f"{' '.join(args.note.split())}\n" if args.note.strip() else ""))
    print(header, flush=True)
    results: dict[str, list[dict]] = {m: [] for m in modes}
    # the vetted winner of each shape (or the table's kernel), all compiled side by side before the first timing
    picks = {p.key: published.get(p.key) if store is None else store.champion(p.key, p.layout, info.key) for p in problems}
    sources = {key: KernelSource.parse(b["source"]) for key, b in picks.items() if b is not None}
    for p in problems:
        if p.key in sources and not sources[p.key].accepts(p, info.sm_count):
            print(f"{p.key}: evo's kernel does not accept this shape (requires: {sources[p.key].meta.requires}); "
                  f"none timed", file=sys.stderr)
            picks[p.key] = None
            del sources[p.key]
    compiled = precompile(compiler, list(sources.values()), info.arch)
    for p in problems:
        best = picks[p.key]
        # input sets at different addresses: set 0 is the one b2b runs on
        sets, gaps = input_sets(p, [rng.randrange(1 << 30) for _ in range(args.placements)])
        plans = [LtPlan(a, b, cfg.baselines) for a, b, _ in sets]
        # the fastest planned algorithm, chosen in a window of its own over every set in turn (not tuned to one set)
        select_across(plans, session.timer, args.reps)
        calls = {"cublas": [lambda a=a, b=b, c=c: session.cublas(a, b, c) for a, b, c in sets],
                 "cublaslt_heuristic": [pl.call(pl.heuristic) for pl in plans],
                 "cublaslt_autotune": [pl.call(pl.tuned) for pl in plans]}
        family = "-"
        if best is not None:
            ks = sources[p.key]
            r = compiled[ks.hash]
            if r.ok:
                k, outs, why = checked_kernel(ks, r.cubin_path, p, info, [(a, b) for a, b, _ in sets], cfg.check)
                if not why:
                    calls["evo"] = [lambda k=k, a=a, b=b, c_evo=c_evo: k(a, b, c_evo) for (a, b, _), c_evo in zip(sets, outs)]
                    family = best["family"]
                else:
                    print(f"{p.key}: stored kernel failed its check here: {why}", file=sys.stderr)
        roof = p.roofline_us(peak, bw)
        # what merely reading A and B once costs in the same window: no GEMM on these inputs can beat it
        calls["read_ab"] = [lambda a=a, b=b: session.timer.read(a, b) for a, b, _ in sets]
        lt_algorithms = {"cublaslt_heuristic": algorithm_config(plans[0].heuristic),  # what each library ran here
                         "cublaslt_autotune": algorithm_config(plans[0].tuned)}
        for mode in modes:
            host_bound: set[str] = set()
            spread: dict[str, float] = {}
            gpu_state = None
            # b2b on the first set (its warm L2 is the point); cold and server over every placement in turn
            contenders = {n: (fs[0] if mode == "b2b" else rotating(fs)) for n, fs in calls.items()}
            if mode == "cold":
                with sample_states(bus, smi_field, STATE_INTERVAL_MS) as sampled:  # the clock the window ran at
                    timed = session.timer.measure(contenders, args.reps, 3)
                gpu_state = sampled.summary
                t = {n: x.median_us for n, x in timed.items()}
                spread = {n: x.spread for n, x in timed.items()}
            elif mode == "b2b":
                inner = max(1, min(200, int(2000 / max(roof, 1.0))))
                t, host_bound = _time_b2b(contenders, max(5, args.reps // 5), inner, rng)
            else:
                t = _time_server(contenders, args.reps, session.timer, rng)
            row = {"shape": p.key, "family": family, "roof": roof, "host_bound": host_bound, "spread": spread, **t,
                   "lt_algorithms": lt_algorithms, "gpu_state": gpu_state}
            results[mode].append(row)
            evo = t.get("evo", 0.0)
            best_lib = min(t[x] for x in LIBS)
            print(f"{mode:>6} {p.key:>16} evo {evo:9.2f} us  best lib {best_lib:9.2f} us  "
                  f"{(best_lib / evo if evo else 0):.3f}x  roofline {roof:.2f} us", flush=True)
            if gpu_state is not None and gpu_state.held_back():
                print(f"{'':>6} {'':>16} while timing: {gpu_state.describe()}", flush=True)
        for pl in plans:
            pl.close()
    text = render_markdown(header, results, cfg.dispatch.noise_floor)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{args.name + '-' if args.name else ''}{info.key}"
    (out / f"{stem}.md").write_text(text)
    _plot(results, out / f"{stem}.png", info.name)
    print(text)
    return 0


def plot_bars(rows: list[dict]) -> list[tuple[float, str]]:
    """Per shape of one mode: (speedup of evo over the best library, mark): mark "host" where evo's or the best
    library's figure is host-bound (back-to-back), "none" where there is no evo kernel, else ""."""
    out = []
    for r in rows:
        if not r.get("evo"):
            out.append((0.0, "none"))
            continue
        best = min(LIBS, key=lambda x: r[x])
        host = r.get("host_bound") or set()
        out.append((r[best] / r["evo"], "host" if ("evo" in host or best in host) else ""))
    return out


def _plot(results: dict[str, list[dict]], path: Path, gpu: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    modes = list(results)
    shapes = [r["shape"] for r in results[modes[0]]]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(shapes)), 4))
    width = 0.8 / len(modes)
    marked = False
    for i, mode in enumerate(modes):
        bars = plot_bars(results[mode])
        xs = [j + i * width for j in range(len(shapes))]
        drawn = ax.bar(xs, [y for y, _ in bars], width, label=mode)
        for x, bar, (y, mark) in zip(xs, drawn, bars):
            if mark == "host":  # the figure is the host's launch rate, not the kernel's: hatched, with a dagger
                bar.set_hatch("//")
                bar.set_edgecolor("black")
                ax.annotate("†", (x, y), ha="center", va="bottom", fontsize=9)
                marked = True
            elif mark == "none":
                ax.annotate("no evo\nkernel", (x, 0.02), ha="center", va="bottom", fontsize=6, rotation=90)
    if marked:
        ax.text(0.01, 0.01, "† hatched: host-bound back-to-back figure (the host's launch rate, not the kernel's)",
                transform=ax.transAxes, fontsize=7, va="bottom")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + width * (len(modes) - 1) / 2 for j in range(len(shapes))], shapes, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs best library")
    ax.set_title(f"evo vs cuBLAS/cuBLASLt on {gpu}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
