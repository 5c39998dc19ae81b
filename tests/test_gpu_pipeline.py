"""The GPU path end to end: worker, check, timing, baselines, fault isolation, search, resume.

Marked gpu: skipped where no CUDA GPU is visible (CI); run on the GPU machine with
    python -m pytest -m gpu -q
"""
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import gpu_worker_session

from evo.gpu.worker import WorkerFault
from evo.kernel import KernelSource
from evo.problem import parse_shape

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    yield from gpu_worker_session(tmp_path_factory.mktemp("gpu"), reps=10)


def evaluate(gpu, name_or_text, shape):
    w, comp, _ = gpu
    text = (DATA / name_or_text).read_text() if name_or_text.endswith(".cu") else name_or_text
    ks = KernelSource.parse(text)
    r = comp.compile(ks, w.info.arch)
    assert r.ok, r.error
    return w.call("evaluate", timeout_s=60, problem=parse_shape(shape), source=text, cubin=r.cubin_path, h=ks.hash)


@pytest.mark.parametrize("shape", ["1x1x1", "77x1000x333", "1000x77x5", "256x256x256"])
def test_naive_is_correct(gpu, shape):
    ev = evaluate(gpu, "naive.cu", shape)
    assert ev.ok, ev.error
    assert ev.time_us > 0 and ev.cublas_us > 0 and ev.check.checks >= 3


def test_partial_write_rejected(gpu):
    ev = evaluate(gpu, "half_write.cu", "256x256x64")
    assert not ev.ok and "unwritten" in ev.error


def test_fp16_accumulation_rejected(gpu):
    ev = evaluate(gpu, "fp16_acc.cu", "64x64x4096")
    assert not ev.ok and ev.stage == "check"


def test_illegal_address_isolated(gpu):
    w = gpu[0]
    restarts = w.restarts
    try:
        ev = evaluate(gpu, "illegal_address.cu", "64x64x64")
        assert not ev.ok  # either reported cleanly or via WorkerFault below
    except WorkerFault as e:
        assert "crash" in str(e)
    assert evaluate(gpu, "naive.cu", "64x64x64").ok  # the worker is usable again
    assert w.restarts >= restarts


def test_hang_is_killed(gpu):
    w, comp, _ = gpu
    text = (DATA / "hang.cu").read_text()
    ks = KernelSource.parse(text)
    r = comp.compile(ks, w.info.arch)
    t0 = time.monotonic()
    with pytest.raises(WorkerFault, match="timeout"):
        w.call("evaluate", timeout_s=15, problem=parse_shape("64x64x64"), source=text, cubin=r.cubin_path, h=ks.hash)
    assert time.monotonic() - t0 < 60
    assert evaluate(gpu, "naive.cu", "64x64x64").ok


def test_baselines_side_by_side(gpu):
    w = gpu[0]
    res = w.call("baselines", timeout_s=300, problem=parse_shape("1024x1024x1024"), reps=20)
    libs = res["results"]
    assert set(libs) == {"cublas", "cublaslt_heuristic", "cublaslt_autotune"}  # the autotune's pool is not reported
    for b in libs.values():
        assert 1.0 < b.time_us < 1000.0
    from evo.ltgemm import algorithm_from_detail

    auto = libs["cublaslt_autotune"]
    assert "fastest of" in auto.detail and algorithm_from_detail(auto.detail)  # which algorithm, for the table
    from evo.placements import whole_rotations

    n = whole_rotations(20, gpu[2].baselines.placements)  # whole rotations over the input sets (24 over 4)
    assert len(res["samples"]["cublas"]) == n
    assert len(res["samples"]["cublaslt_autotune"]) == n // 2  # reported on a held-out half of the repetitions


