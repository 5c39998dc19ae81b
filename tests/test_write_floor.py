"""bench.write_floor's probe kernels compile for sm_90a (the GPU run is bench-only; CI has nvcc, not a GPU)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from bench import write_floor


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_probe_kernels_compile(tmp_path):
    src = tmp_path / "write_floor.cu"
    src.write_text(write_floor._SRC)
    ptx = tmp_path / "write_floor.ptx"
    res = subprocess.run(["nvcc", "-arch=sm_90a", "-ptx", "-o", str(ptx), str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = ptx.read_text()
    for name in ("evo_write_only", "evo_read_write", "evo_tile_store", "evo_tma_tile_store"):
        assert f".entry {name}(" in text
    assert "st.global.cs" in text   # the tile stores stream (evict-first in spirit), as the TMA-store epilogue's hint
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint" in text  # the epilogue's TMA store
