"""GPU datasheet figures: the vendor's dense fp16 tensor-core peak, DRAM bandwidth, SM count, and a launch floor.

These are what the hardware is specified to do, not what a library reaches: the report's compute roof and the
LLM prompts quote them next to the measured library rate (cuBLAS's own 8192³ rate is a measurement, not a roof).

    from evo.datasheet import datasheet, peak_tflops_fp16_dense, dram_bandwidth, launch_floor_us
    peak_tflops_fp16_dense("NVIDIA H200")   # 989.4   (TFLOP/s, fp16 in, fp32 accumulate, no sparsity)
    dram_bandwidth("NVIDIA_H200")           # 4800.0  (GB/s)
    launch_floor_us("NVIDIA H200")          # 3.42    (µs: an empty kernel between CUDA events, measured)

Names are matched loosely ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3", "h100 sxm" all find the H100 SXM).
An unknown GPU gives ``None`` (``datasheet``) or an EvoError (the single-figure functions); nothing is guessed.

Sources: NVIDIA's product datasheets (H100 / H200 / A100 Tensor Core GPU, GH200 Grace Hopper Superchip), dense
figures (the datasheets print sparse figures with an asterisk: these are half of them). The launch floor is a
measurement (docs/perf-flush.md, H200: an empty kernel between CUDA events after a read flush, 3.42 µs); for
GPUs where it was not measured ``LAUNCH_FLOOR_DEFAULT_US`` is that same figure, flagged as not measured there.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import EvoError

LAUNCH_FLOOR_DEFAULT_US = 3.42  # H200, docs/perf-flush.md; the order of magnitude on any recent data-centre GPU


@dataclass(frozen=True)
class Datasheet:
    model: str  # canonical model name, e.g. "H200 SXM"
    peak_tflops_fp16_dense: float  # fp16 inputs, fp32 accumulation, dense (no 2:4 sparsity)
    dram_gbs: float  # DRAM (HBM / GDDR) bandwidth, GB/s (1e9 bytes per second)
    sms: int
    launch_floor_us: float = LAUNCH_FLOOR_DEFAULT_US
    launch_floor_measured: bool = False  # True where launch_floor_us was measured on this model


# (pattern over the normalised name, Datasheet); the first match wins, so the more specific come first.
_SHEETS: tuple[tuple[str, Datasheet], ...] = (
    (r"gh200.*(144|hbm3e)", Datasheet("GH200 144GB HBM3e", 989.4, 4900.0, 132)),
    (r"gh200", Datasheet("GH200 96GB HBM3", 989.4, 4000.0, 132)),
    (r"h200.*nvl", Datasheet("H200 NVL", 835.5, 4800.0, 132)),
    (r"h200", Datasheet("H200 SXM", 989.4, 4800.0, 132, 3.42, True)),
    (r"h100.*nvl", Datasheet("H100 NVL", 835.5, 3900.0, 132)),
    (r"h100.*pcie", Datasheet("H100 PCIe", 756.5, 2000.0, 114)),
    (r"h100", Datasheet("H100 SXM", 989.4, 3350.0, 132)),
    (r"a100.*(pcie.*80|80.*pcie)", Datasheet("A100 80GB PCIe", 312.0, 1935.0, 108)),
    (r"a100.*pcie", Datasheet("A100 40GB PCIe", 312.0, 1555.0, 108)),
    (r"a100.*80", Datasheet("A100 80GB SXM", 312.0, 2039.0, 108)),
    (r"a100", Datasheet("A100 40GB SXM", 312.0, 1555.0, 108)),
)


def _norm(gpu_name: str) -> str:
    return " ".join(str(gpu_name).replace("_", " ").replace("-", " ").lower().split())


def datasheet(gpu_name: str) -> Datasheet | None:
    """The datasheet of a GPU by its reported name (spaces or underscores), or None if it is not known."""
    name = _norm(gpu_name)
    for pattern, sheet in _SHEETS:
        if re.search(pattern, name):
            return sheet
    return None


def _need(gpu_name: str) -> Datasheet:
    ds = datasheet(gpu_name)
    if ds is None:
        known = ", ".join(s.model for _, s in _SHEETS)
        raise EvoError(f"no datasheet for GPU {gpu_name!r}; known: {known}")
    return ds


def peak_tflops_fp16_dense(gpu_name: str) -> float:
    """Dense fp16 tensor-core peak with fp32 accumulation, TFLOP/s (EvoError for an unknown GPU)."""
    return _need(gpu_name).peak_tflops_fp16_dense


def dram_bandwidth(gpu_name: str) -> float:
    """DRAM bandwidth in GB/s (EvoError for an unknown GPU)."""
    return _need(gpu_name).dram_gbs


def launch_floor_us(gpu_name: str) -> float:
    """Time an empty kernel takes between CUDA events, µs: measured where known, else the H200 figure."""
    ds = datasheet(gpu_name)
    return ds.launch_floor_us if ds is not None else LAUNCH_FLOOR_DEFAULT_US


def roofline_us(gpu_name: str, flops: float, min_bytes: float) -> float:
    """max(flops / datasheet peak, bytes / datasheet bandwidth) in µs: no kernel can be faster."""
    ds = _need(gpu_name)
    return max(flops / (ds.peak_tflops_fp16_dense * 1e12), min_bytes / (ds.dram_gbs * 1e9)) * 1e6