def test_sustained_windows_time_and_check_each_kernel(gpu):
    """The runoff's sustained windows (evo/search.py Search._sustained_order): each kernel back to back, a clock
    reading where nvidia-smi answers, and a kernel whose output is wrong afterwards marked WRONG."""
    w, comp, _ = gpu
    extra = {}
    for name in ("naive.cu", "half_write.cu"):
        text = (DATA / name).read_text()
        r = comp.compile(KernelSource.parse(text), w.info.arch)
        assert r.ok, r.error
        extra[name] = (text, r.cubin_path)
    got = w.call("sustained", timeout_s=120, problem=parse_shape("256x256x256"), extra=extra, seconds=0.2, rounds=2,
                 rest=0.05)
    assert set(got) == set(extra)
    assert got["naive.cu"]["detail"] == "" and got["half_write.cu"]["detail"].startswith("WRONG")
    for g in got.values():
        assert 0.5 < g["us"] < 10000.0
        assert g["kcycles"] == -1.0 or g["kcycles"] == pytest.approx(g["us"] * g["sm_mhz"] * 1e-3)


def test_families_correct_on_gpu(gpu):
    """Every family's CI instances pass the checker on off-tile shapes (K % 8 == 0 where TMA needs it)."""
    from evo.families import load_families

    w, comp, _ = gpu
    cases = []  # (family name, params, shape, kernel) for every CI instance on every shape it takes
    for fam in load_families(arch=w.info.arch):
        for params in fam.instances_for_ci():
            # 1030x4104x136: short K, off-tile, CTAs whose units cross row blocks (wgmma_sm90's PANEL)
            for shape in ("1000x1000x1000", "128x128x16384", "77x200x72", "64x4096x4096", "1030x4104x136"):
                p = parse_shape(shape)
                ks = fam.render(params, p)  # a shape-specialized family renders per shape
                if ks.accepts(p):
                    cases.append((fam.name, params, shape, ks))
    compiled = compile_all(comp, [ks for *_, ks in cases], w.info.arch)
    failures, broken = [], set()
    for name, params, shape, ks in cases:
        r = compiled[ks.hash]
        if not r.ok:
            if (name, repr(params)) not in broken:
                broken.add((name, repr(params)))
                failures.append(f"{name} {params}: compile: {r.error}")
            continue
        ev = w.call("evaluate", timeout_s=60, problem=parse_shape(shape), source=ks.text, cubin=r.cubin_path, h=ks.hash)
        if not ev.ok:
            failures.append(f"{name} {params} {shape}: {ev.error}")
    assert not failures, "\n".join(failures)


def compile_all(comp, kernels, arch: str) -> dict:
    """Every distinct kernel compiled at once on the machine's cores (nvcc runs in parallel; the GPU waits for none of
    them one by one): {hash: CompileResult}."""
    unique = list({ks.hash: ks for ks in kernels}.values())
    return {ks.hash: r for ks, r in zip(unique, comp.compile_many([(ks, arch) for ks in unique]))}


def check_instances(gpu, family: str, instances: list[dict], shapes: tuple[str, ...]) -> tuple[int, list[str]]:
    """Compile each instance of `family` (once per shape where the family compiles the shape in; all of them at once)
    and evaluate it on every shape it accepts: (evaluations run, failures)."""
    from evo.families import load_families

    w, comp, _ = gpu
    (fam,) = load_families(names=[family])
    failures, ran = [], 0
    fixed, cases = {}, []  # one kernel per instance (a shape-specialized family: per shape); (kernel, shape) taken
    for i, params in enumerate(instances):
        assert fam.valid(fam.complete(params)), params
        if not fam.shape_specialized:
            fixed[i] = fam.render(params)  # compiled whether or not a shape takes it
        for shape in shapes:
            p = parse_shape(shape)
            ks = fixed.get(i) or fam.render(params, p)
            if ks.accepts(p, w.info.sm_count):
                cases.append((params, shape, ks))
    compiled = compile_all(comp, [*fixed.values(), *(ks for *_, ks in cases)], w.info.arch)
    for ks in fixed.values():
        assert compiled[ks.hash].ok, compiled[ks.hash].error
    for params, shape, ks in cases:
        r = compiled[ks.hash]
        assert r.ok, r.error
        ev = w.call("evaluate", timeout_s=60, problem=parse_shape(shape), source=ks.text, cubin=r.cubin_path, h=ks.hash)
        ran += 1
        if not ev.ok:
            failures.append(f"{params} {shape}: {ev.error}")
    return ran, failures


