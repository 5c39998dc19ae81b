"""bench.carveout_probe's kernel list (the part that runs without a GPU)."""
from bench.carveout_probe import kernels, main
from evo.problem import parse_shape

TABLE = "kernels_out/NVIDIA_H100_80GB_HBM3/TN/128x4096x8192.cu"


def test_kernels_renders_instances_and_reads_kernel_files():
    items = kernels("wgmma_sm90", ['{"BM": 64, "BN": 64, "CONSUMERS": 1, "SWAP_AB": 1, "STAGES": 13, "CLUSTER": 2}'], [TABLE])
    assert [label for label, _ in items] == ["new BM64/BN64/CONSUMERS1/SWAP_AB1/STAGES13/CLUSTER2", "128x4096x8192.cu"]
    (_, rendered), (_, table) = items
    assert rendered.meta.family == "wgmma_sm90" and "constexpr int STAGES = 13" in rendered.text
    assert table.accepts(parse_shape("128x4096x8192"))


def test_an_invalid_instance_is_a_one_line_error(capsys):
    assert main(["--shape", "128x4096x8192", '{"BM": 64, "BN": 64, "CONSUMERS": 2}']) == 2
    assert "not a valid wgmma_sm90 instance" in capsys.readouterr().err
