"""wgmma_sm90's TMA-store epilogue (EPI > 0): launch rules, constraints, the C map, and (nvcc) its PTX.

Whether the stores land where they should (swizzle, clipping at M and N) is proven on a GPU only:
bench/output_bound_smoke.py checks every instance through the evaluator on off-tile shapes.
"""
from pathlib import Path

import pytest

from evo.errors import EvoError
from evo.families import load_families
from evo.kernel import KernelSource
from evo.problem import Problem
from evo.testing.ptx import ptx_of

ROOT = Path(__file__).resolve().parent.parent
PP = {"BM": 128, "BN": 128, "PINGPONG": 1, "STAGES": 4}


@pytest.fixture(scope="module")
def fam():
    (f,) = load_families(ROOT / "templates", names=["wgmma_sm90"])
    return f


@pytest.fixture(scope="module")
def fam_cl(fam):
    return fam  # CLUSTER = 2 is in the search space


def test_c_map_only_with_tma_store(fam):
    prob = Problem(2048, 12288, 128)
    old = fam.render(PP).launch(prob, num_sms=132)
    assert [t.operand for t in old.tensor_maps] == ["A", "B"]
    for epi in (1, 2):
        new = fam.render({**PP, "EPI": epi}).launch(prob, num_sms=132)
        assert [(t.operand, t.box_rows, t.box_cols, t.swizzle) for t in new.tensor_maps] == [
            ("A", 128, 64, 128), ("B", 128, 64, 128), ("C", 64, 64, 128)]
        # the ring plus EPI staging buffers of 64 x BN fp16 per consumer, instead of the 9 KB chunk buffer
        assert new.smem == 4 * (128 + 128) * 128 + 1024 + 2 * epi * 128 * 128
        assert new.grid == old.grid and new.block == old.block and new.workspace == 0
    assert old.smem == 4 * (128 + 128) * 128 + 1024 + 2 * 9216


def test_c_map_of_narrow_boxes(fam):
    """BN % 64 != 0: C goes out in 64-column boxes (128-byte rows and swizzle), then one 64 x 32 box (64-byte rows and
    swizzle) and one 64 x 16 box (32-byte) for the rest of BN, each width through its own map, in that order."""
    prob = Problem(128, 12288, 256)
    c64, c32, c16 = ("C", 64, 64, 128), ("C", 64, 32, 64), ("C", 64, 16, 32)
    for bn, c_maps, extra in ((96, [c64, c32], {}), (32, [c32], {}), (176, [c64, c32, c16], {"PINGPONG": 1}),
                              (16, [c16], {}), (80, [c64, c16], {}), (144, [c64, c16], {"PINGPONG": 1}),
                              (112, [c64, c32, c16], {}), (128, [c64], {})):
        p = {"BM": 128, "BN": bn, "STAGES": 4, "EPI": 2 if bn < 144 else 1, **extra}
        assert fam.valid(fam.complete(p)), p
        launch = fam.render(p).launch(prob, num_sms=132)
        assert [(t.operand, t.box_rows, t.box_cols, t.swizzle) for t in launch.tensor_maps] == [
            ("A", 128, 64, 128), ("B", bn, 64, 128), *c_maps], bn
        assert launch.smem == 4 * (128 + bn) * 128 + 1024 + 2 * p["EPI"] * bn * 128


