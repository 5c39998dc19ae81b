"""Run a kernel once under compute-sanitizer (memcheck, racecheck, initcheck) and say pass or fail.

    python -m evo.sanitize FILE.cu --shape MxNxK [--tools memcheck,racecheck,initcheck] [--cubin FILE.cubin]

Each tool runs in its own subprocess: ``compute-sanitizer --tool T python -m evo.sanitize --once ...``,
where the inner run loads the cubin with the same launcher as the evaluator (evo.gpu.launch), on
exactly sized cudaMalloc'd buffers (no memory pool, no rounding), and launches it once. memcheck runs
with ``--padding`` (an unmapped-for-the-kernel pad behind every allocation, so a read 4 KiB past A is an
error, not a read of the next buffer). CUDA API errors are not kernel errors (``--report-api-errors no``:
the runtime's own ``cuGetProcAddress`` probes made every wgmma champion "inconclusive"); whether the
kernel ran is told by the inner run itself, which prints a marker after its launch and synchronize.
The result is pass/fail per tool plus the first error line. Where compute-sanitizer is absent the
result says "compute-sanitizer not available" and nothing fails.

The search runs this on the champion before export when ``check.sanitize`` is true (vet_champion).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EvoError, cli_entry
from .kernel import KernelSource
from .problem import Problem, parse_shape

TOOLS = ("memcheck", "racecheck", "initcheck")
NOT_AVAILABLE = "compute-sanitizer not available"
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_PREFIX = re.compile(r"^=+\s?")
RAN = "evo-sanitize: kernel launched and synchronized"  # printed by the inner run when its launch completed
PADDING = 1 << 20  # bytes of padding behind every allocation under memcheck


@dataclass
class ToolResult:
    tool: str
    ok: bool
    errors: int = 0
    first_error: str = ""
    seconds: float = 0.0
    note: str = ""  # "inconclusive" (the tool could not run the kernel) or "advisory" (a known tool limit)


@dataclass
class SanitizeReport:
    available: bool
    ok: bool  # True when every tool passed, or when the sanitizer is not available
    shape: str = ""
    tools: list[ToolResult] = field(default_factory=list)
    detail: str = ""

    def line(self) -> str:
        if not self.available:
            return f"sanitizer: {self.detail}"
        def one(t: ToolResult) -> str:
            if not t.ok:
                return f"{t.tool} FAIL: {t.first_error}"
            return f"{t.tool} {t.note}: {t.first_error}" if t.note else f"{t.tool} pass"

        parts = [one(t) for t in self.tools]
        return f"sanitizer on {self.shape}: " + "; ".join(parts)


def find_sanitizer() -> str | None:
    """$COMPUTE_SANITIZER, else the toolkit's compute-sanitizer (evo.compile.toolkit_tool); None if none."""
    from .compile import toolkit_tool

    env = os.environ.get("COMPUTE_SANITIZER")
    if env and Path(env).is_file() and os.access(env, os.X_OK):
        return env
    return toolkit_tool("compute-sanitizer", "compute-sanitizer") or None


def small_shape(problem: Problem, ks: KernelSource) -> Problem:
    """A smaller shape with the same residues (M, N mod 256, K mod 512) the kernel accepts, so the
    sanitizer (10-100x slower) sees the same edge cases; the exact shape when that is not accepted."""
    def cut(d: int, q: int) -> int:
        return d if d <= q else q + d % q

    p = Problem(cut(problem.m, 256), cut(problem.n, 256), cut(problem.k, 512), problem.layout)
    try:
        return p if ks.accepts(p) else problem
    except Exception:  # noqa: BLE001 - an expression that fails on the small shape: use the exact one
        return problem


