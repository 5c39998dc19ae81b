"""Prompts: templates in evo/prompts/*.md with ``{{name}}`` placeholders, filled in one pass
(so braces in C++ sources and logs are never touched)."""
from __future__ import annotations

import re
from pathlib import Path

from ... import kernel as kernel_mod
from ...errors import EvoError
from ...kernel import KernelSource
from ...problem import Problem
from ...records import Individual
from ..base import ProposalContext

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"
TEMPLATES = ("system", "problem", "improve", "fix", "edit_diff", "edit_full", "inspiration", "hopper", "ampere")
CUTLASS_HEADERS = ("cute/tensor.hpp", "cute/arch/copy_sm90_tma.hpp", "cute/arch/mma_sm90_gmma.hpp",
                   "cute/atom/mma_traits_sm90_gmma.hpp", "cute/arch/cluster_sm90.hpp", "cutlass/arch/barrier.h",
                   "cutlass/pipeline/sm90_pipeline.hpp", "cute/arch/copy_sm80.hpp", "cute/atom/mma_traits_sm80.hpp")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_IMPORTANT = re.compile(r"error|ptxas|fatal|undefined|spill|stack frame|lmem|warning|assert|abort|catastrophic", re.I)

PEAK_KEYS = ("peak_tflops_fp16", "peak_fp16_tflops", "peak_tflops", "tensor_tflops_fp16")
BW_KEYS = ("mem_bw_gbs", "bw_gbs", "dram_gbs", "memory_bandwidth_gbs", "dram_bw_gbs")


class Templates:
    """The prompt templates: ``prompts_dir`` (if given) overrides the shipped ones file by file."""

    def __init__(self, prompts_dir: str = ""):
        self.dirs = [PROMPTS_DIR]
        if prompts_dir:
            d = Path(prompts_dir).expanduser()
            if not d.is_dir():
                raise EvoError(f"config llm.prompts_dir {prompts_dir!r} is not a folder")
            self.dirs.insert(0, d)
        self.text: dict[str, str] = {}
        for name in TEMPLATES:
            for d in self.dirs:
                f = d / f"{name}.md"
                if f.is_file():
                    self.text[name] = f.read_text()
                    break
            else:
                raise EvoError(f"prompt template {name}.md not found in {', '.join(map(str, self.dirs))}")

    def render(self, name: str, **values: object) -> str:
        return fill(self.text[name], {k: str(v) for k, v in values.items()}, name)


def fill(template: str, values: dict[str, str], name: str = "template") -> str:
    def sub(m: re.Match) -> str:
        key = m.group(1)
        if key not in values:
            raise EvoError(f"prompt template {name}.md uses {{{{{key}}}}}; known: {', '.join(sorted(values))}")
        return values[key]

    return _PLACEHOLDER.sub(sub, template)


