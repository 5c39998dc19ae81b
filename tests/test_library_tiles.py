"""Seeds from the library's own choice: cuBLASLt's recorded tile, cluster and split as instances of our families."""
import io
import json
from pathlib import Path

import pytest

from evo.families import load_families
from evo.ltgemm import ALGO_MARK
from evo.problem import parse_shape
from evo.proposers.library_tiles import algorithm_tile, library_tile_proposals
from evo.records import BaselineResult
from evo.search import Search
from evo.store import Store
from fakes import FakeCompiler, FakeWorker

TOY = str(Path(__file__).parent / "data" / "families")


def detail(algo: dict) -> str:
    return "cuBLASLt autotune" + ALGO_MARK + json.dumps(algo)


def test_algorithm_tile_reads_what_cublaslt_records():
    assert algorithm_tile({"tile": [128, 64], "cluster_shape": [1, 2, 1], "split_k": 4, "stages": [64, "AUTO"]}) == {
        "TM": 128, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 4}
    assert algorithm_tile({"tile": "TILE_96x128"}) == {"TM": 96, "TN": 128, "CM": 1, "CN": 1, "SPLIT": 1}
    for no_tile in ({}, {"tile": "TILE_UNDEFINED"}, {"tile": [0, 64]}, {"tile": [128]}):
        assert algorithm_tile(no_tile) is None


@pytest.fixture(scope="module")
def wgmma():
    (fam,) = load_families(names=["wgmma_sm90"])
    return fam


def changed(fam, params):
    return {k: v for k, v in params.items() if v != fam.default_params()[k]}


def test_wgmma_maps_the_tile_as_is_and_on_c_transposed(wgmma):
    # 256x1024x16384's autotune algorithm: 128 (over N) x 64 (over M), pairs along M, 4 splits
    got = [changed(wgmma, p) for p in wgmma.library_instances({"TM": 128, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 4})]
    assert got == [{"BM": 64, "BN": 128, "CONSUMERS": 1, "SPLIT_K": 4, "SPLIT_OWNER": 1, "STAGES": 8},  # one consumer: 64 rows; split: EPI 0
                   {"BN": 64, "SWAP_AB": 1, "CLUSTER": 2, "SPLIT_K": 4, "SPLIT_OWNER": 1, "STAGES": 8}]  # C^T: pairs along M
    # 12288x256x1024's: 128 x 192 on C^T (only the transposed mapping has a 128-row tile over N = 256)
    got = [changed(wgmma, p) for p in wgmma.library_instances({"TM": 128, "TN": 192, "CM": 2, "CN": 1, "SPLIT": 1})]
    assert {"BN": 192, "SWAP_AB": 1, "STAGES": 5} in got
    # 12288^2 x 1024's 176 x 128: only as is (BM 176 is not a tile height), its pairs along M not ours
    assert [changed(wgmma, p) for p in wgmma.library_instances({"TM": 176, "TN": 128, "CM": 1, "CN": 2, "SPLIT": 1})] == [
        {"BN": 176, "STAGES": 5}]
    assert wgmma.library_instances({"TM": 64, "TN": 8, "CM": 1, "CN": 2, "SPLIT": 1}) == []  # no 8-row tiles
    for p in wgmma.library_instances({"TM": 96, "TN": 128, "CM": 2, "CN": 1, "SPLIT": 1}):
        assert wgmma.valid(p)



def test_wgmma_pairs_take_the_deepest_ring_that_fits(wgmma):
    """A pair's stage is full when both halves have landed and free when both consumers are done with it, so pairs
    get the deepest ring (13 stages of 64 x 64); single CTAs keep 8 (docs/perf-hopper.md Run 29)."""
    got = [changed(wgmma, p) for p in wgmma.library_instances({"TM": 64, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 1})]
    assert got == [{"BM": 64, "BN": 64, "CONSUMERS": 1, "EPI": 1, "STAGES": 8},
                   {"BM": 64, "BN": 64, "CONSUMERS": 1, "SWAP_AB": 1, "CLUSTER": 2, "STAGES": 13}]  # C^T: no TMA store
    # 128 x 128 pairs: 6 stages are all that fit beside the TMA-store epilogue's staging
    got = [changed(wgmma, p) for p in wgmma.library_instances({"TM": 128, "TN": 128, "CM": 2, "CN": 1, "SPLIT": 1})]
    assert {"BN": 128, "CLUSTER": 2, "EPI": 1, "STAGES": 6} in got and all(wgmma.valid(wgmma.complete(g)) for g in got)


def test_wgmma_library_tiles_store_through_tma_where_the_boxes_are_wide(wgmma):
    """The library's kernels store C with TMA; ours with EPI 1 where valid: not under split-K (the workspace
    reduce), not on C^T, not for tiles whose width is no multiple of 32 (64 x 16 boxes, measured slower)."""
    for tile in ({"TM": 128, "TN": 256, "CM": 1, "CN": 2, "SPLIT": 1}, {"TM": 96, "TN": 128, "CM": 2, "CN": 1, "SPLIT": 1}):
        as_is = [p for p in wgmma.library_instances(tile) if p["SWAP_AB"] == 0]
        assert as_is and all(p["EPI"] == 1 for p in as_is)
    for tile in ({"TM": 176, "TN": 128, "CM": 1, "CN": 2, "SPLIT": 1}, {"TM": 128, "TN": 128, "CM": 1, "CN": 2, "SPLIT": 4}):
        assert all(p["EPI"] == 0 for p in wgmma.library_instances(tile))