def test_split_reduce_scatter_correct_on_gpu(gpu):
    """wgmma_sm90's one-wave reduce-scatter split-K (compiled in CI by tests/test_family_sm90.py) on off-tile shapes,
    empty K slices included (77x200x72 has 2 k blocks for 4-8 splits); the checker launches each several times, so
    the barrier's counters must be left ready for the next launch."""
    from test_family_sm90 import SPLIT_RS_INSTANCES

    ran, failures = check_instances(gpu, "wgmma_sm90", SPLIT_RS_INSTANCES,
                                    ("1000x1000x1000", "128x128x16384", "77x200x72", "64x4096x4096", "200x136x72"))
    assert ran >= 8 and not failures, "\n".join(failures)


def test_ring_split_correct_on_gpu(gpu):
    """A's stages side by side, then B's (or B's, then A's): off-tile shapes, one k block, K splits, CTA pairs, swap-AB."""
    from test_family_sm90 import RING_SPLIT_INSTANCES

    ran, failures = check_instances(gpu, "wgmma_sm90", RING_SPLIT_INSTANCES,
                                    ("200x136x72", "130x260x4104", "77x200x64", "1000x1000x1000", "256x1024x8192"))
    assert ran >= 40 and not failures, "\n".join(failures)


SKINNY_REDUCE_INSTANCES = [  # wgmma_skinny_sm90: K ranks sending their slices (PUSH 1) or reading the peers' (PUSH 0)
    {"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8, "PUSH": 1},
    {"BM": 64, "BN": 48, "CLK": 16, "CONSUMERS": 1, "G": 1, "STAGES": 8, "PUSH": 0},
    {"BM": 64, "BN": 64, "CLK": 8, "CONSUMERS": 1, "G": 1, "STAGES": 8, "PUSH": 1},
    {"BM": 64, "BN": 64, "CLK": 16, "CONSUMERS": 1, "G": 2, "SWAP_AB": 0, "STAGES": 4, "PUSH": 1},  # a global split on top
    {"BM": 128, "BN": 128, "CLK": 2, "MC": 2, "NC": 2, "G": 1, "STAGES": 5, "KI": 1, "PUSH": 1},   # multicast peers
    {"BM": 128, "BN": 128, "CONSUMERS": 2, "CLK": 2, "G": 4, "STAGES": 5, "PUSH": 1},
]


def test_skinny_reduce_paths_correct_on_gpu(gpu):
    """wgmma_skinny_sm90's on-chip split-K reduce, sent (PUSH) and read (pull), with a global split and with multicast
    peers, on off-tile shapes; 77x200x72 has 2 k blocks, so most K ranks send zeros. The checker launches each
    several times: the receive barriers and the split counters must be ready for the next launch."""
    ran, failures = check_instances(gpu, "wgmma_skinny_sm90", SKINNY_REDUCE_INSTANCES,
                                    ("128x128x16384", "77x200x72", "130x260x16392", "200x136x72"))
    assert ran >= 20 and not failures, "\n".join(failures)


SPLIT_CLUSTER_INSTANCES = [  # wgmma_sm90: a tile's K splits in one cluster, slices sent with st.async
    {"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLIT_K": 2, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 8, "SWAP_AB": 1},
    {"BM": 64, "BN": 32, "CONSUMERS": 1, "SPLIT_K": 4, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 8, "SWAP_AB": 1},
    {"BM": 128, "BN": 128, "SPLIT_K": 2, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 4},
]


def test_split_cluster_correct_on_gpu(gpu):
    """wgmma_sm90's split-K inside a cluster (each split sends the others their column slices, completing their
    receive barrier by bytes) on off-tile shapes, 77x200x72's empty K slices included, launched several times."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SPLIT_CLUSTER_INSTANCES,
                                    ("64x4096x4096", "77x200x72", "130x260x16392", "200x136x72"))
    assert ran >= 10 and not failures, "\n".join(failures)


SPLIT_OWNER_INSTANCES = [  # wgmma_sm90: split SPLIT_K-1 of a tile reduces, its own partial kept in registers
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "SPLIT_OWNER": 1},                  # persistent
    {"BM": 128, "BN": 128, "SPLIT_K": 2, "STAGES": 6, "SPLIT_OWNER": 1},                              # persistent
    {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "SPLIT_OWNER": 1},             # one unit per CTA
    {"BM": 128, "BN": 128, "SPLIT_K": 4, "STAGES": 6, "PERSISTENT": 0, "SWAP_AB": 1, "CLUSTER": 2, "SPLIT_OWNER": 1},
    {"BM": 64, "BN": 16, "CONSUMERS": 1, "PERSISTENT": 0, "SPLIT_K": 2, "STAGES": 7, "SWAP_AB": 1, "SPLIT_OWNER": 1},
    # the reducing split takes more k blocks (SPLIT_SKEW): on 200x136x72 (2 k blocks) its partners' ranges are empty
    {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "SPLIT_OWNER": 1, "SPLIT_SKEW": 4},
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "SPLIT_OWNER": 1, "SPLIT_MAJOR": 1, "SPLIT_SKEW": 2},
]


def test_split_owner_correct_on_gpu(gpu):
    """wgmma_sm90's split-K with a designated reducer (split SPLIT_K-1 waits for the others' release arrivals and
    keeps its own partial in registers) on off-tile shapes: 200x136x72 has 2 k blocks (empty splits, the reducer's
    among them), 130x260x16392 a partial last k block, 1030x4104x136 a persistent grid over more units than CTAs (a
    reducer waiting for units of other CTAs); launched several times, so the counters must be reset for the next
    launch."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SPLIT_OWNER_INSTANCES,
                                    ("256x1024x16384", "200x136x72", "130x260x16392", "1030x4104x136"))
    assert ran >= 16 and not failures, "\n".join(failures)


