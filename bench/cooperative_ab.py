"""What a cooperative launch costs: a table's kernels that declare one, timed launched cooperatively and plainly.

    python -m bench.cooperative_ab [--table kernels_out/NVIDIA_H200] [--reps 60] [--shape S ...] [--calls 2000]

For every row whose published kernel declares `cooperative` (its CTAs wait on each other), the kernel is loaded
twice from one compile: as published (cooperative) and with a plain launch. Both are checked against an fp32
reference, then timed side by side with the row's best library (cuBLAS, or cuBLASLt with the row's stored
algorithm; evo.timing.Timer: CUDA events, L2 flushed before every call, interleaved in shuffled order). Per row: the medians, the paired ratio plain / cooperative with
its bootstrap 95 % half-width, and an A/A control (the cooperative call timed twice): a difference counts only
beyond the larger of the two. Then the host side of one call, launched back to back without synchronizing
(--calls, median of five runs): what dispatch's caller waits for before the launch is queued.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from evo.errors import EvoError, cli_entry


def plain(k):
    """The same loaded kernel launched without the cooperative guarantee (either launcher)."""
    if hasattr(k, "spec"):
        k.spec = replace(k.spec, cooperative=False)
    else:
        k.cooperative = False
        getattr(k, "_blocks", {}).clear()  # launch configs are built per stream with the flag
    return k


def host_us(fn, a, b, c, calls: int) -> float:
    import cupy
    import numpy as np

    runs = []
    for _ in range(5):
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn(a, b, c)
        runs.append((time.perf_counter() - t) / calls * 1e6)
        cupy.cuda.Device().synchronize()
    return float(np.median(runs))


def measure_row(be, table_dir: Path, row, reps: int, calls: int) -> dict:
    import cupy
    import numpy as np

    from evo.export import published_kernel
    from evo.gpu.host_launch import load_kernel
    from evo.noise import paired_ratio
    from evo.problem import parse_shape

    p = parse_shape(row.shape, row.layout)
    ks = published_kernel(table_dir.parent, row)
    r = be.compiler(Path(be.cache_dir or ".evo-cache")).compile(ks, be.arch)
    if not r.ok:
        raise EvoError(f"{row.shape}: kernel {ks.hash} does not compile: {r.error}")
    coop = load_kernel(ks, r.cubin_path, p, be.num_sms, be.smem_limit)
    flat = plain(load_kernel(ks, r.cubin_path, p, be.num_sms, be.smem_limit))
    for name, k in (("cooperative", coop), ("plain", flat)):
        why = be.check(k, p)
        if why:
            raise EvoError(f"{row.shape}: the {name} launch is wrong: {why}")
    calls_ = {"cooperative": coop, "cooperative_again": coop, "plain": flat}
    lib = row.best_library
    if lib == "cublas":
        calls_[lib] = be.cublas()
    elif lib.startswith("cublaslt"):  # the row's stored algorithm, else autotuned here
        calls_[lib] = be.cublaslt(p, (row.library_algorithms or {}).get(lib) or None, tune=True)[0]
    samples = be.time(p, calls_, reps)
    ratio, ci = paired_ratio(samples["plain"], samples["cooperative"])
    aa = float(np.median(np.asarray(samples["cooperative_again"]) / np.asarray(samples["cooperative"])))
    rs = cupy.random.RandomState(1)
    a = rs.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty((p.m, p.n), dtype=cupy.float16)
    out = {"shape": row.shape, "coop_us": float(np.median(samples["cooperative"])),
           "plain_us": float(np.median(samples["plain"])), "ratio": ratio, "noise": max(ci, abs(aa - 1.0)),
           "aa": aa, "host_coop_us": host_us(coop, a, b, c, calls), "host_plain_us": host_us(flat, a, b, c, calls),
           "lib": lib if lib in samples else "", "lib_us": float(np.median(samples[lib])) if lib in samples else 0.0}
    for k in (coop, flat):
        k.close()
    return out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from evo.cli import _Parser
    from evo.dispatch import CupyBackend
    from evo.export import published_kernel, read_table
    from evo.problem import parse_shape

    ap = _Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default="", help="a table folder (default: kernels_out/<this GPU>)")
    ap.add_argument("--shape", action="append", default=[], help="only these rows (repeatable)")
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--calls", type=int, default=2000, help="back-to-back calls per host-side run")
    ns = ap.parse_args(argv)
    be = CupyBackend()
    table = Path(ns.table or Path("kernels_out") / be.gpu_key)
    _, rows = read_table(table)
    rows = [r for r in rows if r.kernel_path and (not ns.shape or r.shape in ns.shape)
            and published_kernel(table.parent, r).cooperative(parse_shape(r.shape, r.layout), be.num_sms)]
    if not rows:
        raise EvoError(f"no row of {table} launches cooperatively" + (f" among {', '.join(ns.shape)}" if ns.shape else ""))
    cache = Path(be.cache_dir or ".evo-cache")
    for line in be.precompile([published_kernel(table.parent, r) for r in rows], cache):  # every core, up front
        print(line, file=sys.stderr)
    print(f"{len(rows)} cooperative kernels in {table} on {be.gpu_key}; {ns.reps} rounds each")
    print("| shape | cooperative us | plain us | plain / coop | noise | A/A | host coop us | host plain us | best lib us |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for row in rows:
        m = measure_row(be, table, row, ns.reps, ns.calls)
        ratios.append(m["ratio"])
        lib = f"{m['lib_us']:.2f} ({m['lib']})" if m["lib"] else "-"
        print(f"| {m['shape']} | {m['coop_us']:.2f} | {m['plain_us']:.2f} | {m['ratio']:.4f} | {100 * m['noise']:.2f} % "
              f"| {m['aa']:.4f} | {m['host_coop_us']:.2f} | {m['host_plain_us']:.2f} | {lib} |", flush=True)
    import numpy as np

    print(f"geomean plain / cooperative: {float(np.exp(np.mean(np.log(ratios)))):.4f} over {len(ratios)} kernels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
