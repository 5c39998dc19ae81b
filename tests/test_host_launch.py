"""Host-launched candidates (front matter ``launch: host``): one nvcc run builds <key>.so + <key>.cubin, the ctypes
side of the ABI (evo.gpu.host_launch.HostLibrary) needs no GPU; the GPU tests launch through cuLaunchKernelEx."""
import ctypes
import struct
from pathlib import Path

import pytest

from conftest import DATA, gpu_worker_session
from evo.compile import Compiler, host_library
from evo.config import load_config
from evo.errors import EvoError
from evo.gpu.host_launch import EvoHostLaunch, Fill, HostGeometry, HostLibrary
from evo.kernel import KernelSource
from evo.problem import parse_shape

NAIVE_HOST = (DATA / "naive_host.cu").read_text()


def test_front_matter_launch_host():
    ks = KernelSource.parse(NAIVE_HOST)
    assert ks.meta.launch == "host" and ks.meta.host_args == ("TILE",)
    assert ks.host_arg_values(parse_shape("100x200x64"), 132) == (16,)
    plain = KernelSource.parse((DATA / "naive.cu").read_text())
    assert plain.meta.launch == "device" and plain.meta.host_args == ()


def test_launch_host_needs_its_host_functions():
    text = NAIVE_HOST.replace("evo_host_params(", "evo_host_paramz(")
    with pytest.raises(EvoError, match="evo_host_params"):
        KernelSource.parse(text)
    with pytest.raises(EvoError, match="launch must be one of"):
        KernelSource.parse(NAIVE_HOST.replace("launch: host", "launch: gpu"))
    with pytest.raises(EvoError, match="host_args"):
        KernelSource.parse((DATA / "naive.cu").read_text().replace("params: {}", "params: {}\nhost_args: [1]"))


def test_host_launch_is_part_of_the_hash():
    a = KernelSource.parse(NAIVE_HOST)
    b = KernelSource.parse(NAIVE_HOST.replace('host_args: ["TILE"]', 'host_args: ["TILE * 2"]'))
    assert a.hash != b.hash and a.code_hash == b.code_hash  # runtime arguments: one compile serves both


def test_struct_layout_matches_c():
    # int abi, params_bytes; uint grid[3], block[3], cluster[3]; int smem, pdl; (pad) ll workspace; int n_fills,
    # fill_elem[4]; (pad) ll fill_offset[4], fill_count[4]; uint fill_value[4]; char message[160]
    assert EvoHostLaunch.workspace.offset == 56 and EvoHostLaunch.fill_offset.offset == 88
    assert EvoHostLaunch.message.offset == 168 and ctypes.sizeof(EvoHostLaunch) == 328


def test_geometry_validation():
    ok = HostGeometry(40, (4, 2, 1), (128, 1, 1), (2, 1, 1), 1024, False, 256, (Fill(128, 4, 32, 0),))
    ok.validate()
    with pytest.raises(EvoError, match="multiple of the cluster"):
        HostGeometry(40, (3, 2, 1), (128, 1, 1), (2, 1, 1), 0, False, 0, ()).validate()
    with pytest.raises(EvoError, match="outside"):
        HostGeometry(40, (4, 1, 1), (128, 1, 1), (1, 1, 1), 0, False, 256, (Fill(200, 4, 32, 0),)).validate()
    with pytest.raises(EvoError, match="empty launch"):
        HostGeometry(40, (0, 1, 1), (128, 1, 1), (1, 1, 1), 0, False, 0, ()).validate()


@pytest.fixture(scope="module")
def naive_host_build(tmp_path_factory):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path_factory.mktemp("cache"))}})
    compiler = Compiler.from_config(cfg.compile)
    ks = KernelSource.parse(NAIVE_HOST)
    return compiler, ks, compiler.compile(ks, "sm_90a")


