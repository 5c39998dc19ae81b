"""Fresh-input kernels compile; defence switches parse (no GPU). The GPU side: tests/test_cheats_gpu.py."""
import subprocess

import pytest

from evo.defences import DEFENCES, ENV, defences_off
from evo.errors import EvoError


@pytest.mark.nvcc
def test_fresh_input_kernels_compile(tmp_path):
    from evo.compile import find_nvcc
    from evo.fresh import SOURCE

    cu = tmp_path / "fresh.cu"
    cu.write_text(SOURCE)
    r = subprocess.run([find_nvcc(), "--cubin", "-arch=sm_90a", "-std=c++17", "-Xptxas", "-v", "-o",
                        str(tmp_path / "fresh.cubin"), str(cu)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("evo_fill", "evo_colsum", "evo_dot", "evo_ctv", "evo_sample_ref", "evo_sample_cmp"):
        assert name in r.stdout + r.stderr


def test_defences_from_config_and_environment():
    assert defences_off([], {}) == frozenset()
    assert defences_off(["roofline"], {ENV: "fresh_inputs, tight_bound"}) == {"roofline", "fresh_inputs", "tight_bound"}
    with pytest.raises(EvoError, match="unknown defence nope"):
        defences_off([], {ENV: "nope"})
    assert {"fresh_inputs", "random_checks", "tight_bound", "roofline", "fresh_module", "ptx_checks",
            "sanitizer_padding", "host_sandbox", "host_no_spawn", "host_no_trace",
            "host_read_only"} == set(DEFENCES)


def test_unknown_defence_in_config_is_one_line(tmp_path):
    from evo.config import load_config

    with pytest.raises(EvoError, match="unknown defence"):
        load_config(overrides={"check": {"defences_off": ["everything"]}})
    with pytest.raises(EvoError, match="full_checks_min"):
        load_config(overrides={"check": {"full_checks_min": 5, "full_checks_max": 4}})