SPLIT_MAJOR_INSTANCES = [  # wgmma_sm90: split-K units numbered split-major (every tile's split 0 first)
    {"BM": 64, "BN": 64, "CONSUMERS": 1, "SPLIT_K": 4, "STAGES": 8, "GROUP": 8, "SPLIT_OWNER": 1, "SPLIT_MAJOR": 1},  # persistent, reducer
    {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "SPLIT_MAJOR": 1},                   # one unit per CTA, last arrival
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "CLUSTER": 2, "SPLIT_MAJOR": 1},          # split-K pairs
    {"BM": 128, "BN": 128, "SPLIT_K": 4, "STAGES": 6, "PERSISTENT": 0, "SPLIT_RS": 1, "SPLIT_MAJOR": 1},    # reduce-scatter
]


def test_split_major_correct_on_gpu(gpu):
    """wgmma_sm90's split-major unit order with each split-K reduce it may take (the reducing split, the last arrival,
    pairs, the reduce-scatter) on off-tile shapes: 200x136x72 has empty splits, 1030x4104x136 a persistent grid over
    more units than CTAs (a reducer waiting for units of other CTAs, numbered a whole split earlier); launched several
    times, so the counters must be reset."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SPLIT_MAJOR_INSTANCES,
                                    ("512x256x16384", "200x136x72", "130x260x16392", "1030x4104x136"))
    assert ran >= 12 and not failures, "\n".join(failures)


CTA_PAIR_INSTANCES = [  # wgmma_sm90: CTA pairs multicasting A, units in the GPC-spread order
    {"BM": 128, "BN": 160, "PINGPONG": 1, "STAGES": 5, "EPI": 0, "GROUP": 8, "CLUSTER": 2},      # persistent
    {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1, "GROUP": 8, "CLUSTER": 2},      # persistent
    {"BM": 128, "BN": 96, "STAGES": 7, "PERSISTENT": 0, "GROUP": 4, "CLUSTER": 2},               # one unit per CTA
    {"BM": 128, "BN": 64, "SPLIT_K": 4, "STAGES": 7, "GROUP": 16, "CLUSTER": 2},                  # split-K pairs, persistent
    {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "CLUSTER": 2},             # split-K pairs, a phantom column tile where the count is odd
    {"BM": 128, "BN": 128, "SPLIT_K": 4, "STAGES": 6, "PERSISTENT": 0, "SWAP_AB": 1, "CLUSTER": 2},  # swap-AB pairs: B's row tile multicast, pairs along M
    {"BM": 128, "BN": 64, "STAGES": 7, "GROUP": 16, "SWAP_AB": 1, "CLUSTER": 2},                  # swap-AB pairs, persistent, no split
]


def test_cta_pairs_correct_on_gpu(gpu):
    """wgmma_sm90's CTA pairs on off-tile shapes whose pair counts are not multiples of the spread (1000x1000x1000:
    8 x 4 pairs of 128 x 128 tiles and 44 pairs of 128x96; 1030x4104x136: a persistent grid of 66 pairs over more
    units), with split-K pairs (both CTAs on the same k split; 4104 / 128 column tiles: a phantom pair half): a unit
    no CTA took would leave its tile of C as the poison, a pair on different k splits would multicast the wrong A."""
    ran, failures = check_instances(gpu, "wgmma_sm90", CTA_PAIR_INSTANCES,
                                    ("1000x1000x1000", "1030x4104x136", "200x136x72", "2056x12296x128"))
    assert ran >= 22 and not failures, "\n".join(failures)


WIDE_TILE_INSTANCES = [  # two consumers on whole tiles holding 160-192 accumulators per thread beside the TMA store
    {"BM": 256, "BN": 192, "STAGES": 3, "EPI": 1, "EPI_HINT": 1},               # cooperative, each consumer 128 x 192
    {"BM": 256, "BN": 176, "STAGES": 3},                                        # cooperative, ordinary stores (176)
    {"BM": 256, "BN": 160, "STAGES": 3, "EPI": 1, "PERSISTENT": 0},             # one unit per CTA, boxes 64 + 64 + 32
    {"BM": 128, "BN": 192, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 16},  # ping-pong, 192-wide tiles
    {"BM": 256, "BN": 192, "STAGES": 3, "EPI": 1, "CLUSTER": 2},                # pairs multicasting the 256-row tile
]


def test_wide_tiles_correct_on_gpu(gpu):
    """The 160-192-wide tiles of two consumers (192 accumulators per thread of 232 registers) on off-tile shapes:
    a column tile past N, a row tile past M, K not a multiple of the k block. The four TMA-store instances do not
    take 520x1030x264 (no TMA map of C with N % 8 != 0): 11 evaluations (H100, 2026-11-26: 11 ran, none failed)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", WIDE_TILE_INSTANCES, ("1000x1000x1000", "200x136x72", "520x1030x264"))
    assert ran == 11 and not failures, "\n".join(failures)