def test_c_map_of_swapped_tiles(fam):
    """SWAP_AB: a consumer's 64-row slice of C^T is BN rows x 64 columns of C, stored as one box of a single C map
    (128-byte rows, 128-byte swizzle) whatever BN is; pairs halve B's box (the kernel's row tile), not C's."""
    prob = Problem(12288, 256, 512)
    for bn, extra in ((96, {"PINGPONG": 1}), (192, {}), (80, {"PERSISTENT": 0}), (128, {"CLUSTER": 2})):
        p = {"BM": 128, "BN": bn, "SWAP_AB": 1, "STAGES": 4, "EPI": 2 if bn < 192 else 1, **extra}
        assert fam.valid(fam.complete(p)), p
        launch = fam.render(p).launch(prob, num_sms=132)
        assert [(t.operand, t.box_rows, t.box_cols, t.swizzle) for t in launch.tensor_maps] == [
            ("A", bn, 64, 128), ("B", 128 // p.get("CLUSTER", 1), 64, 128), ("C", bn, 64, 128)], bn
        assert launch.smem == 4 * (128 + bn) * 128 + 1024 + 2 * p["EPI"] * bn * 128
    assert not fam.render({"BM": 128, "BN": 96, "SWAP_AB": 1, "STAGES": 4, "EPI": 1}).accepts(Problem(12288, 260, 512))


def test_tma_store_needs_16_byte_rows_of_c(fam):
    off = Problem(2000, 12004, 128)  # N % 8 != 0: C's row stride is not a multiple of 16 bytes
    assert fam.render(PP).accepts(off)
    assert not fam.render({**PP, "EPI": 1}).accepts(off)
    assert fam.render({**PP, "EPI": 1}).accepts(Problem(2000, 12000, 128))  # off-tile M and N, clipped by TMA


def test_constraints(fam):
    ok = [{**PP, "EPI": 2}, {"BM": 256, "BN": 128, "STAGES": 3, "EPI": 2}, {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 1},
          {"BM": 128, "BN": 128, "STAGES": 5, "CONSUMERS": 1, "EPI": 2},
          {"BM": 256, "BN": 176, "STAGES": 2}, {"BM": 256, "BN": 192, "STAGES": 3, "EPI": 1},   # two consumers, whole tiles
          {"BM": 128, "BN": 64, "SWAP_AB": 1, "STAGES": 4, "EPI": 1}]   # C^T stored through TMA (stmatrix.trans)
    for p in ok:
        assert fam.valid(fam.complete(p)), p
    bad = [
        {**PP, "STAGES": 6, "EPI": 2},                                   # 6 x 32 KB ring + 64 KB staging: too much smem
        {"BM": 128, "BN": 256, "STAGES": 3, "EPI": 2},                    # 2 x 2 x 32 KB staging + 3 x 48 KB ring
        {"BM": 128, "BN": 64, "SPLIT_K": 2, "STAGES": 4, "EPI": 1},       # no split-K reduce through TMA
        {"BM": 128, "BN": 128, "SWAP_AB": 1, "STAGES": 4, "EPI": 1, "EPI_WIDE": 1},   # C^T's slices are one box already
        {"BM": 256, "BN": 192, "STAGES": 2},                              # 192 accumulators beside ordinary stores spill
        {"BM": 256, "BN": 160, "STAGES": 2, "SPLIT_K": 2},                # split-K keeps 128 accumulators (its reduce)
        {**PP, "EPI_HINT": 1},                                            # the L2 hint is for TMA stores
    ]
    for p in bad:
        assert not fam.valid(fam.complete(p)), p
    assert any(p.get("EPI") for p in fam.instances_for_ci())  # CI compiles one TMA-store instance


def test_when_selects_tensor_maps(naive_source):
    src = naive_source.replace("workspace: 0\n", "workspace: 0\ntensor_maps:\n  - {operand: A, box: [64, 64], swizzle: 128}\n"
                               "  - {operand: C, box: [64, 64], when: \"M > 100\"}\n")
    ks = KernelSource.parse(src)
    assert [t.operand for t in ks.launch(Problem(64, 64, 64), 132).tensor_maps] == ["A"]
    assert [t.operand for t in ks.launch(Problem(128, 64, 64), 132).tensor_maps] == ["A", "C"]
    with pytest.raises(EvoError, match="when"):
        KernelSource.parse(src.replace('when: "M > 100"', "when: [1]"))
    blocks = KernelSource.parse(src.replace('when: "M > 100"', "col_block: 32"))
    assert [t.col_block for t in blocks.launch(Problem(64, 64, 64), 132).tensor_maps] == [0, 32]
    for bad in ("col_block: 12", "col_block: -8", "col_block: x"):   # whole 16-byte chunks, a constant
        with pytest.raises(EvoError, match="col_block"):
            KernelSource.parse(src.replace('when: "M > 100"', bad))


def _ptx(ks: KernelSource, tmp_path: Path) -> str:
    return ptx_of(ks.text, tmp_path)


@pytest.mark.nvcc
def test_ptx_tma_store_and_waits(fam, tmp_path):
    text = _ptx(fam.render({**PP, "EPI": 2}), tmp_path)
    entry = text.split(".entry evo_gemm", 1)[1]
    params = entry.split(")", 1)[0]
    assert params.count(".param") == 10  # A, B, C, M, N, K, workspace + maps of A, B and C
    odd = _ptx(fam.render({**PP, "BN": 112, "EPI": 1}), tmp_path)  # C in 64-, 32- and 16-column boxes: three maps
    assert odd.split(".entry evo_gemm", 1)[1].split(")", 1)[0].count(".param") == 12
    assert odd.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 2 * 3  # 2 slices; 16-wide boxes: 2 * 7
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in text
    assert "cp.async.bulk.commit_group" in text
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in text  # fragments to smem, four 8x8 matrices at a time
    # ping-pong: a consumer owns 128 rows (2 slices), staged together in the 2 buffers, one bulk group per round:
    # the round waits for the previous round's reads; before exit only the reads are waited for
    assert "cp.async.bulk.wait_group.read 0" in text and "wait_group.read 1" not in text
    assert "cp.async.bulk.wait_group 0" not in text
    co = _ptx(fam.render({"BM": 128, "BN": 128, "STAGES": 4, "EPI": 2}), tmp_path)  # cooperative: 1 slice a round
    assert "cp.async.bulk.wait_group.read 1" in co  # double buffer: one store group may still read
    assert "fence.proxy.async.shared::cta" in text
    assert "membar.gl" not in text and "fence.sc" not in text
    assert "cache_hint" not in text and "createpolicy" not in text
    narrow = _ptx(fam.render({"BM": 128, "BN": 96, "STAGES": 4, "EPI": 2}), tmp_path)  # three 64 x 32 boxes a slice
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in narrow
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in narrow
    # ping-pong 128 x 176: 176 accumulators per thread, eleven 64 x 16 boxes a slice
    wide = _ptx(fam.render({"BM": 128, "BN": 176, "PINGPONG": 1, "STAGES": 4, "EPI": 1, "GROUP": 16}), tmp_path)
    assert "wgmma.mma_async.sync.aligned.m64n176k16.f32.f16.f16" in wide
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in wide
    one = _ptx(fam.render({**PP, "EPI": 1}), tmp_path)
    assert "cp.async.bulk.wait_group.read 0" in one and "wait_group.read 1" not in one
    hint = _ptx(fam.render({**PP, "EPI": 1, "EPI_HINT": 1}), tmp_path)
    assert "createpolicy.fractional.L2::evict_first" in hint
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint" in hint


@pytest.mark.nvcc
def test_ptx_ordinary_epilogue_unchanged(fam, tmp_path):
    text = _ptx(fam.render(PP), tmp_path)
    params = text.split(".entry evo_gemm", 1)[1].split(")", 1)[0]
    assert params.count(".param") == 9
    assert "cp.async.bulk.tensor.2d.global.shared" not in text and "cp.async.bulk.wait_group" not in text


def test_output_bound_smoke_plan():
    from bench.output_bound_smoke import CHECK_ONLY, DEFAULT, INSTANCES, TIMED, plan

    assert set(DEFAULT) <= set(INSTANCES)
    starts = [p for p in load_families(ROOT / "templates", names=["wgmma_sm90"])[0].start_instances() if p["EPI"]]
    assert starts and all(any(p == q for _, q, _ in plan(DEFAULT, [])) for p in starts)  # the final run times the starts
    items = plan(list(INSTANCES), TIMED + CHECK_ONLY)
    assert {p["EPI"] for _, p, _ in items} == {0, 1, 2}  # today's epilogue next to both TMA-store variants
    for label, p, ks in items:
        for s in TIMED + CHECK_ONLY:
            prob = Problem(*(int(x) for x in s.split("x")))
            # a row panel holds the whole K: it fits beside its ring at K = 128 and is refused (skipped) at K = 256;
            # wide C boxes (EPI_WIDE) need N % 64 == 0: N = 12000 and 136 are refused (skipped), every timed N taken
            panel_fits = not p["PANEL"] or prob.k <= 128
            assert ks.accepts(prob) == (panel_fits and (not p["EPI_WIDE"] or prob.n % 64 == 0)), (label, s)
    with pytest.raises(EvoError, match="unknown instance"):
        plan(["nope"], [])


def test_output_bound_smoke_runs_with_stand_ins(monkeypatch, tmp_path, capsys):
    # the script's plumbing (compile, check, side-by-side timing, tables, JSON) without nvcc or a GPU
    import json

    import evo.compile
    import evo.gpu.worker
    import evo.profile
    from bench import output_bound_smoke
    from tests.fakes import FakeCompiler, FakeWorker

    class _Compiler:
        @staticmethod
        def from_config(cfg):
            return FakeCompiler(cache_dir=tmp_path / "cubins")

    profiled = []

    class _Profiler:
        def __init__(self, **kw):
            pass

        def profile_kernel(self, source, cubin, problem):
            from evo.kernel import KernelSource
            from evo.profile import ProfileResult

            profiled.append((KernelSource.parse(source).meta.params["EPI"], problem.key))
            return ProfileResult(True, "evo_gemm", {"duration_us": 20.0, "dram_pct": 80.0}, seconds=1.0)

    monkeypatch.setattr(evo.compile, "Compiler", _Compiler)
    monkeypatch.setattr(evo.gpu.worker, "GpuWorker", FakeWorker)
    monkeypatch.setattr(evo.profile, "Profiler", _Profiler)
    rc = output_bound_smoke.main(["--shapes", "2048x12288x128", "--check-shapes", "200x136x72",
                                  "--instances", "pp128x128 s6 epi0,pp128x128 s4 epi2,co256x128 s4 epi1 cl2",
                                  "--out", str(tmp_path),
                                  "--profile", "2048x12288x128"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| 2048x12288x128 | cublaslt_autotune | 45.00 | pp128x128 s6 epi0 |" in out
    summary = out.split("| shape |")[1].splitlines()[2]
    assert summary.split("|")[7].strip() in ("pp128x128 s4 epi2", "co256x128 s4 epi1 cl2")  # the best EPI > 0 column
    data = json.loads((tmp_path / "output_bound_smoke.json").read_text())
    assert set(data["shapes"]) == {"2048x12288x128", "200x136x72"}
    assert data["shapes"]["2048x12288x128"]["instances"]["pp128x128 s4 epi2"]["us"] > 0
    assert [e > 0 for e, _ in profiled] == [True, False] and "DRAM throughput, % of peak: 80.0%" in out
    # the cluster-residency query needs a GPU: here it reports its failure in the line instead of raising
    assert "co256x128 s4 epi1 cl2: at most query failed" in out and "its grid has 66" in out
    assert all(v["metrics"]["dram_pct"] == 80.0 for v in data["profile"].values())


def test_cluster_pairs_share_a(fam, fam_cl):
    assert fam.space["CLUSTER"] == (1, 2)  # searched: the remote arrive no longer fences at cluster scope
    ks = fam.render({"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1, "CLUSTER": 2})
    big = ks.launch(Problem(16384, 16384, 128), num_sms=132)
    assert big.grid == (132, 1, 1)
    assert [(t.operand, t.box_rows) for t in big.tensor_maps] == [("A", 128), ("B", 128), ("C", 64)]  # half of A per CTA
    # column tiles padded to pairs: 2000x1000 -> 8 x 8 tiles (of 256 x 128), 4 pairs per tile row; grid stays even
    assert ks.launch(Problem(2000, 1000, 128), num_sms=132).grid == (64, 1, 1)
    assert ks.launch(Problem(200, 136, 72), num_sms=132).grid == (2, 1, 1)
    odd = fam.render({"BM": 128, "BN": 128, "PINGPONG": 1, "PERSISTENT": 0, "STAGES": 4, "CLUSTER": 2})
    assert odd.launch(Problem(384, 384, 128), num_sms=132).grid == (6, 1, 1)  # 3 x 4 padded units, 2 per CTA, pairs
    assert odd.launch(Problem(128, 384, 128), num_sms=132).grid == (2, 1, 1)
    for bad in ({"BM": 128, "BN": 64, "SPLIT_K": 2, "SPLIT_RS": 1, "PERSISTENT": 0, "STAGES": 4, "CLUSTER": 2},
                {"BM": 128, "BN": 64, "SPLIT_K": 2, "SPLIT_CLUSTER": 1, "PERSISTENT": 0, "STAGES": 4, "CLUSTER": 2}):
        assert not fam.valid(fam.complete(bad))
    # swap-AB pairs: the kernel's row tile is B's, so B's box is halved (each CTA multicasts half) and A's is whole
    sw = fam.render(fam.complete({"BM": 128, "BN": 64, "SWAP_AB": 1, "SPLIT_K": 4, "STAGES": 7, "CLUSTER": 2}))
    lw = sw.launch(Problem(256, 1024, 16384), num_sms=132)
    assert [(t.operand, t.box_rows) for t in lw.tensor_maps] == [("A", 64), ("B", 64)]
    assert lw.grid == (128, 1, 1)  # 8 x 4 tiles x 4 splits, persistent
    # split-K pairs (the workspace reduce): both CTAs of a pair on one k split; tiles and the workspace numbered over
    # the pair-padded grid (1000 / 128 -> 8 column tiles, 4104 / 128 -> 33, padded to 34)
    sk = {"BM": 128, "BN": 128, "SPLIT_K": 3, "STAGES": 6, "PERSISTENT": 0, "CLUSTER": 2}
    assert fam.valid(fam.complete(sk))
    sk_ks = fam.render(fam.complete(sk))
    one = fam.render(fam.complete({**sk, "CLUSTER": 1}))
    p = Problem(1030, 4104, 136)
    assert sk_ks.launch(p, num_sms=132).grid == (9 * 34 * 3, 1, 1) and one.launch(p, num_sms=132).grid == (9 * 33 * 3, 1, 1)
    tiles = 9 * 34
    assert sk_ks.launch(p, num_sms=132).workspace == -(-tiles * 4 // 256) * 256 + tiles * 3 * 128 * 128 * 4


@pytest.mark.nvcc
def test_ptx_cluster_multicast(fam, fam_cl, tmp_path):
    text = _ptx(fam_cl.render({"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1, "CLUSTER": 2}), tmp_path)
    assert ".reqnctapercluster 2, 1, 1" in text and ".multicast::cluster" in text
    # consumers free a stage in both CTAs: the default (.release.cta) remote arrive, not .release.cluster (which made
    # every stage release a cluster-scope fence: CTA pairs ran at 0.54-0.71x before, parity after; docs/perf-output-bound.md)
    assert "mbarrier.arrive.shared::cluster.b64" in text and "arrive.release.cluster" not in text
    assert text.count("barrier.cluster.wait") == 2                     # after barrier init, before exit
    one = _ptx(fam.render({"BM": 256, "BN": 128, "STAGES": 4, "EPI": 1}), tmp_path)
    assert "cluster" not in one.replace("fence.mbarrier_init.release.cluster", "").replace(
        "shared::cluster.global", "")


def test_geometry_of_params_from_before_the_epilogue_parameters(fam):
    # archived / exported kernels carry no EPI, EPI_HINT, CLUSTER: their geometry is the defaults' (the old kernel)
    from evo.space import FamilySpace

    sp = FamilySpace(fam)
    old = {k: v for k, v in fam.default_params().items() if k not in ("EPI", "EPI_HINT", "CLUSTER")}
    prob = Problem(4096, 4096, 1024)
    g = sp.geometry(old, prob, 132)
    assert g is not None and g == sp.geometry(fam.default_params(), prob, 132)


PANEL_K128 = {"BM": 128, "BN": 256, "CONSUMERS": 2, "EPI": 1, "EPI_HINT": 1, "GROUP": 1, "PANEL": 1, "STAGES": 4}


def test_wide_c_boxes(fam):
    """EPI_WIDE: C goes out in 64 x 128 boxes through a 3-D map of 64-column blocks (256 contiguous bytes per row per
    box), same staging bytes; the kernel then needs N % 64 == 0 (a block past N would alias the next row)."""
    prob = Problem(16384, 16384, 128)
    base = fam.render(PANEL_K128).launch(prob, num_sms=132)
    wide = fam.render({**PANEL_K128, "EPI_WIDE": 1}).launch(prob, num_sms=132)
    assert [(t.operand, t.box_rows, t.box_cols, t.swizzle, t.col_block) for t in wide.tensor_maps] == [
        ("A", 128, 64, 128, 0), ("B", 256, 64, 128, 0), ("C", 64, 128, 128, 64)]
    assert [t.col_block for t in base.tensor_maps] == [0, 0, 0]
    assert (wide.grid, wide.block, wide.smem, wide.workspace) == (base.grid, base.block, base.smem, base.workspace)
    ks = fam.render({**PANEL_K128, "EPI_WIDE": 1})
    assert ks.accepts(Problem(2056, 12288, 128)) and ks.accepts(Problem(200, 192, 72))
    assert not ks.accepts(Problem(2048, 12296, 128))  # N % 64 == 8
    assert fam.render(PANEL_K128).accepts(Problem(2048, 12296, 128))
    for p in ({**PP, "EPI_WIDE": 1},                                          # no TMA store
              {"BM": 128, "BN": 64, "STAGES": 4, "EPI": 2, "EPI_WIDE": 1},    # a 64-column tile has no box pair
              {"BM": 128, "BN": 192, "STAGES": 3, "EPI": 1, "EPI_WIDE": 1}):
        assert not fam.valid(fam.complete(p)), p
    for p in ({**PANEL_K128, "EPI_WIDE": 1}, {**PP, "EPI": 2, "EPI_WIDE": 1},
              {"BM": 256, "BN": 128, "EPI": 2, "PANEL": 1, "GROUP": 1, "STAGES": 5, "EARLY_STORE": 1, "EPI_WIDE": 1}):
        assert fam.valid(fam.complete(p)), p


@pytest.mark.nvcc
def test_ptx_wide_c_boxes(fam, tmp_path):
    text = _ptx(fam.render({**PANEL_K128, "EPI_WIDE": 1}), tmp_path)
    assert "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group.L2::cache_hint" in text
    assert "cp.async.bulk.tensor.2d.global.shared" not in text   # every C box is a wide one
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in text
    assert text.count("cp.async.bulk.tensor.3d.global.shared") == 2   # two 128-column boxes per 64-row slice



# EPI 3 (not in EPI's list: a tie on the K = 128 panel, docs/perf-hopper.md Run 80), for bench.template_ab or a model's
# child; the K = 128 panel kernel timed with it
PANEL_EPI3 = {"BM": 256, "BN": 128, "CONSUMERS": 2, "PANEL": 1, "GROUP": 1, "EPI": 3, "EPI_HINT": 1, "EARLY_STORE": 1,
              "STAGES": 4}


@pytest.fixture(scope="module")
def fam3():
    (f,) = load_families(ROOT / "templates", names=["wgmma_sm90"])  # its own copy: admit widens the space
    f.admit({"EPI": 3})
    return f


def test_three_staging_buffers_outside_the_searched_values(fam3):
    # valid where the stores' rounds cover the slices (one slice a round, or two slices a consumer)
    f = fam3
    assert f.valid(f.complete(PANEL_EPI3))
    # a 4-stage ring of B, the 256 x 128 panel of A, three 64 x 128 staging buffers per consumer: 230,400 B
    smem = f.render(PANEL_EPI3).launch(Problem(2048, 12288, 128), num_sms=132).smem
    assert smem == 4 * 128 * 128 + 256 * 2 * 128 + 1024 + 2 * 3 * 128 * 128
    assert f.valid(f.complete({**PP, "EPI": 3, "STAGES": 3}))  # ping-pong: two slices a consumer, rounds of two
    four = {"BM": 256, "BN": 64, "CONSUMERS": 1, "STAGES": 4, "EPI": 3}  # four slices: rounds of three do not fit
    assert not f.valid(f.complete(four)) and f.valid(f.complete({**four, "EARLY_STORE": 1}))


@pytest.mark.nvcc
def test_ptx_three_staging_buffers(fam3, tmp_path):
    text = _ptx(fam3.render(PANEL_EPI3), tmp_path)
    # one slice a round (early stores): a buffer is reused three slices later, so two store groups may still read it
    assert "cp.async.bulk.wait_group.read 2" in text and "wait_group.read 1" not in text