def parse_output(tool: str, rc: int, text: str, error_rc: int, ran_marker: bool = False) -> ToolResult:
    """A tool's verdict. Errors in the kernel (bad accesses, hazards, uninitialised reads) fail it. CUDA API
    errors ("Program hit ... on CUDA API call to ...") are no verdict on the kernel: with ran_marker (the
    inner run prints RAN once its launch and synchronize succeeded) they are a note beside a pass when the
    kernel ran, and inconclusive when it did not; without it (older runs) API-only errors are inconclusive."""
    m = _SUMMARY.findall(text)
    errors = int(m[-1]) if m else 0
    first, api = "", ""
    for line in text.splitlines():
        if not line.startswith("=") or "COMPUTE-SANITIZER" in line or "SUMMARY" in line:
            continue
        body = " ".join(_PREFIX.sub("", line).split())
        if body.startswith("Program hit") and "API call" in body:
            api = api or body[:300]
            continue
        if body and not body.startswith(("at ", "by thread", "Address", "Saved host backtrace", "Host Frame",
                                         "Device Frame", "in ", "and ", "Program hit", "#", "Write Thread",
                                         "Read Thread", "Current Value", "Previous Value")):
            first = first or body[:300]
    if ran_marker:
        ran = RAN in text
        if first:
            return ToolResult(tool, False, max(errors, 1), first)
        if ran and rc in (0, error_rc):
            return ToolResult(tool, True, 0, f"CUDA API errors, not from the kernel: {api}" if api else "",
                              note="api errors" if api else "")
        # no kernel error, and the launch never completed (e.g. the instrumented kernel needs more registers than
        # the launch allows): no verdict either way
        tail = [l for l in text.splitlines() if l.strip() and not l.startswith("=")]
        why = f"the kernel did not run under {tool} (exit code {rc}): " + (api or (" ".join(tail[-1].split())[:240] if tail else ""))
        if api or any(m in text for m in ("CUDA_ERROR", "cudaError", "CUDADriverError", "CUDARuntimeError")):
            return ToolResult(tool, True, 0, why, note="inconclusive")
        return ToolResult(tool, False, 0, why)  # the run itself broke (not the GPU): a failure, not a verdict
    if (rc == error_rc or errors) and api and not first:
        return ToolResult(tool, True, 0, f"the kernel did not run under {tool}: {api}", note="inconclusive")
    if rc == error_rc or errors:
        return ToolResult(tool, False, max(errors, 1), first or api or f"{tool} reported errors")
    if rc != 0:
        tail = [l for l in text.splitlines() if l.strip()]
        return ToolResult(tool, False, 0, f"the run failed under {tool} (exit code {rc}): "
                                          + (" ".join(tail[-1].split())[:240] if tail else ""))
    return ToolResult(tool, True)


def tool_command(exe: str, tool: str, error_rc: int, inner: list[str], padding: bool = True) -> list[str]:
    """compute-sanitizer's command line for one tool: API errors not reported as kernel errors, memcheck with
    padding behind every allocation (padding=False: the defence off, for the tests)."""
    cmd = [exe, "--tool", tool, "--error-exitcode", str(error_rc), "--print-limit", "20",
           "--report-api-errors", "no"]
    if tool == "memcheck" and padding:
        cmd += ["--padding", str(PADDING)]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    return cmd + inner