ONE_WAVE_INSTANCES = [  # wgmma_sm90's widths for one wave of 128-row tiles (N = 32 or 16 x the width on 512 / 1024 rows)
    {"BM": 128, "BN": 144, "STAGES": 5, "PERSISTENT": 0, "EPI": 1},   # m64n144, store boxes 64 + 64 + 16
    {"BM": 128, "BN": 112, "STAGES": 6, "PERSISTENT": 0, "EPI": 1},   # m64n112
    {"BM": 128, "BN": 80, "PINGPONG": 1, "STAGES": 5},                # m64n80, ping-pong, ordinary stores
    {"BM": 128, "BN": 224, "STAGES": 4},                              # m64n224, persistent, ordinary stores
]


def test_one_wave_widths_correct_on_gpu(gpu):
    """The 80-, 112-, 144- and 224-wide tiles on off-tile shapes (a column tile past N, a row tile past M, K not a
    multiple of the k block); the TMA-store instances do not take 520x1030x264: 10 evaluations."""
    ran, failures = check_instances(gpu, "wgmma_sm90", ONE_WAVE_INSTANCES, ("1000x1000x1000", "200x136x72", "520x1030x264"))
    assert ran == 10 and not failures, "\n".join(failures)


SPLIT_BOX_INSTANCES = [  # wgmma_sm90's TMA-store boxes for widths that are not a multiple of 64: 64-column boxes, then
    # one of 32 and one of 16 columns, each through its own C map (BN 112: three maps)
    {"BM": 128, "BN": 80, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "EPI_HINT": 1, "RING_SPLIT": 1},   # 64 + 16
    {"BM": 128, "BN": 112, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "EPI_HINT": 1, "RING_SPLIT": 1},  # 64 + 32 + 16
    {"BM": 128, "BN": 176, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "RING_SPLIT": 1},                 # 2 x 64 + 32 + 16
    {"BM": 128, "BN": 112, "STAGES": 4, "EPI": 2},                                                 # cooperative
    {"BM": 128, "BN": 96, "CONSUMERS": 1, "STAGES": 5, "EPI": 2, "EARLY_STORE": 1},               # 64 + 32, early slices
    {"BM": 64, "BN": 176, "CONSUMERS": 1, "STAGES": 6, "EPI": 2},                                  # one 64-row slice
    {"BM": 128, "BN": 80, "STAGES": 4, "EPI": 4},                                                  # four staging buffers
]


