"""bench.skinny_trace instruments the skinny family's kernel at fixed places: they must still be there (once each),
and the instrumented family must still render and declare a workspace for the stamps."""
from pathlib import Path

from bench.skinny_trace import FAMILY, PATCHES, PHASES, anchors_present, instrumented_templates
from evo.families import load_families
from evo.problem import Problem

ROOT = Path(__file__).resolve().parent.parent


def test_every_anchor_is_in_the_template_once():
    text = (ROOT / "templates" / FAMILY / "kernel.cu").read_text()
    assert anchors_present(text) == []
    assert anchors_present(text.replace(PATCHES[3][0], "")) == [PATCHES[3][0]]


def test_instrumented_family_renders_with_a_trace_workspace(tmp_path):
    (fam,) = load_families(instrumented_templates(tmp_path), names=[FAMILY])
    ks = fam.render({"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8})
    assert ks.text.count("EVO_T(") == 1 + len(PHASES)  # the macro and one stamp per phase
    assert ks.launch(Problem(128, 128, 16384), 132).workspace >= 96 * 8 * 8
