"""The kernel ABI: a candidate is one complete .cu text with its launch rules in front matter.

Every candidate defines

    extern "C" __global__ void evo_gemm(const __half* A, const __half* B, __half* C,
                                        int M, int N, int K, float* workspace
                                        [, const __grid_constant__ TmaDesc tmap0, ...]);

A is M x K row-major, B is N x K row-major, C is M x N row-major: C = A @ B^T with
fp32 accumulation. ``workspace`` is a device buffer of ``workspace`` bytes that the
harness zeroes once after allocation and gives to this kernel on this shape alone; a kernel
that uses it (e.g. split-K counters) must leave any counters as its next launch expects them:
back at zero, or a count each launch advances by the same step (read relative to where it is).

The source starts with a YAML block in a C comment:

    /*---evo
    family: mma_sm80
    archs: [sm_80, sm_90a]
    params: {BM: 128, BN: 128, BK: 32, STAGES: 3}
    block: [256, 1, 1]                          # ints or expressions
    grid: ["cdiv(N, BN)", "cdiv(M, BM)", 1]
    smem: "STAGES * (BM + BN) * BK * 2"        # dynamic shared memory, bytes
    workspace: 0                                # bytes
    requires: "K % 8 == 0"                      # shapes this kernel accepts (default: all)
    tensor_maps:                                # optional, appended to the arguments in order
      - {operand: A, box: [BM, 64], swizzle: 128}
    ---*/

Expressions may use M, N, K, NUM_SMS, every name in ``params`` and the functions
cdiv, min, max, round_up.  A tensor map describes operand A (M x K), B (N x K) or C
(M x N) as a 2-D fp16 row-major tensor; ``box`` is [rows, cols] of one TMA box and
out-of-bounds loads read zeros (out-of-bounds parts of a TMA store are not written). An entry
may carry ``when: "EXPR"``: the map is passed only where the expression is true (a parameter
that selects a TMA-store epilogue adds a C map to those instances alone). ``col_block: W`` makes
it a 3-D map (W, cols / W, rows) with box (W, box_cols / W, box_rows): one box then moves
box_cols contiguous columns of each row while its shared-memory image is made of W-column lines
(what a swizzle spans); the tensor's cols must be a multiple of W.

``launch: host`` (with optional ``host_args: [exprs]``) marks a candidate that builds its own launch: it defines
``extern "C"`` host functions ``evo_host_query`` and ``evo_host_params`` (HOST_ENTRIES) and an ``evo_gemm`` taking
one by-value parameter block; it is compiled into a shared object beside its cubin and launched by
evo.gpu.host_launch. Its block/grid/smem rules are then estimates (for the prior), not the launch.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import expr
from .errors import EvoError
from .problem import Problem

ENTRY = "evo_gemm"
HOST_ENTRIES = ("evo_host_query", "evo_host_params")  # launch: host (evo.gpu.host_launch, README)
LAUNCH_MODES = ("device", "host")
# libyaml's scanner where PyYAML has it (its wheels do): the same safe constructors, ~10x faster on a kernel's front
# matter, which every rendered candidate is parsed from (a generation renders hundreds)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FRONT = re.compile(r"\A\s*/\*---evo\s*\n(.*?)\n\s*---\*/", re.S)
_ENTRY_RE = re.compile(r'extern\s+"C"[^;{}]*?\b' + ENTRY + r"\s*\(")
_LINE_COMMENT = re.compile(r"//[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_WS = re.compile(r"\s+")
OPERANDS = {"A": ("M", "K"), "B": ("N", "K"), "C": ("M", "N")}
SWIZZLES = (0, 32, 64, 128)


@dataclass(frozen=True)
class TensorMapSpec:
    operand: str
    box_rows: int
    box_cols: int
    swizzle: int
    col_block: int = 0  # > 0: a 3-D map of col_block-column blocks (see the module docstring)


@dataclass(frozen=True)
class LaunchSpec:
    """Launch geometry of one kernel for one problem."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    workspace: int
    tensor_maps: tuple[TensorMapSpec, ...] = ()
    cooperative: bool = False  # launched so that the whole grid is resident at once (CTAs wait on other CTAs)


@dataclass(frozen=True)
class KernelMeta:
    family: str
    archs: tuple[str, ...]
    params: dict[str, Any]
    block: tuple
    grid: tuple
    smem: Any = 0
    workspace: Any = 0
    requires: Any = True
    tensor_maps: tuple[dict, ...] = ()
    launch: str = "device"   # "host": the candidate's own host functions build its launch (see HOST_ENTRIES)
    host_args: tuple = ()    # launch: host: expressions passed to the host functions as int64s
    cooperative: Any = False  # expression: true where the kernel's CTAs wait on each other (a cooperative launch)


