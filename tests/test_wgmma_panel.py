"""wgmma_sm90's row panel (PANEL = 1): launch rules, constraints, the K limit, and (nvcc) its PTX.

That the panel is loaded once per row block and reused correctly is proven on a GPU only: the CI instance runs
through the checker on off-tile shapes in tests/test_gpu_pipeline.py (1030x4104x136: CTAs cross row blocks).
"""
from pathlib import Path

import pytest

from evo.families import load_families
from evo.problem import Problem
from evo.testing.ptx import ptx_of

ROOT = Path(__file__).resolve().parent.parent
PANEL = {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "PANEL": 1, "GROUP": 1}


@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    return f


def test_panel_geometry(fam):
    ks = fam.render(fam.complete(PANEL))
    spec = ks.launch(Problem(2048, 12288, 128), num_sms=132)
    assert spec.grid == (132, 1, 1) and spec.block == (384, 1, 1)  # persistent: 768 units in contiguous shares
    # ring of B tiles only (5 x 128 x 64 fp16) + alignment + 2 consumers x 2 staging buffers + the 256 x 128 panel
    assert spec.smem == 5 * 128 * 128 + 1024 + 2 * 2 * 128 * 128 + 256 * 2 * 128
    base = fam.render(fam.complete({**PANEL, "PANEL": 0, "STAGES": 3})).launch(Problem(2048, 12288, 128), num_sms=132)
    assert base.smem == 3 * (256 + 128) * 128 + 1024 + 2 * 2 * 128 * 128
    assert [(t.operand, t.box_rows) for t in spec.tensor_maps] == [(t.operand, t.box_rows) for t in base.tensor_maps]


def test_panel_needs_a_short_k(fam):
    ks = fam.render(fam.complete(PANEL))
    assert ks.accepts(Problem(2048, 12288, 128)) and ks.accepts(Problem(1000, 4104, 72))
    assert not ks.accepts(Problem(2048, 12288, 136))  # a 256 x 192 panel does not fit beside five stages
    assert fam.render(fam.complete({**PANEL, "STAGES": 3})).accepts(Problem(2048, 12288, 192))
    small = fam.render(fam.complete({"BM": 128, "BN": 64, "CONSUMERS": 1, "STAGES": 6, "EPI": 2, "PANEL": 1, "GROUP": 1}))
    assert small.accepts(Problem(4096, 512, 256)) and not small.accepts(Problem(4096, 512, 4096))


def test_panel_constraints(fam):
    assert fam.valid(fam.complete(PANEL))
    for bad in ({"SPLIT_K": 2, "BM": 128, "BN": 64}, {"PINGPONG": 1, "BM": 128}, {"CLUSTER": 2},
                {"PERSISTENT": 0}, {"GROUP": 8}, {"STAGES": 7}):
        assert not fam.valid(fam.complete({**PANEL, **bad})), bad
    assert any(p.get("PANEL") for p in fam.instances_for_ci())  # CI compiles it and the GPU test checks it




@pytest.mark.nvcc
def test_ptx_panel_loads(fam, tmp_path):
    panel = ptx_of(fam.render(fam.complete(PANEL)).text, tmp_path, name="panel")
    ring = ptx_of(fam.render(fam.complete({**PANEL, "PANEL": 0, "STAGES": 3})).text, tmp_path, name="ring")
    # full + empty per ring stage, the two ping-pong order barriers, and (panel) a full barrier per k block the panel
    # can hold beside five stages (two: K <= 128), so a new row block's first wgmmas wait for its first k block only,
    # and the panel's empty barrier
    assert ring.count("mbarrier.init.shared::cta.b64") == 2 * 3 + 2
    assert panel.count("mbarrier.init.shared::cta.b64") == 2 * 5 + 2 + 2 + 1
    assert "membar.gl" not in panel and "fence.sc" not in panel
    # four staging buffers (two 64-row slices per consumer a round): a round waits for the round before last
    four = ptx_of(fam.render(fam.complete({**PANEL, "STAGES": 2, "EPI": 4})).text, tmp_path, name="four")
    assert "cp.async.bulk.wait_group.read 1" in four


@pytest.mark.nvcc
def test_ptx_panel_prologue_has_no_64_bit_division(fam, tmp_path):
    # a CTA's share of the units [b * units / grid, (b + 1) * units / grid) and a unit's row block take 32-bit
    # arithmetic: a 64-bit division is a call on the way to the first load (0.36 us of the prologue, H200 trace)
    ptx = ptx_of(fam.render(fam.complete({**PANEL, "EARLY_STORE": 1, "EPI_HINT": 1})).text, tmp_path, name="panel")
    assert not any(op in ptx for op in ("div.s64", "div.u64", "rem.s64", "rem.u64"))
