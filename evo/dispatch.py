"""Call the kernel table from a program: ``C = A·Bᵀ``, never slower than the best library (beyond noise).

    from evo.dispatch import Dispatcher, matmul
    d = Dispatcher.load()                 # kernels_out/<this GPU's name, spaces -> _>/table.json
    c = d.matmul(a, b)                    # a [M, K], b [N, K]: fp16, C-contiguous, CuPy arrays or torch CUDA tensors
    c = matmul(a, b)                      # the same through a lazily created default Dispatcher
    print(d.explain(4096, 4096, 1024))    # what serves a shape, and the measured ratio behind it

Per shape, chosen once per process and cached:
* in the table, evo won beyond the row's noise band: evo's kernel (compiled once into ``<table>/cubins``);
* in the table, otherwise: the library that won it. cuBLASLt rows run cuBLASLt with the algorithm that won
  (stored in the table as ``library_algorithm``), else the heuristic's top-1 for a heuristic row, else an
  algorithm autotuned once on this GPU (persisted); cuBLAS rows run ``cublasGemmEx``. An evo win inside the
  noise band is a tie and goes to the library, except a tie whose evo kernel was ahead by more than
  ``dispatch.noise_floor`` (its lead hidden by wide spreads, as on small shapes): with ``dispatch.measure_ties``
  that row is decided on this GPU as a shape not in the table is (below), its own kernel the one candidate, and
  the decision is kept per (GPU, driver, shape, kernel).
* not in the table: evo kernels of the nearest table shapes whose ``requires`` accept it (a kernel of a family
  that compiles the shape in is rendered again from its template with this shape's constants) are checked on it
  (random inputs against an fp32 reference and an exact {0,1} test); those that pass are timed on it side by side
  with cuBLAS and every planned cuBLASLt algorithm (CUDA events, L2 flushed, all calls interleaved in shuffled
  order, ``dispatch.measure_reps`` repetitions, medians); nvmath's own autotune pick is one of those algorithms.
  A borrowed kernel serves only when it beats the fastest library beyond the noise band; else the libraries
  settle it: every library call whose paired ratio to the fastest (median over rounds) is within the noise
  (``dispatch.settle_floor``, or the ratio's bootstrap 95 % half-width where wider) is a near-tie, and the near-ties
  (at most ``dispatch.settle_max``, nvmath's pick kept) are timed again, alone, for ``dispatch.settle_reps`` rounds
  (bounded by ``dispatch.settle_budget_s`` of device time); the fastest median of that second round serves (a
  60-round decision and a 100-round comparison of the same algorithms had picked different ones, 1.5 % apart:
  docs/perf-dispatch.md). A clear winner is not timed again. Without a second round (``settle_reps: 0``) cuBLASLt's best algorithm within
  ``dispatch.library_tie`` of cuBLAS counts as a tie and serves. The decision is persisted per (GPU, driver,
  shape) (evo.decisions, ``~/.cache/evo/dispatch.json``), so it is measured once.

"Autotuned" means one thing everywhere here: every planned cuBLASLt algorithm timed interleaved with the others
(flushed, medians of ``measure_reps``), the fastest kept; nvmath's own autotune (5 unflushed iterations) chose
different algorithms from run to run on the same shape, and a shape served by a noisy pick lost up to 2.8 %.
A kernel that fails to compile, load or check is never used, so the result is never wrong.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import noise
from .config import DispatchConfig
from .decisions import METHOD, Decision, Decisions, key as decision_key
from .errors import EvoError, NoGpuError
from .families import Family, load_families, rerendered
from .kernel import KernelSource
from .problem import Problem, log_distance

Fn = Callable[[Any, Any, Any], None]
_SAME_DEVICE = contextlib.nullcontext()  # reusable: the context of a backend whose GPU is current already


@dataclass
class Plan:
    """What serves one shape."""

    kind: str  # "evo" (the shape's table winner, or its tied kernel measured faster here), "library" (a table row a
    #            library won or tied),
    #            "general" (another shape's evo winner, checked and timed on this shape), "cublas" / "cublaslt"
    #            (a shape not in the table, served by the library that measured fastest, or cuBLAS by default)
    shape: str
    source_shape: str = ""  # the table row whose kernel is used
    hash: str = ""
    library: str = ""  # the library that serves: cublas, cublaslt_heuristic, cublaslt_autotune, cublaslt
    reason: str = ""
    ratio: float = 0.0  # best library µs / served kernel µs, where measured (table or here)
    fn: Fn | None = field(default=None, repr=False)


class DispatchSettings(DispatchConfig):
    """dispatch: in evo/defaults.yaml (the values and their meaning live there; the fields are evo.config's
    DispatchConfig)."""

    @classmethod
    def from_config(cls, **overrides: Any) -> "DispatchSettings":
        """The config's dispatch section (evo/defaults.yaml, merged), with these fields replaced."""
        from .config import load_config

        return cls(**{**dataclasses.asdict(load_config().dispatch), **overrides})


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


def row_band(row: dict, floor: float) -> float:
    """The noise band of a table row: exported with the table, else from its spreads, else the floor."""
    if row.get("noise_band"):
        return max(float(row["noise_band"]), 0.0)
    return noise.band(row.get("spread") or 0.0, row.get("best_library_spread") or 0.0, floor=floor)