@dataclass(frozen=True)
class KernelSource:
    """A candidate: its full text and the launch rules parsed from its front matter."""

    text: str
    meta: KernelMeta
    hash: str = field(default="")

    @staticmethod
    def parse(text: str) -> "KernelSource":
        meta = parse_meta(text)
        code = strip_comments(text)
        if not _ENTRY_RE.search(code):
            raise EvoError(f'kernel does not follow the ABI: no extern "C" __global__ {ENTRY}(...) entry point')
        if meta.launch == "host":
            missing = [f for f in HOST_ENTRIES if not re.search(r'extern\s+"C"[^;{}]*?\b' + f + r"\s*\(", code)]
            if missing:
                raise EvoError(f'kernel says launch: host but defines no extern "C" {", ".join(missing)}(...)')
        return KernelSource(text=text, meta=meta, hash=source_hash(text, meta))

    @property
    def code_hash(self) -> str:
        """Hash of the code nvcc compiles, exactly (the front matter, a comment to nvcc, left out): candidates that
        differ only in launch rules or runtime arguments share one compile; any other difference compiles apart,
        spacing and comments included (with them normalized away, a line break that ends a #define, or its
        absence, shared one compile between two texts that compile to different kernels)."""
        return hashlib.sha256(_FRONT.sub("", self.text, count=1).encode()).hexdigest()[:16]

    def env(self, problem: Problem, num_sms: int) -> dict[str, int]:
        env = {k: v for k, v in self.meta.params.items() if isinstance(v, (int, bool))}
        env.update(M=problem.m, N=problem.n, K=problem.k, NUM_SMS=num_sms)
        return env

    def accepts(self, problem: Problem, num_sms: int = 132) -> bool:
        return bool(expr.evaluate(self.meta.requires, self.env(problem, num_sms)))

    def serves(self, problem: Problem, arch: str, num_sms: int) -> bool:
        """Whether this kernel can run `problem` on a GPU of `arch` ("" = any) with num_sms SMs: the arch is one it
        claims, its `requires` accept the shape and its launch geometry evaluates to a non-empty grid there."""
        try:
            if arch and arch not in self.meta.archs:
                return False
            if not self.accepts(problem, num_sms):
                return False
            self.launch(problem, num_sms)
            return True
        except (EvoError, ValueError, ZeroDivisionError, TypeError):
            return False

    def cooperative(self, problem: Problem, num_sms: int) -> bool:
        """Whether this instance's CTAs wait on other CTAs of the grid (a reduce-scatter barrier, stream-K's
        fix-up), so that it must be launched cooperatively: the driver then makes the whole grid resident at once
        or refuses the launch, even beside other kernels (other streams, other priorities)."""
        return bool(expr.evaluate(self.meta.cooperative, self.env(problem, num_sms)))

    def host_arg_values(self, problem: Problem, num_sms: int) -> tuple[int, ...]:
        """launch: host: the front matter's host_args evaluated for this problem (int64s for the host functions)."""
        env = self.env(problem, num_sms)
        return tuple(int(expr.evaluate(a, env)) for a in self.meta.host_args)

    def launch(self, problem: Problem, num_sms: int) -> LaunchSpec:
        env = self.env(problem, num_sms)
        grid = tuple(expr.evaluate(g, env) for g in self.meta.grid)
        block = tuple(expr.evaluate(b, env) for b in self.meta.block)
        if min(grid) < 1 or min(block) < 1:
            raise EvoError(f"kernel {self.hash}: launch geometry grid={grid} block={block} is empty for {problem.key}")
        maps = tuple(
            TensorMapSpec(
                operand=t["operand"],
                box_rows=expr.evaluate(t["box"][0], env),
                box_cols=expr.evaluate(t["box"][1], env),
                swizzle=int(t.get("swizzle", 0)),
                col_block=int(t.get("col_block", 0)),
            )
            for t in self.meta.tensor_maps
            if expr.evaluate(t.get("when", True), env)
        )
        return LaunchSpec(
            grid=grid,  # type: ignore[arg-type]
            block=block,  # type: ignore[arg-type]
            smem=expr.evaluate(self.meta.smem, env),
            workspace=expr.evaluate(self.meta.workspace, env),
            tensor_maps=maps,
            cooperative=self.cooperative(problem, num_sms),
        )


