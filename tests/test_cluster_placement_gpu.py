"""bench.cluster_placement on a GPU: every CTA of both launch kinds runs, one per SM (its shared memory fills an SM).

    python -m pytest -m gpu tests/test_cluster_placement_gpu.py
"""
import pytest

pytestmark = pytest.mark.gpu


def test_both_launch_kinds_place_one_cta_per_sm():
    pytest.importorskip("cupy")
    from bench.cluster_placement import place

    res = place(grid=16, smem=200 * 1024, threads=128, spin_ns=2000)
    assert set(res) == {"plain", "pair"}
    for kind, (sms, skew) in res.items():
        assert len(sms) == 16 and len(set(sms)) == 16, kind  # 200 KB of shared memory: one CTA per SM
        assert 0.0 <= skew < 2.0, kind  # 16 CTAs on 132 SMs start together