def sanitize(source_path: str, cubin: str, problem: Problem, tools=TOOLS, timeout_s: float = 600.0,
             exact_shape: bool = False, off: list | tuple = ()) -> SanitizeReport:
    """Run every tool once on the kernel; never raises for a missing sanitizer. off: the config's
    check.defences_off (with EVO_TEST_DEFENCES_OFF, evo.defences)."""
    import time

    from .defences import defences_off

    padding = "sanitizer_padding" not in defences_off(off)

    exe = find_sanitizer()
    if exe is None:
        return SanitizeReport(False, True, detail=f"{NOT_AVAILABLE} (not on PATH, nor in $CUDA_HOME/bin or /usr/local/cuda/bin); skipped")
    ks = KernelSource.parse(Path(source_path).read_text())
    p = problem if exact_shape else small_shape(problem, ks)
    report = SanitizeReport(True, True, shape=p.key)
    error_rc = 86
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (root, os.environ.get("PYTHONPATH", "")) if x))
    for tool in tools:
        cmd = tool_command(exe, tool, error_rc, [sys.executable, "-m", "evo.sanitize", "--once", source_path,
                                                 "--cubin", cubin, "--shape", p.key], padding)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                                  start_new_session=True)
            res = parse_output(tool, proc.returncode, proc.stdout + proc.stderr, error_rc, ran_marker=True)
        except subprocess.TimeoutExpired:
            res = ToolResult(tool, False, 0, f"{tool} ran longer than {timeout_s:.0f} s")
        res.seconds = time.monotonic() - t0
        if tool == "racecheck" and not res.ok and "hazard" in res.first_error and uses_mbarriers(ks.text):
            # racecheck does not model mbarrier waits / the async proxy (TMA, wgmma): on such kernels its
            # shared-memory hazards are recorded, but the bit-exact and repeated checks are the verdict
            res = ToolResult(tool, True, res.errors, res.first_error, res.seconds, note="advisory")
        report.tools.append(res)
        report.ok = report.ok and res.ok
    return report


def uses_mbarriers(text: str) -> bool:
    return "mbarrier" in text


def run_once(source_path: str, cubin: str, shape: str) -> int:
    """The inner run: one launch on plain allocations, then a full synchronize."""
    import cupy

    from .gpu.host_launch import load_kernel

    cupy.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the sanitizer sees exact edges
    p = parse_shape(shape)
    ks = KernelSource.parse(Path(source_path).read_text())
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    k = load_kernel(ks, cubin, p, props["multiProcessorCount"], props.get("sharedMemPerBlockOptin", 48 * 1024))
    rs = cupy.random.RandomState(1)
    # each buffer its own cudaMalloc of exactly its size (no pool): an access past one is an access past an
    # allocation, which memcheck's padding makes visible
    a = cupy.empty((p.m, p.k), dtype=cupy.float16)
    a[...] = rs.standard_normal((p.m, p.k), dtype=cupy.float32)
    b = cupy.empty((p.n, p.k), dtype=cupy.float16)
    b[...] = rs.standard_normal((p.n, p.k), dtype=cupy.float32)
    c = cupy.zeros((p.m, p.n), dtype=cupy.float16)
    cupy.cuda.runtime.deviceSynchronize()
    k(a, b, c)
    cupy.cuda.runtime.deviceSynchronize()
    print(RAN, flush=True)
    return 0


@cli_entry
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evo.sanitize", description=__doc__.splitlines()[0])
    ap.add_argument("kernel", help="a .cu file following the evo kernel ABI")
    ap.add_argument("--shape", required=True, help="MxNxK")
    ap.add_argument("--cubin", help="an already compiled cubin of the kernel (default: compile it)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma list of compute-sanitizer tools")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per tool")
    ap.add_argument("--exact-shape", action="store_true", help="do not shrink the shape")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    p = parse_shape(args.shape)
    if args.once:
        return run_once(args.kernel, args.cubin, args.shape)
    try:
        text = Path(args.kernel).read_text()
    except OSError as e:
        raise EvoError(f"cannot read {args.kernel}: {e.strerror}") from None
    ks = KernelSource.parse(text)
    tools = [t for t in args.tools.split(",") if t]
    bad = [t for t in tools if t not in TOOLS + ("synccheck",)]
    if bad:
        raise EvoError(f"unknown sanitizer tool {', '.join(bad)}; known: {', '.join(TOOLS)}, synccheck")
    if find_sanitizer() is None:
        raise EvoError(f"{NOT_AVAILABLE}: install the CUDA toolkit's compute-sanitizer or set COMPUTE_SANITIZER")
    cubin = args.cubin
    if not cubin:
        from .compile import Compiler
        from .config import load_config
        from .gpu.device import gpu_info, require_gpu

        require_gpu()
        info = gpu_info()
        res = Compiler.from_config(load_config().compile).compile(ks, info.arch)
        if not res.ok:
            raise EvoError(f"{args.kernel} does not compile for {info.arch}: {res.error}")
        cubin = res.cubin_path
    report = sanitize(args.kernel, cubin, p, tools, args.timeout, args.exact_shape)
    print(report.line())
    return 0 if report.ok else 1


