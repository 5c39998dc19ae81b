"""Per-phase timestamps of a kernel family's instances on a GPU: where a launch's time goes, CTA by CTA.

    python -m bench.phase_trace --family wgmma_skinny_sm90 --shape 128x128x16384 '{"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "STAGES": 8}' ...
    python -m bench.phase_trace --family wgmma_sm90 --shape 128x12288x256 '{"BM": 128, "BN": 96, "PERSISTENT": 0, "EPI": 1}' ...

The family's kernel is copied and instrumented at fixed places (TRACES below: each family's phases and the anchors
they are patched in at): one thread per CTA writes %globaltimer into the workspace. wgmma_skinny_sm90: entry,
first and last full stage, wgmma done, partial staged, reduce go (after the cluster barrier or the receive wait), C
stored, exit. wgmma_sm90: entry, first load issued (producer), first full stage (the first consumer's), then the
latest of the consumers' (each one's thread 0; a ping-pong CTA's last unit may be either consumer's): last full
stage, wgmma done, C stored (TMA store issued / plain stores done), consumer done (its stores have read their
staging buffers), exit (after the cluster barrier). Persistent CTAs: the first stage is the first unit's, the
later phases the last unit's. Each instance is checked once against an fp32 reference, then launched
--reps times with the L2 flushed (evo.timing.Timer); the table gives, per phase, the first / median / last CTA's
time after the first CTA's entry (median over launches) and the per-CTA phase lengths; `--per-cta` prints every CTA's
phases (which CTAs end late, and after which phase), `--allow-spills` traces a build the stamps push into spills (a
kernel at its register limit; its phases then include the spills' cost). `--waits` (wgmma_sm90) also counts, with
%clock64, the cycles the producer waits for a free stage, each consumer for a full stage and for the others (ping-pong:
the other consumer's turn; split-K: the tile's other splits, counted by the thread that spins on their arrivals, the
first of consumer 0), and prints the SM clock each CTA ran at (entry to exit): whether operand delivery or the tensor
pipe holds a kernel back, at the clock of a timed window. The stamps live in 4 MiB ahead of the kernel's own
workspace (split-K partials and tickets follow it). If a template moves, `anchors_present` fails in
tests/test_phase_trace.py: re-anchor its TRACES entry.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


SLOTS = 32  # 8-byte slots per CTA: rows 0-1 the %globaltimer stamps (one row per consumer), rows 2-3 the wait counts
TRACE_BYTES = 4 << 20  # the stamps' region, ahead of the kernel's own workspace (16384 CTAs x SLOTS x 8 bytes)
TRACE_DEF = f"constexpr int TRACE_FLOATS = {TRACE_BYTES // 4};  // the trace's region; the kernel's workspace follows it\n"


def _stamp_macro(name: str, cond: str, row: str = "0") -> str:
    """`name(i)`: the thread for which `cond` holds writes %globaltimer into slot i of row `row` (0 or 1) of its CTA's
    two rows of 8. The reader takes the later row per slot, so consumer c stamping row c (`row` =
    "threadIdx.x / 128 - 1") gives whichever consumer ran the CTA's last unit. Plain stores, no atomics: an atomic
    after the kernel's stores is what the compile gate rejects as an unordered publication. The timer read clobbers
    memory, so the compiler keeps it between the barriers and memory operations around it: without, a stamp after a
    named barrier was read before it (a consumer's stamp after the reduce-scatter's wait, 2 us early)."""
    return (f"#define {name}(i) do {{ if ({cond}) {{ unsigned long long t_; asm volatile(\"mov.u64 %0, %%globaltimer;\" "
            f": \"=l\"(t_) :: \"memory\"); evo_trace[blockIdx.x * {SLOTS} + 8 * ({row}) + (i)] = t_; }} }} while (0)\n")


def _clock(var: str) -> str:
    return f'asm volatile("mov.u64 %0, %%clock64;" : "=l"({var}) :: "memory");'


# wgmma_sm90's wait counts (`--waits`): EVO_WAIT(acc, stmt) adds the SM cycles `stmt` (a barrier wait) took to acc;
# row 2 of a CTA's slots: entry clock, the producer's last clock and %globaltimer, its free-stage wait cycles; row 3,
# four slots per consumer: its full-stage and other-consumer wait cycles, its exit clock (next to its exit stamp), and
# the part of its full-stage wait spent at a unit's first k block (EVO_WAITF: a new tile's start, against the steady
# state). Without --waits the macros leave each wait as it is and count nothing.
WAITS_ON = (
    "#define EVO_WAIT(acc, ...) do { unsigned long long q_, r_; " + _clock("q_") + " __VA_ARGS__; " + _clock("r_")
    + " acc += r_ - q_; } while (0)\n"
    "#define EVO_WAITF(first, ...) do { const unsigned long long f_ = evo_wf; EVO_WAIT(evo_wf, __VA_ARGS__); "
    "if (first) evo_wf0 += evo_wf - f_; } while (0)\n"
    "#define EVO_WDECL unsigned long long evo_k0, evo_we = 0, evo_wf = 0, evo_wf0 = 0, evo_wo = 0; " + _clock("evo_k0")
    + "\n"
    "#define EVO_WPUT_P do { unsigned long long k_, g_; " + _clock("k_")
    + ' asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_) :: "memory"); unsigned long long* w_ = evo_trace + '
    f"blockIdx.x * {SLOTS} + 16; w_[0] = evo_k0; w_[1] = k_; w_[2] = g_; w_[3] = evo_we; }} while (0)\n"
    "#define EVO_WPUT_C do { if (threadIdx.x >= 128 && threadIdx.x % 128 == 0) { unsigned long long k_; " + _clock("k_")
    + f" unsigned long long* w_ = evo_trace + blockIdx.x * {SLOTS} + 24 + 4 * (threadIdx.x / 128 - 1); w_[0] = evo_wf; "
    "w_[1] = evo_wo; w_[2] = k_; w_[3] = evo_wf0; } } while (0)\n")
WAITS_OFF = ("#define EVO_WAIT(acc, ...) __VA_ARGS__\n#define EVO_WAITF(first, ...) __VA_ARGS__\n#define EVO_WDECL\n#define EVO_WPUT_P do { } while (0)\n"
             "#define EVO_WPUT_C do { } while (0)\n")
WAITS_HEADER = "// EVO_WAITS\n"  # where instrumented_templates puts WAITS_ON or WAITS_OFF


# at entry: the stamps go to the workspace's first TRACE_BYTES, the kernel's own use starts after them
_SHIFT = ("  unsigned long long* const evo_trace = reinterpret_cast<unsigned long long*>(workspace);\n"
          "  workspace += TRACE_FLOATS;\n")


@dataclass(frozen=True)
class Trace:
    """A family's phases (at most 8) and the (anchor, replacement) patches that stamp them."""
    phases: list[str]
    patches: list[tuple[str, str]]


