"""The GEMM problem: shape, layout and data types, and its roofline bound."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .errors import EvoError

LAYOUTS = ("TN",)  # A[M,K] row-major, B[N,K] row-major: C = A @ B.T (cuBLASLt "TN")
MAX_DIM = 1 << 20  # 1,048,576: anything larger is surely a typo
MAX_BYTES = 64 << 30  # A, B and C together must fit in 64 GiB


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    layout: str = "TN"
    dtype: str = "float16"
    acc_dtype: str = "float32"

    @property
    def key(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def min_bytes(self) -> float:
        """Fewest bytes moved through device memory: A and B read once, C written once."""
        return 2.0 * (self.m * self.k + self.n * self.k + self.m * self.n)

    def tflops(self, us: float) -> float:
        return self.flops / (us * 1e-6) / 1e12 if us > 0 else 0.0

    def roofline_us(self, peak_tflops: float, bw_gbs: float) -> float:
        """max(2MNK / P, bytes / BW) in microseconds."""
        t_compute = self.flops / (peak_tflops * 1e12)
        t_memory = self.min_bytes / (bw_gbs * 1e9)
        return max(t_compute, t_memory) * 1e6


_SEP = re.compile(r"\s*[x,X×]\s*")


def parse_shape(text: str, layout: str = "TN") -> Problem:
    """Parse 'MxNxK' or 'M,N,K' into a Problem; raise EvoError with one line otherwise."""
    raw = str(text).strip()
    parts = _SEP.split(raw) if raw else []
    if len(parts) != 3:
        raise EvoError(f"malformed shape {text!r}: expected MxNxK (or M,N,K), e.g. 4096x4096x1024")
    dims = []
    for p in parts:
        if not re.fullmatch(r"\d+", p):
            raise EvoError(f"malformed shape {text!r}: {p!r} is not a positive integer")
        dims.append(int(p))
    m, n, k = dims
    if min(dims) < 1:
        raise EvoError(f"malformed shape {text!r}: every dimension must be at least 1")
    if max(dims) > MAX_DIM:
        raise EvoError(f"shape {text!r} has a dimension over {MAX_DIM}")
    if layout not in LAYOUTS:
        raise EvoError(f"unknown layout {layout!r}; supported: {', '.join(LAYOUTS)}")
    p = Problem(m, n, k, layout)
    if p.min_bytes > MAX_BYTES:
        raise EvoError(f"shape {text!r} needs {p.min_bytes / 2**30:.0f} GiB for A, B and C; the limit is {MAX_BYTES >> 30} GiB")
    return p


@dataclass(frozen=True)
class GpuInfo:
    """What the evaluating GPU reported about itself."""

    name: str
    arch: str  # compile target, e.g. "sm_90a"
    cc: tuple[int, int]
    sm_count: int
    l2_bytes: int
    smem_per_block_optin: int
    driver: str
    cuda_runtime: str
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        return self.name.replace(" ", "_")


def arch_for_cc(major: int, minor: int) -> str:
    if (major, minor) == (9, 0):
        return "sm_90a"
    return f"sm_{major}{minor}"


def log_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """How far apart two shapes (M, N, K) are: the Euclidean distance of their (log2 M, log2 N, log2 K)."""
    return math.sqrt(sum((math.log2(x) - math.log2(y)) ** 2 for x, y in zip(a, b)))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def wave_efficiency(tiles: int, sms: int) -> float:
    if tiles <= 0:
        return 0.0
    return (tiles / sms) / math.ceil(tiles / sms)