@pytest.fixture(scope="module")
def cutlass():
    (fam,) = load_families(names=["cutlass_sm90"])
    return fam


def test_cutlass_maps_the_librarys_tile_and_cluster_both_ways(cutlass):
    # 128x4096x8192's algorithm: 64 x 64, pairs along M; on C^T (the library's orientation) and over C as is, then
    # the same with the pairs along N (cuBLASLt records this 1x2 for 4096x128x8192 too, where it shares the small
    # operand; there the pairs along N over C won)
    got = [changed(cutlass, p) for p in cutlass.library_instances({"TM": 64, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 1})]
    assert got == [{"TILE_M": 64, "TILE_N": 64, "SWAP_AB": 1, "CLUSTER_M": 1, "CLUSTER_N": 2, "SCHEDULE": 0},
                   {"TILE_M": 64, "TILE_N": 64, "SCHEDULE": 0},  # CLUSTER_M 2 is the family's default
                   {"TILE_M": 64, "TILE_N": 64, "SWAP_AB": 1, "SCHEDULE": 0},
                   {"TILE_M": 64, "TILE_N": 64, "CLUSTER_M": 1, "CLUSTER_N": 2, "SCHEDULE": 0}]
    # without a cluster both pairings are the same instance: one per orientation
    assert len(cutlass.library_instances({"TM": 64, "TN": 64, "CM": 1, "CN": 1, "SPLIT": 1})) == 2
    assert all(p["STAGES"] == 0 for p in cutlass.library_instances({"TM": 64, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 1}))
    # a split-K algorithm: CUTLASS's stream-K scheduler splitting K, which needs the cooperative kernel
    for p in cutlass.library_instances({"TM": 128, "TN": 128, "CM": 1, "CN": 2, "SPLIT": 4}):
        assert (p["SCHEDULE"], p["SCHEDULER"], p["SPLITS"]) == (1, 1, 4) and cutlass.valid(p)
    # outside the family's space: 144-wide tiles, clusters of 4, 5 splits
    assert cutlass.library_instances({"TM": 144, "TN": 64, "CM": 1, "CN": 2, "SPLIT": 1}) == []
    assert cutlass.library_instances({"TM": 64, "TN": 64, "CM": 1, "CN": 4, "SPLIT": 1}) == []
    assert cutlass.library_instances({"TM": 128, "TN": 128, "CM": 1, "CN": 1, "SPLIT": 5}) == []

def test_proposals_one_per_distinct_instance(wgmma):
    algo = {"tile": [128, 192], "cluster_shape": [2, 1, 1], "split_k": 1}
    base = [BaselineResult("cublas", 16.3), BaselineResult("cublaslt_heuristic", 16.4, detail=detail(algo)),
            BaselineResult("cublaslt_autotune", 16.5, detail=detail(algo))]  # the same algorithm twice
    props = library_tile_proposals(parse_shape("12288x256x1024"), base, [wgmma])
    assert len(props) == len(wgmma.library_instances(algorithm_tile(algo))) >= 1
    assert all(p.proposer == "seed" and "tile 128x192, cluster 2x1, split 1" in p.idea for p in props)
    assert library_tile_proposals(parse_shape("12288x256x1024"), base[:1], [wgmma]) == []  # no algorithm recorded


@pytest.mark.parametrize("library_seeds", [True, False])
def test_the_librarys_tile_is_timed_as_a_seed(tmp_path, library_seeds):
    """A search whose baselines carry cuBLASLt's algorithm times that algorithm's tile as a toy instance first
    (search.library_seeds: false leaves it out, for measuring what the seeds bring)."""

    class LtWorker(FakeWorker):
        def call(self, op, timeout_s, **kw):
            res = super().call(op, timeout_s, **kw)
            if op == "baselines" and not kw.get("extra"):
                res["results"]["cublaslt_autotune"] = BaselineResult("cublaslt_autotune", 45.0,
                                                                     detail=detail({"tile": [32, 8], "split_k": 1}))
            return res

    from evo.config import load_config

    cfg = load_config(overrides={"search": {"budget_minutes": 0, "max_candidates": 1, "children": 2, "seed": 1,
                                            "library_seeds": library_seeds},
                                 "paths": {"db": str(tmp_path / "evo.db"), "out": str(tmp_path / "out"), "templates": TOY}})
    out = io.StringIO()
    Search(parse_shape("256x256x256"), cfg, out=out, worker_factory=LtWorker, compiler=FakeCompiler()).run()
    (toy,) = load_families(TOY, names=["toy"])
    lib = toy.render(toy.complete({"TILE": 32, "UNROLL": 4}))
    store = Store(cfg.paths.db)
    if not library_seeds:
        assert not store.evaluated(lib.hash, "256x256x256", "TN", "Fake_GPU") and "cuBLASLt's tile" not in out.getvalue()
        return
    assert store.evaluated(lib.hash, "256x256x256", "TN", "Fake_GPU")
    (idea,) = next(iter(store.rows("SELECT idea FROM candidates WHERE hash=?", (lib.hash,))))
    assert idea.startswith("cublaslt_autotune's tile 32x8") and "cuBLASLt's tile for it" in out.getvalue()
