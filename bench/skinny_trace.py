"""Per-phase timestamps of wgmma_skinny_sm90 instances on a GPU: where a launch's time goes, CTA by CTA.

    python -m bench.skinny_trace --shape 128x128x16384 '{"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "STAGES": 8}' ...

The family's kernel is copied and instrumented at fixed places (PHASES below): thread 0 of every CTA writes
%globaltimer into the workspace at entry, first and last full stage, wgmma done, partial staged, reduce go (after
the cluster barrier or the receive wait), C stored, exit. Each instance is checked once against an fp32 reference,
then launched --reps times with the L2 flushed (evo.timing.Timer); the table gives, per phase, the first / median /
last CTA's time after the first CTA's entry (median over launches) and the per-CTA phase lengths. G > 1 instances
are refused (the trace lives where their workspace would). If the template moves, `anchors_present` fails in
tests/test_skinny_trace.py: re-anchor PATCHES.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILY = "wgmma_skinny_sm90"
PHASES = ["entry", "first stage", "last stage", "mma done", "staged", "reduce go", "stored", "exit"]
STAMP = ("#define EVO_T(i) do { if (threadIdx.x == 0) { unsigned long long t_; asm volatile(\"mov.u64 %0, %%globaltimer;\" "
         ": \"=l\"(t_)); reinterpret_cast<unsigned long long*>(workspace)[blockIdx.x * 8 + (i)] = t_; } } while (0)\n")
PATCHES = [  # (anchor in kernel.cu, replacement)
    ("using namespace evo_skinny;\n", "using namespace evo_skinny;\n" + STAMP),
    ("  const uint32_t base_u32 = smem_u32(smem_raw);\n", "  EVO_T(0);\n  const uint32_t base_u32 = smem_u32(smem_raw);\n"),
    ("      mbar_wait(smem_u32(&full_bar[s]), phase);\n",
     "      mbar_wait(smem_u32(&full_bar[s]), phase);\n      if (i == 0) EVO_T(1);\n      if (i == nk - 1) EVO_T(2);\n"),
    ("    wgmma_wait<0>();\n    // (no release", "    wgmma_wait<0>();\n    EVO_T(3);\n    // (no release"),
    ("  // ---- on-chip split-K reduce over the CLK CTAs of this tile (all threads of the CTA)\n", "  EVO_T(4);\n"),
    ("  // C-space origin of the tile and this CTA's slice of C rows.\n", "  EVO_T(5);\n"),
    ("  // Done reading the peers' smem.", "  EVO_T(6);\n  // Done reading the peers' smem."),
    ("  if constexpr (CS > 1) cluster_wait();  // peers are done with our smem and barriers before we exit\n}",
     "  if constexpr (CS > 1) cluster_wait();\n  EVO_T(7);\n}"),
]


def anchors_present(text: str) -> list[str]:
    """The anchors missing from (or not unique in) the template text; empty when it can be instrumented."""
    return [a for a, _ in PATCHES if text.count(a) != 1]


def instrumented_templates(dest: Path) -> Path:
    """A templates folder holding the instrumented family alone (its workspace: 1 MiB for the stamps)."""
    shutil.copytree(ROOT / "templates" / FAMILY, dest / FAMILY)
    k = dest / FAMILY / "kernel.cu"
    text = k.read_text()
    missing = anchors_present(text)
    if missing:
        raise SystemExit(f"error: the {FAMILY} template moved; re-anchor bench/skinny_trace.py at: {missing[0]!r}")
    for anchor, new in PATCHES:
        text = text.replace(anchor, new)
    text = re.sub(r"^workspace: .*$", 'workspace: "1048576"', text, count=1, flags=re.M)
    k.write_text(text)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("instances", nargs="+", help="JSON parameter dicts (G = 1)")
    a = ap.parse_args(argv)
    import cupy
    import numpy as np

    from evo.compile import Compiler
    from evo.config import load_config
    from evo.families import load_families
    from evo.gpu.device import gpu_info
    from evo.gpu.launch import LoadedKernel
    from evo.problem import parse_shape
    from evo.timing import Contender, Timer

    tmp = Path(tempfile.mkdtemp())
    (fam,) = load_families(instrumented_templates(tmp / "templates"), names=[FAMILY])
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp / "cache")}}).compile)
    info = gpu_info()
    problem = parse_shape(a.shape)
    rs = cupy.random.RandomState(1)
    A = (rs.standard_normal((problem.m, problem.k)) * 0.5).astype(cupy.float16)
    B = (rs.standard_normal((problem.n, problem.k)) * 0.5).astype(cupy.float16)
    ref = A.astype(cupy.float32) @ B.astype(cupy.float32).T
    for js in a.instances:
        params = fam.complete(json.loads(js))
        if int(params.get("G", 1)) != 1:
            print(f"{js}: G > 1 is not traced (its workspace holds the global split)", file=sys.stderr)
            continue
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
        run = Contender(run=lambda: kern(A, B, C),
                        after=lambda: traces.append(kern.workspace[: ctas * 16].view(cupy.uint64).copy()))
        t = Timer(info.l2_bytes, seed=0, sms=info.sm_count).measure({"k": run}, reps=a.reps, warmup=3)["k"]
        tr = np.stack([x.get().astype(np.int64).reshape(ctas, 8) for x in traces[3:]])  # launches x CTAs x phases
        rel = (tr - tr[:, :, :1].min(axis=1, keepdims=True)) / 1000.0
        print(f"\n{js} on {problem.key} ({info.name})\n  event median {t.median_us:.2f} us, max |C - ref| {err:.3g}, "
              f"{ctas} CTAs, {r.registers} registers")
        print("  phase          first CTA  median  last CTA   (us after the first CTA's entry; median over launches)")
        for i, name in enumerate(PHASES):
            first, med, last = (np.median(f(rel[:, :, i], axis=1)) for f in (np.min, np.median, np.max))
            print(f"  {name:13s} {first:9.2f} {med:7.2f} {last:9.2f}")
        steps = ", ".join(f"{PHASES[i]} -> {PHASES[i + 1]} {np.median(rel[:, :, i + 1] - rel[:, :, i]):.2f}"
                          for i in range(len(PHASES) - 1))
        print(f"  per CTA (median): {steps}")
        kern.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
