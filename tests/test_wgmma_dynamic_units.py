"""wgmma_sm90 DYN: units past each CTA's static share claimed at run time from a workspace counter (the GPU test
test_dynamic_units_correct_on_gpu runs them; these check the launch, the constraints and the PTX)."""
from __future__ import annotations

from pathlib import Path

import pytest

from evo.families import load_families
from evo.problem import Problem
from evo.ptx_checks import check_ptx
from evo.testing.ptx import ptx_of

ROOT = Path(__file__).resolve().parent.parent
PANEL_DYN = {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EPI_WIDE": 1, "DYN": 1}


@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    return f


def test_dynamic_units_take_a_counter_in_the_workspace(fam):
    prob = Problem(16384, 16384, 128)
    dyn = fam.render(fam.complete(PANEL_DYN)).launch(prob, num_sms=132)
    static = fam.render(fam.complete({**PANEL_DYN, "DYN": 0})).launch(prob, num_sms=132)
    assert dyn.workspace == 256 and static.workspace == 0  # one counter, zeroed by the evaluator and by the last claim
    assert dyn.grid == static.grid == (132, 1, 1) and dyn.smem == static.smem


def test_dynamic_units_constraints(fam):
    for p in ({**PANEL_DYN, "PANEL": 0, "GROUP": 8, "STAGES": 3},          # strided shares
              {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "DYN": 8},   # every unit claimed, alternate consumers
              {"BM": 128, "BN": 256, "STAGES": 3, "DYN": 4}):                 # ordinary stores
        assert fam.valid(fam.complete(p)), p
    for p in ({"BM": 128, "BN": 128, "STAGES": 4, "PERSISTENT": 0, "DYN": 1},  # one unit per CTA: nothing to balance
              {"BM": 128, "BN": 64, "STAGES": 4, "SPLIT_K": 2, "DYN": 1},      # split-K's counters own the workspace
              {"BM": 128, "BN": 128, "STAGES": 4, "CLUSTER": 2, "DYN": 1}):    # pairs take units in GPC stripes
        assert not fam.valid(fam.complete(p)), p


@pytest.mark.nvcc
def test_ptx_dynamic_claims(fam, tmp_path):
    text = ptx_of(fam.render(fam.complete(PANEL_DYN)).text, tmp_path, name="dyn")
    # every atomic is the scheduler thread's claim, .release so the compile-time publication rule holds (nothing is
    # published by it); and the relaxed store that sets the counter back for the next launch
    claims = text.count("atom.release.gpu.global.add.u32")
    assert claims >= 1 and text.count("atom.") == claims
    assert "st.relaxed.gpu.global.u32" in text
    assert check_ptx(text) == []
    static = ptx_of(fam.render(fam.complete({**PANEL_DYN, "DYN": 0})).text, tmp_path, name="static")
    assert "atom." not in static and "st.relaxed.gpu" not in static  # static shares touch no counter