def vet_kernel(worker, problem: Problem, source: str, cubin_path: str, cfg, out, sanitizer: bool = True) -> str:
    """The strong re-check of one kernel before it is published: cfg.check.recheck_seeds seeds on the exact shape,
    guards, off-tile shapes it claims to accept, then (check.sanitize, unless `sanitizer` is False: a caller that
    runs it later, on the one kernel it keeps, with sanitize_kernel) the sanitizer. '' if it passes, else why not."""
    from .gpu.worker import WorkerFault

    off_tile = [f"{max(1, problem.m - 1)}x{problem.n + 3}x{problem.k}", "77x200x72", "129x67x33"]
    try:
        res = worker.call("recheck", timeout_s=max(300.0, cfg.timing.timeout_s), problem=problem, source=source,
                          cubin=cubin_path, shapes=off_tile, seeds=cfg.check.recheck_seeds)
        why = "" if res["ok"] else f"re-check failed: {res['error']}"
    except WorkerFault as e:
        why = f"re-check crashed: {e}"
    except EvoError as e:
        why = f"re-check failed: {e}"
    if not why and sanitizer:
        why = sanitize_kernel(problem, source, cubin_path, cfg, out)
    return why


def sanitize_kernel(problem: Problem, source: str, cubin_path: str, cfg, out) -> str:
    """vet_kernel's last step alone: with check.sanitize, compute-sanitizer on the kernel. '' if it passes."""
    if not cfg.check.sanitize:
        return ""
    src = Path(cubin_path).with_suffix(".cu")
    if not src.is_file():
        src.write_text(source)
    rep = sanitize(str(src), cubin_path, problem, timeout_s=cfg.check.sanitize_timeout_s, off=cfg.check.defences_off)
    print(f"  {rep.line()}", file=out, flush=True)
    if rep.ok:
        return ""
    bad = next(t for t in rep.tools if not t.ok)
    return f"compute-sanitizer {bad.tool}: {bad.first_error}"


def vet_champion(worker, store, compiler, problem: Problem, info, cfg, out, run_id: int = 0, tries: int = 3,
                 order: list[str] | None = None):
    """Before export: the best stored kernel must pass a strong re-check (cfg.check.recheck_seeds seeds on
    the exact shape, guards, plus off-tile shapes it claims to accept) and, with check.sanitize, the
    sanitizer. A kernel that fails is re-recorded as rejected and the next best is tried. With `order` (hashes,
    best first: a runoff's ranking) the kernels are tried in that order instead of by stored time.
    Returns the store row of the vetted champion, or None."""
    from .compile import stored_cubin
    from .records import EvalResult

    gpu = info.key
    # each try takes the next hash of `order`, or (None) the stored best left after the rejections so far
    for h in list(order) if order else [None] * max(1, tries):
        best = store.kernel_row(h, problem.key, problem.layout, gpu) if h else store.best(problem.key, problem.layout, gpu)
        if best is None:
            if h:
                continue
            return None
        h = best["hash"]
        try:
            cubin_path = stored_cubin(compiler, store, best["source"], info.arch)  # recompiled where the cache lacks it
            why = vet_kernel(worker, problem, best["source"], cubin_path, cfg, out)
        except EvoError as e:
            why = f"re-check failed: {e}"
        if not why:
            return best
        print(f"  the best kernel {h[:10]} is rejected: {why}", file=out, flush=True)
        store.add_evaluation(problem.key, problem.layout, gpu, EvalResult(h, False, "recheck", why[:500]),
                             info.cuda_runtime, info.driver, run_id)
    return None


if __name__ == "__main__":
    sys.exit(main())
