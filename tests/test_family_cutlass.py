"""cutlass_sm90: the CUTLASS 3.x SM90 family (launch: host). CPU tests of its space and front matter; one nvcc test
builds the default instance and asks its host code for the launch geometry without a GPU."""
import random
from pathlib import Path

import pytest

from evo.families import load_families
from evo.problem import parse_shape

RUNTIME = ("RASTER", "SWIZZLE", "DECOMP", "SPLITS")  # host_args: no recompile


@pytest.fixture(scope="module")
def fam():
    return load_families(names=["cutlass_sm90"])[0]


def test_family_claims_sm90a_and_is_host_launched(fam):
    assert fam.archs == ("sm_90a",)
    ks = fam.render(fam.default_params())
    assert ks.meta.launch == "host" and ks.meta.host_args == RUNTIME
    assert not fam.shape_specialized  # one instance serves every shape
    assert ks.accepts(parse_shape("4096x4096x1024")) and not ks.accepts(parse_shape("4096x4096x1001"))


def test_runtime_arguments_share_one_compile(fam):
    base = fam.default_params()
    ks = fam.render(base)
    other = fam.render({**base, "RASTER": 2, "SWIZZLE": 4})
    assert other.code_hash == ks.code_hash and other.hash != ks.hash
    assert other.host_arg_values(parse_shape("256x256x256"), 132) == (2, 4, 0, 1)
    compiled = fam.render({**base, "TILE_N": 64})
    assert compiled.code_hash != ks.code_hash


def test_constraints_keep_every_instance_in_bounds(fam):
    rng = random.Random(1)
    seen = set()
    for _ in range(300):
        p = fam.random_params(rng)
        if p is None:  # 200 random draws found no valid point (rare)
            continue
        seen.add((p["SCHEDULE"], p["SCHEDULER"]))
        assert (p["TILE_M"] + p["TILE_N"]) * p["TILE_K"] * 2 * max(p["STAGES"], 2) + 16384 * p["EPI"] <= 232448
        if p["SCHEDULE"] == 1:
            assert p["TILE_M"] >= 128 and p["TILE_M"] * p["TILE_N"] <= 32768
        else:
            assert p["TILE_M"] <= 128 and p["TILE_M"] * p["TILE_N"] <= 16384 and p["SCHEDULER"] == 0
        if p["SCHEDULER"] == 0:
            assert p["DECOMP"] == 0 and p["SPLITS"] == 1
        assert p["SPLITS"] == 1 or p["DECOMP"] == 0  # split-K is its own decomposition
    assert {(2, 0), (1, 0), (1, 1), (0, 0)} <= seen  # every schedule, stream-K included, is reachable
    for p in fam.start_instances() + fam.instances_for_ci():
        assert fam.valid(p)


def test_template_placeholders_all_filled(fam):
    text = fam.render(fam.default_params()).text
    assert "{{" not in text.split("---*/", 1)[1]
    assert 'extern "C" int evo_host_params' in text and 'extern "C" int evo_host_query' in text


@pytest.mark.nvcc
def test_default_instance_builds_and_reports_its_geometry_without_gpu(fam, tmp_path):
    """One nvcc run: the .so and the cubin; the host query runs here and in the sandbox (no GPU: TMA descriptors are
    not encoded)."""
    from evo.compile import Compiler, host_library
    from evo.config import load_config
    from evo.gpu.host_launch import HostLibrary

    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}})
    comp = Compiler.from_config(cfg.compile)
    params = fam.default_params()
    ks = fam.render(params)
    r = comp.compile(ks, "sm_90a")
    assert r.ok, f"{r.error}\n{r.log[-3000:]}"
    assert Path(host_library(r.cubin_path)).is_file() and r.spill_bytes == 0
    lib = HostLibrary(host_library(r.cubin_path))
    for shape in ("4096x4096x1024", "512x2048x4096", "100x256x64"):
        p = parse_shape(shape)
        g = lib.query(p, 132, ks.host_arg_values(p, 132))
        assert g.cluster == (params["CLUSTER_M"], params["CLUSTER_N"], 1)
        assert g.block == (384, 1, 1)  # ping-pong: a producer and two consumer warpgroups
        assert g.grid[0] * g.grid[1] * g.grid[2] <= 132  # persistent: at most one CTA per SM
        assert 100_000 < g.smem <= 232448 and g.workspace >= 0 and g.params_bytes > 256
    # fewer SMs, fewer CTAs
    assert lib.query(parse_shape("4096x4096x1024"), 66, (0, 1, 0, 1)).grid[1] <= 33
    # as the evaluator runs it: in the sandbox, after its guards (no process, no tracing, no file changed), the same
    from evo.gpu.host_sandbox import SandboxedHostLibrary

    box = SandboxedHostLibrary(host_library(r.cubin_path), timeout_s=60)
    try:
        p = parse_shape("512x2048x4096")
        assert box.query(p, 132, ks.host_arg_values(p, 132)) == lib.query(p, 132, ks.host_arg_values(p, 132))
    finally:
        box.close()


