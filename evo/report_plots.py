"""The report's plots (matplotlib, Agg), each from the kernel table's rows alone. Every plot shows every shape it can;
each returns a note naming what it leaves out (printed on the image and under it on the page)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import EvoError
from .export import LIBRARIES, TableRow
from .problem import parse_shape
from .stats import geomean
from .table_classes import best_lib_us

LIB_LABEL = {"cublas": "cuBLAS", "cublaslt_heuristic": "cuBLASLt heuristic", "cublaslt_autotune": "cuBLASLt autotuned"}
EVO_COLOR, LIB_COLOR, TIE_COLOR, GREY = "#1f77b4", "#d62728", "#ff9f1c", "#7f7f7f"
VERDICT_COLOR = {"win": EVO_COLOR, "tie": TIE_COLOR, "loss": LIB_COLOR}


@dataclass(frozen=True)
class Bounds:
    """What no kernel can beat, and where each figure comes from."""

    peak_tflops: float  # compute roof
    bw_gbs: float  # memory roof
    roof_source: str  # "datasheet NVIDIA H200 SXM" or "measured (no datasheet for this GPU)"
    lib_peak_tflops: float = 0.0  # measured: cuBLAS on 8192^3 (a library's rate, not a roof)
    lib_bw_gbs: float = 0.0  # measured: a 1 GiB device-to-device copy
    launch_us: float = 0.0  # launch floor: an empty kernel between CUDA events
    launch_source: str = ""

    def bound_us(self, shape: str) -> float:
        p = parse_shape(shape)
        roof = p.roofline_us(self.peak_tflops, self.bw_gbs) if self.peak_tflops and self.bw_gbs else 0.0
        return max(roof, self.launch_us)


def plt_module():
    try:
        import matplotlib
    except ImportError:
        raise EvoError("the report needs matplotlib: pip install 'evo[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3})
    return plt


def _note(fig, text: str) -> None:
    if text:
        fig.text(0.01, 0.005, text, fontsize=7, color=GREY, va="bottom", ha="left")


def _without_evo(rows: list[TableRow]) -> list[str]:
    return [r.shape for r in rows if not r.time_us]


def plot_speedups(plt, rows: list[TableRow], path: Path) -> tuple[dict[str, float], str]:
    libs = [l for l in LIBRARIES if any(getattr(r, f"speedup_{l}") for r in rows)]
    fig, axes = plt.subplots(len(libs) or 1, 1, figsize=(8, 2.2 * max(1, len(libs)) + 0.8), sharex=True, squeeze=False)
    from matplotlib.ticker import MaxNLocator

    gms = {}
    allv = [getattr(r, f"speedup_{l}") for r in rows for l in libs if getattr(r, f"speedup_{l}")]
    lo, hi = (min(allv), max(allv)) if allv else (0.5, 2.0)
    lo, hi = min(lo, 0.9) * 0.95, max(hi, 1.1) * 1.05
    bins = [lo * (hi / lo) ** (i / 30) for i in range(31)]
    for ax, lib in zip(axes[:, 0], libs):
        v = [getattr(r, f"speedup_{lib}") for r in rows if getattr(r, f"speedup_{lib}")]
        gms[lib] = gm = geomean(v)
        faster = sum(x > 1 for x in v)
        ax.hist([x for x in v if x > 1], bins=bins, color=EVO_COLOR, label="evo faster")
        ax.hist([x for x in v if x <= 1], bins=bins, color=LIB_COLOR, label=f"{LIB_LABEL[lib]} faster")
        ax.axvline(1.0, color="black", lw=1)
        ax.axvline(gm, color="black", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_ylabel("shapes")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"vs {LIB_LABEL[lib]}: geomean {gm:.3f}x (dashed), evo faster on {faster} of {len(v)} shapes "
                     "(before noise bands)", loc="left", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
    ax = axes[-1, 0]
    ax.set_xlabel("speedup of evo's best kernel (baseline time / evo time; > 1 means evo is faster)")
    ticks = [t for t in (0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4) if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    missing = _without_evo(rows)
    note = f"{len(missing)} of {len(rows)} shapes have no evo kernel and are not in these histograms: " \
           f"{', '.join(missing)}" if missing else ""
    fig.suptitle("Speedup distribution per baseline", x=0.01, ha="left", fontweight="bold")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    _note(fig, note[:160] + ("..." if len(note) > 160 else ""))
    fig.savefig(path)
    plt.close(fig)
    return gms, note


def plot_noise(plt, rows: list[TableRow], path: Path) -> str:
    """Every shape with an evo kernel: its speedup over the best library, the noise band around 1x (a tie inside
    it), coloured by verdict."""
    pts = sorted((r for r in rows if r.time_us and r.speedup_best_library), key=lambda r: r.speedup_best_library)
    fig, ax = plt.subplots(figsize=(max(8, 0.28 * len(pts) + 2), 4.6))
    xs = list(range(len(pts)))
    for x, r in zip(xs, pts):
        b = r.noise_band
        ax.plot([x, x], [1 / (1 + b), 1 + b], color=GREY, lw=5, alpha=0.35, solid_capstyle="butt")
        ax.scatter([x], [r.speedup_best_library], s=30, zorder=3, color=VERDICT_COLOR.get(r.verdict, GREY))
    for v, c in VERDICT_COLOR.items():
        ax.scatter([], [], color=c, label=f"{v} ({sum(r.verdict == v for r in pts)})")
    ax.plot([], [], color=GREY, lw=5, alpha=0.35, label="noise band (a tie inside it)")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ys = [r.speedup_best_library for r in pts] or [1.0]
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4)
             if min(ys + [0.95]) * 0.9 <= t <= max(ys + [1.05]) * 1.1]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(xs)
    ax.set_xticklabels([r.shape for r in pts], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("best library µs / evo µs")
    ax.set_title("Per shape: evo against the best library, with its noise band", loc="left", fontweight="bold")
    ax.legend(fontsize=8, loc="upper left")
    missing = _without_evo(rows)
    note = f"{len(missing)} shapes without an evo kernel are not shown: {', '.join(missing)}" if missing else ""
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    _note(fig, note[:160])
    fig.savefig(path)
    plt.close(fig)
    return note


def plot_roofline(plt, rows: list[TableRow], bounds: Bounds | None, path: Path) -> str:
    fig, ax = plt.subplots(figsize=(8, 5.4))
    ai = lambda r: parse_shape(r.shape).flops / parse_shape(r.shape).min_bytes  # noqa: E731
    xs = [ai(r) for r in rows]
    if bounds and xs:
        lo, hi = min(xs) / 1.5, max(xs) * 1.5
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(grid, [min(bounds.peak_tflops, x * bounds.bw_gbs / 1000) for x in grid], color="black", lw=1.5,
                label=f"roof: {bounds.peak_tflops:.0f} TFLOP/s, {bounds.bw_gbs:.0f} GB/s ({bounds.roof_source})")
        if bounds.lib_peak_tflops and bounds.lib_bw_gbs:
            ax.plot(grid, [min(bounds.lib_peak_tflops, x * bounds.lib_bw_gbs / 1000) for x in grid], color=GREY,
                    ls="--", lw=1, label=f"measured: cuBLAS 8192³ {bounds.lib_peak_tflops:.0f} TFLOP/s, "
                                         f"copy {bounds.lib_bw_gbs:.0f} GB/s (a library's rate, not a roof)")
        if bounds.launch_us:
            caps = [(ai(r), parse_shape(r.shape).flops / (bounds.launch_us * 1e-6) / 1e12) for r in rows]
            caps = [(x, y) for x, y in caps if y < bounds.peak_tflops]
            if caps:
                ax.scatter(*zip(*caps), marker="_", s=60, color="black", lw=1,
                           label=f"launch floor {bounds.launch_us:.2f} µs caps these shapes ({bounds.launch_source})")
    lib_t = [(ai(r), parse_shape(r.shape).tflops(best_lib_us(r))) for r in rows if best_lib_us(r)]
    if lib_t:
        ax.scatter(*zip(*lib_t), marker="x", s=22, color=GREY, label=f"best library ({len(lib_t)} shapes)")
    for verdict, color in VERDICT_COLOR.items():
        pts = [(ai(r), r.tflops) for r in rows if r.tflops and r.verdict == verdict]
        if pts:
            ax.scatter(*zip(*pts), s=26, color=color, label=f"evo: {verdict} ({len(pts)})", alpha=0.85,
                       edgecolor="white", lw=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of A, B and C moved once)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline: all {len(rows)} shapes, evo's best kernel and the best library", loc="left",
                 fontweight="bold")
    ax.legend(fontsize=7, loc="lower right")
    missing = _without_evo(rows)
    note = (f"{len(missing)} shapes have no evo kernel (library point only)" if missing else "") + \
        ("" if bounds else "; no roof: neither a datasheet nor measured ceilings for this GPU")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    _note(fig, note.strip("; "))
    fig.savefig(path)
    plt.close(fig)
    return note.strip("; ")


def plot_wins(plt, rows: list[TableRow], path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in rows:
        key = f"evo: {r.family}" if r.winner == "evo" else LIB_LABEL.get(r.winner, r.winner or "none")
        counts[key] = counts.get(key, 0) + 1
    items = sorted(counts.items(), key=lambda kv: (not kv[0].startswith("evo"), -kv[1]))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(items) + 1.4))
    names = [k for k, _ in items][::-1]
    vals = [v for _, v in items][::-1]
    colors = [EVO_COLOR if n.startswith("evo") else LIB_COLOR for n in names]
    ax.barh(names, vals, color=colors)
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v}", va="center", fontsize=9)
    ties = sum(r.verdict == "tie" for r in rows)
    ax.set_xlabel("shapes won (an evo lead inside the noise band counts for the library)")
    ax.set_title(f"Wins per kernel family ({sum(vals)} shapes, {ties} ties; blue: evo, red: a library)", loc="left",
                 fontweight="bold", fontsize=10)
    ax.grid(axis="y", visible=False)
    ax.set_xlim(0, max(vals) * 1.15 if vals else 1)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return counts


def plot_minutes(plt, rows: list[TableRow], minutes: dict[str, float], path: Path) -> str:
    fig, ax = plt.subplots(figsize=(8, 4.4))
    for win, color, label in ((True, EVO_COLOR, "evo wins"), (False, LIB_COLOR, "library wins")):
        pts = [(parse_shape(r.shape).flops / 1e9, minutes[r.shape]) for r in rows
               if r.shape in minutes and (r.winner == "evo") == win]
        if pts:
            ax.scatter(*zip(*pts), s=24, color=color, label=label, alpha=0.85)
    shown = [r for r in rows if r.shape in minutes]
    total = sum(minutes[r.shape] for r in shown)
    ax.set_xscale("log")
    ax.set_xlabel("shape size (GFLOP per call)")
    ax.set_ylabel("GPU-minutes")
    ax.set_ylim(bottom=0)
    ax.set_title(f"GPU-minutes per shape: {total:.1f} over {len(shown)} of {len(rows)} shapes", loc="left",
                 fontweight="bold")
    if shown:
        ax.legend(fontsize=8)
    missing = [r.shape for r in rows if r.shape not in minutes]
    note = f"{len(missing)} of {len(rows)} shapes have no GPU-time record in the archive: {', '.join(missing)}" \
        if missing else ""
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))
    _note(fig, note[:160] + ("..." if len(note) > 160 else ""))
    fig.savefig(path)
    plt.close(fig)
    return note


def plot_lineage(plt, tree: list[tuple[int, dict]], shape: str, path: Path) -> None:
    """The first-parent chain of the winner: time on this shape per ancestor, oldest on the left."""
    chain = []
    for d, node in tree:
        if d == len(chain):
            chain.append(node)
    chain = chain[::-1]
    fig, ax = plt.subplots(figsize=(8, 3.8))
    xs = list(range(len(chain)))
    ys = [n["time_us"] or float("nan") for n in chain]
    ax.plot(xs, ys, "-o", color=EVO_COLOR)
    for x, n in zip(xs, chain):
        y = n["time_us"]
        ax.annotate(f"{n['hash'][:8]}\n{n['proposer']}", (x, y if y else 0), textcoords="offset points",
                    xytext=(0, 8), ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{'winner' if i == len(chain) - 1 else f'-{len(chain) - 1 - i}'}" for i in xs])
    ax.set_xlabel("ancestor (first parent), oldest left")
    ax.set_ylabel(f"µs on {shape}")
    ax.margins(y=0.25)
    ax.set_title(f"Lineage of the winner on {shape}", loc="left", fontweight="bold")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
