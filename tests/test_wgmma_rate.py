"""bench.wgmma_rate: its generated kernels compile for sm_90a with one HGMMA width each (CI has nvcc), bad widths and
a missing GPU stop it with exit 2 and one line."""
import shutil
import subprocess

import pytest

from bench import wgmma_rate


def test_variants_keep_the_accumulators_within_bounds():
    v = wgmma_rate.variants((64, 128, 176, 256))
    assert (128, 2) in v and (176, 2) in v and (256, 1) in v
    assert (256, 2) not in v
    assert all(mt * n // 2 <= wgmma_rate.MAX_ACC for n, mt in v)


def test_feed_rings_fit_shared_memory_and_stay_1024_aligned():
    for n, mt in wgmma_rate.variants(wgmma_rate.WIDTHS):
        st, sb = wgmma_rate.feed_stages(n, mt), wgmma_rate.stage_bytes(n, mt)
        assert 2 <= st <= 8 and sb % 1024 == 0 and st * sb + 1024 <= 227 * 1024


def test_source_has_one_kernel_per_variant_and_rejects_bad_widths():
    src = wgmma_rate.source((112, 120))
    for n, mt in wgmma_rate.variants((112, 120)):
        assert f"void __launch_bounds__(256, 1) {wgmma_rate.kernel_name(n, mt)}(" in src
        assert f"void __launch_bounds__(256, 1) {wgmma_rate.feed_name(n, mt)}(" in src
    assert src.count("m64n120k16") == 1 and src.count("m64n112k16") == 1
    for bad in ((100,), (0,), (264,)):
        with pytest.raises(ValueError):
            wgmma_rate.source(bad)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_rate_kernels_compile_for_sm90a_with_their_widths(tmp_path):
    out = tmp_path / "rate.cubin"
    r = wgmma_rate.compile_rate(out, (112, 128))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    for n, mt in wgmma_rate.variants((112, 128)):
        assert wgmma_rate.kernel_name(n, mt).encode() in data and wgmma_rate.feed_name(n, mt).encode() in data
    dump = shutil.which("cuobjdump")
    if dump:
        sass = subprocess.run([dump, "-sass", str(out)], capture_output=True, text=True).stdout
        assert "HGMMA.64x112x16" in sass and "HGMMA.64x128x16" in sass


def test_bad_widths_exit_2_with_one_line(capsys):
    assert wgmma_rate.main(["--widths", "64,100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --widths")


def test_without_a_gpu_exits_2_with_one_line(capsys):
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert wgmma_rate.main(["--widths", "128"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")


def test_bad_chunks_or_share_exit_2_with_one_line(capsys):
    for argv in (["--chunks", "3"], ["--share", "0"], ["--chunks", "x"]):
        assert wgmma_rate.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --chunks / --share")


def test_lsu_bytes_are_whole_rounds_of_the_producer_warpgroup():
    sb = wgmma_rate.stage_bytes(128, 2)
    assert wgmma_rate.lsu_bytes(0, sb) == 0 and wgmma_rate.lsu_bytes(1, sb) == sb
    assert wgmma_rate.lsu_bytes(0.5, sb) == sb // 2 and wgmma_rate.lsu_bytes(0.3, sb) % (128 * 16) == 0
    with pytest.raises(ValueError):
        wgmma_rate.lsu_bytes(1.5, sb)
    src = wgmma_rate.source((128,))
    assert "cp.async.cg.shared.global" in src and "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in src


def test_bad_lsu_exits_2_with_one_line(capsys):
    for argv in (["--lsu", "2"], ["--lsu", "x"]):
        assert wgmma_rate.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --lsu")