@pytest.mark.nvcc
def test_compile_builds_so_and_cubin_once(naive_host_build):
    compiler, ks, r = naive_host_build
    assert r.ok, r.error
    assert Path(r.cubin_path).is_file() and Path(host_library(r.cubin_path)).is_file()
    assert r.registers > 0  # the ptxas report of the device code still feeds the gates
    assert Path(r.cubin_path).read_bytes()[:4] == b"\x7fELF"
    again = compiler.compile(ks, "sm_90a")
    assert again.cached and again.cubin_path == r.cubin_path
    # a cache entry whose .so went missing is compiled again
    Path(host_library(r.cubin_path)).unlink()
    third = compiler.compile(ks, "sm_90a")
    assert not third.cached and Path(host_library(third.cubin_path)).is_file()
    leftovers = [p.name for p in Path(r.cubin_path).parent.iterdir() if "tmp" in p.name or p.name.endswith(".keep")]
    assert leftovers == []


@pytest.mark.nvcc
def test_host_library_query_and_params_without_gpu(naive_host_build):
    _, ks, r = naive_host_build
    lib = HostLibrary(host_library(r.cubin_path))
    p = parse_shape("100x200x64")
    g = lib.query(p, 132, (16,))
    assert g.grid == (13, 7, 1) and g.block == (16, 16, 1) and g.cluster == (1, 1, 1) and g.workspace == 0
    g8 = lib.query(p, 132, (8,))
    assert g8.grid == (25, 13, 1) and g8.block == (8, 8, 1)
    g2, block = lib.params(p, 132, (16,), 0x1000, 0x2000, 0x3000, 0)
    assert g2 == g and len(block.raw) == g.params_bytes == 40  # 3 pointers + 3 ints, padded to 8
    a, b, c, m, n, k = struct.unpack("<QQQiii", block.raw[:36])
    assert (a, b, c, m, n, k) == (0x1000, 0x2000, 0x3000, 100, 200, 64)
    with pytest.raises(EvoError, match="TILE must be"):
        lib.query(p, 132, (64,))


# ---- GPU ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    yield from gpu_worker_session(tmp_path_factory.mktemp("gpu"), reps=10)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["128x128x64", "100x200x72", "1x333x40"])
def test_naive_host_is_correct_on_gpu(gpu, shape):
    w, compiler, cfg = gpu
    ks = KernelSource.parse(NAIVE_HOST)
    r = compiler.compile(ks, w.info.arch)
    assert r.ok, r.error
    ev = w.call("evaluate", timeout_s=120, problem=parse_shape(shape), source=NAIVE_HOST, cubin=r.cubin_path, h=ks.hash)
    assert ev.ok, ev.error
    assert ev.stage == "done" and ev.time_us > 0


@pytest.mark.gpu
def test_naive_host_wrong_params_are_caught(gpu):
    """A host function that builds a wrong parameter block (K - 8) computes the wrong thing: the check says so."""
    w, compiler, cfg = gpu
    text = NAIVE_HOST.replace("NaiveParams p{(const __half*)A, (const __half*)B, (__half*)C, M, N, K};",
                              "NaiveParams p{(const __half*)A, (const __half*)B, (__half*)C, M, N, K - 8};")
    ks = KernelSource.parse(text)
    r = compiler.compile(ks, w.info.arch)
    assert r.ok, r.error
    ev = w.call("evaluate", timeout_s=120, problem=parse_shape("128x128x64"), source=text, cubin=r.cubin_path, h=ks.hash)
    assert not ev.ok and ev.stage == "check"


def test_call_builds_the_launch_config_once_per_stream(monkeypatch):
    """The per-call host work of a host-launched kernel: the parameter block per pointer set and the launch config
    per stream are built once, then reused; the fills are replayed every call (a stand-in driver and CuPy, no GPU)."""
    import sys
    import types

    import evo.gpu.host_launch as hl

    launched, memsets, built = [], [], []
    stream = types.SimpleNamespace(ptr=7)
    fake_cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: stream,
                                                                 driver=types.SimpleNamespace(CUDADriverError=RuntimeError)))
    drv = types.SimpleNamespace(cuLaunchKernelEx=lambda cfg, fn, ptrs, extra: launched.append(cfg._obj.hStream) or 0,
                                cuMemsetD32Async=lambda *a: memsets.append(a) or 0)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(hl, "driver", lambda: drv)
    real = hl.launch_config
    monkeypatch.setattr(hl, "launch_config", lambda g, s, coop: built.append(s) or real(g, s, coop))
    g = HostGeometry(64, (2, 1, 1), (128, 1, 1), (1, 1, 1), 0, False, 16, (Fill(0, 4, 4, 0),))
    k = object.__new__(hl.HostLaunchedKernel)
    k.fn_ptr, k.workspace, k._blocks = 1, types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096)), {}
    k.cooperative = False
    k._block = lambda a, b, c: k._blocks.setdefault((a, b, c), (g, None, None, {}))
    for _ in range(3):
        k(1, 2, 3)
    stream.ptr = 9
    k(1, 2, 3)
    assert built == [7, 9] and launched == [7, 7, 7, 9] and len(memsets) == 4


