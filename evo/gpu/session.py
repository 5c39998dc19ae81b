"""The worker's side: one CUDA context, requests in, plain results out.

Every request handler returns picklable records; a CUDA error that may have poisoned
the context is reported with ``fatal=True`` so the parent restarts the worker.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
import traceback
from dataclasses import asdict
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")  # the fp32 reference must be real fp32

import cupy  # noqa: E402

from ..autotune_pick import pick_fastest  # noqa: E402
from ..baselines import LtPlan, call_across, cublas_gemm, pool_across  # noqa: E402
from ..check import check_kernel, compare, poisoned_output, random_inputs, reference, sync  # noqa: E402
from ..defences import defences_off  # noqa: E402
from ..drift import corrected_us, retimed  # noqa: E402
from ..fresh import FreshInputs  # noqa: E402
from ..config import Config  # noqa: E402
from ..errors import EvoError, LibraryMissing  # noqa: E402
from ..families import Family, is_family_rendering, load_families  # noqa: E402
from ..kernel import KernelSource  # noqa: E402
from ..problem import Problem, parse_shape  # noqa: E402
from ..records import BaselineResult, EvalResult  # noqa: E402
from ..timing import Contender, Timer, summarize  # noqa: E402
from .device import gpu_info  # noqa: E402
from .gpu_state import GpuState, describe_state, query_gpu_state  # noqa: E402
from .host_launch import load_kernel  # noqa: E402
from .host_sandbox import SandboxSpares  # noqa: E402
from ..ltgemm import algorithm_note  # noqa: E402
from ..placements import MAX_PAD, input_sets, rotating, whole_rotations  # noqa: E402
from .module import FreshKernel  # noqa: E402

_FATAL_MARKERS = ("illegal", "misaligned", "launch failure", "unspecified launch", "exception", "ECC", "hardware",
                  "cudaErrorLaunchTimeout", "not permitted", "CUDA_ERROR_ILLEGAL", "ERROR_LAUNCH")


_LT_ALG = "cublaslt_algorithm_"  # contender names of the planned cuBLASLt algorithms (the autotune's pool; not reported)

ROOFLINE_MARGIN = 0.85  # a time under 0.85x the roofline bound of the measured ceilings is impossible


class _Rejected(Exception):
    """A timing window that ends the candidate's evaluation (a wrong timed call, an impossible time)."""

    def __init__(self, result: EvalResult):
        super().__init__(result.error)
        self.result = result


