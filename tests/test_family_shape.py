"""Shape-specialized families: a template with {{M}}/{{N}}/{{K}} is rendered for one problem."""
import pytest

from evo.errors import EvoError
from evo.families import Family
from evo.problem import parse_shape

TEMPLATE = """/*---evo
family: fixed
archs: [sm_90a]
params: {{PARAMS}}
block: [32]
grid: [1]
requires: "M == {{M}} and N == {{N}} and K == {{K}}"
---*/
#include <cuda_fp16.h>
constexpr int kM = {{M}}, kN = {{N}}, kK = {{K}}, kT = {{T}};
extern "C" __global__ void evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* ws) {}
"""


def _family(tmp_path, params="T: [1, 2]", extra=""):
    d = tmp_path / "fixed"
    d.mkdir()
    (d / "family.yaml").write_text(f"name: fixed\narchs: [sm_90a]\nparams:\n  {params}\n{extra}")
    (d / "kernel.cu").write_text(TEMPLATE)
    return Family.load(d)


def test_shape_is_compiled_in_and_pinned(tmp_path):
    fam = _family(tmp_path, extra="ci_shape: 64x128x256\n")
    assert fam.shape_specialized
    p = parse_shape("128x64x512")
    ks = fam.render({"T": 2}, p)
    assert "kM = 128, kN = 64, kK = 512, kT = 2" in ks.text
    assert ks.accepts(p) and not ks.accepts(parse_shape("128x64x1024"))
    assert fam.render({"T": 2}, parse_shape("128x64x1024")).hash != ks.hash
    assert fam.ci_problem().key == "64x128x256"


def test_shape_specialized_family_needs_a_problem(tmp_path):
    fam = _family(tmp_path)
    with pytest.raises(EvoError, match="render it for a problem"):
        fam.render({"T": 1})
    with pytest.raises(EvoError, match="needs a ci_shape"):
        fam.ci_problem()


def test_shape_names_are_not_parameters(tmp_path):
    with pytest.raises(EvoError, match="not a parameter"):
        _family(tmp_path, params="M: [1, 2]")
