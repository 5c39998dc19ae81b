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


def test_clusters_of_sixteen_fill_one_gpc_each():
    """Non-portable clusters of 16: each cluster's CTAs on 16 distinct SMs, no SM shared between clusters, and the
    occupancy query says how many the GPU holds at once (at least the two launched)."""
    pytest.importorskip("cupy")
    from bench.cluster_placement import max_active_clusters, place

    res = place(grid=32, smem=200 * 1024, threads=128, spin_ns=2000, cluster=16)
    sms, _ = res["pair"]
    groups = [set(sms[i:i + 16]) for i in (0, 16)]
    assert all(len(g) == 16 for g in groups) and not groups[0] & groups[1]
    assert 2 <= max_active_clusters(16, 32, 128, 200 * 1024) <= 132 // 16
