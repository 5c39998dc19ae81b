"""bench.multicast_probe: its kernels compile for sm_90a (CI has nvcc) and it stops with exit 2, one line, where it
cannot run."""
import shutil

import pytest

from bench import multicast_probe


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_probe_kernels_compile_for_sm90a(tmp_path):
    out = tmp_path / "probe.cubin"
    r = multicast_probe.compile_probe(out)
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    assert b"probe_single" in data and b"probe_pair" in data


def test_probe_without_a_gpu_exits_2_with_one_line(capsys):
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert multicast_probe.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
