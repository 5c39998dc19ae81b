"""Seeds from the transposed shape: its fastest kernels with SWAP_AB flipped (evo/proposers/transposed.py)."""
import io

import pytest

from evo.families import load_families
from evo.kernel import KernelSource
from evo.problem import Problem, parse_shape
from evo.proposers.transposed import transposed_proposals, transposed_shape
from evo.records import CheckResult, EvalResult, Sample
from evo.store import Store

GPU = "Fake_GPU"


@pytest.fixture(scope="module")
def fams():
    return {f.name: f for f in load_families(names=["wgmma_sm90", "cutlass_sm90", "mma_sm80"])}


def stored(store, fam, params, shape, us, ok=True):
    ks = fam.render(fam.complete(params))
    store.add_candidate(ks, proposer="mutate")
    store.add_evaluation(shape, "TN", GPU, EvalResult(ks.hash, ok, "done" if ok else "check", "" if ok else "wrong",
                                                      check=CheckResult(ok, checks=3), time_us=us))
    return ks.hash


def test_transposed_shape():
    assert transposed_shape(Problem(128, 4096, 8192)) == "4096x128x8192"
    assert transposed_shape(Problem(4096, 4096, 1024)) == ""  # its own transpose


def test_the_transposed_shapes_fastest_kernels_flipped(tmp_path, fams):
    store = Store(str(tmp_path / "evo.db"))
    w, c = fams["wgmma_sm90"], fams["cutlass_sm90"]
    fast = stored(store, w, {"BM": 128, "BN": 128, "EPI": 1}, "4096x128x8192", 30.0)  # TMA-store epilogue: no swap-AB
    stored(store, w, {"BM": 128, "BN": 64}, "4096x128x8192", 40.0)  # slower: one per family
    stored(store, w, {"BM": 64, "BN": 64, "CONSUMERS": 1}, "4096x128x8192", 20.0, ok=False)  # wrong: never a seed
    pair = stored(store, c, {"TILE_M": 64, "TILE_N": 64, "SCHEDULE": 0, "CLUSTER_M": 1, "CLUSTER_N": 2, "STAGES": 0},
                  "4096x128x8192", 29.0)
    stored(store, fams["mma_sm80"], {}, "4096x128x8192", 10.0)  # a family without SWAP_AB
    stored(store, w, {"BM": 128, "BN": 256}, "128x4096x4096", 5.0)  # another shape
    props = transposed_proposals(Problem(128, 4096, 8192), store, GPU, list(fams.values()))
    assert [p.parents for p in props] == [(pair,), (fast,)]  # fastest first
    got = [KernelSource.parse(p.source).meta.params for p in props]
    assert got[0]["SWAP_AB"] == 1 and (got[0]["TILE_M"], got[0]["TILE_N"], got[0]["CLUSTER_M"], got[0]["CLUSTER_N"]) == (64, 64, 1, 2)
    # the wgmma kernel's TMA-store epilogue needs SWAP_AB 0: repaired to a valid instance keeping the flip and the tile
    assert got[1]["SWAP_AB"] == 1 and (got[1]["BM"], got[1]["BN"]) == (128, 128) and w.valid(got[1])
    assert all(p.proposer == "seed" and "transposed shape 4096x128x8192" in p.idea for p in props)
    assert transposed_proposals(Problem(4096, 128, 8192), store, GPU, list(fams.values())) == []  # nothing on 128x4096x8192 yet
    assert transposed_proposals(Problem(128, 4096, 8192), store, "Other_GPU", list(fams.values())) == []


@pytest.mark.parametrize("on", [True, False])
def test_the_search_times_them_as_seeds(tmp_path, monkeypatch, on):
    """search.transposed_seeds (default true) adds them to the seeds; false leaves them out."""
    import evo.search as search_mod
    from evo.config import load_config
    from fakes import FakeCompiler, FakeWorker

    asked = []

    def spy(problem, store, gpu, families, per_family=1, published=()):
        asked.append((problem.key, gpu))
        return []

    monkeypatch.setattr(search_mod, "transposed_proposals", spy)
    cfg = load_config(overrides={"search": {"budget_minutes": 0, "max_candidates": 1, "children": 2, "seed": 1,
                                            "transposed_seeds": on},
                                 "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"),
                                           "templates": "tests/data/families"}})
    search_mod.Search(parse_shape("256x128x256"), cfg, out=io.StringIO(), worker_factory=FakeWorker,
                      compiler=FakeCompiler()).run()
    assert asked == ([("256x128x256", "Fake_GPU")] if on else [])


