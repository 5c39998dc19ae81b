"""CPU tests of the `cute_sm80` kernel family (templates/cute_sm80, CuTe from the nvidia-cutlass wheel).

* the parameter space is consistent: default and CI instances valid, every valid instance renders,
  and its launch geometry (grid, block, smem, `requires`) is sane for 4096x4096x1024 and 1000x1000x1000;
* the CI instances compile with nvcc (through evo.compile.Compiler, the search's own flags and
  gates) for every arch the family claims, with no register spills and no stack frame, and the
  kernel uses tensor cores (mma.sync / HMMA), ldmatrix and cp.async (checked in the PTX).
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evo.compile import Compiler
from evo.config import load_config
from evo.families import load_families
from evo.problem import Problem

NAME = "cute_sm80"
SMEM_MAX = 227 * 1024


def family():
    return load_families(names=[NAME])[0]


def test_space_and_ci_instances_valid():
    fam = family()
    assert set(fam.archs) == {"sm_80", "sm_90a"}
    assert fam.valid(fam.default_params())
    assert len(fam.ci_instances) <= 2          # CuTe compiles are slow: keep CI small
    for p in fam.instances_for_ci():
        assert fam.valid(p), p
    rng = random.Random(0)
    for _ in range(50):
        assert fam.random_params(rng) is not None


def test_constraints_keep_every_instance_buildable():
    fam = family()
    valid = list(fam.valid_instances())
    assert len(valid) >= 50
    for p in valid:
        threads = 32 * p["WARPS_M"] * p["WARPS_N"]
        assert threads in (128, 256)
        assert p["BM"] % (16 * p["WARPS_M"]) == 0 and p["BN"] % (16 * p["WARPS_N"]) == 0
        assert p["BM"] * p["BN"] // threads <= 128                      # fp32 accumulators per thread
        assert max(p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2, p["BM"] * (p["BN"] + 8) * 2) <= SMEM_MAX


@pytest.mark.parametrize("shape", [(4096, 4096, 1024), (1000, 1000, 1000)])
def test_launch_geometry(shape):
    fam = family()
    prob = Problem(*shape)
    rng = random.Random(1)
    valid = list(fam.valid_instances())
    for p in rng.sample(valid, 40) + fam.instances_for_ci():
        ks = fam.render(p)
        assert ks.meta.family == NAME and ks.meta.params == fam.complete(p) and "{{" not in ks.text
        assert ks.accepts(prob)                      # K % 8 == 0 for both shapes
        ls = ks.launch(prob, num_sms=132)
        assert ls.block == (32 * p["WARPS_M"] * p["WARPS_N"], 1, 1)
        assert ls.grid == (-(-prob.n // p["BN"]), -(-prob.m // p["BM"]), 1)
        assert ls.smem == max(p["STAGES"] * (p["BM"] + p["BN"]) * p["BK"] * 2, p["BM"] * (p["BN"] + 8) * 2)
        assert 0 < ls.smem <= SMEM_MAX and ls.workspace == 0 and ls.tensor_maps == ()
    ks = fam.render({})
    p = fam.default_params()
    ls = ks.launch(Problem(4096, 4096, 1024), 132)
    assert ls.grid == (4096 // p["BN"], 4096 // p["BM"], 1)
    ls = ks.launch(Problem(1000, 1000, 1000), 132)
    assert ls.grid == (-(-1000 // p["BN"]), -(-1000 // p["BM"]), 1)


def test_requires_k_multiple_of_8_only():
    ks = family().render({})
    for shape in [(1, 1, 8), (1000, 1000, 1000), (77, 1001, 336), (4097, 33, 1024)]:
        assert ks.accepts(Problem(*shape)), shape     # M and N are predicated: any value
    for shape in [(1000, 1000, 1001), (64, 64, 60), (128, 128, 4)]:
        assert not ks.accepts(Problem(*shape)), shape


@pytest.fixture(scope="module")
def ci_results(tmp_path_factory):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path_factory.mktemp("cute_cache"))}})
    comp = Compiler.from_config(cfg.compile)
    fam = family()
    items = [(fam.render(p), arch) for p in fam.instances_for_ci() for arch in fam.archs]
    return comp, items, comp.compile_many(items, jobs=2)


@pytest.mark.nvcc
def test_ci_instances_compile_without_spills(ci_results):
    _, items, results = ci_results
    assert {a for _, a in items} == {"sm_80", "sm_90a"}
    for (ks, arch), r in zip(items, results):
        what = f"{arch} {ks.meta.params}"
        assert r.ok, f"{what}: {r.error}"
        assert r.spill_bytes == 0 and r.stack_bytes == 0, what
        assert 0 < r.registers <= 255, what
        assert Path(r.cubin_path).stat().st_size > 0, what


@pytest.mark.nvcc
def test_default_uses_tensor_cores_ldmatrix_cp_async(ci_results, tmp_path):
    comp, items, results = ci_results
    ks, arch = items[0]
    cuobjdump = shutil.which("cuobjdump") or next((str(p) for p in [Path(comp.nvcc).parent / "cuobjdump"] if p.is_file()), None)
    if cuobjdump:  # SASS of the cubin the search would load
        sass = subprocess.run([cuobjdump, "-sass", results[0].cubin_path], check=True, capture_output=True,
                              text=True, timeout=300).stdout
        assert "HMMA.16816.F32" in sass and "LDSM" in sass and "LDGSTS" in sass
        return
    # no cuobjdump here: check the PTX of the same source instead
    cu = tmp_path / "k.cu"
    cu.write_text(ks.text)
    ptx = tmp_path / "k.ptx"
    code = arch.replace("sm_", "")
    cmd = [comp.nvcc, "--ptx", f"-arch=sm_{code}", *comp.flags, *(f"-I{i}" for i in comp.include_dirs), "-o", str(ptx), str(cu)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    text = ptx.read_text()
    assert re.search(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32", text)
    assert "ldmatrix.sync.aligned" in text and "cp.async.cg.shared.global" in text
    assert ".local" not in text
