"""Stand-ins for the GPU worker and nvcc, so the search plumbing is tested on any machine."""
from __future__ import annotations

from pathlib import Path

from evo.errors import EvoError
from evo.gpu.gpu_state import GpuState
from evo.kernel import KernelSource
from evo.problem import GpuInfo
from evo.records import BaselineResult, CheckResult, CompileResult, EvalResult

FAKE_GPU = GpuInfo(name="Fake GPU", arch="sm_90a", cc=(9, 0), sm_count=132, l2_bytes=50 << 20,
                   smem_per_block_optin=227 * 1024, driver="0.0", cuda_runtime="13.0")


def fake_time(ks: KernelSource) -> float:
    p = ks.meta.params
    return 100.0 / p.get("UNROLL", 1) + 3.0 * abs(p.get("TILE", 16) - 16) + p.get("PAD", 0)


QUIET_GPU = GpuState(sm_mhz=1980, max_sm_mhz=1980, power_w=120.0, power_limit_w=700.0, temperature_c=40, reasons=(),
                     processes=1, own=1)  # the worker alone on the GPU
BUSY_GPU = GpuState(sm_mhz=1410, max_sm_mhz=1980, power_w=698.52, power_limit_w=700.0, temperature_c=61,
                    reasons=("software power cap",), processes=2, own=1)
FAKE_GPU_STATE = BUSY_GPU.describe()  # "SM clock 1410 of 1980 MHz; 699 of 700 W; 61 C; ...; 1 other process on the GPU"


class FakeWorker:
    """Answers like evo.gpu.worker.GpuWorker; PAD == 3 'crashes', UNROLL == 8 with TILE == 8 is 'wrong'."""

    instances = []
    fail_recheck = None  # set to a predicate over params to make the champion's re-check fail
    gpu_state_reply = QUIET_GPU  # what "gpu_state" answers
    sustained_kcycles = None  # params -> k cycles a call under sustained load (default: 1.5 x the fake time)
    sustained_wrong = None  # params -> "" or "WRONG: ..." after the sustained windows

    def __init__(self, cfg, *a, **k):
        self.cfg = cfg
        self.calls = []
        self.info = None
        FakeWorker.instances.append(self)

    def start(self):
        self.info = FAKE_GPU
        return FAKE_GPU

    def stop(self):
        pass

    def call(self, op, timeout_s, **kw):
        from evo.gpu.worker import WorkerFault

        self.calls.append(op)
        cubins = [kw.get("cubin")] + [c for _src, c in (kw.get("extra") or {}).values()]
        for c in cubins:  # like the real worker: a kernel is loaded from its cubin file
            if c is not None and not Path(c).exists():
                raise EvoError(f"cannot load evo_gemm from the cubin: CUDA_ERROR_FILE_NOT_FOUND: {c}")
        if op == "ceilings":
            return {"peak_tflops": 800.0, "bw_gbs": 4000.0, "detail": "fake"}
        if op == "baselines":
            res = {"cublas": BaselineResult("cublas", 50.0), "cublaslt_heuristic": BaselineResult("cublaslt_heuristic", 55.0),
                   "cublaslt_autotune": BaselineResult("cublaslt_autotune", 45.0)}
            for name, (src, _cubin) in (kw.get("extra") or {}).items():
                res[name] = BaselineResult(name, fake_time(KernelSource.parse(src)))
            return {"results": res, "notes": {}, "samples": {}}
        if op == "recheck":  # the champion's re-check before export (evo.sanitize.vet_champion)
            ks = KernelSource.parse(kw["source"])
            if self.fail_recheck and self.fail_recheck(ks.meta.params):
                return {"ok": False, "error": "seed #2: relative error 3e-01 > 1e-02", "shapes": {}}
            return {"ok": True, "error": "", "shapes": {kw["problem"].key: "ok"}}
        if op == "evaluate":
            ks = KernelSource.parse(kw["source"])
            p = ks.meta.params
            if p.get("PAD") == 3:
                raise WorkerFault("crash: illegal address; worker restarted")
            if p.get("UNROLL") == 8 and p.get("TILE") == 8:
                return EvalResult(kw["h"], False, "check", "random inputs #0: relative error 1e+00 > 1e-02")
            return EvalResult(kw["h"], True, "done", check=CheckResult(True, checks=3), time_us=fake_time(ks), cublas_us=50.0)
        if op == "warmup":  # the checker's first use, before the budget (Session.handle_warmup)
            return {"seconds": 0.0, "ok": True, "error": "", "first": False}
        if op == "gpu_state":  # asked when a search starts and after a slow timing window (evo/gpu/gpu_state.py)
            return self.gpu_state_reply
        if op == "sustained":  # the runoff's cold ties back to back (evo/search.py Search._sustained_order)
            out = {}
            for name, (src, _cubin) in kw["extra"].items():
                ks = KernelSource.parse(src)
                us = fake_time(ks)
                kc = self.sustained_kcycles(ks.meta.params) if self.sustained_kcycles else us * 1.5
                out[name] = {"us": us, "sm_mhz": 1500.0, "power_w": 690.0, "kcycles": kc,
                             "detail": self.sustained_wrong(ks.meta.params) if self.sustained_wrong else ""}
            return out
        raise AssertionError(op)


def fake_machine_code(ks) -> str:
    import hashlib
    import re

    from evo.kernel import strip_comments

    code = re.sub(r"\s+", " ", strip_comments(ks.text.split("---*/", 1)[-1]))
    return "fake cubin " + hashlib.sha256(code.encode()).hexdigest()


class FakeCompiler:
    """Compiles nothing; TILE == 32 'fails to compile'. With a cache_dir, each kernel's 'cubin' holds a hash of its
    code without comments and front matter (texts that differ only there 'compile' to the same bytes)."""

    nvcc = "fake-nvcc"

    def __init__(self, cache_dir=None):
        self.compiled = []
        self.cache_dir = cache_dir  # None: every cubin is /dev/null; else one (empty) file per kernel there

    def compile(self, ks, arch, cancel=None):
        self.compiled.append(ks.hash)
        if ks.meta.params.get("TILE") == 32:
            return CompileResult(ks.hash, arch, False, error="error: too many resources requested", log="ptxas error")
        path = "/dev/null"
        if self.cache_dir is not None:
            Path(self.cache_dir).mkdir(parents=True, exist_ok=True)
            path = str(Path(self.cache_dir) / f"{ks.hash}.cubin")
            Path(path).write_text(fake_machine_code(ks))
        return CompileResult(ks.hash, arch, True, cubin_path=path, registers=32)

    def is_cached(self, ks, arch):
        return ks.hash in self.compiled

    def compile_many(self, items, jobs=0, on_done=None, stop=None):
        out = []
        for ks, arch in items:
            if stop is not None and stop():
                break  # like Compiler.compile_many: what is left is dropped
            r = self.compile(ks, arch)
            out.append(r)
            if on_done:
                on_done(r)
        return out


def copy_table_as_other_gpu(out_dir: Path, name: str = "Other_GPU") -> tuple[Path, dict]:
    """Copy the fake GPU's table folder under `out_dir` as another GPU's (its rows' gpu and kernel paths renamed);
    returns that table.json's path and its document, for a test to edit and write back."""
    import json
    import shutil

    shutil.copytree(out_dir / "Fake_GPU", out_dir / name)
    table = out_dir / name / "table.json"
    doc = json.loads(table.read_text())
    for r in doc["rows"]:
        r["gpu"], r["kernel_path"] = name, r["kernel_path"].replace("Fake_GPU/", f"{name}/")
    table.write_text(json.dumps(doc))
    return table, doc