def test_split_store_boxes_correct_on_gpu(gpu):
    """C stored in 64-, 32- and 16-column TMA boxes side by side, on off-tile shapes: partial tiles along M and N (the
    narrow boxes past N clipped), K short and long. Every instance takes every shape (N % 8 == 0): 28 evaluations
    (H100, 2026-12-06: these instances and four more checked by bench.template_ab, none failed)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SPLIT_BOX_INSTANCES,
                                    ("200x136x72", "130x264x4104", "264x1096x200", "136x2056x72"))
    assert ran == 28 and not failures, "\n".join(failures)


SWAP_STORE_INSTANCES = [  # wgmma_sm90 SWAP_AB with the TMA-store epilogue: C^T's slices written transposed by
    # stmatrix.trans into BN x 64 boxes of C (one C map)
    {"BM": 128, "BN": 192, "SWAP_AB": 1, "STAGES": 4, "EPI": 1},                                  # cooperative, persistent
    {"BM": 128, "BN": 96, "SWAP_AB": 1, "STAGES": 6, "EPI": 2, "PINGPONG": 1},                    # ping-pong
    {"BM": 128, "BN": 96, "SWAP_AB": 1, "STAGES": 6, "EPI": 2, "PINGPONG": 1, "CLUSTER": 2},      # pairs (padded tiles)
    {"BM": 128, "BN": 128, "CONSUMERS": 1, "STAGES": 4, "EPI": 2, "PANEL": 1, "GROUP": 1, "SWAP_AB": 1},  # row panel
    {"BM": 256, "BN": 64, "CONSUMERS": 1, "SWAP_AB": 1, "STAGES": 4, "EPI": 4, "EARLY_STORE": 1},  # four slices, early
    {"BM": 128, "BN": 80, "SWAP_AB": 1, "PERSISTENT": 0, "STAGES": 6, "EPI": 1, "EPI_HINT": 1},   # 80-row boxes
    {"BM": 128, "BN": 128, "PINGPONG": 1, "SWAP_AB": 1, "STAGES": 5, "EPI": 1, "STREAMK": 1},     # stream-K
    {"BM": 128, "BN": 128, "PINGPONG": 1, "SWAP_AB": 1, "STAGES": 4, "EPI": 1, "EARLY_STORE": 2, "DYN": 1},  # claimed units
]


def test_swap_ab_tma_store_correct_on_gpu(gpu):
    """C^T stored through TMA on off-tile shapes: tiles past M (C's rows, the boxes' BN rows clipped) and past N (C's
    columns), K short, long and not a multiple of the k block; 12296x264x520 is the tall, narrow class the store is for.
    37 evaluations (the row panel takes K <= 200 only)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SWAP_STORE_INSTANCES,
                                    ("200x136x72", "130x264x4104", "264x1096x200", "1000x1000x1000", "12296x264x520"))
    assert ran == 37 and not failures, "\n".join(failures)


