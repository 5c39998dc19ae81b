"""Datasheet peaks by reported GPU name."""
import pytest

from evo.datasheet import (LAUNCH_FLOOR_DEFAULT_US, datasheet, dram_bandwidth, launch_floor_us,
                           peak_tflops_fp16_dense, roofline_us)
from evo.errors import EvoError


@pytest.mark.parametrize("name,model", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA_H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA GH200 480GB", "GH200 96GB HBM3"),
])
def test_names_resolve(name, model):
    assert datasheet(name).model == model


def test_figures():
    assert peak_tflops_fp16_dense("NVIDIA H200") == pytest.approx(989.4)
    assert dram_bandwidth("NVIDIA_H100_80GB_HBM3") == pytest.approx(3350.0)
    assert peak_tflops_fp16_dense("NVIDIA H100 PCIe") < peak_tflops_fp16_dense("NVIDIA H100 80GB HBM3")
    assert datasheet("NVIDIA H200").launch_floor_measured
    assert not datasheet("NVIDIA H100 PCIe").launch_floor_measured


def test_unknown_gpu_is_not_guessed():
    assert datasheet("NVIDIA GeForce RTX 4090") is None
    with pytest.raises(EvoError, match="no datasheet"):
        peak_tflops_fp16_dense("NVIDIA GeForce RTX 4090")
    with pytest.raises(EvoError):
        dram_bandwidth("Some GPU")
    assert launch_floor_us("Some GPU") == LAUNCH_FLOOR_DEFAULT_US


def test_roofline():
    # 8192^3 on H200: compute-bound, 2*8192^3 / 989.4e12 s
    assert roofline_us("NVIDIA H200", 2.0 * 8192 ** 3, 3 * 2 * 8192 ** 2) == pytest.approx(2 * 8192 ** 3 / 989.4e6, rel=1e-9)
    # a GEMV-like shape is bound by bandwidth
    assert roofline_us("NVIDIA H200", 2.0 * 1 * 8192 * 8192, 2 * 8192 * 8192) == pytest.approx(2 * 8192 * 8192 / 4800e3, rel=1e-9)