def _triple(v: Any, what: str) -> tuple:
    if not isinstance(v, (list, tuple)) or not 1 <= len(v) <= 3:
        raise EvoError(f"front matter: {what} must be a list of 1 to 3 ints or expressions")
    v = list(v) + [1] * (3 - len(v))
    return tuple(v)


def parse_meta(text: str) -> KernelMeta:
    m = _FRONT.match(text)
    if not m:
        raise EvoError("kernel does not follow the ABI: it must start with a /*---evo ... ---*/ front-matter block")
    if "*/" in m.group(1):  # it would end the comment early: code nvcc compiles that the compile key leaves out
        raise EvoError("front matter must not contain '*/' (it ends the comment that hides the front matter from nvcc)")
    try:
        d = yaml.load(m.group(1), Loader=_YAML_LOADER) or {}
    except yaml.YAMLError as e:
        raise EvoError(f"front matter is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(d, dict):
        raise EvoError("front matter must be a YAML mapping")
    missing = [k for k in ("family", "archs", "block", "grid") if k not in d]
    if missing:
        raise EvoError(f"front matter lacks {', '.join(missing)}")
    archs = d["archs"]
    if isinstance(archs, str):
        archs = [archs]
    maps = d.get("tensor_maps") or []
    for t in maps:
        if not isinstance(t, dict) or t.get("operand") not in OPERANDS or not isinstance(t.get("box"), list) or len(t["box"]) != 2:
            raise EvoError(f"front matter: bad tensor map {t!r} (need operand A|B|C and box [rows, cols])")
        if int(t.get("swizzle", 0)) not in SWIZZLES:
            raise EvoError(f"front matter: tensor map swizzle must be one of {SWIZZLES}")
        cb = t.get("col_block", 0)
        if isinstance(cb, bool) or not isinstance(cb, int) or cb < 0 or cb % 8:
            raise EvoError(f"front matter: tensor map col_block must be 0 or a multiple of 8 columns, got {cb!r}")
        if not isinstance(t.get("when", True), (bool, int, str)):
            raise EvoError(f"front matter: tensor map when must be an expression, got {t['when']!r}")
    params = d.get("params") or {}
    if not isinstance(params, dict):
        raise EvoError("front matter: params must be a mapping")
    launch = str(d.get("launch", "device"))
    if launch not in LAUNCH_MODES:
        raise EvoError(f"front matter: launch must be one of {', '.join(LAUNCH_MODES)}, not {launch!r}")
    cooperative = d.get("cooperative", False)
    if not isinstance(cooperative, (bool, int, str)):
        raise EvoError(f"front matter: cooperative must be true, false or an expression, got {cooperative!r}")
    host_args = d.get("host_args") or []
    if not isinstance(host_args, list) or (host_args and launch != "host"):
        raise EvoError("front matter: host_args must be a list, and only with launch: host")
    return KernelMeta(
        family=str(d["family"]),
        archs=tuple(str(a) for a in archs),
        params=dict(params),
        block=_triple(d["block"], "block"),
        grid=_triple(d["grid"], "grid"),
        smem=d.get("smem", 0),
        workspace=d.get("workspace", 0),
        requires=d.get("requires", True),
        tensor_maps=tuple(maps),
        launch=launch,
        host_args=tuple(host_args),
        cooperative=cooperative,
    )


def strip_comments(text: str) -> str:
    return _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text))


def normalize(text: str) -> str:
    """Front matter plus code with comments and whitespace runs removed: two candidates that differ only
    in comments or spacing are one; a different launch rule (front matter) makes a different candidate."""
    m = _FRONT.match(text)
    front = ""
    if m:
        front = _WS.sub(" ", re.sub(r"#[^\n]*", "", m.group(1))).strip() + " ---*/ "
        text = text[m.end():]
    return front + _WS.sub(" ", strip_comments(text)).strip()


def source_hash(text: str, meta: KernelMeta) -> str:
    launch = {
        "archs": meta.archs,
        "block": meta.block,
        "grid": meta.grid,
        "smem": meta.smem,
        "workspace": meta.workspace,
        "requires": meta.requires,
        "tensor_maps": meta.tensor_maps,
        "params": meta.params,
    }
    if meta.launch != "device":  # only then: hashes of device-launched candidates stay as they were
        launch.update(launch_mode=meta.launch, host_args=meta.host_args)
    if meta.cooperative is not False:  # likewise: a kernel that declares none keeps its hash
        launch.update(cooperative=meta.cooperative)
    h = hashlib.sha256()
    h.update(normalize(_FRONT.sub("", text, count=1)).encode())
    h.update(json.dumps(launch, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]