EARLY_STORE_INSTANCES = [  # wgmma_sm90: each 64-row slice stored once its own wgmma group completes
    {"BM": 256, "BN": 128, "STAGES": 6, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EARLY_STORE": 2},  # row panel, whole K
    {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EARLY_STORE": 1},  # the last k block
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "EARLY_STORE": 2},   # K past the ring: the last-k-block path
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_HINT": 1, "EARLY_STORE": 1},
    {"BM": 128, "BN": 128, "CONSUMERS": 1, "PERSISTENT": 0, "STAGES": 4, "EPI": 1, "EARLY_STORE": 2},  # one unit per CTA
    {"BM": 256, "BN": 64, "CONSUMERS": 1, "PANEL": 1, "GROUP": 1, "STAGES": 6, "EPI": 4, "EARLY_STORE": 2},  # four slices
    {"BM": 256, "BN": 192, "STAGES": 3, "EPI": 1, "EARLY_STORE": 1},                  # cooperative, 192 accumulators
]


def test_early_store_correct_on_gpu(gpu):
    """wgmma_sm90's early slice stores on off-tile shapes: 2056x12296x128 has a partial row block (a CTA's units
    cross row blocks: the panel is released after the last slice's wait), 1030x4104x136 and 130x12296x264 a partial
    last k block, 1000x1000x1000 16 k blocks (more than the ring: whole-K mode falls back to the last k block's
    groups), 200x136x72 a tile past M and N; launched several times. 27 evaluations (the panels take K <= 128-256)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", EARLY_STORE_INSTANCES,
                                    ("2056x12296x128", "1030x4104x136", "130x12296x264", "1000x1000x1000", "200x136x72"))
    assert ran == 27 and not failures, "\n".join(failures)


WIDE_C_INSTANCES = [  # wgmma_sm90 EPI_WIDE: C in 64 x 128 boxes through a 3-D map of 64-column blocks
    {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EPI_WIDE": 1},   # K = 128 panel
    {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EARLY_STORE": 1, "EPI_WIDE": 1},
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 2, "EPI_WIDE": 1},
    {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "EPI_HINT": 1, "EPI_WIDE": 1},
]


def test_wide_c_boxes_correct_on_gpu(gpu):
    """Wide C boxes on shapes whose N is a multiple of 64 (the kernel's requirement) but not of the tile: 200x192x72 and
    1030x4160x136 end in a tile whose second 64-column block (4160 = 65 x 64) or second box lies past N (clipped by
    the map), 2056x12288x128 has a partial row block, 1000x1024x1000 runs K past the ring. 12 evaluations (the panels
    take K <= 128)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", WIDE_C_INSTANCES,
                                    ("2056x12288x128", "200x192x72", "1030x4160x136", "1000x1024x1000"))
    assert ran == 12 and not failures, "\n".join(failures)


DYN_INSTANCES = [  # wgmma_sm90 DYN: units past each CTA's static share claimed from a workspace counter
    {"BM": 128, "BN": 256, "STAGES": 4, "EPI": 1, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EPI_WIDE": 1, "DYN": 1},
    {"BM": 256, "BN": 128, "STAGES": 5, "EPI": 2, "EPI_HINT": 1, "PANEL": 1, "GROUP": 1, "EARLY_STORE": 1, "DYN": 2},
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "DYN": 8},   # every unit claimed, consumers alternate
    {"BM": 128, "BN": 256, "STAGES": 3, "DYN": 4},                             # ordinary stores
]


def test_dynamic_units_correct_on_gpu(gpu):
    """Claimed units on off-tile shapes, each launched several times by the checker: a counter not set back to zero
    by the launch's last claim leaves the next launch's units unwritten. 2056x12288x128 has a partial row block (a
    claimed unit's panel is loaded anew), 1000x1024x1000 runs K past the ring, 200x192x72 has fewer units than SMs
    (every CTA's share is empty but one unit). 10 evaluations (the panels take K <= 128)."""
    ran, failures = check_instances(gpu, "wgmma_sm90", DYN_INSTANCES, ("2056x12288x128", "200x192x72", "1000x1024x1000"))
    assert ran == 10 and not failures, "\n".join(failures)


SK_INSTANCES = [  # wgmma_sm90 STREAMK: the last partial wave's tiles dealt out k block by k block over every CTA
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "EPI": 1, "STREAMK": 1},   # ping-pong: a piece per consumer
    {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1, "STREAMK": 1},                  # cooperative: halves of a partial
    {"BM": 128, "BN": 128, "CONSUMERS": 1, "STAGES": 6, "STREAMK": 1},            # one consumer, ordinary stores
    {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 6, "SWAP_AB": 1, "STREAMK": 1},  # C^T
]


