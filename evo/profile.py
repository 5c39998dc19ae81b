"""Nsight Compute evidence for one kernel on one problem: a small fixed metric set, read from ``ncu --csv``.

    ncu --clock-control none --profile-from-start off --metrics <METRICS> --csv \\
        python -m evo.gpu.profile_target --shape MxNxK --source kernel.cu --cubin kernel.cubin

The target (evo/gpu/profile_target.py) warms the kernel up, then launches it once between
cudaProfilerStart/Stop, so only that launch is measured; ``--library cublas`` profiles the library's
call instead (its kernel name gives tile, cluster and split: evo.library_kernel). The GPU's clocks are
left as they are (``--clock-control none``). Where ncu is missing or not permitted (ERR_NVGPUCTRPERM)
``Profiler`` says so once and every later call returns a result with ``ok=False`` at no cost.

    python -m evo.profile --shape 4096x4096x1024 --source k.cu --cubin k.cubin    # prints the metrics
    python -m evo.profile --shape 4096x4096x1024 --library cublas
"""
from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from .errors import EvoError, cli_entry
from .gpu.profile_target import LIBRARIES
from .problem import Problem, parse_shape

# name -> (metric, what it says). A fixed, small set: one replay pass group per kernel on Hopper.
METRICS: dict[str, tuple[str, str]] = {
    "duration_us": ("gpu__time_duration.sum", "kernel duration"),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput, % of peak"),
    "tensor_hmma_pct": ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                        "tensor pipe busy (mma.sync / HMMA), % of active cycles"),
    "tensor_gmma_pct": ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                        "tensor pipe busy (wgmma / GMMA), % of active cycles"),
    "dram_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput, % of peak"),
    "dram_read_mb": ("dram__bytes_read.sum", "DRAM bytes read"),
    "dram_write_mb": ("dram__bytes_write.sum", "DRAM bytes written"),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 throughput, % of peak"),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct", "L2 hit rate"),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy (active warps)"),
    "smem_ld_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "shared-memory load bank conflicts"),
    "smem_st_conflicts": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "shared-memory store bank conflicts"),
    "l2_read_mb": ("lts__t_sectors_srcunit_tex_op_read.sum", "L2 reads by the SMs (TMA and loads)"),
    "l2_fabric_mb": ("lts__t_sectors_srcunit_ltcfabric.sum",
                     "L2 fabric traffic (lines crossing between the L2's two partitions)"),
    "ctas": ("sm__ctas_launched.sum", "CTAs launched"),
    "sm_clock_mhz": ("sm__cycles_elapsed.avg.per_second", "SM clock during the kernel"),
    "sm_active_min": ("sm__cycles_active.min", "active cycles of the least busy SM"),
    "sm_active_max": ("sm__cycles_active.max", "active cycles of the busiest SM"),
}
STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "wait", "math_pipe_throttle", "mio_throttle",
          "lg_throttle", "not_selected", "dispatch_stall", "sleeping", "no_instruction", "branch_resolving")
for _s in STALLS:  # warp-state sampling: cycles a warp waits on this reason per issued instruction
    METRICS[f"stall_{_s}"] = (f"smsp__average_warps_issue_stalled_{_s}_per_issue_active.ratio",
                              f"stall: {_s.replace('_', ' ')}, cycles per issued instruction")
_BY_METRIC = {m: k for k, (m, _) in METRICS.items()}
_UNKNOWN_METRIC = re.compile(r"Failed to find metric (?:regex:)?([\w.]+)")
_NOT_PERMITTED = ("ERR_NVGPUCTRPERM", "permission", "not permitted")


@dataclass
class ProfileResult:
    ok: bool
    kernel: str = ""  # the profiled kernel's name (for the library: which kernel cuBLAS ran)
    metrics: dict[str, float] = field(default_factory=dict)  # METRICS keys -> value (durations in µs, bytes in MB)
    detail: str = ""  # why not ok; or skipped metrics
    command: str = ""
    seconds: float = 0.0
    kernels: list[str] = field(default_factory=list)  # every kernel in the profiled range
    kernel_us: list[float] = field(default_factory=list)  # their durations, in the same order

    def call_summary(self) -> str:
        """Where the profiled call launched more than one kernel (cuBLAS's split-K sums its partials in a second
        kernel): each with its duration and their sum, since the metrics are the longest kernel's alone."""
        if len(self.kernels) < 2:
            return ""
        parts = ", ".join(f"{k.split('(')[0]} {us:.1f} µs" for k, us in zip(self.kernels, self.kernel_us))
        return (f"the call ran {len(self.kernels)} kernels: {parts}; together {sum(self.kernel_us):.1f} µs "
                f"(the metrics are {self.kernel.split('(')[0]}'s alone)")

    def lines(self) -> list[str]:
        """What a terminal prints: the metrics (describe), then the call's kernels where it ran more than one."""
        summary = self.call_summary()
        return describe(self.metrics) + ([summary] if summary else [])


