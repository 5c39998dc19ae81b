"""Typed records that flow between the pipeline stages."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CompileResult:
    hash: str
    arch: str
    ok: bool
    cubin_path: str = ""
    log: str = ""
    registers: int = 0
    smem_static: int = 0
    spill_bytes: int = 0
    stack_bytes: int = 0
    seconds: float = 0.0
    error: str = ""  # one line; set when ok is False
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckResult:
    correct: bool
    error: str = ""  # why it failed: one line
    rel_err: float = 0.0
    max_abs_err: float = 0.0
    checks: int = 0


@dataclass
class Timing:
    """Device time of one contender, measured side by side with others."""

    name: str
    median_us: float
    min_us: float
    p90_us: float
    reps: int
    samples: list[float] = field(default_factory=list, repr=False)

    @property
    def spread(self) -> float:
        """(p90 - min) / median: the noise of this measurement."""
        return (self.p90_us - self.min_us) / self.median_us if self.median_us else 0.0


@dataclass
class EvalResult:
    """What the GPU said about one candidate on one problem."""

    hash: str
    ok: bool  # compiled, ran and was correct
    stage: str  # where it stopped: "check", "time", "crash", "timeout", "done"
    error: str = ""
    check: CheckResult | None = None
    time_us: float = 0.0
    spread: float = 0.0
    cublas_us: float = 0.0  # cuBLAS timed interleaved with this candidate
    seconds: float = 0.0
    measured_us: float = 0.0  # the raw median where time_us was scaled for drift (evo/drift.py); 0 = not scaled
    gpu_state: str = ""  # what the GPU reported after a window where it ran slow (evo/gpu/gpu_state.py); "" = none was


LIBRARIES = ("cublas", "cublaslt_heuristic", "cublaslt_autotune")  # the library baselines, in the tables' order


@dataclass
class BaselineResult:
    library: str  # one of LIBRARIES
    time_us: float
    spread: float = 0.0
    detail: str = ""


@dataclass
class Individual:
    """A candidate with what is known of it on the current problem."""

    hash: str
    family: str
    params: dict[str, Any]
    source: str
    parent: str = ""
    proposer: str = ""
    idea: str = ""
    compiled: bool | None = None
    correct: bool | None = None
    time_us: float = 0.0
    cublas_us: float = 0.0
    error: str = ""
    registers: int = 0
    smem: int = 0
    compile_log: str = ""

    @property
    def fitness(self) -> float:
        """Higher is better; failed or unmeasured candidates rank last."""
        return 1.0 / self.time_us if self.correct and self.time_us > 0 else 0.0


@dataclass(frozen=True)
class Sample:
    """One measurement of an instance on a shape (the archive's, or shipped beside a table: evo.measurements)."""

    shape: str
    hash: str
    family: str
    params: dict[str, Any]
    time_us: float
    ok: bool = True  # False: failed to compile, check or time on that shape
