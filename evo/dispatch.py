"""Call the kernel table from a program: ``C = A·Bᵀ`` with the fastest kernel known for the shape.

    from evo.dispatch import Dispatcher, matmul
    d = Dispatcher.load()                 # kernels_out/<this GPU's name, spaces -> _>/table.json
    c = d.matmul(a, b)                    # a [M, K], b [N, K]: fp16, C-contiguous, CuPy arrays or torch CUDA tensors
    c = matmul(a, b)                      # the same through a lazily created default Dispatcher

Per shape, chosen once and cached:
* the shape is in the table and evo won there: evo's kernel (compiled once into ``<table>/cubins``, loaded once);
* the shape is in the table and a library won: cuBLAS (``cublasGemmEx``; rows won by cuBLASLt are served by
  cuBLAS too);
* the shape is not in the table: if the nearest table shape (log-distance of M, N, K) was won by evo, the evo
  winners of the nearest shapes whose ``requires`` accept this shape are tried in order, each checked once on
  this shape (random inputs against an fp32 reference and an exact {0,1} test, as in the search) before it is
  used; the first one that passes serves the shape. Otherwise, or when none passes, cuBLAS.
A kernel that fails to compile, load or check is never used: the shape falls back to cuBLAS, so the result is
never wrong. ``Dispatcher.explain(M, N, K)`` says what serves a shape and why.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import EvoError
from .kernel import KernelSource
from .problem import Problem

Fn = Callable[[Any, Any, Any], None]


@dataclass
class Plan:
    """What serves one shape."""

    kind: str  # "evo" (the shape's table winner), "library" (cuBLAS, table says a library wins),
    #            "general" (another shape's evo winner, checked on this shape), "cublas" (not in the table)
    shape: str
    source_shape: str = ""  # the table row whose kernel is used
    hash: str = ""
    reason: str = ""
    fn: Fn | None = field(default=None, repr=False)


_F16 = np.dtype(np.float16)


def validate(a: Any, b: Any) -> tuple[int, int, int]:
    """(M, N, K) of C = A·Bᵀ, or a one-line TypeError / ValueError."""
    try:  # the fast path: a few attribute reads (str(dtype) alone costs several microseconds)
        if a.dtype == _F16 and b.dtype == _F16 and a.ndim == 2 and b.ndim == 2 and a.flags.c_contiguous \
                and b.flags.c_contiguous:
            (m, k), (n, k2) = a.shape, b.shape
            if k == k2 and m and n and k:
                return m, n, k
    except (AttributeError, TypeError):
        pass
    return _validate_slow(a, b)


def _validate_slow(a: Any, b: Any) -> tuple[int, int, int]:
    for name, x, dims in (("A", a, "[M, K]"), ("B", b, "[N, K]")):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"matmul: {name} must be a CuPy array or a torch CUDA tensor, not {type(x).__name__}")
        if len(x.shape) != 2:
            raise ValueError(f"matmul: {name} must be 2-D {dims}, got shape {tuple(x.shape)}")
        if str(x.dtype) not in ("float16", "torch.float16"):
            raise TypeError(f"matmul: {name} must be float16, got {x.dtype}")
        flags = getattr(x, "flags", None)
        if flags is not None and not flags.c_contiguous:
            raise ValueError(f"matmul: {name} must be C-contiguous (row-major {dims}); pass cupy.ascontiguousarray({name.lower()})")
        if min(x.shape) < 1:
            raise ValueError(f"matmul: {name} has an empty dimension: shape {tuple(x.shape)}")
    (m, k), (n, k2) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: K differs: A is [M, K] = {list(a.shape)}, B is [N, K] = {list(b.shape)} (C = A·Bᵀ)")
    return int(m), int(n), int(k)


def log_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    return math.sqrt(sum((math.log2(x) - math.log2(y)) ** 2 for x, y in zip(a, b)))


class CupyBackend:
    """The GPU side of the dispatcher: CuPy arrays, cubins compiled with nvcc and loaded once, cuBLAS."""

    def __init__(self, device_id: int | None = None, cache_dir: str | Path | None = None):
        import cupy

        self.cupy = cupy
        self.device_id = cupy.cuda.runtime.getDevice() if device_id is None else device_id
        p = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        from .problem import arch_for_cc

        self.gpu_name = name
        self.gpu_key = name.replace(" ", "_")
        self.arch = arch_for_cc(p["major"], p["minor"])
        self.num_sms = p["multiProcessorCount"]
        self.smem_limit = p.get("sharedMemPerBlockOptin", 48 * 1024)
        self.cache_dir = cache_dir
        self._compiler = None
        self._cublas: Fn | None = None
        self.native = cupy.ndarray

    def adopt(self, x: Any) -> Any:
        """A torch tensor (or anything with __dlpack__) as a CuPy array, without a copy."""
        if not hasattr(x, "__dlpack__"):
            return x  # validate() says what is wrong with it
        try:
            return self.cupy.from_dlpack(x)
        except Exception:  # noqa: BLE001 - e.g. a CPU tensor or a NumPy array
            raise TypeError(f"matmul: inputs must live on the GPU (CuPy arrays or torch CUDA tensors), "
                            f"got a {type(x).__module__}.{type(x).__name__} that cannot be shared") from None

    def check_device(self, a: Any, b: Any) -> None:
        for name, x in (("A", a), ("B", b)):
            if x.device.id != self.device_id:
                raise ValueError(f"matmul: {name} is on GPU {x.device.id}, the dispatcher serves GPU {self.device_id}")

    def empty(self, m: int, n: int) -> Any:
        return self.cupy.empty((m, n), dtype=self.cupy.float16)

    def cublas(self) -> Fn:
        if self._cublas is None:
            from .baselines import cublas_gemm

            from cupy.cuda import cublas, device

            gemm, handle, cupy = cublas_gemm(), device.get_cublas_handle(), self.cupy

            def call(a: Any, b: Any, c: Any) -> None:
                cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)  # run where our kernels run
                gemm(a, b, c)

            self._cublas = call
        return self._cublas

    def load(self, ks: KernelSource, problem: Problem, cache_dir: Path) -> Fn:
        """Compile (or take from the cubin cache) and load the kernel for this shape; EvoError if it cannot."""
        from .compile import Compiler
        from .config import load_config
        from .gpu.launch import LoadedKernel

        if self._compiler is None:
            cfg = load_config(overrides={"compile": {"cache_dir": str(self.cache_dir or cache_dir)}})
            self._compiler = Compiler.from_config(cfg.compile)
        r = self._compiler.compile(ks, self.arch)
        if not r.ok:
            raise EvoError(f"kernel {ks.hash} does not compile for {self.arch}: {r.error}")
        return LoadedKernel(ks, r.cubin_path, problem, self.num_sms, self.smem_limit)

    def check(self, fn: Fn, problem: Problem) -> str:
        """'' if the kernel computes this shape right (random inputs + exact {0,1} test), else why not."""
        from .check import check_kernel
        from .config import load_config

        r = check_kernel(fn, problem, load_config().check, seed=12345)
        return "" if r.correct else r.error


class Dispatcher:
    def __init__(self, table: dict, table_dir: str | Path, backend: Any, verify: str = "general", general_tries: int = 3):
        """table: the parsed table.json; verify: "general" checks borrowed kernels on their new shape before use,
        "all" also checks each shape's own winner once, "none" trusts the table (borrowed kernels are still checked)."""
        if verify not in ("general", "all", "none"):
            raise EvoError(f"verify must be general, all or none, not {verify!r}")
        self.table_dir = Path(table_dir)
        self.backend = backend
        self.verify = verify
        self.general_tries = general_tries
        self.gpu = table.get("gpu", "")
        self.rows: dict[tuple[int, int, int], dict] = {}
        for r in table.get("rows", []):
            self.rows[(int(r["m"]), int(r["n"]), int(r["k"]))] = r
        self._sources: dict[str, KernelSource | None] = {}
        self._plans: dict[tuple[int, int, int], Plan] = {}
        self._native = getattr(backend, "native", None)

    @classmethod
    def load(cls, table_dir: str | Path | None = None, backend: Any = None, **kw: Any) -> "Dispatcher":
        """The table of the current GPU: <table_dir or $EVO_KERNELS or kernels_out>/<GPU name>/table.json."""
        backend = backend or CupyBackend()
        if table_dir is None:
            table_dir = Path(os.environ.get("EVO_KERNELS", "kernels_out")) / backend.gpu_key
        path = Path(table_dir) / "table.json"
        try:
            table = json.loads(path.read_text())
        except OSError:
            raise EvoError(f"no kernel table for {backend.gpu_key} at {path}; run python -m evo.sweep (or evo.search) "
                           "on this GPU, or pass table_dir") from None
        except ValueError as e:
            raise EvoError(f"{path} is not valid JSON: {e}") from None
        if table.get("gpu") and table["gpu"] != backend.gpu_key:
            raise EvoError(f"{path} is the table of {table['gpu']}, this GPU is {backend.gpu_key}")
        return cls(table, table_dir, backend, **kw)

    # --- choosing ---------------------------------------------------------------------------------------
    def _source(self, row: dict) -> KernelSource | None:
        h = row.get("hash") or ""
        if h not in self._sources:
            ks = None
            if row.get("kernel_path"):
                try:
                    ks = KernelSource.parse((self.table_dir.parent / row["kernel_path"]).read_text())
                except (OSError, EvoError):
                    ks = None
            self._sources[h] = ks
        return self._sources[h]

    def _accepts(self, ks: KernelSource, p: Problem) -> bool:
        try:
            arch = getattr(self.backend, "arch", "")
            if arch and arch not in ks.meta.archs:
                return False
            if not ks.accepts(p, self.backend.num_sms):
                return False
            ks.launch(p, self.backend.num_sms)
            return True
        except (EvoError, ValueError, ZeroDivisionError, TypeError):
            return False

    def candidates(self, m: int, n: int, k: int) -> list[tuple[str, dict]]:
        """What could serve (M, N, K), best first: [(kind, row)]; cuBLAS is always the last resort."""
        row = self.rows.get((m, n, k))
        if row is not None:
            if row.get("winner") == "evo" and row.get("kernel_path"):
                return [("evo", row)]
            return []
        p = Problem(m, n, k)
        near = sorted(self.rows.items(), key=lambda kv: log_distance(kv[0], (m, n, k)))
        if not near or near[0][1].get("winner") != "evo":
            return []  # the region belongs to the libraries
        out = []
        seen = set()
        for _, r in near:
            if len(out) >= self.general_tries:
                break
            if r.get("winner") != "evo" or not r.get("kernel_path") or r.get("hash") in seen:
                continue
            seen.add(r.get("hash"))
            ks = self._source(r)
            if ks is not None and self._accepts(ks, p):
                out.append(("general", r))
        return out

    def _plan(self, m: int, n: int, k: int) -> Plan:
        p = Problem(m, n, k)
        key = p.key
        reasons = []
        for kind, row in self.candidates(m, n, k):
            ks = self._source(row)
            if ks is None:
                reasons.append(f"{row['shape']}: kernel file missing")
                continue
            try:
                fn = self.backend.load(ks, p, self.table_dir / "cubins")
            except EvoError as e:
                reasons.append(f"{row['shape']}: {e}")
                continue
            if kind == "general" or self.verify == "all":
                why = self.backend.check(fn, p)
                if why:
                    reasons.append(f"{row['shape']}'s kernel fails on {key}: {why}")
                    continue
            return Plan(kind, key, row["shape"], row.get("hash", ""),
                        "table winner" if kind == "evo" else f"evo winner of {row['shape']}, checked on {key}", fn)
        row = self.rows.get((m, n, k))
        if row is not None and row.get("winner") != "evo":
            return Plan("library", key, key, reason=f"{row.get('winner')} wins in the table; served by cuBLAS",
                        fn=self.backend.cublas())
        why = "; ".join(reasons) if reasons else ("not in the table, and the nearest table shape is won by a library"
                                                  if row is None else "")
        return Plan("cublas", key, reason=why or "no usable kernel", fn=self.backend.cublas())

    def plan(self, m: int, n: int, k: int) -> Plan:
        key = (m, n, k)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(m, n, k)
        return plan

    def explain(self, m: int, n: int, k: int) -> str:
        pl = self.plan(m, n, k)
        return f"{pl.shape}: {pl.kind}" + (f" {pl.hash[:10]}" if pl.hash else "") + f" ({pl.reason})"

    # --- the call -----------------------------------------------------------------------------------------
    def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
        """C = A·Bᵀ (A [M, K], B [N, K], fp16, C-contiguous); returns a new [M, N] fp16 array (or fills `out`)."""
        foreign = self._native is not None and not isinstance(a, self._native)
        if foreign:
            a, b = self.backend.adopt(a), self.backend.adopt(b)
            if out is not None:
                out = self.backend.adopt(out)
        m, n, k = validate(a, b)
        if hasattr(self.backend, "check_device"):
            self.backend.check_device(a, b)
        plan = self._plans.get((m, n, k)) or self.plan(m, n, k)
        if out is None:
            c = self.backend.empty(m, n)
        else:
            if tuple(out.shape) != (m, n) or out.dtype != _F16 or not out.flags.c_contiguous:
                raise ValueError(f"matmul: out must be a C-contiguous float16 [{m}, {n}] array, got {tuple(out.shape)} {out.dtype}")
            c = out
        plan.fn(a, b, c)  # type: ignore[misc]
        if foreign:
            import torch  # only reached with torch inputs

            return torch.from_dlpack(c)
        return c


_default: Dispatcher | None = None


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·Bᵀ through a Dispatcher for the current GPU, created on first use."""
    global _default
    if _default is None:
        _default = Dispatcher.load()
    return _default.matmul(a, b, out)