@pytest.mark.nvcc
def test_stream_k_instance_reports_its_workspace_fills_without_gpu(fam, tmp_path):
    """The CI stream-K instance: CUTLASS's initialize_workspace asks to zero its lock range; the host code records
    that fill (FillRecorder) instead of running it, and the launcher replays it before every call."""
    from evo.compile import Compiler, host_library
    from evo.config import load_config
    from evo.gpu.host_launch import HostLibrary

    params = fam.complete(fam.ci_instances[0])
    assert params["SCHEDULER"] == 1 and params["SWAP_AB"] == 1
    comp = Compiler.from_config(load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache")}}).compile)
    ks = fam.render(params)
    r = comp.compile(ks, "sm_90a")
    assert r.ok, f"{r.error}\n{r.log[-3000:]}"
    lib = HostLibrary(host_library(r.cubin_path))
    p = parse_shape("512x2048x4096")
    g = lib.query(p, 132, ks.host_arg_values(p, 132))
    assert g.workspace > 0 and len(g.fills) >= 1
    assert all(f.value == 0 and f.offset + f.elem * f.count <= g.workspace for f in g.fills)
    assert g.grid[0] * g.grid[1] * g.grid[2] == 132 and g.cluster == (1, 1, 1)
    split = lib.query(p, 132, (0, 1, 0, 4))  # split-K 4: another decomposition, same compile, same persistent grid
    assert split.grid == g.grid and split.fills


def test_smoke_bench_instances_are_valid(fam):
    """bench/cutlass_smoke.py's instances and their runtime variants are valid points of the family."""
    from bench import cutlass_smoke

    names = set()
    for name, params in cutlass_smoke.INSTANCES.items():
        for vname, p in cutlass_smoke.variants(name, params).items():
            ks = fam.render(p)
            names.add(vname)
            assert ks.meta.launch == "host"
    assert len(names) > len(cutlass_smoke.INSTANCES)


@pytest.mark.nvcc
def test_a_tile_width_off_the_basic_wgmma_list_gets_its_own_wgmma(tmp_path):
    """CuTe picks the wgmma N that divides TILE_N; without CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED only 256/192/128/96/
    64/32/16/8 exist, so a 144-wide tile ran as nine m64n16 wgmmas per k slice (2x slower, docs/perf-cutlass.md)."""
    import subprocess

    from evo.compile import Compiler
    from evo.config import load_config

    fam = load_families(names=["cutlass_sm90"])[0]  # its own copy: admit() widens the space
    p = {**fam.default_params(), "SCHEDULE": 0, "TILE_M": 64, "TILE_N": 144, "CLUSTER_M": 1, "CLUSTER_N": 1,
         "EPI": 0}
    fam.admit(p)
    cu = tmp_path / "k.cu"
    cu.write_text(fam.render(fam.complete(p)).text)
    comp = Compiler.from_config(load_config().compile)  # evo's own nvcc, flags and CUTLASS headers; PTX only
    assert comp.include_dirs, "the nvidia-cutlass wheel's headers are not installed"
    r = subprocess.run([comp.nvcc, "-ptx", "-arch=sm_90a", *comp.flags, *[f"-I{d}" for d in comp.include_dirs],
                        "-o", str(tmp_path / "k.ptx"), str(cu)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ptx = (tmp_path / "k.ptx").read_text()
    assert "wgmma.mma_async.sync.aligned.m64n144k16" in ptx and "m64n16k16" not in ptx
