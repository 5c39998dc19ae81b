"""Seeds from the transposed shape: its fastest kernels with SWAP_AB flipped (evo/proposers/transposed.py)."""
import io

import pytest

from evo.families import load_families
from evo.kernel import KernelSource
from evo.problem import Problem, parse_shape
from evo.proposers.transposed import transposed_proposals, transposed_shape
from evo.records import CheckResult, EvalResult
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

    def spy(problem, store, gpu, families, per_family=1):
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