SKINNY = Trace(
    phases=["entry", "first stage", "last stage", "mma done", "staged", "reduce go", "stored", "exit"],
    patches=[
        ("using namespace evo_skinny;\n", "using namespace evo_skinny;\n" + TRACE_DEF + _stamp_macro("EVO_T", "threadIdx.x == 0")),
        ("  const uint32_t base_u32 = smem_u32(smem_raw);\n", _SHIFT + "  EVO_T(0);\n  const uint32_t base_u32 = smem_u32(smem_raw);\n"),
        ("      mbar_wait(smem_u32(&full_bar[s]), phase);\n",
         "      mbar_wait(smem_u32(&full_bar[s]), phase);\n      if (i == 0) EVO_T(1);\n      if (i == nk - 1) EVO_T(2);\n"),
        ("    wgmma_wait<0>();\n    // (no release", "    wgmma_wait<0>();\n    EVO_T(3);\n    // (no release"),
        ("  // ---- on-chip split-K reduce over the CLK CTAs of this tile (all threads of the CTA)\n", "  EVO_T(4);\n"),
        ("  // C-space origin of the tile and this CTA's slice of C rows.\n", "  EVO_T(5);\n"),
        ("  // Done reading the peers' smem.", "  EVO_T(6);\n  // Done reading the peers' smem."),
        ("  if constexpr (CS > 1) cluster_wait();  // peers are done with our smem and barriers before we exit\n}",
         "  if constexpr (CS > 1) cluster_wait();\n  EVO_T(7);\n}"),
    ],
)

