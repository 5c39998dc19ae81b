"""Cooperative launches on a GPU: instances whose CTAs wait on each other run with the whole grid resident.

A reduce-scatter split, a stream-K fix-up (evo's and CUTLASS's) and a persistent owner reduce declare
`cooperative` in their front matter; the launchers then launch them cooperatively (cuLaunchCooperativeKernel, or
cuLaunchKernelEx's cooperative attribute for host-launched kernels, clusters included). Checked here: they compute
right that way, a grid too large to be resident is refused before it runs (and the GPU stays usable), and a captured
cooperative launch replays right.
"""
from dataclasses import replace

import pytest
from conftest import gpu_worker_session
from test_gpu_pipeline import check_instances

from evo.errors import EvoError
from evo.families import load_families
from evo.problem import parse_shape

pytestmark = pytest.mark.gpu

SHAPES = ("1000x1000x1000", "77x200x72", "512x2048x4096", "128x128x16384")

WAITING = {  # family: instances whose CTAs wait on CTAs of the same grid
    "wgmma_sm90": [
        {"BM": 128, "BN": 128, "STREAMK": 1, "PERSISTENT": 1, "STAGES": 5},                     # stream-K fix-up
        {"BM": 128, "BN": 128, "SPLIT_K": 2, "STAGES": 6, "SPLIT_OWNER": 1, "CLUSTER": 2},       # persistent owner, pairs
        {"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 6},        # reduce-scatter
    ],
    "cutlass_sm90": [
        {"SCHEDULE": 1, "SCHEDULER": 1, "TILE_N": 64, "SWAP_AB": 1, "CLUSTER_M": 2, "DECOMP": 2},  # stream-K, pairs
    ],
}


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    yield from gpu_worker_session(tmp_path_factory.mktemp("coop"), reps=5)


@pytest.mark.parametrize("family", sorted(WAITING))
def test_waiting_instances_launch_cooperatively_and_compute_right(gpu, family):
    (fam,) = load_families(names=[family])
    for p in WAITING[family]:
        assert fam.render(fam.complete(p)).cooperative(parse_shape("1000x1000x1000"), 132), p
    ran, failures = check_instances(gpu, family, WAITING[family], SHAPES)
    assert ran >= len(WAITING[family]) and not failures, "\n".join(failures)


def _loaded(comp, arch, grid_times: int = 1):
    """The reduce-scatter instance loaded for 512x2048x4096 (its grid multiplied by grid_times before any call),
    with inputs and their fp32 product."""
    import cupy

    from evo.gpu.launch import LoadedKernel

    (fam,) = load_families(names=["wgmma_sm90"])
    ks = fam.render(fam.complete(WAITING["wgmma_sm90"][2]))
    r = comp.compile(ks, arch)
    assert r.ok, r.error
    dev = cupy.cuda.Device()
    p = parse_shape("512x2048x4096")
    k = LoadedKernel(ks, r.cubin_path, p, dev.attributes["MultiProcessorCount"],
                     dev.attributes["MaxSharedMemoryPerBlockOptin"])
    k.spec = replace(k.spec, grid=(k.spec.grid[0] * grid_times, 1, 1))
    rs = cupy.random.RandomState(3)
    a = rs.standard_normal((p.m, p.k), dtype=cupy.float32).astype(cupy.float16)
    b = rs.standard_normal((p.n, p.k), dtype=cupy.float32).astype(cupy.float16)
    want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
    return k, a, b, want


def _err(c, want) -> float:
    import cupy

    return float(cupy.linalg.norm(c.astype(cupy.float32) - want) / cupy.linalg.norm(want))


def test_a_grid_too_large_to_be_resident_is_refused_not_run(gpu):
    """A cooperative grid larger than the GPU holds at once is refused before any CTA runs, by the driver (cupy's
    own cooperative launch would shrink it silently); the GPU serves the next call."""
    import cupy

    w, comp, _ = gpu
    k, a, b, want = _loaded(comp, w.info.arch)
    big, *_ = _loaded(comp, w.info.arch, grid_times=8)
    assert k.spec.cooperative and big.spec.cooperative
    c = cupy.full((a.shape[0], b.shape[0]), cupy.nan, dtype=cupy.float16)
    k(a, b, c)
    cupy.cuda.Device().synchronize()
    assert _err(c, want) < 1e-2
    with pytest.raises(EvoError, match="launch refused: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"):
        big(a, b, c)
    c.fill(cupy.nan)
    k(a, b, c)
    cupy.cuda.Device().synchronize()
    assert _err(c, want) < 1e-2
    k.close()
    big.close()


def test_a_captured_cooperative_launch_replays_right(gpu):
    """Dispatch records evo kernels into CUDA graphs (torch.compile, CUDA-graph capture): a cooperative launch is
    captured and replayed like any other, with fresh inputs read at replay."""
    import cupy

    w, comp, _ = gpu
    k, a, b, want = _loaded(comp, w.info.arch)
    c = cupy.full((a.shape[0], b.shape[0]), cupy.nan, dtype=cupy.float16)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        k(a, b, c)
        g = s.end_capture()
    for seed in (5, 6):
        rs = cupy.random.RandomState(seed)
        a[...] = rs.standard_normal(a.shape, dtype=cupy.float32).astype(cupy.float16)
        want = a.astype(cupy.float32) @ b.astype(cupy.float32).T
        c.fill(cupy.nan)
        cupy.cuda.Device().synchronize()
        g.launch(s)
        s.synchronize()
        assert _err(c, want) < 1e-2
    k.close()
