"""The worker's side: one CUDA context, requests in, plain results out.

Every request handler returns picklable records; a CUDA error that may have poisoned
the context is reported with ``fatal=True`` so the parent restarts the worker.
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import asdict

os.environ.setdefault("CUPY_TF32", "0")  # the fp32 reference must be real fp32

import cupy  # noqa: E402

from ..baselines import LtPlan, cublas_gemm  # noqa: E402
from ..check import check_kernel, poisoned_output, random_inputs, reference, compare  # noqa: E402
from ..config import Config  # noqa: E402
from ..errors import EvoError  # noqa: E402
from ..kernel import KernelSource  # noqa: E402
from ..problem import Problem  # noqa: E402
from ..records import BaselineResult, EvalResult  # noqa: E402
from ..timing import Timer  # noqa: E402
from .device import gpu_info  # noqa: E402
from .launch import LoadedKernel  # noqa: E402

_FATAL_MARKERS = ("illegal", "misaligned", "launch failure", "unspecified launch", "exception", "ECC", "hardware",
                  "cudaErrorLaunchTimeout", "not permitted", "CUDA_ERROR_ILLEGAL", "ERROR_LAUNCH")


class Session:
    def __init__(self, cfg: Config, device_id: int = 0):
        self.cfg = cfg
        self.info = gpu_info(device_id)
        self.timer = Timer(self.info.l2_bytes, cfg.timing.flush_l2, cfg.timing.flush_bytes)
        self.cublas = cublas_gemm()
        self.seed = cfg.search.seed * 1000003 + int(time.time())  # fresh inputs every process

    def _next_seed(self) -> int:
        self.seed += 1
        return self.seed

    def handle_info(self):
        return self.info

    # --- baselines --------------------------------------------------------
    def handle_baselines(self, problem: Problem, extra: dict | None = None, reps: int | None = None) -> dict:
        """Time every library baseline side by side; extra = {name: (source, cubin)} kernels to include."""
        rs = cupy.random.RandomState(self._next_seed())
        a, b = random_inputs(problem, rs)
        c = cupy.empty((problem.m, problem.n), dtype=cupy.float16)
        contenders = {}
        notes: dict[str, str] = {}
        bc = self.cfg.baselines
        if bc.cublas:
            contenders["cublas"] = lambda: self.cublas(a, b, c)
        plan = None
        if bc.cublaslt_heuristic or bc.cublaslt_autotune:
            try:
                plan = LtPlan(a, b, bc)
                if bc.cublaslt_heuristic:
                    contenders["cublaslt_heuristic"] = plan.call(plan.heuristic)
                    notes["cublaslt_heuristic"] = f"top-1 of {plan.n_algorithms} planned"
                if bc.cublaslt_autotune:
                    plan.autotune()
                    contenders["cublaslt_autotune"] = plan.call(plan.tuned)
                    notes["cublaslt_autotune"] = f"best of {plan.n_algorithms} by nvmath autotune"
            except EvoError as e:
                notes["cublaslt"] = str(e)
        kernels = {}
        for name, (source, cubin) in (extra or {}).items():
            k = LoadedKernel(KernelSource.parse(source), cubin, problem, self.info.sm_count, self.info.smem_per_block_optin)
            kernels[name] = k
            contenders[name] = (lambda k=k: k(a, b, c))
        reps = reps or max(self.cfg.baselines.reps, self.cfg.timing.reps)
        timings = self.timer.measure(contenders, reps, self.cfg.timing.warmup)
        # the timed kernels' last output must still be right (no caching across calls)
        for name, k in kernels.items():
            c2 = poisoned_output(problem)
            k(a, b, c2)
            r = compare(c2, reference(a, b), self.cfg.check, f"{name} after timing")
            if not r.correct:
                notes[name] = "WRONG: " + r.error
        if plan:
            plan.close()
        out = {name: BaselineResult(name, t.median_us, t.spread, notes.get(name, "")) for name, t in timings.items()}
        return {"results": out, "notes": notes, "samples": {n: t.samples for n, t in timings.items()}}

    # --- one candidate ------------------------------------------------------
    def handle_evaluate(self, problem: Problem, source: str, cubin: str, h: str) -> EvalResult:
        t0 = time.monotonic()
        ks = KernelSource.parse(source)
        if not ks.accepts(problem, self.info.sm_count):
            return EvalResult(h, False, "check", f"kernel does not accept shape {problem.key} (requires: {ks.meta.requires})")
        try:
            kernel = LoadedKernel(ks, cubin, problem, self.info.sm_count, self.info.smem_per_block_optin)
        except EvoError as e:
            return EvalResult(h, False, "check", str(e))
        chk = check_kernel(kernel, problem, self.cfg.check, self._next_seed())
        if not chk.correct:
            return EvalResult(h, False, "check", chk.error, check=chk, seconds=time.monotonic() - t0)
        # time on another fresh input set, interleaved with cuBLAS on the same inputs
        rs = cupy.random.RandomState(self._next_seed())
        a, b = random_inputs(problem, rs)
        c = cupy.empty((problem.m, problem.n), dtype=cupy.float16)
        c_ref = cupy.empty_like(c)
        timings = self.timer.measure({"candidate": lambda: kernel(a, b, c), "cublas": lambda: self.cublas(a, b, c_ref)},
                                     self.cfg.timing.reps, self.cfg.timing.warmup)
        cupy.cuda.get_current_stream().synchronize()
        after = compare(c, reference(a, b), self.cfg.check, "output of the last timed call")
        if not after.correct:
            return EvalResult(h, False, "time", after.error, check=chk, seconds=time.monotonic() - t0)
        t = timings["candidate"]
        return EvalResult(h, True, "done", check=chk, time_us=t.median_us, spread=t.spread,
                          cublas_us=timings["cublas"].median_us, seconds=time.monotonic() - t0)

    # --- ceilings ----------------------------------------------------------
    def handle_ceilings(self) -> dict:
        """Practical ceilings of this GPU: a large fp16 cuBLAS matmul and a device-to-device copy."""
        n = 8192
        rs = cupy.random.RandomState(1)
        a = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        b = rs.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
        c = cupy.empty((n, n), dtype=cupy.float16)
        src = cupy.empty(1 << 28, dtype=cupy.float32)  # 1 GiB
        dst = cupy.empty_like(src)
        t = self.timer.measure({"mm": lambda: self.cublas(a, b, c), "copy": lambda: dst.__setitem__(Ellipsis, src)},
                               reps=10, warmup=2)
        peak = 2.0 * n ** 3 / (t["mm"].min_us * 1e-6) / 1e12
        bw = 2.0 * src.nbytes / (t["copy"].min_us * 1e-6) / 1e9
        del a, b, c, src, dst
        cupy.get_default_memory_pool().free_all_blocks()
        return {"peak_tflops": peak, "bw_gbs": bw, "detail": f"cuBLAS fp16 {n}^3 and a 1 GiB D2D copy, best of 10"}


def is_fatal(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    return isinstance(exc, cupy.cuda.runtime.CUDARuntimeError) or any(m in text for m in _FATAL_MARKERS) or \
        "CUDADriverError" in type(exc).__name__


def serve(conn, cfg_dict: dict, device_id: int) -> None:
    """Worker main loop: (op, kwargs) in, ("ok", result) or ("error", message, fatal) out."""
    from ..config import load_config

    cfg = load_config(overrides=cfg_dict)
    try:
        session = Session(cfg, device_id)
    except EvoError as e:
        conn.send(("error", str(e), True))
        return
    except Exception as e:  # noqa: BLE001
        conn.send(("error", f"GPU worker failed to start: {type(e).__name__}: {e}", True))
        return
    conn.send(("ok", session.info))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        op, kwargs = msg
        try:
            result = getattr(session, f"handle_{op}")(**kwargs)
            conn.send(("ok", result))
        except EvoError as e:
            conn.send(("error", str(e), False))
        except Exception as e:  # noqa: BLE001
            fatal = is_fatal(e)
            detail = " ".join(f"{type(e).__name__}: {e}".split())[:500]
            conn.send(("error", detail, fatal))
            if fatal:
                return  # the context may be poisoned: exit, the parent starts a fresh worker
            traceback.print_exc()


def result_dict(r) -> dict:
    return asdict(r)

