"""Split-K paths order their partials with release/acquire, never with sequentially consistent fences.

`__threadfence()` compiles to `membar.gl` (fence.sc.gpu: MEMBAR.SC.GPU + CCTL.IVALL in SASS), which
cost 2-4 us of tail on small outputs with long K. Every family's split-K arrival is one
`atom.add.acq_rel.gpu` after a CTA barrier (release is cumulative); the skinny family's
mbarrier-init cluster sync arrives relaxed (the init is released by fence.mbarrier_init).

The PTX check compiles split-K instances with `nvcc -ptx` (no ptxas: a few seconds each).
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from evo.families import load_families
from evo.problem import parse_shape

# family -> a split-K instance (params) and a shape it accepts
SPLIT_INSTANCES = {
    "mma_sm80": ({"BM": 64, "BN": 64, "BK": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3, "SPLIT_K": 4, "GROUP_M": 1}, "128x128x16384"),
    "mma_small_sm80": ({"BM": 32, "BN": 64, "BK": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 4, "SPLIT_K": 16},
                       "128x128x16384"),
    "wgmma_sm90": ({"BM": 64, "BN": 64, "CONSUMERS": 1, "STAGES": 6, "SPLIT_K": 8}, "128x128x16384"),
    "wgmma_skinny_sm90": ({"BM": 64, "BN": 64, "CONSUMERS": 1, "CLK": 4, "MC": 2, "G": 8, "SWAP_AB": 0, "STAGES": 4},
                          "128x128x16384"),
}
SC_FENCE = re.compile(r"\bmembar\.(gl|sys)\b|\bfence\.sc\b|\bfence\.(gpu|sys)\b")
TICKET = re.compile(r"\batom\.add\.acq_rel\.gpu\.global\.[us]32\b")


def _family(name):
    return load_families(names=[name])[0]


def _code(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


@pytest.mark.parametrize("name", sorted(SPLIT_INSTANCES))
def test_source_has_no_sc_fence_and_takes_an_acq_rel_ticket(name):
    fam = _family(name)
    params, shape = SPLIT_INSTANCES[name]
    assert fam.valid(fam.complete(params)), params
    code = _code(fam.render(params, parse_shape(shape)).text)
    assert "__threadfence" not in code and "atomicAdd" not in code
    assert TICKET.search(code), f"{name}: no acq_rel ticket in its split-K path"


def test_skinny_mbarrier_init_sync_arrives_relaxed():
    code = _code(_family("wgmma_skinny_sm90").template)
    init = code[code.index("fence.mbarrier_init.release.cluster"):]
    first_arrive = re.search(r"cluster_arrive\w*\(\)", init.split("if (warp == PRODUCER_WARP)")[0])
    assert first_arrive and first_arrive.group(0) == "cluster_arrive_relaxed()"
    assert "barrier.cluster.arrive.relaxed" in code


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("name", sorted(SPLIT_INSTANCES))
def test_ptx_has_no_sc_fence(name, tmp_path):
    fam = _family(name)
    params, shape = SPLIT_INSTANCES[name]
    cu = tmp_path / "k.cu"
    cu.write_text(fam.render(params, parse_shape(shape)).text)
    ptx = tmp_path / "k.ptx"
    from evo.compile import cutlass_include_dirs

    cmd = ["nvcc", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-DNDEBUG", "-o", str(ptx), str(cu)]
    cmd[1:1] = [f"-I{d}" for d in cutlass_include_dirs()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    text = ptx.read_text()
    assert TICKET.search(text), f"{name}: the acq_rel ticket is missing from the PTX"
    bad = SC_FENCE.findall(text)
    assert not bad, f"{name}: sequentially consistent fence in the PTX: {bad}"