def test_the_kernel_tables_row_is_a_source_too(tmp_path, fams):
    """An archive that never held the transposed shape (a fresh machine's) still gets the table's kernel for it;
    where both have one of a family, the faster is the seed."""
    store = Store(str(tmp_path / "evo.db"))
    w = fams["wgmma_sm90"]
    ks = w.render(w.complete({"BM": 64, "BN": 96, "CONSUMERS": 1, "STAGES": 8, "SWAP_AB": 1}))
    table = Sample("4096x128x8192", ks.hash, "wgmma_sm90", ks.meta.params, 28.0)
    props = transposed_proposals(Problem(128, 4096, 8192), store, GPU, list(fams.values()), published=[table])
    assert [p.parents for p in props] == [(ks.hash,)] and "in the kernel table" in props[0].idea
    got = KernelSource.parse(props[0].source).meta.params
    assert got["SWAP_AB"] == 0 and (got["BM"], got["BN"], got["STAGES"]) == (64, 96, 8)
    # a row of another shape is not this one's transpose
    assert transposed_proposals(Problem(128, 4096, 4096), store, GPU, list(fams.values()), published=[table]) == []
    # the archive's kernel of the family is faster: it is the seed, the table's is not timed as well
    fast = stored(store, w, {"BM": 128, "BN": 128}, "4096x128x8192", 25.0)
    props = transposed_proposals(Problem(128, 4096, 8192), store, GPU, list(fams.values()), published=[table])
    assert [p.parents for p in props] == [(fast,)]


def test_the_search_reads_the_transposed_shapes_row_from_its_table(tmp_path, fams):
    """Search._published_transposed: the table in paths.out, the row of N x M x K, its kernel's family and params."""
    import evo.search as search_mod
    from evo.config import load_config
    from evo.export import TableRow, write_table
    from evo.problem import GpuInfo

    w = fams["wgmma_sm90"]
    ks = w.render(w.complete({"BM": 128, "BN": 64, "SWAP_AB": 1}))
    gpu = "Fake_GPU"
    out = tmp_path / "kernels_out"
    rel = f"{gpu}/TN/4096x128x8192.cu"
    (out / rel).parent.mkdir(parents=True)
    (out / rel).write_text(ks.text)
    row = TableRow(gpu=gpu, shape="4096x128x8192", layout="TN", m=4096, n=128, k=8192, winner="evo",
                   family="wgmma_sm90", hash=ks.hash, kernel_path=rel, time_us=28.5, tflops=1.0, cublas_us=29.0,
                   cublaslt_heuristic_us=29.0, cublaslt_autotune_us=29.0, speedup_cublas=1.0,
                   speedup_cublaslt_heuristic=1.0, speedup_cublaslt_autotune=1.0, speedup_best_library=1.0,
                   best_library="cublas", roofline_us=1.0, pct_of_roofline=5.0, timing_source="confirm",
                   lineage="", cuda="13.0", driver="0.0", date="2026-01-01", library_algorithms={})
    write_table(out / gpu, {"gpu": gpu, "layout": "TN", "noise_floor": 0.02}, [row])
    cfg = load_config(overrides={"paths": {"db": str(tmp_path / "evo.db"), "out": str(out)}})
    info = GpuInfo(gpu, "sm_90a", (9, 0), 132, 50 << 20, 232448, "0", "13.0")
    s = search_mod.Search(parse_shape("128x4096x8192"), cfg, out=io.StringIO())
    assert s._published_transposed(info) == [Sample("4096x128x8192", ks.hash, "wgmma_sm90", ks.meta.params, 28.5)]
    assert search_mod.Search(parse_shape("128x4096x4096"), cfg, out=io.StringIO())._published_transposed(info) == []
    assert search_mod.Search(parse_shape("4096x4096x8192"), cfg, out=io.StringIO())._published_transposed(info) == []