def test_stream_k_correct_on_gpu(gpu):
    """Stream-K pieces on off-tile shapes, each launched several times by the checker (a tile counter not zeroed by
    its first piece would leave the next launch waiting or adding stale partials): 1000x1024x1000 has fewer tiles
    than SMs (every tile split over ~2 CTAs), 2056x2048x520 two waves and a few tiles split over ~9 CTAs of one k
    block each, 1030x4104x136 a remainder of 33 tiles of 3 k blocks, 200x192x72 four tiles of two k blocks over 132
    CTAs (most ranges empty). 16 evaluations."""
    ran, failures = check_instances(gpu, "wgmma_sm90", SK_INSTANCES,
                                    ("1000x1024x1000", "2056x2048x520", "1030x4104x136", "200x192x72"))
    assert ran == 16 and not failures, "\n".join(failures)


SMALL_CLUSTER_CASES = [  # mma_small_sm80 (shape compiled in): K split in a cluster, slices sent (PUSH 1) or read (PUSH 0)
    ({"BM": 32, "BN": 32, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 8, "CLK": 8}, ("128x64x4096", "77x200x1024")),
    ({"BM": 32, "BN": 32, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 8, "CLK": 8, "PUSH": 0}, ("77x200x1024",)),
    ({"BM": 32, "BN": 64, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 2, "STAGES": 3, "SPLIT_K": 2, "CLK": 4},
     ("100x200x1024", "130x260x4096")),
    ({"BM": 16, "BN": 32, "BK": 32, "WARPS_M": 1, "WARPS_N": 2, "WARPS_K": 1, "STAGES": 6, "CLK": 8}, ("77x202x1024",)),
    ({"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "WARPS_K": 1, "STAGES": 6, "SPLIT_K": 4, "CLK": 8},
     ("200x136x2048", "128x128x16384")),
]


def test_small_cluster_reduce_paths_correct_on_gpu(gpu):
    """mma_small_sm80's on-chip split-K reduce, pushed and pulled, with a global split on top, on off-tile shapes;
    the checker launches each several times (receive barriers and slice tickets ready for the next launch)."""
    ran, failures = 0, []
    for params, shapes in SMALL_CLUSTER_CASES:
        n, bad = check_instances(gpu, "mma_small_sm80", [params], shapes)
        ran, failures = ran + n, failures + bad
    assert ran == 8 and not failures, "\n".join(failures)  # every case accepts each of its shapes


def test_kernel_loads_through_the_shared_module_cache(gpu):
    """fresh_module off (how the defence tests show what it catches) loads the cubin through cupy's per-process
    module cache instead of a module of its own: the kernel still launches and computes C."""
    import cupy

    from evo.check import compare, random_inputs, reference
    from evo.gpu.launch import LoadedKernel

    w, comp, cfg = gpu
    ks = KernelSource.parse((DATA / "naive.cu").read_text())
    r = comp.compile(ks, w.info.arch)
    assert r.ok, r.error
    p = parse_shape("77x1000x333")
    a, b = random_inputs(p, cupy.random.RandomState(7))
    c = cupy.full((p.m, p.n), cupy.nan, dtype=cupy.float16)
    k = LoadedKernel(ks, r.cubin_path, p, w.info.sm_count, w.info.smem_per_block_optin, fresh=False)
    try:
        k(a, b, c)
        assert compare(c, reference(a, b), cfg.check, "shared module").correct
    finally:
        k.close()


def _count(db):
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    finally:
        con.close()


def test_search_killed_then_resumed(tmp_path):
    """SIGKILL mid-search loses no stored candidate, and the rerun repeats none."""
    db, out = tmp_path / "evo.db", tmp_path / "out"
    cmd = [sys.executable, "-m", "evo.search", "--shape", "512x512x512", "--families", "simt", "--budget-minutes", "3",
           "--db", str(db), "--out", str(out)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        time.sleep(2)
        if db.exists() and _count(db) >= 8:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _count(db)
    assert before >= 8
    res = subprocess.run(cmd[:-6] + ["--max-candidates", "5", "--budget-minutes", "2", "--db", str(db), "--out", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "resuming" in res.stdout
    con = sqlite3.connect(db)
    rows = con.execute("SELECT hash, COUNT(*) FROM evaluations GROUP BY hash HAVING COUNT(*) > 1").fetchall()
    assert not rows
    assert _count(db) >= before + 1
    assert (out / "NVIDIA_H100_80GB_HBM3").exists() or any(out.iterdir())