class Session:
    def __init__(self, cfg: Config, device_id: int = 0):
        self.cfg = cfg
        self.info = gpu_info(device_id)
        self.timer = Timer(self.info.l2_bytes, cfg.timing.flush_l2, cfg.timing.flush_bytes,
                           flush_mode=cfg.timing.flush_mode, sms=self.info.sm_count)
        self.cublas = cublas_gemm()
        self.seed = cfg.search.seed * 1000003 + int(time.time())  # fresh inputs every process
        self.off = defences_off(cfg.check.defences_off)  # tests only: defences switched off by name
        self._warm = False  # handle_warmup ran in this process
        self.sandboxes = SandboxSpares(cfg.check.host_spares)  # host-code sandboxes started ahead for the next phases
        self._families: list[Family] | None = None  # loaded at the first launch: host candidate (_family_host_code)
        self._renderings: dict[tuple[str, str], bool] = {}  # (text's sha256, shape): its family's rendering?

    def _next_seed(self) -> int:
        self.seed += 1
        return self.seed

    def handle_info(self):
        return self.info

    # --- baselines --------------------------------------------------------
    def handle_baselines(self, problem: Problem, extra: dict | None = None, reps: int | None = None,
                         bound_us: float = 0.0) -> dict:
        """Time every library baseline side by side; extra = {name: (source, cubin)} kernels to include.

        Extra kernels run on inputs generated anew before every call (evo.fresh.FreshInputs: C poisoned, every
        call checked by checksum and sampled rows/cols, random calls compared in full); a kernel that fails
        that, or is faster than the roofline bound, is marked WRONG in its detail."""
        bc = self.cfg.baselines
        # the libraries over `placements` input sets at different addresses in turn (a library's time can follow where
        # its buffers lie: evo/placements.py); the autotune's algorithm is chosen over all of them, not fitted to one
        sets, gaps = input_sets(problem, [self._next_seed() for _ in range(self._placements(problem))])
        a, b, _ = sets[0]  # the candidates' check after timing
        contenders: dict = {}
        notes: dict[str, str] = {}
        if bc.cublas:
            contenders["cublas"] = rotating([lambda a=a, b=b, c=c: self.cublas(a, b, c) for a, b, c in sets])
        plans: list = []
        lt_algs: dict = {}  # contender name -> plan 0's planned cuBLASLt algorithm (the autotune's pool)
        if bc.cublaslt_heuristic or bc.cublaslt_autotune:
            try:
                plans = [LtPlan(sa, sb, bc) for sa, sb, _ in sets]
                plan = plans[0]
                tops = [pl.heuristic for pl in plans]  # each set's own top-1
                if bc.cublaslt_heuristic:
                    contenders["cublaslt_heuristic"] = call_across(plans, tops)
                    notes["cublaslt_heuristic"] = f"top-1 of {plan.n_algorithms} planned" + algorithm_note(plan.heuristic)
                if bc.cublaslt_autotune:  # every planned algorithm a contender; the fastest chosen after timing
                    for i, copies in pool_across(plans).items():
                        if i == 0 and copies == tops and "cublaslt_heuristic" in contenders:
                            lt_algs["cublaslt_heuristic"] = copies[0]  # the heuristic's top-1 is planned algorithm 0
                        else:
                            lt_algs[f"{_LT_ALG}{i}"] = copies[0]
                            contenders[f"{_LT_ALG}{i}"] = call_across(plans, copies)
            except LibraryMissing:
                raise  # asked for and not there: no "best library" may be claimed without it (evo.errors)
            except EvoError as e:
                notes["cublaslt"] = str(e)
        kernels = {}
        reps = whole_rotations(reps or max(self.cfg.baselines.reps, self.cfg.timing.reps), len(sets))
        for name, (source, cubin) in (extra or {}).items():
            k = self._launcher(KernelSource.parse(source), cubin, problem)
            rot = FreshInputs(problem, self.cfg.check, self._next_seed(), self.cfg.timing.warmup, reps, self.off,
                              self.info.sm_count)
            kernels[name] = (k, rot)
            contenders[name] = Contender(run=lambda k=k, rot=rot: k(*rot.args()), before=rot.before, after=rot.after)
        timings = self.timer.measure(contenders, reps, self.cfg.timing.warmup)
        if lt_algs:
            pick = pick_fastest({n: timings[n].samples for n in lt_algs}, sets=len(sets))
            timings["cublaslt_autotune"] = summarize("cublaslt_autotune", pick.samples)
            notes["cublaslt_autotune"] = (
                f"fastest of {len(lt_algs)} planned algorithms, each timed here interleaved "
                + (f"over {len(sets)} input sets in turn (chosen on the first half of the repetitions, timed on the "
                   f"second)" if len(sets) > 1 else "(chosen on the even repetitions, timed on the odd ones)")
                + algorithm_note(lt_algs[pick.name]))
            for n in lt_algs:
                if n.startswith(_LT_ALG):
                    del timings[n]
        # every timed call of every kernel was right, and one more call on fresh buffers is right too
        for name, (k, rot) in kernels.items():
            why = rot.verify(f"{name}: timed call")
            if not why:
                c2 = poisoned_output(problem)
                k(a, b, c2)
                sync()
                why = compare(c2, reference(a, b), self.cfg.check, f"{name} after timing").error
            if not why:
                why = self._impossible(timings[name].median_us, bound_us)
            if why:
                notes[name] = "WRONG: " + why
            k.close()
        for pl in plans:
            pl.close()
        del gaps
        out = {name: BaselineResult(name, t.median_us, t.spread, notes.get(name, "")) for name, t in timings.items()}
        return {"results": out, "notes": notes, "samples": {n: t.samples for n, t in timings.items()}}

    def _placements(self, problem: Problem) -> int:
        """baselines.placements, or fewer where the sets would not leave the candidates' check and timing (_need_bytes)
        their memory: the largest shapes fall back towards one set rather than fail."""
        p = self.cfg.baselines.placements
        if p == 1:
            return 1
        cupy.get_default_memory_pool().free_all_blocks()
        free, _ = cupy.cuda.runtime.memGetInfo()
        spare = free - self._need_bytes(problem)
        return max(1, min(p, 1 + int(spare // (problem.min_bytes + MAX_PAD))))

    def _impossible(self, time_us: float, bound_us: float) -> str:
        if "roofline" in self.off:
            return ""
        if bound_us > 0 and time_us < ROOFLINE_MARGIN * bound_us:
            return (f"{time_us:.3f} us is faster than the roofline: measurement or kernel is wrong "
                    f"(bound {bound_us:.3f} us from the measured peak and bandwidth, margin {ROOFLINE_MARGIN})")
        return ""

    @staticmethod
    def _need_bytes(problem: Problem) -> float:
        """GPU memory a candidate's check and timing hold: about 8 copies of A, B and C (guarded buffers,
        FreshInputs' snapshots of C) plus fp32 and fp64 references (the exact test's)."""
        return 8 * problem.min_bytes + 40.0 * problem.m * problem.n

    @classmethod
    def _fits(cls, problem: Problem) -> None:
        """The GPU holds the candidate's check and timing (_need_bytes), or EvoError. The blocks CuPy's pool keeps
        cached are given back to the device only where what is free without them falls short: given back every
        evaluation (and allocated anew by its check), a device-launched kernel's evaluation took 80-200 ms on an H200
        against 40-80 ms (docs/perf-search.md)."""
        need = cls._need_bytes(problem)
        free, total = cupy.cuda.runtime.memGetInfo()
        if need > free:
            cupy.get_default_memory_pool().free_all_blocks()
            free, total = cupy.cuda.runtime.memGetInfo()
        if need > free:
            raise EvoError(f"shape {problem.key} needs about {need / 2**30:.1f} GiB of GPU memory to check and time; "
                           f"{free / 2**30:.1f} GiB of {total / 2**30:.0f} GiB are free")

    # --- one candidate ------------------------------------------------------
    def _launcher(self, ks: KernelSource, cubin: str, problem: Problem):
        """The kernel as the ABI launches it, with the evaluator's defences (fresh module, host-code sandbox: for
        host code that is not the family's own, _family_host_code)."""
        isolate = ("host_sandbox" not in self.off and ks.meta.launch == "host"
                   and not self._family_host_code(ks, problem))
        return load_kernel(ks, cubin, problem, self.info.sm_count, self.info.smem_per_block_optin,
                           fresh="fresh_module" not in self.off, isolate_host=isolate, spares=self.sandboxes)

    def _family_host_code(self, ks: KernelSource, problem: Problem) -> bool:
        """Whether a launch: host candidate's host code is its family's own: its text is the family's template
        rendered with its parameters, byte for byte (its compile is of that code exactly: the compile key is the
        code's exact text, evo.kernel.KernelSource.code_hash). Such code runs in the worker, as evo.dispatch runs a
        published kernel's; any other goes to the sandbox. A sandbox makes a CUDA context of its own, and the driver
        makes ~5 a second, which held a CUTLASS evaluation at 0.1-0.9 s against ~0.05 s for a device-launched kernel
        (docs/perf-search.md)."""
        key = (hashlib.sha256(ks.text.encode()).hexdigest(), problem.key)  # ks.hash leaves comments out
        if key not in self._renderings:
            if self._families is None:
                self._families = load_families(Path(self.cfg.paths.templates) if self.cfg.paths.templates else None)
            self._renderings[key] = is_family_rendering(ks, self._families, problem)
        return self._renderings[key]

    def fresh_kernel(self, problem: Problem, source: str, cubin: str) -> FreshKernel:
        """The candidate, loaded anew (module, globals, workspace) for every phase; with fresh_module off, one
        load shared by all phases (the old behaviour, for the tests). Whether it accepts the shape and the GPU's
        memory holds the evaluation are asked once, here."""
        ks = KernelSource.parse(source)
        if not ks.accepts(problem, self.info.sm_count):
            raise EvoError(f"kernel does not accept shape {problem.key} (requires: {ks.meta.requires})")
        self._fits(problem)
        return FreshKernel(lambda: self._launcher(ks, cubin, problem), shared="fresh_module" in self.off)

    def handle_evaluate(self, problem: Problem, source: str, cubin: str, h: str, bound_us: float = 0.0,
                        screen_reps: int = 0, screen_vs_us: float = 0.0, cublas_ref_us: float = 0.0,
                        drift_tol: float | None = None) -> EvalResult:
        """Check, then time. Staged timing (screen_reps > 0 and a best so far, screen_vs_us): a first measurement
        of screen_reps repetitions; a candidate slower than the best by more than search.screen_margin (or its own
        spread) is returned from it, stage "screened"; the others get the full timing.reps measurement.
        Drift (cublas_ref_us: the quiet cuBLAS time of this run, evo/drift.py): a window where cuBLAS ran more than
        drift_tol slower (the shape's tolerance, evo.drift.tolerance; None: timing.drift_tol) is timed again; the
        less drifted window is kept, and if it drifted too, the candidate's time is scaled to the quiet speed (the raw
        median kept as measured_us)."""
        return self._evaluate(lambda: self.fresh_kernel(problem, source, cubin), problem, h, bound_us, screen_reps,
                              screen_vs_us, cublas_ref_us, drift_tol)

    def _evaluate(self, make, problem: Problem, h: str, bound_us: float = 0.0, screen_reps: int = 0,
                  screen_vs_us: float = 0.0, cublas_ref_us: float = 0.0, drift_tol: float | None = None) -> EvalResult:
        """handle_evaluate's check and timing of the FreshKernel that make() builds."""
        t0 = time.monotonic()
        try:
            fk = make()
            with fk.phase("check") as kernel:
                chk = check_kernel(kernel, problem, self.cfg.check, self._next_seed(), self.off)
        except EvoError as e:
            return EvalResult(h, False, "check", str(e), seconds=time.monotonic() - t0)
        if not chk.correct:
            return EvalResult(h, False, "check", chk.error, check=chk, seconds=time.monotonic() - t0)
        # time on inputs generated anew on the device before every call, interleaved with cuBLAS; every call
        # checked (checksum, sampled rows/cols), 2-4 random timed calls compared in full afterwards
        rs = cupy.random.RandomState(self._next_seed())
        a, b = random_inputs(problem, rs)
        c_ref = cupy.empty((problem.m, problem.n), dtype=cupy.float16)
        stages = [self.cfg.timing.reps]
        if 0 < screen_reps < self.cfg.timing.reps and screen_vs_us > 0:
            stages = [screen_reps, self.cfg.timing.reps]
        tol = self.cfg.timing.drift_tol if drift_tol is None else drift_tol
        state: list[str] = []  # the GPU's state after the first slow window, if one was (at most one line)
        for stage, reps in enumerate(stages):
            def window(reps=reps):  # one timing window: the candidate and cuBLAS, interleaved
                try:
                    with fk.phase("timing") as kernel:
                        rot = FreshInputs(problem, self.cfg.check, self._next_seed(), self.cfg.timing.warmup,
                                          reps, self.off, self.info.sm_count)
                        timings = self.timer.measure(
                            {"candidate": Contender(run=lambda: kernel(*rot.args()), before=rot.before, after=rot.after),
                             "cublas": lambda: self.cublas(a, b, c_ref)},
                            reps, self.cfg.timing.warmup)
                        why = rot.verify()
                        del rot
                except EvoError as e:
                    why = str(e)
                if why:
                    raise _Rejected(EvalResult(h, False, "time", why, check=chk, seconds=time.monotonic() - t0))
                t = timings["candidate"]
                why = self._impossible(t.median_us, bound_us)  # the raw median: what the kernel physically took
                if why:
                    raise _Rejected(EvalResult(h, False, "time", why, check=chk, time_us=t.median_us,
                                               seconds=time.monotonic() - t0))
                return t, timings["cublas"].median_us

            def again():  # after a slow window: what the GPU reports (evo/gpu/gpu_state.py), then one more window
                if not state:
                    state.append(describe_state(self.handle_gpu_state()))
                return window()

            try:  # a window where the whole GPU ran slow (cuBLAS beside the candidate) is timed once more
                t, cublas_us = retimed(window(), again, lambda w: w[1], cublas_ref_us, tol)[0]
            except _Rejected as r:
                return dataclasses.replace(r.result, gpu_state="".join(state))
            time_us = corrected_us(t.median_us, cublas_us, cublas_ref_us, tol)  # scaled if even the better one drifted
            measured_us, spread = (t.median_us if time_us != t.median_us else 0.0), t.spread
            if stage + 1 < len(stages) and time_us > screen_vs_us * (1 + max(self.cfg.search.screen_margin, spread)):
                return EvalResult(h, True, "screened", check=chk, time_us=time_us, spread=spread, cublas_us=cublas_us,
                                  seconds=time.monotonic() - t0, measured_us=measured_us, gpu_state="".join(state))
        return EvalResult(h, True, "done", check=chk, time_us=time_us, spread=spread, cublas_us=cublas_us,
                          seconds=time.monotonic() - t0, measured_us=measured_us, gpu_state="".join(state))

    def handle_warmup(self) -> dict:
        """The checker, the fresh inputs, the timer and cuBLAS run once in this process on small shapes (one on the
        tile grid, one off it), with the fp32 product rounded to fp16 as the kernel: their CuPy kernels are compiled
        on first use (NVRTC), 28-50 s on a bare machine, which the search's first candidate paid inside its budget
        (docs/perf-search.md). Once a process; from CuPy's disk cache a later process takes well under a second.
        Returns {"seconds", "ok", "error", "first"} (first: this call did the work)."""
        if self._warm:
            return {"seconds": 0.0, "ok": True, "error": "", "first": False}
        t0 = time.monotonic()

        def exact(a, b, c):  # a correct kernel: the checks and the timed calls' verification all pass on it
            c[...] = reference(a, b)

        error = ""
        for p in (Problem(128, 128, 64), Problem(200, 136, 72)):
            r = self._evaluate(lambda: FreshKernel(lambda: exact), p, "warmup", screen_reps=0)
            error = error or ("" if r.ok else f"{p.key}: {r.stage}: {r.error}")
        self._warm = True
        return {"seconds": time.monotonic() - t0, "ok": not error, "error": error, "first": True}

    def handle_gpu_state(self) -> GpuState | None:
        """What the GPU reports now (clocks, power, temperature, clock limits, processes; None: no reading): asked
        when a search starts and after a timing window where the GPU ran slow (evo/drift.py)."""
        return query_gpu_state(str(self.info.extra.get("pci_bus_id", "")))

    # --- kernels under sustained load (evo/sustained.py) ----------------------
    def handle_sustained(self, problem: Problem, extra: dict, seconds: float, rounds: int, rest: float) -> dict:
        """Each kernel of extra = {name: (source, cubin)} run back to back alone for `seconds`, `rounds` times in a
        fresh order each round with `rest` idle seconds before each window, while nvidia-smi samples the clock and
        power. The calls alternate between two input sets; after the windows each kernel's output of both is
        compared with the reference (poisoned first), and a wrong one is marked WRONG in its detail.
        Returns {name: {"us", "sm_mhz", "power_w", "kcycles", "detail"}} (medians over rounds; -1: no reading)."""
        import random

        from ..sustained import per_contender, windows
        from .state_sampler import reasons_field, sample_states

        rs = cupy.random.RandomState(self._next_seed())
        sets = [random_inputs(problem, rs) for _ in range(2)]
        kernels = {name: self._launcher(KernelSource.parse(src), cubin, problem) for name, (src, cubin) in extra.items()}
        outs = {name: [cupy.empty((problem.m, problem.n), dtype=cupy.float16) for _ in sets] for name in kernels}
        turn = {name: 0 for name in kernels}

        def call_of(name):
            k, cs = kernels[name], outs[name]

            def call():
                i = turn[name] = turn[name] ^ 1
                k(sets[i][0], sets[i][1], cs[i])
            return call

        calls = {name: call_of(name) for name in kernels}
        bus, field = str(self.info.extra.get("pci_bus_id", "")), reasons_field()
        got = windows(calls, seconds, rounds, rest, sync, random.Random(self._next_seed()),
                      lambda: sample_states(bus, field))
        details = {}
        for name, k in kernels.items():  # the same kernels on the same inputs: their outputs must be the reference
            why = ""
            for i, (a, b) in enumerate(sets):
                c = poisoned_output(problem)
                k(a, b, c)
                sync()
                why = why or compare(c, reference(a, b), self.cfg.check, f"{name} after the sustained windows, set {i}").error
            details[name] = "WRONG: " + why if why else ""
            k.close()
        return {r.contender: {"us": r.us, "sm_mhz": r.sm_mhz, "power_w": r.power_w, "kcycles": r.kcycles,
                              "detail": details[r.contender]} for r in per_contender(got)}

    # --- strong re-check of a kernel before it is exported or used elsewhere ----
    def handle_recheck(self, problem: Problem, source: str, cubin: str, shapes: list | None = None,
                       seeds: int = 4) -> dict:
        """The full check with ``seeds`` random seeds on the exact shape, then on every extra shape
        (e.g. off-tile shapes for a kernel whose ``requires`` claims generality) it accepts.
        Returns {"ok": bool, "error": first failure, "shapes": {shape: "ok" | error | "not accepted"}}."""
        cfg = dataclasses.replace(self.cfg.check, seeds=max(1, int(seeds)))
        out: dict[str, str] = {}
        error = ""
        ks = KernelSource.parse(source)
        for p in [problem] + [x if isinstance(x, Problem) else parse_shape(str(x)) for x in (shapes or [])]:
            if p.key in out:
                continue
            if not ks.accepts(p, self.info.sm_count):
                if p == problem:
                    out[p.key] = error = f"{p.key}: kernel does not accept its own shape"
                    break
                out[p.key] = "not accepted"
                continue
            try:
                k = self._launcher(ks, cubin, p)
                r = check_kernel(k, p, cfg, self._next_seed(), self.off)
                k.close()
                msg = "ok" if r.correct else r.error
            except EvoError as e:
                msg = str(e)
            out[p.key] = msg
            if msg != "ok" and not error:
                error = f"{p.key}: {msg}"
        return {"ok": not error, "error": error, "shapes": out}

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
        empty = cupy.RawKernel('extern "C" __global__ void evo_empty() {}', "evo_empty")
        t = self.timer.measure({"mm": lambda: self.cublas(a, b, c), "copy": lambda: dst.__setitem__(Ellipsis, src),
                                "launch": lambda: empty((1,), (32,), ())}, reps=10, warmup=2)
        peak = 2.0 * n ** 3 / (t["mm"].min_us * 1e-6) / 1e12
        bw = 2.0 * src.nbytes / (t["copy"].min_us * 1e-6) / 1e9
        del a, b, c, src, dst
        cupy.get_default_memory_pool().free_all_blocks()
        launch = t["launch"].median_us  # the launch floor: an empty kernel between the events, L2 flushed
        return {"peak_tflops": peak, "bw_gbs": bw, "launch_us": launch,
                "detail": f"cuBLAS fp16 {n}^3 and a 1 GiB D2D copy, best of 10; empty kernel median; launch_us={launch:.3f}"}


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
    try:
        _answer(conn, session)
    finally:
        session.sandboxes.close()


def _answer(conn, session: Session) -> None:
    """serve's requests until the pipe closes or a fatal error."""
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