SM90 = Trace(
    phases=["entry", "first load", "first stage", "last stage", "mma done", "stored", "consumer done", "exit"],
    patches=[
        ("using namespace evo_sm90;\n", "using namespace evo_sm90;\n" + TRACE_DEF + WAITS_HEADER + _stamp_macro("EVO_T", "threadIdx.x == 0")
         + _stamp_macro("EVO_C", "threadIdx.x == 128")
         + _stamp_macro("EVO_M", "threadIdx.x >= 128 && threadIdx.x % 128 == 0", "threadIdx.x / 128 - 1")),
        ("  extern __shared__ uint8_t smem_raw[];\n", _SHIFT + "  EVO_T(0);\n  EVO_WDECL\n  extern __shared__ uint8_t smem_raw[];\n"),
        ("    mbar_wait(smem_u32(&empty_bar[ps]), pphase ^ 1);  // first pass: fresh barrier, returns at once\n",
         "    EVO_WAIT(evo_we, mbar_wait(smem_u32(&empty_bar[ps]), pphase ^ 1));\n"),
        ("      while (produce_next()) {\n      }\n", "      while (produce_next()) {\n      }\n      EVO_WPUT_P;\n"),
        ("        if (c == 1) mbar_wait(smem_u32(&order_bar[1]), t & 1);\n"
         "        else if (t > 0) mbar_wait(smem_u32(&order_bar[0]), (t - 1) & 1);\n",
         "        EVO_WAIT(evo_wo, if (c == 1) mbar_wait(smem_u32(&order_bar[1]), t & 1);\n"
         "        else if (t > 0) mbar_wait(smem_u32(&order_bar[0]), (t - 1) & 1));\n"),
        ("    if (CLUSTER == 1 && !DYN) produce_next();  // (DYN: the first unit comes from the scheduler)\n",
         "    if (CLUSTER == 1 && !DYN) produce_next();\n    EVO_T(1);\n"),
        ("          mbar_wait(smem_u32(&full_bar[s]), phase);\n",
         "          EVO_WAITF(i == 0, mbar_wait(smem_u32(&full_bar[s]), phase));\n          if (i == 0 && j == 0) EVO_C(2);\n"
         "          if (i == nk - 1) EVO_M(3);\n"),
        # split-K: the spin on the tile's other splits (SPLIT_RS, SPLIT_OWNER's reducer) counts as waiting for others
        ("            while (static_cast<unsigned>(ld_acquire_gpu(arrivals)) != done) __nanosleep(32);\n",
         "            EVO_WAIT(evo_wo, while (static_cast<unsigned>(ld_acquire_gpu(arrivals)) != done) __nanosleep(32));\n"),
        ("              while (ld_acquire_gpu(arrivals) != SPLIT_K - 1) __nanosleep(32);\n",
         "              EVO_WAIT(evo_wo, while (ld_acquire_gpu(arrivals) != SPLIT_K - 1) __nanosleep(32));\n"),
        ("          store_slice(acc, C, Mk, Nk, w.m0 + row_off, w.n0, static_cast<uint32_t>(w.split));\n",
         "          store_slice(acc, C, Mk, Nk, w.m0 + row_off, w.n0, static_cast<uint32_t>(w.split));\n          EVO_M(5);\n"),
        ("        wgmma_wait<0>();\n        if (nk > 0", "        wgmma_wait<0>();\n        EVO_M(4);\n        if (nk > 0"),
        # EARLY_STORE: the whole-K pass's waits, the last k block's wait, the last slice's wgmma wait
        ("            if (mt == 0) mbar_wait(smem_u32(&full_bar[ss]), pp);  // whole: the first pass waits\n",
         "            if (mt == 0) EVO_WAITF(i == 0, mbar_wait(smem_u32(&full_bar[ss]), pp));\n"
         "            if (mt == 0 && i == 0 && j == 0) EVO_C(2);\n            if (mt == 0 && i == nk - 1) EVO_M(3);\n"),
        ("          mbar_wait(smem_u32(full_bar + s), phase);  // last k block\n",
         "          EVO_WAITF(nk == 1, mbar_wait(smem_u32(full_bar + s), phase));\n          if (nk == 1 && j == 0) EVO_C(2);\n"
         "          EVO_M(3);\n"),
        ("          wgmma_wait_upto(MT - 1 - mt);  // slice mt's group and every group before it have completed\n",
         "          wgmma_wait_upto(MT - 1 - mt);\n          if (mt == MT - 1) EVO_M(4);\n"),
        ("      store_tile(acc, epi_stage + c * (EPI_BYTES / 2), c, C, Mk, Nk, w.m0 + row_off, w.n0);\n#endif\n",
         "      store_tile(acc, epi_stage + c * (EPI_BYTES / 2), c, C, Mk, Nk, w.m0 + row_off, w.n0);\n#endif\n      EVO_M(5);\n"),
        ("    (void)epi_stage_u32;\n#endif\n", "    (void)epi_stage_u32;\n#endif\n    EVO_M(6);\n"),
        ("    cluster_arrive();\n    cluster_wait();\n  }\n}",
         "    cluster_arrive();\n    cluster_wait();\n  }\n  EVO_M(7);\n  EVO_WPUT_C;\n}"),
    ],
)