def parse_csv(text: str) -> list[tuple[str, dict[str, float]]]:
    """ncu --csv (the default 'details' page, one row per kernel x metric) -> [(kernel name, {key: value})] in
    launch order. Units are normalised: durations to µs, bytes to MB."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    kernels: dict[str, tuple[str, dict[str, float]]] = {}
    for r in rows:
        metric = r.get("Metric Name", "")
        key = _BY_METRIC.get(metric)
        ident = r.get("ID", "") or str(len(kernels))
        name = r.get("Kernel Name", "")
        entry = kernels.setdefault(ident, (name, {}))
        if key is None:
            continue
        raw = (r.get("Metric Value") or "").replace(",", "")
        try:
            v = float(raw)
        except ValueError:
            continue
        unit = (r.get("Metric Unit") or "").strip().lower()
        entry[1][key] = _normalise(key, v, unit)
    return list(kernels.values())


def _normalise(key: str, v: float, unit: str) -> float:
    if key == "duration_us":
        return v * {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6}.get(unit, 1e-3)
    if key == "sm_clock_mhz":  # cycles per unit of time
        return v * {"cycle/nsecond": 1e3, "cycle/usecond": 1.0, "cycle/msecond": 1e-3, "cycle/second": 1e-6,
                    "hz": 1e-6, "khz": 1e-3, "mhz": 1.0, "ghz": 1e3}.get(unit, 1e-6)
    if key.endswith("_mb"):  # bytes, or L2 sectors of 32 bytes
        return v * {"byte": 1e-6, "kbyte": 1e-3, "mbyte": 1.0, "gbyte": 1e3, "sector": 32e-6}.get(unit, 1e-6)
    return v


def main_kernel(kernels: list[tuple[str, dict[str, float]]], name: str = "") -> tuple[str, dict[str, float]] | None:
    """The kernel named ``name`` if given, else the longest one (a library call may add a reduction kernel)."""
    if name:
        hits = [k for k in kernels if k[0] == name or k[0].startswith(name + "(")]
        return hits[-1] if hits else None
    return max(kernels, key=lambda k: k[1].get("duration_us", 0.0), default=None)


class Profiler:
    """Runs ncu on evo.gpu.profile_target. ``say`` receives the one-time note when ncu cannot be used."""

    def __init__(self, ncu: str = "ncu", timeout_s: float = 180.0, *, python: str = sys.executable,
                 say: Callable[[str], None] | None = None, env: dict | None = None):
        self.ncu = ncu
        self.timeout_s = float(timeout_s)
        self.python = python
        self.say = say or (lambda s: print(s, file=sys.stderr))
        self.env = env
        self.disabled = ""  # why ncu cannot be used here (said once)
        self.runs = 0

    def _disable(self, why: str) -> ProfileResult:
        if not self.disabled:
            self.disabled = why
            self.say(f"note: {why}; the LLM prompts go without profiler metrics")
        return ProfileResult(False, detail=self.disabled)

    def available(self) -> bool:
        if self.disabled:
            return False
        exe = find_ncu(self.ncu)
        if not exe:
            self._disable(f"Nsight Compute ({self.ncu}) not found")
            return False
        self.ncu = exe
        return True

    def command(self, problem: Problem, target: list[str], metrics: list[str], pages: list[str] | None = None) -> list[str]:
        """ncu on evo.gpu.profile_target: the given metrics, or (pages) other sections/pages instead."""
        what = pages if pages is not None else ["--metrics", ",".join(metrics)]
        return [self.ncu, "--clock-control", "none", "--profile-from-start", "off", "--target-processes", "all",
                *what, "--csv", self.python, "-m", "evo.gpu.profile_target",
                "--shape", f"{problem.m}x{problem.n}x{problem.k}", *target]

    def profile_kernel(self, source: str, cubin: str, problem: Problem) -> ProfileResult:
        """Metrics of one launch of a candidate (its source gives the launch rules, its cubin the code)."""
        if not self.available():
            return ProfileResult(False, detail=self.disabled)
        with _source_file(source) as src:
            return self._run(problem, ["--source", src, "--cubin", cubin], kernel="")

    def sass(self, source: str, cubin: str, problem: Problem):
        """The SASS lines of one launch of a candidate with their warp-state samples (evo.profile_sass)."""
        from .profile_sass import SECTIONS, SassProfile, parse_source_csv

        if not self.available():
            return SassProfile(False, detail=self.disabled)
        t0 = time.monotonic()
        with _source_file(source) as src:
            cmd = self.command(problem, ["--source", src, "--cubin", cubin], [], pages=SECTIONS)
            self.runs += 1
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, env=self.env)
            except FileNotFoundError:
                return SassProfile(False, detail=self._disable(f"Nsight Compute ({self.ncu}) not found").detail)
            except subprocess.TimeoutExpired:
                return SassProfile(False, detail=f"ncu timed out after {self.timeout_s:g} s", command=shlex.join(cmd),
                                   seconds=time.monotonic() - t0)
        out = (p.stdout or "") + "\n" + (p.stderr or "")
        if any(s in out for s in _NOT_PERMITTED):
            return SassProfile(False, detail=self._disable("Nsight Compute is not permitted to read the GPU's "
                                                           "performance counters (ERR_NVGPUCTRPERM)").detail)
        lines = parse_source_csv(p.stdout or "")
        if p.returncode != 0 or not lines:
            tail = " ".join(ln.strip() for ln in out.strip().splitlines()[-3:])[:300]
            return SassProfile(False, detail=f"ncu exit {p.returncode}, no source page: {tail}", command=shlex.join(cmd),
                               seconds=time.monotonic() - t0)
        return SassProfile(True, lines, "", shlex.join(cmd), time.monotonic() - t0)

    def profile_library(self, problem: Problem, library: str = "cublas") -> ProfileResult:
        """Metrics and name of the kernel the library runs for this problem."""
        if not self.available():
            return ProfileResult(False, detail=self.disabled)
        return self._run(problem, ["--library", library], kernel="")

    def _known_bases(self) -> set[str]:
        """Base names of the metrics this ncu knows on this GPU (ncu --query-metrics); empty if it cannot say."""
        try:
            p = subprocess.run([self.ncu, "--query-metrics"], capture_output=True, text=True, timeout=60, env=self.env)
        except (OSError, subprocess.TimeoutExpired):
            return set()
        return {ln.split()[0] for ln in (p.stdout or "").splitlines() if ln.strip() and "__" in ln.split()[0]}

    def _run(self, problem: Problem, target: list[str], kernel: str) -> ProfileResult:
        metrics = [m for m, _ in METRICS.values()]
        dropped: list[str] = []
        t0 = time.monotonic()
        for _ in range(4):  # drop metrics this ncu / GPU does not know, then try again
            cmd = self.command(problem, target, metrics)
            self.runs += 1
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, env=self.env)
            except FileNotFoundError:
                return self._disable(f"Nsight Compute ({self.ncu}) not found")
            except subprocess.TimeoutExpired:
                return ProfileResult(False, detail=f"ncu timed out after {self.timeout_s:g} s", command=shlex.join(cmd),
                                     seconds=time.monotonic() - t0)
            out = (p.stdout or "") + "\n" + (p.stderr or "")
            if any(s in out for s in _NOT_PERMITTED):
                return self._disable("Nsight Compute is not permitted to read the GPU's performance counters "
                                     "(ERR_NVGPUCTRPERM: needs root or NVreg_RestrictProfilingToAdminUsers=0)")
            unknown = [m for m in _UNKNOWN_METRIC.findall(out) if m in metrics]
            if unknown:
                known = self._known_bases() if not dropped else None  # ncu may name one unknown metric per run
                keep = [m for m in metrics if m not in unknown and (not known or m.split(".")[0] in known)]
                dropped += [m for m in metrics if m not in keep]
                metrics = keep
                continue
            kernels = parse_csv(p.stdout or "")
            hit = main_kernel(kernels, kernel)
            if p.returncode != 0 or hit is None:
                tail = " ".join(l.strip() for l in out.strip().splitlines()[-3:])[:300]
                return ProfileResult(False, detail=f"ncu exit {p.returncode}, no {kernel or 'kernel'} profiled: {tail}",
                                     command=shlex.join(cmd), seconds=time.monotonic() - t0)
            detail = f"not available here: {', '.join(dropped)}" if dropped else ""
            return ProfileResult(True, hit[0], hit[1], detail, shlex.join(cmd), time.monotonic() - t0,
                                 [k[0] for k in kernels], [k[1].get("duration_us", 0.0) for k in kernels])
        return ProfileResult(False, detail="ncu kept refusing metrics: " + ", ".join(dropped), seconds=time.monotonic() - t0)


@contextlib.contextmanager
def _source_file(source: str):
    """The candidate's source in a temporary kernel.cu (profile_target reads its launch rules from it)."""
    with tempfile.TemporaryDirectory(prefix="evo-profile-") as d:
        src = os.path.join(d, "kernel.cu")
        with open(src, "w") as f:
            f.write(source)
        yield src