def truncate_log(log: str, limit: int) -> str:
    """Keep a long compiler log useful: its head, then every error/ptxas line, then its tail.
    Lines are never edited (long C++ symbols reach the model intact), only dropped."""
    log = (log or "").replace("\r\n", "\n").strip("\n")
    if limit <= 0 or len(log) <= limit:
        return log
    lines = log.split("\n")
    head: list[str] = []
    used = 0
    i = 0
    while i < len(lines) and used + len(lines[i]) + 1 <= limit // 3:
        head.append(lines[i])
        used += len(lines[i]) + 1
        i += 1
    if not head:  # one giant first line
        head = [lines[0][: limit // 3] + " [...]"]
        used = len(head[0])
        i = 1
    rest = lines[i:]
    tail = rest[-3:] if len(rest) > 3 else []
    body = rest[: len(rest) - len(tail)]
    keep: list[str] = []
    budget = limit - used - sum(len(t) + 1 for t in tail) - 80
    last = -1
    for j, ln in enumerate(body):
        if _IMPORTANT.search(ln) and len(ln) + 1 <= budget:
            if j != last + 1:
                keep.append(f"[... {j - last - 1} lines omitted ...]")
            keep.append(ln)
            budget -= len(ln) + 1
            last = j
    if last != len(body) - 1:
        keep.append(f"[... {len(body) - last - 1} lines omitted ...]")
    return "\n".join(head + keep + tail)


def _gpu_text(ctx: ProposalContext) -> str:
    g = ctx.gpu
    if g is None:
        return f"(not reported) arch {ctx.arch}"
    return (f"{g.name}: compute capability {g.cc[0]}.{g.cc[1]}, {g.sm_count} SMs, "
            f"{g.smem_per_block_optin} bytes of shared memory per block (opt-in maximum), "
            f"{g.l2_bytes / 2**20:.0f} MiB L2.")


def datasheet_roofline(ctx: ProposalContext) -> tuple[float, float, float]:
    """(roofline µs, peak TFLOP/s, DRAM GB/s) from the GPU's datasheet (evo.datasheet); zeros for an unknown GPU."""
    from ...datasheet import datasheet

    sheet = datasheet(ctx.gpu.name) if ctx.gpu else None
    if sheet is None:
        return 0.0, 0.0, 0.0
    p = ctx.problem
    roof = max(p.flops / (sheet.peak_tflops_fp16_dense * 1e12), p.min_bytes / (sheet.dram_gbs * 1e9)) * 1e6
    return roof, sheet.peak_tflops_fp16_dense, sheet.dram_gbs


def roofline_us(ctx: ProposalContext) -> float:
    """The roofline time of the problem on this GPU: from its datasheet peaks, else from what the GPU
    reported or was measured at; 0 when nothing is known."""
    roof = datasheet_roofline(ctx)[0]
    if roof:
        return roof
    extra = (ctx.gpu.extra if ctx.gpu else None) or {}
    peak = next((float(extra[k]) for k in PEAK_KEYS if extra.get(k)), 0.0)
    bw = next((float(extra[k]) for k in BW_KEYS if extra.get(k)), 0.0)
    if "roofline_us" in extra:
        return float(extra["roofline_us"])
    return ctx.problem.roofline_us(peak, bw) if peak and bw else 0.0


def problem_text(t: Templates, ctx: ProposalContext) -> str:
    p: Problem = ctx.problem
    roof, peak, bw = datasheet_roofline(ctx)
    if roof:
        roof_text = (f"\nDatasheet peaks of this GPU: {peak:.0f} TFLOP/s dense fp16 with fp32 accumulation, {bw:.0f} GB/s DRAM; "
                     f"roofline bound for this problem: {roof:.2f} µs (max of work / peak and minimum traffic / bandwidth).")
    else:
        roof = roofline_us(ctx)
        roof_text = (f" Roofline bound on this GPU (measured ceilings, not a datasheet): {roof:.2f} µs." if roof else "")
    extra = (ctx.gpu.extra if ctx.gpu else None) or {}
    if extra.get("peak_tflops"):
        roof_text += (f"\nMeasured on this GPU: cuBLAS reaches {float(extra['peak_tflops']):.0f} TFLOP/s on 8192^3 "
                      f"(a library rate, not the hardware's peak)"
                      + (f"; a 1 GiB copy moves {float(extra['bw_gbs']):.0f} GB/s." if extra.get("bw_gbs") else "."))
    return t.render("problem", layout=p.layout, M=p.m, N=p.n, K=p.k, dtype=_dtype(p.dtype), acc_dtype=_dtype(p.acc_dtype),
                    gflop=f"{p.flops / 1e9:.2f}", mbytes=f"{p.min_bytes / 1e6:.1f}", roofline=roof_text,
                    gpu=_gpu_text(ctx), arch=ctx.arch, abi=(kernel_mod.__doc__ or "").strip())


def _dtype(d: str) -> str:
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(d, d)


def launch_text(source: str, ctx: ProposalContext) -> str:
    sms = ctx.gpu.sm_count if ctx.gpu else 132
    try:
        ls = KernelSource.parse(source).launch(ctx.problem, sms)
    except Exception:  # noqa: BLE001
        return ""
    ctas = ls.grid[0] * ls.grid[1] * ls.grid[2]
    threads = ls.block[0] * ls.block[1] * ls.block[2]
    return (f"launch: grid {list(ls.grid)} = {ctas} CTAs ({ctas / sms:.2f} waves on {sms} SMs if one CTA per SM), "
            f"{threads} threads per CTA, {ls.smem} bytes of dynamic shared memory")


def measurements_text(ind: Individual, ctx: ProposalContext, ev=None) -> str:
    """The parent's time against every library baseline and the roofline; the baselines also when the
    parent itself has not been timed on this shape (a family's starting instance in generation 1)."""
    p = ctx.problem
    lines = []
    time_us, cublas_us = (ind.time_us, ind.cublas_us) if ind.correct and ind.time_us > 0 else (0.0, 0.0)
    if not time_us and ev is not None and ev.time_us:
        time_us, cublas_us = ev.time_us, ev.cublas_us
    if time_us > 0:
        lines.append(f"- time: {time_us:.2f} µs (median of L2-flushed runs), {p.tflops(time_us):.1f} TFLOP/s (2MNK / t)")
        for b in ctx.baselines:
            if b.time_us > 0:
                s = b.time_us / time_us
                lines.append(f"- vs {b.library} ({b.time_us:.2f} µs, {p.tflops(b.time_us):.1f} TFLOP/s): "
                             f"{s:.3f}x ({'faster' if s > 1 else 'slower'})")
        if cublas_us > 0:
            lines.append(f"- vs cuBLAS timed interleaved with it ({cublas_us:.2f} µs): {cublas_us / time_us:.3f}x")
        roof = roofline_us(ctx)
        if roof:
            lines.append(f"- {100.0 * roof / time_us:.1f}% of the roofline bound ({roof:.2f} µs)")
    else:
        if ind.correct is False:
            lines.append(f"- incorrect: {ind.error}")
        else:
            lines.append("- the parent has not been timed on this shape yet (a family's starting instance); "
                         "what it has to beat:")
        for b in ctx.baselines:
            if b.time_us > 0:
                lines.append(f"- {b.library} on this shape: {b.time_us:.2f} µs ({p.tflops(b.time_us):.1f} TFLOP/s)")
        roof = roofline_us(ctx)
        if roof:
            lines.append(f"- roofline bound: {roof:.2f} µs")
    if ind.registers:
        lines.append(f"- registers per thread: {ind.registers}")
    if ind.smem:
        lines.append(f"- shared memory per block: {ind.smem} bytes")
    launch = launch_text(ind.source, ctx)
    if launch:
        lines.append(f"- {launch}")
    return "\n".join(lines)


def inspirations_for(parent: Individual, ctx: ProposalContext, k: int) -> list[Individual]:
    """The fastest correct individual of each other family, best first, at most k (<= 3)."""
    k = max(0, min(3, int(k)))
    out: list[Individual] = []
    seen = {parent.family}
    for ind in sorted((i for i in ctx.population if i.correct and i.time_us > 0), key=lambda i: i.time_us):
        if ind.family not in seen and len(out) < k:
            out.append(ind)
            seen.add(ind.family)
    return out


def inspirations_text(t: Templates, parent: Individual, ctx: ProposalContext, k: int) -> str:
    insp = inspirations_for(parent, ctx, k)
    if not insp:
        return ""
    parts = ["", "## Inspirations", "The fastest kernels of other families on this problem: borrow their ideas, "
             "but keep the parent's front matter consistent with whatever you take.", ""]
    for n, ind in enumerate(insp, 1):
        summary = f"{ind.time_us:.2f} µs ({ctx.problem.tflops(ind.time_us):.1f} TFLOP/s)"
        if ind.idea:
            summary += f"; idea: {ind.idea}"
        parts.append(t.render("inspiration", index=n, family=ind.family, summary=summary, source=ind.source.rstrip("\n")))
    return "\n".join(parts)


def _edit(t: Templates, mode: str) -> str:
    return t.render("edit_diff" if mode == "diff" else "edit_full").rstrip("\n")


def improve_prompt(t: Templates, parent: Individual, ctx: ProposalContext, *, mode: str, inspirations: int,
                   ev=None, budget_tokens: int = 0) -> str:
    return improve_prompt_sections(t, parent, ctx, mode=mode, inspirations=inspirations, ev=ev,
                                   budget_tokens=budget_tokens)[0]


def improve_prompt_sections(t: Templates, parent: Individual, ctx: ProposalContext, *, mode: str, inspirations: int,
                            ev=None, budget_tokens: int = 0) -> tuple[str, dict]:
    """The improve prompt and its size by section ({name: characters}, plus 'total', 'tokens_est' and
    'cut': the sections shortened to fit ``budget_tokens`` at 4 characters a token)."""
    from . import sections as sec

    fixed = dict(problem=problem_text(t, ctx).rstrip("\n"), family=parent.family, hash=parent.hash,
                 parent_idea=f" Its idea: {parent.idea}" if parent.idea else "", source=parent.source.rstrip("\n"),
                 measurements=measurements_text(parent, ctx, ev), edit_instructions=_edit(t, mode))
    optional = sec.optional_sections(t, parent, ctx, ev, inspirations)
    values, sizes = sec.fit(t, "improve", fixed, optional, budget_tokens)
    return t.render("improve", **values), sizes


def failure_of(ind: Individual, log_chars: int) -> tuple[str, str, str]:
    """(stage, one-line error, log block) of a failed candidate."""
    if ind.compiled is False:
        stage = "compile"
        log = truncate_log(ind.compile_log or "", log_chars)
        error = ind.error or "the compiler reported errors"
    else:
        stage = "correctness check" if ind.correct is False else "evaluation"
        log = truncate_log(ind.compile_log or "", log_chars) if ind.compile_log and "spill" in ind.compile_log else ""
        error = ind.error or "the result did not match the reference"
    block = f"\nCompiler output:\n```text\n{log}\n```\n" if log else ""
    return stage, error, block


def fix_prompt(t: Templates, failed: Individual, ctx: ProposalContext, *, mode: str, log_chars: int) -> str:
    stage, error, block = failure_of(failed, log_chars)
    return t.render(
        "fix",
        problem=problem_text(t, ctx).rstrip("\n"),
        family=failed.family,
        hash=failed.hash,
        parent_idea=f" It tried: {failed.idea}" if failed.idea else "",
        source=failed.source.rstrip("\n"),
        stage=stage,
        error=error,
        log=block,
        edit_instructions=_edit(t, mode),
    )


def techniques_text(t: Templates, arch: str, short: bool = False) -> str:
    """The architecture's techniques (hopper.md / ampere.md), TmaDesc included, and the CUTLASS/CuTe headers on
    the include path."""
    text = t.render("hopper" if arch.startswith("sm_90") else "ampere").rstrip("\n")
    if short:
        text = text.split("\n\nTMA descriptors:")[0]
    heads = cutlass_headers()
    if heads:
        text += ("\n\nCUTLASS/CuTe headers (nvidia-cutlass) are on the include path, for device code: "
                 + ", ".join(f"`<{h}>`" for h in heads)
                 + ". The harness launches `evo_gemm` itself (grid, block, smem from the front matter), so CUTLASS's "
                 "host-side launch and Params are not used, except by kernels whose front matter says `launch: host`.")
    return text


def cutlass_headers() -> list[str]:
    from ...compile import cutlass_include_dirs

    dirs = cutlass_include_dirs()
    return [h for h in CUTLASS_HEADERS if any((Path(d) / h).is_file() for d in dirs)]


def messages(t: Templates, user: str) -> list[dict]:
    return [{"role": "system", "content": t.render("system").strip()}, {"role": "user", "content": user}]