def test_launch_config_carries_cluster_pdl_and_cooperative():
    from evo.gpu.host_launch import (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                                     CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, launch_config)

    g = HostGeometry(64, (4, 66, 1), (384, 1, 1), (2, 1, 1), 205824, True, 0, ())
    cfg, attrs = launch_config(g, 0)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.blockDimX, cfg.sharedMemBytes, cfg.numAttrs) == (4, 66, 384, 205824, 2)
    assert attrs[0].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    assert (attrs[0].value.clusterDim.x, attrs[0].value.clusterDim.y, attrs[0].value.clusterDim.z) == (2, 1, 1)
    assert attrs[1].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attrs[1].value.programmaticStreamSerializationAllowed == 1
    plain, _ = launch_config(HostGeometry(64, (1, 1, 1), (32, 1, 1), (1, 1, 1), 0, False, 0, ()), 0)
    assert plain.numAttrs == 0
    coop, cattrs = launch_config(g, 0, cooperative=True)  # a kernel whose CTAs wait on each other
    assert coop.numAttrs == 3 and cattrs[0].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE and cattrs[0].value.cooperative == 1
    assert [cattrs[i].id for i in (1, 2)] == [CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    assert ctypes.sizeof(attrs[0]) == 72  # CUlaunchAttribute: 4-byte id, 4 bytes pad, 64-byte value


def test_abi_parameters_point_at_the_kernel_arguments_in_order():
    """The device-launched kernels' parameter block for cuLaunchKernelEx: A, B, C (64-bit), M, N, K (32-bit), the
    workspace (64-bit), then every 128-byte tensor map by value, each pointer reading back its own argument."""
    import numpy as np

    from evo.gpu.host_launch import abi_parameters

    maps = [np.arange(16, dtype=np.uint64) + 100 * i for i in range(2)]
    ptrs, held = abi_parameters(0x1000, 0x2000, 0x3000, parse_shape("100x200x64"), 0x4000, maps)
    assert len(ptrs) == 9
    read = [ctypes.c_uint64.from_address(ptrs[i]).value for i in (0, 1, 2, 6)]
    assert read == [0x1000, 0x2000, 0x3000, 0x4000]
    assert [ctypes.c_int32.from_address(ptrs[i]).value for i in (3, 4, 5)] == [100, 200, 64]
    for i, t in enumerate(maps):
        assert ctypes.string_at(ptrs[7 + i], 128) == t.tobytes()
    no_maps, _ = abi_parameters(1, 2, 3, parse_shape("8x8x8"), 4, [])
    assert len(no_maps) == 7 and ctypes.c_int32.from_address(no_maps[5]).value == 8


def test_export_marks_host_launched_champions(tmp_path):
    """The exported .json of a host-launched champion says so (its front-matter geometry is an estimate)."""
    import json as _json

    from evo.export import export_table
    from test_export import GPU, set_lead, swept

    cfg, store = swept(tmp_path, ["512x512x2048"])
    set_lead(store, "512x512x2048", 1.10, 0.01)
    h = store.confirm("512x512x2048", "TN", GPU)["hash"]
    store.db.execute("UPDATE candidates SET source=? WHERE hash=?", (NAIVE_HOST, h))
    store.db.commit()
    out, rows = export_table(store, GPU, cfg.paths.out)
    meta = _json.loads((Path(cfg.paths.out) / GPU / "TN" / "512x512x2048.json").read_text())
    assert meta["launch_abi"] == "host" and meta["host_args"] == [16]
    assert (Path(cfg.paths.out) / GPU / "TN" / "512x512x2048.cu").read_text() == NAIVE_HOST
