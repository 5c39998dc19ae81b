"""bench.phase_trace instruments a family's kernel at fixed places: they must still be there (once each), and the
instrumented family must still render and declare a workspace for the stamps."""
from pathlib import Path

import pytest

from bench.phase_trace import TRACE_BYTES, TRACES, anchors_present, instrumented_templates
from evo.families import load_families
from evo.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = {
    "wgmma_skinny_sm90": ({"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8}, Problem(128, 128, 16384)),
    "wgmma_sm90": ({"BM": 128, "BN": 96, "PERSISTENT": 0, "STAGES": 6, "EPI": 1}, Problem(128, 12288, 256)),
}


@pytest.mark.parametrize("family", sorted(TRACES))
def test_every_anchor_is_in_the_template_once(family):
    text = (ROOT / "templates" / family / "kernel.cu").read_text()
    assert anchors_present(text, family) == []
    gone = TRACES[family].patches[3][0]
    assert anchors_present(text.replace(gone, ""), family) == [gone]


@pytest.mark.parametrize("family", sorted(TRACES))
def test_instrumented_family_renders_with_a_trace_workspace(tmp_path, family):
    (fam,) = load_families(instrumented_templates(tmp_path, family), names=[family])
    params, problem = INSTANCES[family]
    ks = fam.render(fam.complete(params))
    stamps = len(TRACES[family].phases)
    assert sum(ks.text.count(f"{m}(") for m in ("EVO_T", "EVO_C")) >= 1 + stamps  # the macros and one stamp per phase
    for i in range(stamps):
        assert f"(({i}))" not in ks.text and (f"EVO_T({i})" in ks.text or f"EVO_C({i})" in ks.text)
    launch = ks.launch(problem, 132)
    assert launch.workspace >= launch.grid[0] * 8 * 8


def test_the_trace_comes_ahead_of_a_split_k_workspace(tmp_path):
    """Split-K instances keep their workspace: the instrumented one is 1 MiB longer and the kernel steps past it."""
    params, problem = {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16}, Problem(256, 1024, 16384)
    (plain,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    (traced,) = load_families(instrumented_templates(tmp_path, "wgmma_sm90"), names=["wgmma_sm90"])
    before = plain.render(plain.complete(params)).launch(problem, 132).workspace
    ks = traced.render(traced.complete(params))
    assert before > 0 and ks.launch(problem, 132).workspace == before + TRACE_BYTES
    assert "workspace += TRACE_FLOATS;" in ks.text and f"TRACE_FLOATS = {TRACE_BYTES // 4};" in ks.text
