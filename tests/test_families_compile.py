"""Every kernel family compiles, for every arch it claims, through evo.compile and its gates.

The CI instances of each family (its default plus `ci_instances` in family.yaml) are built with the same
nvcc command the search uses; a build fails here on an error, register spills, a stack frame (local memory),
ptxas C7510 (wgmma serialized) or C7508 (setmaxnreg ignored).
"""
import pytest

from evo.compile import Compiler
from evo.config import load_config
from evo.families import load_families

CASES = [(fam.name, arch, i) for fam in load_families() for arch in fam.archs for i in range(len(fam.instances_for_ci()))]


@pytest.fixture(scope="module")
def compiler(tmp_path_factory):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path_factory.mktemp("families-cache"))}})
    return Compiler.from_config(cfg.compile)


def test_every_family_claims_a_known_arch_and_has_ci_instances():
    fams = load_families()
    assert {"simt", "mma_sm80", "cute_sm80", "wgmma_sm90", "wgmma_skinny_sm90"} <= {f.name for f in fams}
    for fam in fams:
        assert set(fam.archs) <= {"sm_80", "sm_90a"} and fam.archs
        assert 1 <= len(fam.instances_for_ci()) <= 5, f"{fam.name}: keep CI instances few (2-core CI)"
        # a start or CI instance that breaks a constraint (e.g. after a new parameter's default) would be dropped
        # from generation 0 without a word (Family.start_instances keeps the valid ones)
        for p in list(fam.starts) + list(fam.ci_instances):
            assert fam.valid(fam.complete(p)), f"{fam.name}: {p} violates the family's constraints"


@pytest.mark.nvcc
@pytest.mark.parametrize("family,arch,index", CASES, ids=[f"{f}-{a}-{i}" for f, a, i in CASES])
def test_ci_instance_compiles_clean(compiler, family, arch, index):
    fam = next(f for f in load_families() if f.name == family)
    params = fam.instances_for_ci()[index]
    ks = fam.render(params, fam.ci_problem())
    r = compiler.compile(ks, arch)
    assert r.ok, f"{family} {params} for {arch}: {r.error}\n{r.log[-3000:]}"
    assert "C7508" not in r.log, f"{family} {params}: setmaxnreg ignored"
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers > 0