def find_ncu(ncu: str = "ncu") -> str:
    """The ncu executable: as given (a path), else the toolkit's (evo.compile.toolkit_tool); "" if none."""
    if os.sep in ncu:
        return ncu if os.path.isfile(ncu) and os.access(ncu, os.X_OK) else ""
    from .compile import toolkit_tool

    return toolkit_tool(ncu)


def describe(metrics: dict[str, float]) -> list[str]:
    """Readable lines for a prompt or a terminal: throughput figures, then the top stall reasons."""
    out = []
    for key in ("duration_us", "sm_throughput_pct", "tensor_gmma_pct", "tensor_hmma_pct", "dram_pct", "l2_pct",
                "l2_hit_pct", "occupancy_pct", "dram_read_mb", "dram_write_mb", "l2_read_mb", "l2_fabric_mb",
                "smem_ld_conflicts", "smem_st_conflicts", "ctas", "sm_clock_mhz"):
        if key in metrics:
            v = metrics[key]
            unit = (" µs" if key == "duration_us" else "%" if key.endswith("_pct") else " MB" if key.endswith("_mb")
                    else " MHz" if key.endswith("_mhz") else "")
            num = f"{v:.0f}" if key.endswith(("conflicts", "_mhz")) or key == "ctas" else f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.3f}"
            out.append(f"{METRICS[key][1]}: {num}{unit}")
    lo, hi = metrics.get("sm_active_min", 0.0), metrics.get("sm_active_max", 0.0)
    if hi > 0:  # SMs with no work, or with much longer work than others: tail, imbalance or coupled CTAs
        out.append(f"busiest SM active {hi:.0f} cycles, least busy {lo:.0f}" + (f" ({hi / lo:.2f}x)" if lo > 0 else " (an idle SM)"))
    stalls = sorted(((k, v) for k, v in metrics.items() if k.startswith("stall_") and v > 0), key=lambda kv: -kv[1])
    if stalls:
        total = sum(v for _, v in stalls)
        top = ", ".join(f"{k[6:].replace('_', ' ')} {v:.2f} ({100 * v / total:.0f}%)" for k, v in stalls[:5])
        out.append(f"top warp stall reasons (cycles per issued instruction): {top}")
    return out


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from .cli import _Parser
    from .config import load_config

    ap = _Parser(prog="python -m evo.profile", description="Nsight Compute metrics of one kernel (or the library) on one shape.")
    ap.add_argument("--config", help="YAML file overriding evo/defaults.yaml (its llm.ncu and llm.profile_timeout_s)")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--source", help="candidate .cu (front matter gives the launch)")
    ap.add_argument("--cubin", help="its compiled cubin")
    ap.add_argument("--library", choices=LIBRARIES, help="profile the library's kernel instead (cuBLASLt: the "
                    "heuristic's first algorithm, or the autotune winner)")
    ap.add_argument("--ncu", help="the Nsight Compute command (default: the config's llm.ncu)")
    ap.add_argument("--sass", type=int, metavar="N", help="instead of the metrics: the N SASS instructions where the "
                    "kernel's warps wait most (ncu source page, warp-state sampling; evo.profile_sass)")
    args = ap.parse_args(argv)
    problem = parse_shape(args.shape)
    llm = load_config(args.config).llm
    prof = Profiler(args.ncu or llm.ncu, llm.profile_timeout_s)
    if args.sass is not None:
        return _sass(prof, args, problem)
    if args.library:
        res = prof.profile_library(problem, args.library)
    else:
        if not (args.source and args.cubin):
            raise EvoError("give --source and --cubin, or --library " + "|".join(LIBRARIES))
        with open(args.source) as f:
            res = prof.profile_kernel(f.read(), args.cubin, problem)
    if not res.ok:
        raise EvoError(f"profile failed: {res.detail}")
    print(f"kernel: {res.kernel}")
    for line in res.lines():
        print(f"  {line}")
    if args.library:
        from .library_kernel import parse_kernel_name

        print(f"  {parse_kernel_name(res.kernel).summary()}")
    print(f"({res.seconds:.1f} s: {res.command})")
    return 0


def _sass(prof: Profiler, args, problem: Problem) -> int:
    from .profile_sass import hotspots

    if args.library or not (args.source and args.cubin):
        raise EvoError("--sass needs --source and --cubin (a candidate; the library's SASS is not sampled)")
    if args.sass < 1:
        raise EvoError("--sass takes a count of instructions, at least 1")
    with open(args.source) as f:
        res = prof.sass(f.read(), args.cubin, problem)
    if not res.ok:
        raise EvoError(f"profile failed: {res.detail}")
    for line in hotspots(res.lines, args.sass):
        print(line)
    print(f"({res.seconds:.1f} s: {res.command})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