def row_algorithm(row: dict, library: str) -> dict:
    """The stored cuBLASLt algorithm of a row's library (table column library_algorithms), or {}."""
    algos = row.get("library_algorithms") or {}
    if isinstance(algos, str):
        try:
            algos = json.loads(algos) if algos else {}
        except ValueError:
            algos = {}
    a = algos.get(library) if isinstance(algos, dict) else None
    return a if isinstance(a, dict) else {}


def pick_library(t: dict[str, tuple[float, float]], tie: float) -> tuple[str, str]:
    """From one interleaved measurement ({"cublas": (median µs, spread), "cublaslt:<i>": ..., ...}): the library
    that serves ("cublas" or "cublaslt") and cuBLASLt's fastest algorithm ("" where none was timed). cuBLASLt's
    fastest within `tie` of cuBLAS is a tie and serves (the library that is the best more often)."""
    lts = [n for n in t if n.startswith("cublaslt")]
    lt_name = min(lts, key=lambda n: t[n][0]) if lts else ""
    if not lt_name:
        return "cublas", ""
    if "cublas" not in t or t[lt_name][0] <= t["cublas"][0] * (1.0 + tie):
        return "cublaslt", lt_name
    return "cublas", lt_name


def medians(samples: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """{name: (median µs, spread)} of per-round samples (spread = (p90 - min) / median, as evo.records.Timing)."""
    out = {}
    for name, xs in samples.items():
        a = np.asarray(xs, dtype=np.float64)
        med = float(np.median(a))
        out[name] = (med, float((np.percentile(a, 90) - a.min()) / med) if med > 0 else 0.0)
    return out


@dataclass(frozen=True)
class NearTie:
    """A library call whose paired ratio to the fastest (median over rounds of its µs / the fastest's) is inside
    the noise: max(settle_floor, the bootstrap 95 % half-width of that median)."""

    name: str
    ratio: float
    noise: float


def near_ties(samples: dict[str, list[float]], floor: float, cap: int, keep: str = "") -> list[NearTie]:
    """The contenders of a second round, from one interleaved measurement of library calls (per-round µs): the
    fastest median first, then every other call within the noise of it, nearest first, at most `cap` (at least 2);
    `keep` (nvmath's autotune pick) stays when it is within the noise, in place of the farthest. One entry means a
    clear winner: no second round."""
    if not samples:
        return []
    med = {n: float(np.median(v)) for n, v in samples.items()}
    best = min(med, key=lambda n: med[n])
    ties = [NearTie(best, 1.0, 0.0)]
    for name in sorted(samples, key=lambda n: med[n]):
        if name == best:
            continue
        r, ci = noise.paired_ratio(samples[name], samples[best])
        band = max(floor, ci)
        if r <= 1.0 + band:
            ties.append(NearTie(name, r, band))
    cap = max(2, cap)
    if len(ties) > cap:
        kept = next((t for t in ties if t.name == keep), None)
        ties = ties[:cap]
        if kept is not None and kept not in ties:
            ties[-1] = kept
    return ties


def lib_label(lib: str) -> str:
    return {"cublas": "cuBLAS", "cublaslt_heuristic": "cuBLASLt (heuristic)", "cublaslt_autotune": "cuBLASLt (autotuned)",
            "cublaslt": "cuBLASLt"}.get(lib, lib)


class CupyBackend:
    """The GPU side of the dispatcher: CuPy arrays, cubins compiled with nvcc and loaded once, cuBLAS, cuBLASLt."""

    def __init__(self, device_id: int | None = None, cache_dir: str | Path | None = None, lt_algorithms: int = 8,
                 tune_reps: int = 60, stream_instances: int = 8):
        try:
            import cupy

            device_id = cupy.cuda.runtime.getDevice() if device_id is None else device_id
            p = cupy.cuda.runtime.getDeviceProperties(device_id)
        except ImportError:
            raise NoGpuError("evo.dispatch needs CuPy and a CUDA GPU: pip install 'evo[gpu]'") from None
        except Exception as e:  # noqa: BLE001 - CUDARuntimeError without a driver or a device
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise NoGpuError(f"evo.dispatch needs a CUDA GPU; none is usable here ({type(e).__name__}: {first})") from None
        self.cupy = cupy
        self.device_id = device_id
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        from .problem import arch_for_cc

        self.gpu_name = name
        self.gpu_key = name.replace(" ", "_")
        self.arch = arch_for_cc(p["major"], p["minor"])
        self.num_sms = p["multiProcessorCount"]
        self.smem_limit = p.get("sharedMemPerBlockOptin", 48 * 1024)
        self.l2_bytes = int(p.get("l2CacheSize", 50 << 20))
        v = cupy.cuda.runtime.driverGetVersion()
        self.driver = f"{v // 1000}.{v % 1000 // 10}"
        self.cache_dir = cache_dir
        self.lt_algorithms = lt_algorithms
        self.tune_reps = tune_reps
        self.stream_instances = stream_instances
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

    def on_device(self) -> Any:
        """A context in which CUDA work goes to this backend's GPU: its module loads, allocations and launches (nothing
        to switch where it is the current device already)."""
        if self.cupy.cuda.runtime.getDevice() == self.device_id:
            return _SAME_DEVICE
        return self.cupy.cuda.Device(self.device_id)

    def per_stream(self, first: Fn, make: Callable[[], Fn]) -> Fn:
        """`first`, with an instance of its own (`make`) for every further CUDA stream that calls it: a kernel's
        workspace or a cuBLASLt call's is never shared by two streams at once (evo.stream_local)."""
        from .stream_local import StreamLocal

        cupy = self.cupy
        return StreamLocal(first, make, lambda: cupy.cuda.get_current_stream().ptr,
                           cupy.cuda.runtime.streamIsCapturing, self.stream_instances)

    def cublas(self) -> Fn:
        """cublasGemmEx on the current stream through evo.ltgemm.CublasGemm (nvmath's bindings, a handle of our
        own): capture-safe, unlike CuPy's cuBLAS wrappers, which refuse a capturing stream."""
        if self._cublas is None:
            from .ltgemm import CublasGemm

            try:
                self._cublas = CublasGemm(self.device_id)
            except ImportError:
                raise NoGpuError("evo.dispatch needs nvmath-python for cuBLAS and cuBLASLt: pip install 'evo[gpu]'") from None
        return self._cublas

    def cublaslt(self, problem: Problem, config: dict | None, tune: bool) -> tuple[Fn, dict, str]:
        """cuBLASLt for this shape: the algorithm with `config` if planned, else autotuned here (tune), else the
        heuristic's top-1. Returns (call, the algorithm's config, how it was chosen); EvoError if unavailable."""
        from .ltgemm import LtGemm, algorithm_config

        try:
            lt = LtGemm(problem.m, problem.n, problem.k, limit=self.lt_algorithms)
            alg, how = (lt.find(config), "the stored algorithm") if config else (None, "")
            if alg is None and tune:
                algs = lt.algorithms
                t = medians(self.time(problem, {str(i): lt.bind(a) for i, a in enumerate(algs)}, self.tune_reps))
                alg = algs[int(min(t, key=lambda i: t[i][0]))]
                how = "autotuned on this GPU" + (" (the stored one is not planned here)" if config else "")
            if alg is None:
                alg, how = lt.heuristic, "the heuristic's top-1" + (" (the stored one is not planned here)" if config else "")
            return self.per_stream(lt.bind(alg), lambda: lt.bind(alg, own_workspace=True)), algorithm_config(alg), how
        except ImportError as e:
            raise EvoError(f"cuBLASLt through nvmath-python is not available ({e})") from None
        except EvoError:
            raise
        except Exception as e:  # noqa: BLE001 - a cuBLASLt / nvmath error: the caller falls back to cuBLAS
            raise EvoError(f"cuBLASLt failed for {problem.key}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None

    def cublaslt_algorithms(self, problem: Problem) -> tuple[list[tuple[Fn, dict]], int]:
        """Every planned cuBLASLt algorithm of this shape as (call, config), the heuristic's top-1 first, and the
        index among them of nvmath's own autotune pick (``LtGemm.autotune``, what bench.dispatch_compare's
        "cuBLASLt autotuned" column runs); a pick outside the plan is appended, so it is always a contender."""
        from .ltgemm import LtGemm, algorithm_config

        try:
            lt = LtGemm(problem.m, problem.n, problem.k, limit=self.lt_algorithms)
            planned = lt.algorithms  # the heuristic's order (autotune reorders lt.algorithms)
            try:
                pick = lt.autotune()
            except Exception:  # noqa: BLE001 - without nvmath's pick the planned algorithms are still timed
                pick = None
            idx = next((i for i, a in enumerate(planned) if a is pick), -1)
            if idx < 0 and pick is not None:
                planned.append(pick)
                idx = len(planned) - 1
            return [(self.per_stream(lt.bind(a), lambda a=a: lt.bind(a, own_workspace=True)), algorithm_config(a))
                    for a in planned], idx
        except ImportError as e:
            raise EvoError(f"cuBLASLt through nvmath-python is not available ({e})") from None
        except Exception as e:  # noqa: BLE001 - a cuBLASLt / nvmath error: the caller measures cuBLAS alone
            raise EvoError(f"cuBLASLt failed for {problem.key}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None

    def compiler(self, cache_dir: Path) -> Any:
        """The nvcc front end, made once, caching cubins under this backend's cache_dir or else cache_dir."""
        if self._compiler is None:
            from .compile import Compiler
            from .config import load_config

            cfg = load_config(overrides={"compile": {"cache_dir": str(self.cache_dir or cache_dir)}})
            self._compiler = Compiler.from_config(cfg.compile)
        return self._compiler

    def precompile(self, sources: list[KernelSource], cache_dir: Path) -> list[str]:
        """Compile these kernels side by side on every core into the cubin cache `load` reads; one line for each
        that does not compile."""
        res = self.compiler(cache_dir).compile_many([(ks, self.arch) for ks in sources])
        return [f"kernel {r.hash} does not compile for {self.arch}: {r.error}" for r in res if not r.ok]

    def load(self, ks: KernelSource, problem: Problem, cache_dir: Path) -> Fn:
        """Compile (or take from the cubin cache) and load the kernel for this shape; EvoError if it cannot. Each
        further CUDA stream that calls it loads it again, with a workspace of its own (per_stream)."""
        from .gpu.host_launch import load_kernel

        r = self.compiler(cache_dir).compile(ks, self.arch)
        if not r.ok:
            raise EvoError(f"kernel {ks.hash} does not compile for {self.arch}: {r.error}")
        first = load_kernel(ks, r.cubin_path, problem, self.num_sms, self.smem_limit)
        return self.per_stream(first, lambda: load_kernel(ks, r.cubin_path, problem, self.num_sms, self.smem_limit))

    def check(self, fn: Fn, problem: Problem) -> str:
        """'' if the kernel computes this shape right (random inputs + exact {0,1} test), else why not."""
        from .check import check_kernel
        from .config import load_config

        r = check_kernel(fn, problem, load_config().check, seed=12345)
        return "" if r.correct else r.error

    def time(self, problem: Problem, calls: dict[str, Fn], reps: int) -> dict[str, list[float]]:
        """{name: µs per round} of each call on this shape (index i = round i, every call once per round): CUDA
        events, L2 flushed (read) before every call, calls interleaved in shuffled order (evo.timing.Timer, as the
        search times candidates)."""
        from .timing import Timer

        cupy = self.cupy
        rs = cupy.random.RandomState(4242)
        a = rs.standard_normal((problem.m, problem.k), dtype=cupy.float32).astype(cupy.float16)
        b = rs.standard_normal((problem.n, problem.k), dtype=cupy.float32).astype(cupy.float16)
        outs = {name: cupy.empty((problem.m, problem.n), dtype=cupy.float16) for name in calls}
        timer = Timer(self.l2_bytes, flush=True, flush_mode="read", sms=self.num_sms)
        try:
            res = timer.measure({name: (lambda fn=fn, c=outs[name]: fn(a, b, c)) for name, fn in calls.items()},
                                reps=max(3, reps), warmup=3)
        finally:
            del timer
        return {name: list(t.samples) for name, t in res.items()}


class Dispatcher:
    def __init__(self, table: dict, table_dir: str | Path, backend: Any, verify: str = "general",
                 general_tries: int | None = None, settings: DispatchSettings | None = None,
                 decisions: Decisions | None = None):
        """table: the parsed table.json; verify: "general" checks borrowed kernels on their new shape before use,
        "all" also checks each shape's own winner once, "none" trusts the table (borrowed kernels are still checked)."""
        if verify not in ("general", "all", "none"):
            raise EvoError(f"verify must be general, all or none, not {verify!r}")
        self.settings = settings or DispatchSettings.from_config()
        self.table_dir = Path(table_dir)
        self.backend = backend
        self.verify = verify
        self.general_tries = self.settings.general_tries if general_tries is None else general_tries
        self.decisions = decisions or Decisions(self.settings.decisions or None)
        self.gpu = table.get("gpu", "")
        self.rows: dict[tuple[int, int, int], dict] = {}
        for r in table.get("rows", []):
            self.rows[(int(r["m"]), int(r["n"]), int(r["k"]))] = r
        self._sources: dict[str, KernelSource | None] = {}
        self._rendered: dict[tuple[str, str], KernelSource | None] = {}  # (row's hash, shape): its kernel rendered for it
        self._families: list[Family] | None = None  # the template families, loaded on first need
        self._plans: dict[tuple[int, int, int], Plan] = {}
        self._native = getattr(backend, "native", None)
        self._on_device: Callable[[], Any] = getattr(backend, "on_device", None) or (lambda: _SAME_DEVICE)
        self._planning = threading.RLock()

    @classmethod
    def load(cls, table_dir: str | Path | None = None, backend: Any = None, device_id: int | None = None,
             **kw: Any) -> "Dispatcher":
        """The table of GPU `device_id` (the current GPU by default): <table_dir or $EVO_KERNELS or the config's
        paths.out (kernels_out)>/<GPU name>/table.json."""
        settings = kw.pop("settings", None) or DispatchSettings.from_config()
        backend = backend or CupyBackend(device_id, lt_algorithms=settings.lt_algorithms, tune_reps=settings.measure_reps,
                                         stream_instances=settings.stream_instances)
        if table_dir is None:
            from .config import load_config

            table_dir = Path(os.environ.get("EVO_KERNELS") or load_config().paths.out) / backend.gpu_key
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
        return cls(table, table_dir, backend, settings=settings, **kw)

    def precompile(self) -> list[str]:
        """Compile the kernel of every row evo serves now and of every tie measured on first use (`measures_tie`),
        side by side on all cores, so that no shape's first call waits on nvcc (the H200 table's 99 distinct kernels:
        50 s on 16 cores; one after another, on first calls, they took longer than the 200 s its GPU test was given,
        docs/perf-hopper.md Run 69); a cubin already cached is reused. Returns one line for each kernel that does not
        compile (its shape is then served by the library, as on a first call)."""
        sources = {ks.hash: ks for r in self.rows.values()
                   if (r.get("winner") == "evo" or self.measures_tie(r)) and (ks := self._source(r)) is not None}
        return self.backend.precompile(list(sources.values()), self.table_dir / "cubins") if sources else []

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
        return ks.serves(p, getattr(self.backend, "arch", ""), self.backend.num_sms)

    def _borrowed(self, row: dict, p: Problem) -> KernelSource | None:
        """The kernel a table row lends to the shape `p` it was not searched on: its own source where that accepts
        `p`; for a family that compiles the shape in (its `requires` pins M, N, K), the row's parameters rendered
        again from the family's template with `p`'s constants; None where neither serves `p` on this GPU."""
        ks = self._source(row)
        if ks is None:
            return None
        if self._accepts(ks, p):
            return ks
        key = (ks.hash, p.key)
        if key not in self._rendered:
            self._rendered[key] = None
            fam = next((f for f in self._template_families() if f.name == ks.meta.family), None)
            if fam is not None and fam.shape_specialized:  # (none for an LLM's own kernel or a family gone)
                try:
                    new = rerendered(ks, [fam], p)
                    if self._accepts(new, p):
                        self._rendered[key] = new
                except EvoError:
                    pass  # parameters that no longer render
        return self._rendered[key]

    def _template_families(self) -> list[Family]:
        """The template families, loaded once, on the first shape that needs one ([] where none load)."""
        if self._families is None:
            try:
                self._families = load_families()
            except (EvoError, OSError, ValueError):
                self._families = []
        return self._families

    def candidates(self, m: int, n: int, k: int) -> list[tuple[str, dict, KernelSource | None]]:
        """Evo kernels that could serve (M, N, K), nearest first: [(kind, row, its kernel for this shape)]; a
        library is always the rest."""
        row = self.rows.get((m, n, k))
        if row is not None:
            if row.get("winner") == "evo" and row.get("kernel_path"):
                return [("evo", row, self._source(row))]
            return []
        p = Problem(m, n, k)
        near = sorted(self.rows.items(), key=lambda kv: log_distance(kv[0], (m, n, k)))
        if not near or near[0][1].get("winner") != "evo":
            return []  # the region belongs to the libraries: no kernel is compiled or timed for it
        out = []
        seen = set()
        for _, r in near:
            if len(out) >= self.general_tries:
                break
            if r.get("winner") != "evo" or not r.get("kernel_path") or r.get("hash") in seen:
                continue
            seen.add(r.get("hash"))
            ks = self._borrowed(r, p)
            if ks is not None:
                out.append(("general", r, ks))
        return out

    def _driver(self) -> str:
        return str(getattr(self.backend, "driver", ""))

    def _gpu_key(self) -> str:
        return self.gpu or str(getattr(self.backend, "gpu_key", ""))

    def _library(self, lib: str, p: Problem, row: dict | None, why: str, kind: str, ratio: float = 0.0) -> Plan:
        """A plan served by `lib`; cuBLASLt falls back to cuBLAS (said in the reason) where it cannot run."""
        if lib.startswith("cublaslt"):
            stored = row_algorithm(row, lib) if row else {}
            tune = lib == "cublaslt_autotune" and self.settings.autotune
            lt_key = decision_key(self._gpu_key(), self._driver(), p.key, "cublaslt_autotune")
            if tune and not stored:
                d = self.decisions.get(lt_key)
                if d is not None and d.algorithm and d.method == METHOD:
                    stored = d.algorithm
            try:
                fn, cfg, how = self.backend.cublaslt(p, stored or None, tune)
                if tune and how.startswith("autotuned"):
                    self.decisions.put(lt_key, Decision(serve="cublaslt", library=lib, algorithm=cfg, note="autotuned",
                                                        method=METHOD))
                    how += ", kept in " + str(self.decisions.path)
                elif tune and stored and not row_algorithm(row or {}, lib):
                    how = "the algorithm autotuned here earlier (" + str(self.decisions.path) + ")"
                alg = f"algorithm {cfg.get('algorithm_id', '?')}" + (f" tile {cfg['tile']}" if cfg.get("tile") else "")
                return Plan(kind, p.key, p.key if row else "", library=lib, ratio=ratio,
                            reason=f"{why}; served by cuBLASLt, {alg} ({how})", fn=fn)
            except EvoError as e:
                return Plan(kind, p.key, p.key if row else "", library="cublas", ratio=ratio,
                            reason=f"{why}; cuBLASLt unavailable ({e}), served by cuBLAS", fn=self.backend.cublas())
        return Plan(kind, p.key, p.key if row else "", library="cublas", ratio=ratio,
                    reason=f"{why}; served by cuBLAS", fn=self.backend.cublas())

    def _load_checked(self, row: dict, ks: KernelSource | None, p: Problem, check: bool, reasons: list[str]) -> Fn | None:
        """`row`'s kernel (its own, or the one it lends to `p`) loaded for `p`, and checked on it where asked."""
        if ks is None:
            reasons.append(f"{row['shape']}: kernel file missing")
            return None
        try:
            fn = self.backend.load(ks, p, self.table_dir / "cubins")
        except EvoError as e:
            reasons.append(f"{row['shape']}: {e}")
            return None
        if check:
            why = self.backend.check(fn, p)
            if why:
                reasons.append(f"{row['shape']}'s kernel fails on {p.key}: {why}")
                return None
        return fn

    def measures_tie(self, row: dict) -> bool:
        """A table row that is not an evo win beyond its noise band, whose evo kernel was nevertheless ahead by more
        than dispatch.noise_floor: decided on this GPU by measurement (dispatch.measure_ties)."""
        floor = self.settings.noise_floor
        r = float(row.get("speedup_best_library") or 0.0)
        lost = row.get("winner") != "evo" or not noise.wins(r, 1.0, row_band(row, floor))
        return bool(self.settings.measure_ties and row.get("kernel_path") and lost and r > 1.0 + floor)

    def _table_plan(self, p: Problem, row: dict) -> Plan:
        floor = self.settings.noise_floor
        best_lib = row.get("best_library") or ("cublas" if row.get("winner") == "evo" else row.get("winner")) or "cublas"
        tie_note = ""
        if self.measures_tie(row):
            unusable: list[str] = []
            tie = (f"a tie in the table (evo {float(row['speedup_best_library']):.3f}x inside its "
                   f"±{100 * row_band(row, floor):.1f}% noise band)")
            plan = self._measured_plan(p, row, tie, unusable)
            if plan is not None:
                return plan
            tie_note = "; its evo kernel is unusable here: " + "; ".join(unusable)
        if row.get("winner") != "evo":
            lib = row.get("winner") or best_lib
            r = float(row.get("speedup_best_library") or 0.0)
            evo_note = f"evo's best {r:.3f}x" if r else "no evo kernel"
            if row.get("verdict") == "tie":
                evo_note += f", inside the ±{100 * row_band(row, floor):.1f}% noise band: a tie"
            return self._library(lib, p, row, f"{lib_label(lib)} wins in the table ({evo_note}){tie_note}", "library")
        band = row_band(row, floor)
        r = float(row.get("speedup_best_library") or 0.0)
        if r and not noise.wins(r, 1.0, band):
            return self._library(best_lib, p, row, f"evo's {r:.3f}x over {lib_label(best_lib)} is inside the noise band "
                                 f"(±{100 * band:.1f}%): a tie{tie_note}", "library", ratio=1.0)
        reasons: list[str] = []
        ks = self._source(row)
        if ks is not None and not self._accepts(ks, p):  # e.g. a one-wave kernel from a GPU with more SMs than this one
            reasons.append(f"{row['shape']}'s kernel does not take {p.key} on this GPU "
                           f"({getattr(self.backend, 'num_sms', '?')} SMs, {getattr(self.backend, 'arch', '?')})")
            fn = None
        else:  # (borrowed kernels of other shapes are filtered the same way in `candidates`)
            fn = self._load_checked(row, ks, p, self.verify == "all", reasons)
        if fn is not None:
            beyond = f"{r:.3f}x {lib_label(best_lib)}, beyond ±{100 * band:.1f}% noise" if r else "no library time"
            return Plan("evo", p.key, row["shape"], row.get("hash", ""), reason=f"table winner ({beyond})", ratio=r, fn=fn)
        return self._library(best_lib, p, row, "the table's evo kernel is unusable here: " + "; ".join(reasons), "library")

    def _measured_plan(self, p: Problem, tied: dict | None = None, tie: str = "",
                       unusable: list[str] | None = None) -> Plan | None:
        """A shape not in the table, or the tie of table row `tied` (its own kernel the one candidate; `tie` says
        what the table measured): decided once by measurement, persisted (a tie's decision per kernel). None only for
        a tie whose kernel cannot load or check here (why in `unusable`): the table's library serves it."""
        k = decision_key(self._gpu_key(), self._driver(), p.key, f"tie:{tied.get('hash', '')}" if tied else "shape")
        d = self.decisions.get(k)
        reasons: list[str] = []
        if d is not None and d.method == METHOD:  # a decision measured another way is measured again
            plan = self._apply(d, p, reasons, tie=tie)
            if plan is not None:
                return plan
        if tied is not None:
            ks = self._source(tied)
            cands = [("evo", tied, ks)] if ks is not None and self._accepts(ks, p) else []
            if not cands:
                reasons.append(f"it does not take {p.key} on this GPU")
        else:
            cands = self.candidates(p.m, p.n, p.k)
        fns: dict[str, tuple[dict, Fn]] = {}
        for _, row, ks in cands:
            fn = self._load_checked(row, ks, p, True, reasons)
            if fn is not None:
                fns[f"evo:{row['shape']}"] = (row, fn)
        if tied is not None and not fns:
            if unusable is not None:
                unusable.extend(reasons)
            return None
        if not fns and not self.settings.measure_libraries:
            why = "; ".join(reasons) or "not in the table, no nearby evo kernel accepts it"
            return Plan("cublas", p.key, library="cublas", reason=why + "; served by cuBLAS", fn=self.backend.cublas())
        # one interleaved measurement: borrowed kernels, cuBLAS and every planned cuBLASLt algorithm (nvmath's own
        # autotune pick among them)
        calls: dict[str, Fn] = {name: fn for name, (_, fn) in fns.items()}
        calls["cublas"] = self.backend.cublas()
        lt_cfgs: dict[str, dict] = {}
        nvmath_name = ""
        try:
            algs, pick = self.backend.cublaslt_algorithms(p)
            for i, (lt_fn, cfg) in enumerate(algs):
                calls[f"cublaslt:{i}"], lt_cfgs[f"cublaslt:{i}"] = lt_fn, cfg
            nvmath_name = f"cublaslt:{pick}" if 0 <= pick < len(algs) else ""
        except EvoError as e:
            reasons.append(f"cuBLASLt not measured: {e}")
        try:
            samples = self.backend.time(p, calls, self.settings.measure_reps)
        except EvoError as e:
            return Plan("cublas", p.key, library="cublas", reason=f"not in the table; timing failed ({e}); served by cuBLAS",
                        fn=self.backend.cublas())
        t = medians(samples)
        lib, lt_name = pick_library(t, self.settings.library_tie)
        lib_us, lib_spread = t[lt_name] if lib == "cublaslt" else t["cublas"]
        best_us = min(t[n][0] for n in t if not n.startswith("evo:"))  # a borrowed kernel must beat the fastest
        evos = {name: v for name, v in t.items() if name.startswith("evo:")}
        dec = Decision(serve=lib, lib_us=round(lib_us, 3), library=lib, algorithm=lt_cfgs[lt_name] if lib == "cublaslt" else {},
                       note="", method=METHOD)
        if evos:
            best = min(evos, key=lambda name: evos[name][0])
            evo_us, evo_spread = evos[best]
            band = noise.band(evo_spread, lib_spread, floor=self.settings.noise_floor)
            row = fns[best][0]
            dec.evo_us, dec.band, dec.ratio = round(evo_us, 3), round(band, 4), round(noise.ratio(lib_us, evo_us), 4)
            dec.hash, dec.source_shape = row.get("hash", ""), row["shape"]
            if noise.wins(best_us, evo_us, band):
                dec.serve = "evo"
        if dec.serve != "evo":  # the libraries decide: near-ties are settled by a second, longer measurement
            settled, settled_us = self._settle(p, {n: v for n, v in samples.items() if not n.startswith("evo:")},
                                               calls, nvmath_name, reasons)
            if settled:
                lt_name = settled if settled.startswith("cublaslt") else lt_name
                dec.serve = dec.library = "cublaslt" if settled.startswith("cublaslt") else "cublas"
                dec.algorithm = lt_cfgs[settled] if dec.serve == "cublaslt" else {}
                dec.lib_us = round(settled_us, 3)
                if evos:
                    dec.ratio = round(noise.ratio(dec.lib_us, dec.evo_us), 4)
            elif lib == "cublaslt" and t["cublas"][0] < lib_us:
                reasons.append(f"cuBLAS {t['cublas'][0]:.2f} us, within the ±{100 * self.settings.library_tie:.1f}% "
                               "library tie: cuBLASLt serves")
        dec.note = "; ".join(reasons)
        self.decisions.put(k, dec)
        fresh: dict[str, Fn] = {name: fn for name, (_, fn) in fns.items()}
        fresh["lib:cublas"] = calls["cublas"]
        if lt_name:
            fresh["lib:cublaslt"] = calls[lt_name]  # the very algorithm that was timed serves
        plan = self._apply(dec, p, reasons, fresh=fresh, tie=tie)
        assert plan is not None  # a library always applies
        return plan

    def _settle(self, p: Problem, samples: dict[str, list[float]], calls: dict[str, Fn], nvmath_name: str,
                reasons: list[str]) -> tuple[str, float]:
        """Near-ties among the library calls of the first measurement (near_ties) timed again, alone, for more
        rounds (dispatch.settle_reps, fewer where they would take over dispatch.settle_budget_s of device time,
        never fewer than measure_reps): (the fastest of that second round, its median µs), or ("", 0) without a
        second round (a clear winner, settle_reps 0, or timing failed). Says what it did in `reasons`."""
        st = self.settings
        if st.settle_reps <= 0:
            return "", 0.0
        ties = near_ties(samples, st.settle_floor, st.settle_max, keep=nvmath_name)
        if len(ties) < 2:
            return "", 0.0
        names = [x.name for x in ties]
        per_round = sum(float(np.median(samples[n])) for n in names)  # µs of device time per round
        rounds = min(st.settle_reps, max(st.measure_reps, int(st.settle_budget_s * 1e6 / max(per_round, 1e-3))))
        try:
            second = medians(self.backend.time(p, {n: calls[n] for n in names}, rounds))
        except EvoError as e:
            reasons.append(f"second round failed ({e}): the first measurement decides")
            return "", 0.0
        win = min(names, key=lambda n: second[n][0])
        label = lambda n: n + (" (nvmath's autotune pick)" if n == nvmath_name else "")  # noqa: E731
        first = ", ".join(f"{label(x.name)} {x.ratio:.4f}x (±{100 * x.noise:.1f}%)" for x in ties[1:])
        reasons.append(f"near-tie in the first measurement ({st.measure_reps} rounds): {first} of {label(ties[0].name)}; "
                       f"second round of {rounds}: " + ", ".join(f"{n} {second[n][0]:.2f} us" for n in names)
                       + f"; {win} serves")
        return win, second[win][0]

    def _apply(self, d: Decision, p: Problem, reasons: list[str], fresh: dict | None = None, tie: str = "") -> Plan | None:
        """The plan a decision names (None where its evo kernel is gone or no longer passes: measure again). `tie`:
        the decision settles a table row's tie (what the table measured), not a shape outside the table."""
        where = "measured here" if fresh is not None else f"measured {d.date or 'earlier'}, {self.decisions.path}"
        if d.serve == "evo":
            row = next((r for r in self.rows.values() if r.get("hash") == d.hash and r.get("kernel_path")), None)
            fn = None
            if fresh is not None:
                fn = fresh.get(f"evo:{d.source_shape}")
            elif row is not None:
                ks = self._borrowed(row, p)
                if ks is not None:
                    fn = self._load_checked(row, ks, p, True, reasons)
            if fn is None:
                return None
            timed = (f"timed against {lib_label(d.library)}: {d.ratio:.3f}x ({d.lib_us:.2f} vs {d.evo_us:.2f} us, "
                     f"beyond ±{100 * d.band:.1f}% noise; {where})")
            if tie:
                return Plan("evo", p.key, d.source_shape, d.hash, ratio=d.ratio, fn=fn,
                            reason=f"{tie}; its kernel checked and {timed}")
            return Plan("general", p.key, d.source_shape, d.hash, ratio=d.ratio, fn=fn,
                        reason=f"evo winner of {d.source_shape}, checked on {p.key} and {timed}")
        evo_note = ""
        if d.evo_us:
            whose = "its evo kernel" if tie else f"the best borrowed evo kernel ({d.source_shape}'s)"
            evo_note = (f"; {whose} measured {d.ratio:.3f}x ({d.evo_us:.2f} vs {d.lib_us:.2f} us), "
                        f"not beyond ±{100 * d.band:.1f}% noise")
        why = f"{tie or 'not in the table'}; {lib_label(d.serve)} measured fastest ({d.lib_us:.2f} us, {where}){evo_note}"
        if d.note:
            why += f" [{d.note}]"
        if d.serve == "cublaslt":
            if fresh is not None and "lib:cublaslt" in fresh:  # the very call that was timed
                return Plan("library" if tie else "cublaslt", p.key, library="cublaslt", ratio=1.0, fn=fresh["lib:cublaslt"],
                            reason=f"{why}; cuBLASLt algorithm {d.algorithm.get('algorithm_id', '?')} (autotuned here)")
            try:
                fn, cfg, how = self.backend.cublaslt(p, d.algorithm or None, False)
                return Plan("library" if tie else "cublaslt", p.key, library="cublaslt", ratio=1.0, fn=fn,
                            reason=f"{why}; cuBLASLt algorithm {cfg.get('algorithm_id', '?')} ({how})")
            except EvoError as e:
                why += f"; cuBLASLt unavailable now ({e})"
        return Plan("library" if tie else "cublas", p.key, library="cublas", ratio=1.0, reason=why + "; served by cuBLAS",
                    fn=self.backend.cublas())

    def _plan(self, m: int, n: int, k: int) -> Plan:
        p = Problem(m, n, k)
        row = self.rows.get((m, n, k))
        if row is not None:
            return self._table_plan(p, row)
        return self._measured_plan(p)

    def plan(self, m: int, n: int, k: int) -> Plan:
        key = (m, n, k)
        plan = self._plans.get(key)
        if plan is None:
            with self._planning:  # one plan at a time: threads never time on the GPU side by side, nor twice
                plan = self._plans.get(key)
                if plan is None:
                    with self._on_device():
                        plan = self._plans[key] = self._plan(m, n, k)
        return plan

    def cached(self, m: int, n: int, k: int) -> Plan | None:
        """The plan already made for a shape in this process, or None (nothing is chosen, compiled or timed)."""
        return self._plans.get((m, n, k))

    def explain(self, m: int, n: int, k: int) -> str:
        pl = self.plan(m, n, k)
        who = pl.kind + (f" {pl.hash[:10]}" if pl.hash else "") + (f" [{pl.library}]" if pl.library else "")
        return f"{pl.shape}: {who} ({pl.reason})"

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
        if out is not None and (tuple(out.shape) != (m, n) or out.dtype != _F16 or not out.flags.c_contiguous):
            raise ValueError(f"matmul: out must be a C-contiguous float16 [{m}, {n}] array, got {tuple(out.shape)} {out.dtype}")
        with self._on_device():  # C is allocated and the kernel launched on this dispatcher's GPU
            c = self.backend.empty(m, n) if out is None else out
            plan.fn(a, b, c)  # type: ignore[misc]
        if foreign:
            import torch  # only reached with torch inputs

            return torch.from_dlpack(c)
        return c


class _Default:
    """The Dispatchers behind evo.dispatch.matmul and torch.ops.evo.matmul, one per GPU (device ordinal), each
    created on its GPU's first use or set by `use`."""

    dispatchers: dict[int | None, Dispatcher] = {}


def device_of(x: Any) -> int | None:
    """The CUDA device ordinal an array lives on: a CuPy array's ``device.id``, a torch CUDA tensor's
    ``device.index``; None for anything else (validation then says what is wrong with it)."""
    dev = getattr(x, "device", None)
    if isinstance(getattr(dev, "id", None), int):
        return dev.id
    if getattr(dev, "type", None) == "cuda":
        return dev.index if dev.index is not None else _current_device()
    return None


def _current_device() -> int | None:
    try:
        import cupy

        return int(cupy.cuda.runtime.getDevice())
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: Dispatcher.load says so in one line
        return None


def default(device: int | None = None) -> Dispatcher:
    """The Dispatcher of GPU `device` (the current GPU by default), created on its first use."""
    device = _current_device() if device is None else device
    d = _Default.dispatchers.get(device)
    if d is None:
        d = _Default.dispatchers[device] = Dispatcher.load(device_id=device)
    return d


def use(dispatcher: Dispatcher, device: int | None = None) -> None:
    """Serve GPU `device` (the dispatcher's own GPU by default) from this Dispatcher (e.g. another table folder),
    in evo.dispatch.matmul and torch.ops.evo.matmul alike."""
    if device is None:
        device = getattr(dispatcher.backend, "device_id", None)
    _Default.dispatchers[_current_device() if device is None else device] = dispatcher


def matmul(a: Any, b: Any, out: Any = None) -> Any:
    """C = A·Bᵀ through the Dispatcher of the GPU that holds A (each GPU's created on its first use)."""
    return default(device_of(a)).matmul(a, b, out)
