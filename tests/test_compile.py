import subprocess
import sys
from pathlib import Path

import pytest

from evo.compile import Compiler, gate, parse_ptxas
from evo.config import load_config
from evo.kernel import KernelSource

ROOT = Path(__file__).resolve().parent.parent
LOG = """ptxas info    : Compiling entry function 'evo_gemm' for 'sm_90a'
ptxas info    : Function properties for evo_gemm
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""


def test_parse_ptxas_report():
    r = parse_ptxas("h", "sm_90a", LOG)
    assert (r.registers, r.smem_static, r.stack_bytes, r.spill_bytes) == (168, 1024, 24, 20)
    ok, why = gate(r, LOG, reject_spills=True)
    assert not ok and "spill" in why
    clean = parse_ptxas("h", "sm_90a", LOG.replace("24 bytes stack frame, 8 bytes spill stores, 12", "0 bytes stack frame, 0 bytes spill stores, 0"))
    assert gate(clean, LOG, True) == (True, "")
    c7510 = "ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized"
    assert not gate(clean, c7510, True)[0]


@pytest.fixture
def compiler(tmp_path):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}})
    return Compiler.from_config(cfg.compile)


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compile_naive_and_cache(compiler, naive_source, arch):
    ks = KernelSource.parse(naive_source)
    r = compiler.compile(ks, arch)
    assert r.ok, r.error
    assert Path(r.cubin_path).stat().st_size > 0 and r.registers > 0 and not r.cached
    again = compiler.compile(ks, arch)
    assert again.cached and again.cubin_path == r.cubin_path


@pytest.mark.nvcc
def test_compile_error_is_one_line(compiler, naive_source):
    ks = KernelSource.parse(naive_source.replace("float acc = 0.f;", "float acc = undefined_name;"))
    r = compiler.compile(ks, "sm_80")
    assert not r.ok and "undefined_name" in r.error and "\n" not in r.error
    assert "undefined_name" in r.log


@pytest.mark.nvcc
def test_compile_timeout(tmp_path, naive_source):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "c"), "timeout_s": 0.05}})
    r = Compiler.from_config(cfg.compile).compile(KernelSource.parse(naive_source), "sm_80")
    assert not r.ok and "longer than" in r.error


def test_arch_not_claimed(compiler, naive_source):
    ks = KernelSource.parse(naive_source.replace("archs: [sm_80, sm_90a]", "archs: [sm_90a]"))
    r = compiler.compile(ks, "sm_80")
    assert not r.ok and "does not claim sm_80" in r.error


@pytest.mark.nvcc
def test_compile_only_cli(tmp_path):
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "1000x1000x1000", "--compile-only", "--arch", "sm_80",
                          "--families", "simt", "--db", str(tmp_path / "e.db"), "--config", str(_small_cfg(tmp_path))],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "compiled for sm_80" in res.stdout and "simt" in res.stdout


def _small_cfg(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(f"search:\n  initial_random: 2\ncompile:\n  cache_dir: {tmp_path / 'cache'}\n")
    return f


def test_compile_only_bad_arch(tmp_path):
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "64x64x64", "--compile-only", "--arch", "sm_70",
                          "--db", str(tmp_path / "e.db")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().startswith("error: unknown arch") and "Traceback" not in res.stderr