TRACES = {"wgmma_skinny_sm90": SKINNY, "wgmma_sm90": SM90}


def _lead(anchor: str) -> str:
    """What must come before an anchor: an anchor that starts with indentation is matched only where it starts a line
    (a more deeply indented copy of the same statement, a new loop's wait say, is another place, not the anchor)."""
    return "\n" if anchor[:1] in (" ", "\t") else ""


def _occurrences(text: str, anchor: str) -> int:
    """How often `anchor` is in `text` (see `_lead`)."""
    lead = _lead(anchor)
    return (lead + text).count(lead + anchor)


def _patched(text: str, anchor: str, new: str) -> str:
    """`text` with the anchor, where `_occurrences` finds it, replaced by `new`."""
    lead = _lead(anchor)
    return (lead + text).replace(lead + anchor, lead + new, 1)[len(lead):]


def anchors_present(text: str, family: str = "wgmma_skinny_sm90") -> list[str]:
    """The anchors missing from (or not unique in) the template text; empty when it can be instrumented."""
    return [a for a, _ in TRACES[family].patches if _occurrences(text, a) != 1]


def trace_compiler(cache_dir: Path, allow_spills: bool):
    """The compiler for instrumented builds: the config's, with its own cache; `allow_spills` lifts the compile gate's
    spill rule (the stamps take registers: a kernel at its register limit spills once traced)."""
    from evo.compile import Compiler
    from evo.config import load_config

    overrides = {"cache_dir": str(cache_dir)} | ({"reject_spills": False} if allow_spills else {})
    return Compiler.from_config(load_config(overrides={"compile": overrides}).compile)


def per_cta_lines(rel, phases: list[str]) -> list[str]:
    """Every CTA's phases, medians over launches (rel: launches x CTAs x phases, us after the first entry; NaN where
    a phase was not stamped): which CTAs end late, and after which phase."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        per = np.nanmedian(rel, axis=0)  # CTAs x phases
    return (["  CTA  " + " ".join(f"{n[:10]:>10s}" for n in phases)]
            + [f"  {b:4d} " + " ".join(f"{v:10.2f}" for v in row) for b, row in enumerate(per)])


def wait_lines(raw, consumers: int) -> list[str]:
    """`--waits`: the SM clock of each CTA (its entry to a consumer's exit, %clock64 against %globaltimer) and the
    share of each thread's cycles it spent waiting: the producer for a free stage, each consumer for a full stage (and
    the part of that at a unit's first k block) and for the others (ping-pong's turns, split-K's partner splits).
    raw: launches x CTAs x 4 x 8 slots as the kernel left them (int64); per launch the median CTA, then the median
    over launches; a CTA whose counts are missing is left out."""
    import numpy as np

    raw = np.asarray(raw, dtype=np.int64)

    def ratio(num, den):  # differences are taken in int64 first: ns stamps exceed float64's integers
        num, den = num.astype(np.float64), den.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / den, np.nan)

    def med(x):  # median CTA per launch, then over launches
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(np.nanmedian(np.nanmedian(x, axis=1)))

    gt0, k0 = raw[:, :, 0, 0], raw[:, :, 2, 0]
    ok = (gt0 > 0) & (k0 > 0)
    out = []
    for c in range(consumers):
        kx, gx = raw[:, :, 3, 4 * c + 2], raw[:, :, c, 7]
        live = ok & (kx > 0) & (gx > 0)
        cyc = np.where(live, kx - k0, 0)
        mhz = np.where(live, ratio(cyc, gx - gt0) * 1000.0, np.nan)
        if np.isnan(mhz).all():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            per_cta = np.nanmedian(mhz, axis=0)
        out.append(f"  SM clock, entry -> consumer {c}'s exit: {med(mhz):.0f} MHz (median CTA; CTAs "
                   f"{np.nanmin(per_cta):.0f}-{np.nanmax(per_cta):.0f})")
        full = np.where(live, ratio(raw[:, :, 3, 4 * c], cyc), np.nan)
        first = np.where(live, ratio(raw[:, :, 3, 4 * c + 3], cyc), np.nan)
        other = np.where(live, ratio(raw[:, :, 3, 4 * c + 1], cyc), np.nan)
        out.append(f"  consumer {c} waits for a full stage {100 * med(full):.1f} % of its cycles ({100 * med(first):.1f} "
                   f"at a unit's first k block), for the other consumer or splits {100 * med(other):.1f} %")
    pk = raw[:, :, 2, 1]
    live = ok & (pk > 0)
    prod = np.where(live, ratio(raw[:, :, 2, 3], np.where(live, pk - k0, 0)), np.nan)
    if not np.isnan(prod).all():
        out.append(f"  producer waits for a free stage {100 * med(prod):.1f} % of its cycles (entry -> last load issued)")
    return out


def counts_waits(family: str) -> bool:
    """Whether the family's trace can count ring waits (`--waits`)."""
    return any(WAITS_HEADER in new for _, new in TRACES[family].patches)


def instrumented_templates(dest: Path, family: str = "wgmma_skinny_sm90", source: Path = ROOT / "templates",
                           waits: bool = False) -> Path:
    """A templates folder holding the instrumented family alone (its workspace: TRACE_BYTES more, for the stamps),
    copied from `source` (another templates folder: a trial variant); `waits`: with the wait counts."""
    if waits and not counts_waits(family):
        from evo.errors import EvoError

        raise EvoError(f"--waits is wgmma_sm90's; {family} counts no waits")
    shutil.copytree(Path(source) / family, dest / family)
    k = dest / family / "kernel.cu"
    text = k.read_text()
    bad = anchors_present(text, family)
    if bad:
        n = _occurrences(text, bad[0])
        where = "is gone" if n == 0 else f"starts {n} lines"
        raise SystemExit(f"error: the {family} template moved: the anchor {bad[0]!r} {where}; re-anchor bench/phase_trace.py")
    for anchor, new in TRACES[family].patches:
        text = _patched(text, anchor, new)
    text = text.replace(WAITS_HEADER, WAITS_ON if waits else WAITS_OFF, 1)
    # the kernel's workspace grows by the trace's region, which comes first (the kernel steps past it at entry)
    text, n = re.subn(r'^workspace: "(.*)"$', lambda m: f'workspace: "({m.group(1)}) + {TRACE_BYTES}"', text, count=1, flags=re.M)
    if n != 1:
        raise SystemExit(f"error: the {family} template declares no workspace expression to extend")
    k.write_text(text)
    return dest


def main(argv: list[str] | None = None) -> int:
    from evo.errors import cli_entry

    return cli_entry(_main)(argv)


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(TRACES), default="wgmma_skinny_sm90")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--no-flush", action="store_true", help="leave L2 warm between launches (code, parameters and "
                    "operands stay cached: what the cold launch's phases owe to memory latency)")
    ap.add_argument("--templates", default=str(ROOT / "templates"), help="the templates folder (default: this tree's)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--allow-spills", action="store_true",
                    help="trace a build that spills (the stamps take registers; its phases then include the spills' cost)")
    ap.add_argument("--per-cta", action="store_true", help="also print every CTA's phases (median over launches)")
    ap.add_argument("--waits", action="store_true", help="wgmma_sm90: count the cycles spent waiting on the ring "
                    "(producer, consumers) and print the SM clock each CTA ran at")
    ap.add_argument("instances", nargs="+", help="JSON parameter dicts")
    a = ap.parse_args(argv)
    from bench.template_ab import parse_instances
    from evo.gpu.device import require_gpu
    from evo.problem import parse_shape

    parse_shape(a.shape)  # a malformed shape or instance is one line, before any GPU work
    instances = parse_instances(a.instances)
    trace = TRACES[a.family]
    tmp = Path(tempfile.mkdtemp())
    templates = instrumented_templates(tmp / "templates", a.family, Path(a.templates), a.waits)  # (--waits: its family)
    require_gpu()
    import cupy
    import numpy as np

    from evo.families import load_families
    from evo.gpu.device import gpu_info
    from evo.gpu.launch import LoadedKernel
    from evo.timing import Contender, Timer

    (fam,) = load_families(templates, names=[a.family])
    comp = trace_compiler(tmp / "cache", a.allow_spills)
    info = gpu_info()
    problem = parse_shape(a.shape)
    rs = cupy.random.RandomState(1)
    A = (rs.standard_normal((problem.m, problem.k)) * 0.5).astype(cupy.float16)
    B = (rs.standard_normal((problem.n, problem.k)) * 0.5).astype(cupy.float16)
    ref = A.astype(cupy.float32) @ B.astype(cupy.float32).T
    for js, given in zip(a.instances, instances):
        fam.admit(given)  # a trial value outside the declared space, as bench.template_ab allows
        params = fam.complete(given)
        ks = fam.render(params)
        r = comp.compile(ks, info.arch)
        if not r.ok:
            print(f"{js}: does not compile: {r.error}", file=sys.stderr)
            continue
        kern = LoadedKernel(ks, r.cubin_path, problem, info.sm_count, info.smem_per_block_optin)
        C = cupy.full((problem.m, problem.n), cupy.nan, dtype=cupy.float16)
        kern(A, B, C)
        cupy.cuda.runtime.deviceSynchronize()
        err = float(cupy.max(cupy.abs(C.astype(cupy.float32) - ref)))
        ctas = kern.spec.grid[0]
        traces: list = []
        # the stamps are cleared before every launch (outside the window): a phase a CTA skips (the epilogue of a
        # split that is not the last to arrive) reads as missing, not as an earlier launch's time
        words = ctas * SLOTS * 2  # the stamp region in the workspace's 4-byte words
        run = Contender(run=lambda: kern(A, B, C), before=lambda: kern.workspace[:words].fill(0),
                        after=lambda: traces.append(kern.workspace[:words].view(cupy.uint64).copy()))
        t = Timer(info.l2_bytes, not a.no_flush, seed=0, sms=info.sm_count).measure({"k": run}, reps=a.reps, warmup=3)["k"]
        # launches x CTAs x phases (ns): per phase the later of the two rows (a row a consumer did not stamp reads 0)
        raw = np.stack([x.get().astype(np.int64).reshape(ctas, SLOTS // 8, 8) for x in traces[3:]])
        tr = raw[:, :, :2].max(axis=2)
        missing = tr == 0  # not stamped in that launch
        first_entry = np.where(missing[:, :, :1], np.iinfo(np.int64).max, tr[:, :, :1]).min(axis=1, keepdims=True)
        rel = (tr - first_entry).astype(np.float64) / 1000.0  # (differences first: ns stamps exceed float64's integers)
        rel[missing] = np.nan
        print(f"\n{js} on {problem.key} ({info.name})\n  event median {t.median_us:.2f} us, max |C - ref| {err:.3g}, "
              f"{ctas} CTAs, {r.registers} registers" + (f", {r.spill_bytes} bytes spilled" if r.spill_bytes else ""))
        print("  phase          first CTA  median  last CTA   (us after the first CTA's entry; median over launches)")
        for i, name in enumerate(trace.phases):
            if np.isnan(rel[:, :, i]).all():
                print(f"  {name:13s}   (not stamped)")
                continue
            with warnings.catch_warnings():  # launches where no CTA stamped this phase
                warnings.simplefilter("ignore", RuntimeWarning)
                first, med, last = (np.nanmedian(f(rel[:, :, i], axis=1)) for f in (np.nanmin, np.nanmedian, np.nanmax))
            stamped = np.mean(~np.isnan(rel[:, :, i]))
            print(f"  {name:13s} {first:9.2f} {med:7.2f} {last:9.2f}" + ("" if stamped == 1 else f"   ({stamped:.0%} of the CTAs)"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            steps = ", ".join(f"{trace.phases[i]} -> {trace.phases[i + 1]} {np.nanmedian(rel[:, :, i + 1] - rel[:, :, i]):.2f}"
                              for i in range(len(trace.phases) - 1))
        print(f"  per CTA (median): {steps}")
        if a.waits:
            print("\n".join(wait_lines(raw, int(params.get("CONSUMERS", 2)))))
        if a.per_cta:
            print("\n".join(per_cta_lines(rel, trace.phases)))
        kern.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
