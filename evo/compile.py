"""Compile candidates to cubins with nvcc, in parallel, cached, with the ptxas report and compile gates.

Why nvcc and not NVRTC: nvcc's ptxas report (-Xptxas -v: registers, shared memory,
spills, stack frame, the C7510 "wgmma serialized" warning) is what the compile gate
reads; `-gencode=arch=compute_90a,code=sm_90a` builds wgmma/setmaxnreg code; and the
same command runs in CI without a GPU. The cubin is loaded with cupy.RawModule(path=...).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import resource
import shutil
import subprocess
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .config import CompileConfig
from .errors import EvoError
from .kernel import KernelSource
from .ptx_checks import RULES as PTX_RULES
from .records import CompileResult

_REGS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_C7510 = re.compile(r"C7510|wgmma\.mma_async instructions are serialized")
CANCELLED = "cancelled: the caller stopped the compiles (a search's budget was spent)"
_USES_HEADERS = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"](?:cute|cutlass)/', re.M)  # code built against include_dirs
_CANCELLED_RC = -2


@dataclass(frozen=True)
class Compiler:
    """nvcc with fixed flags; `compile` is safe to call from many threads."""

    nvcc: str
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    cache_dir: Path
    timeout_s: float
    memory_mb: int
    reject_spills: bool
    ptx_checks: bool = True  # evo.ptx_checks on the PTX nvcc -keep leaves (off only through EVO_TEST_DEFENCES_OFF)
    headers: str = ""  # the release the include dirs hold (nvidia-cutlass's version): keys the code that includes them
    locks: dict = field(default_factory=dict, compare=False, repr=False)  # cache key -> lock, per compiler

    @staticmethod
    def from_config(cfg: CompileConfig) -> "Compiler":
        nvcc = find_nvcc()
        flags = list(cfg.flags)
        if cfg.max_registers:
            flags.append(f"-maxrregcount={cfg.max_registers}")
        return Compiler(
            nvcc=nvcc,
            flags=tuple(flags),
            include_dirs=tuple(cutlass_include_dirs()),
            cache_dir=Path(cfg.cache_dir),
            timeout_s=cfg.timeout_s,
            memory_mb=cfg.memory_mb,
            reject_spills=cfg.reject_spills,
            ptx_checks=_ptx_checks_on(),
            headers=cutlass_headers_release(),
        )

    def key(self, ks: KernelSource, arch: str) -> str:
        """The cache key: the code nvcc compiles (not the front matter), the target and the flags; for code that
        includes CUTLASS / CuTe headers also where they are and which release, so a result got without them (a
        machine where the wheel was missing: "cute/tensor.hpp: No such file") or from another release is not
        replayed once they change."""
        headers = (f"|headers={self.headers}@{';'.join(self.include_dirs)}"
                   if _USES_HEADERS.search(ks.text) else "")
        h = hashlib.sha256((f"{ks.code_hash}|{arch}|{' '.join(self.flags)}|{self.reject_spills}"
                            + (f"|ptx-rules={PTX_RULES}" if self.ptx_checks else "|no-ptx-checks")
                            + ("|host-so" if ks.meta.launch == "host" else "") + headers).encode())
        return h.hexdigest()[:20]

    def _key_lock(self, key: str) -> threading.Lock:
        with self.locks.setdefault("", threading.Lock()):
            return self.locks.setdefault(key, threading.Lock())

    def command(self, cu: Path, cubin: Path, arch: str, keep_dir: Path | None = None,
                host_so: Path | None = None) -> list[str]:
        """host_so: (launch: host) build the host shared object there instead; the cubin is then the one nvcc
        leaves in keep_dir (one nvcc run compiles the device code once for both)."""
        code = arch.replace("sm_", "")
        out = ["--cubin"] if host_so is None else ["-shared", "-Xcompiler", "-fPIC"]
        cmd = [self.nvcc, *out, f"-gencode=arch=compute_{code},code=sm_{code}", "-Xptxas", "-v",
               *self.flags, "-o", str(cubin if host_so is None else host_so), str(cu)]
        if host_so is not None:
            cmd.append("-ldl")  # host code may resolve driver entry points (cuTensorMapEncodeTiled) with dlopen
        if keep_dir is not None:  # the PTX (and nvcc's other intermediates) for evo.ptx_checks
            cmd[1:1] = ["-keep", "-keep-dir", str(keep_dir)]
        for inc in self.include_dirs:
            cmd.insert(1, f"-I{inc}")
        return cmd

    def is_cached(self, ks: KernelSource, arch: str) -> bool:
        """Whether the cache holds this kernel's result for arch (compiled or failed): `compile` would return at once."""
        return (self.cache_dir / arch / f"{self.key(ks, arch)}.json").is_file()

    def compile(self, ks: KernelSource, arch: str, cancel: threading.Event | None = None) -> CompileResult:
        """cancel: once set, a compile not finished is killed and returns error CANCELLED (nothing cached)."""
        if arch not in ks.meta.archs:
            return CompileResult(ks.hash, arch, False, error=f"family {ks.meta.family} does not claim {arch}")
        key = self.key(ks, arch)
        lock = self._key_lock(key)  # two candidates with the same code compile once
        while not lock.acquire(timeout=0.2):  # held by another thread compiling the same code (evo.compile_ahead)
            if cancel is not None and cancel.is_set():  # a stopped search does not wait for that compile to finish
                return CompileResult(ks.hash, arch, False, error=CANCELLED)
        try:
            if cancel is not None and cancel.is_set():
                return CompileResult(ks.hash, arch, False, error=CANCELLED)
            res = self._compile(ks, arch, key, cancel)
        finally:
            lock.release()
        res.hash = ks.hash  # a cache entry may have been made for another candidate with the same code
        return res

    def _compile(self, ks: KernelSource, arch: str, key: str, cancel: threading.Event | None = None) -> CompileResult:
        folder = self.cache_dir / arch
        folder.mkdir(parents=True, exist_ok=True)
        meta_path, cubin = folder / f"{key}.json", folder / f"{key}.cubin"
        host = ks.meta.launch == "host"
        so = cubin.with_suffix(".so")
        if meta_path.is_file():
            try:
                res = CompileResult(**json.loads(meta_path.read_text()))
                if not res.ok or (cubin.is_file() and (not host or so.is_file())):
                    res.cached = True
                    res.cubin_path = str(cubin) if res.ok else ""
                    return res
            except (ValueError, TypeError):
                pass  # a torn or old cache entry: compile again
        cu = folder / f"{key}.cu"
        cu.write_text(ks.text)
        tmp_cubin = folder / f"{key}.{os.getpid()}.tmp.cubin"
        t0 = time.monotonic()
        limit = self.memory_mb * 1024 * 1024

        def _limits() -> None:  # runs in the child: cap its address space
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        keep = folder / f"{key}.{os.getpid()}.{threading.get_ident()}.keep" if self.ptx_checks or host else None
        if keep is not None:
            keep.mkdir(exist_ok=True)
        tmp_so = folder / f"{key}.{os.getpid()}.{threading.get_ident()}.tmp.so" if host else None
        try:
            log, rc = run_capped(self.command(cu, tmp_cubin, arch, keep, tmp_so), self.timeout_s, _limits, "nvcc",
                                 cancel)
            if rc == _CANCELLED_RC:  # not a result: nothing is cached, a later run compiles it again
                tmp_cubin.unlink(missing_ok=True)
                if tmp_so is not None:
                    tmp_so.unlink(missing_ok=True)
                return CompileResult(ks.hash, arch, False, error=CANCELLED, seconds=time.monotonic() - t0)
            if host and rc == 0:  # the device code of the shared object, as nvcc -keep left it
                rc, log = take_kept_cubin(keep, cu, tmp_cubin, rc, log)
            ptx_error = ptx_gate(keep) if self.ptx_checks and keep is not None and rc == 0 else ""
        finally:
            if keep is not None:
                shutil.rmtree(keep, ignore_errors=True)
        res = parse_ptxas(ks.hash, arch, log)
        res.seconds = time.monotonic() - t0
        if rc != 0:
            res.ok = False
            res.error = first_error(log) or f"nvcc exited with code {rc}"
            if rc != -1 and limit and any(m in log for m in ("bad_alloc", "out of memory", "Out of memory", "memory exhausted")):
                res.error = f"nvcc ran out of memory (cap {self.memory_mb} MB): {res.error}"[:300]
        else:
            res.ok, res.error = gate(res, log, self.reject_spills)
            if res.ok and ptx_error:
                res.ok, res.error = False, ptx_error
        if res.ok:
            if tmp_so is not None:
                os.replace(tmp_so, so)  # before the cubin: a cubin in the cache means its .so is there too
            os.replace(tmp_cubin, cubin)
            res.cubin_path = str(cubin)
        else:
            tmp_cubin.unlink(missing_ok=True)
            if tmp_so is not None:
                tmp_so.unlink(missing_ok=True)
        tmp_meta = meta_path.with_suffix(f".{os.getpid()}.tmp")
        tmp_meta.write_text(json.dumps(res.to_dict()))
        os.replace(tmp_meta, meta_path)  # atomic: a kill never leaves a half-written entry
        return res

    def compile_many(self, items: Iterable[tuple[KernelSource, str]], jobs: int = 0,
                     on_done: Callable[[CompileResult], None] | None = None,
                     stop: Callable[[], bool] | None = None) -> list[CompileResult]:
        """Compile every item on `jobs` threads; results in the items' order. `on_done` runs in the calling thread
        as each compile finishes, in the order they finish: a slow compile (a CUTLASS instance: 30-70 s) never holds
        back the evaluation of the quick ones queued after it, so a search's budget is spent timing kernels, not
        waiting behind one. `stop` is asked after each result and at least every half second: once it says so, the
        queued compiles are dropped and the running ones killed (a search whose budget is spent does not keep its
        GPU idle while they finish); those items are left out of the returned list and never reach `on_done`."""
        items = list(items)
        jobs = jobs or os.cpu_count() or 1
        out: list[CompileResult | None] = [None] * len(items)
        cancel = threading.Event()
        extra = {"cancel": cancel} if stop is not None else {}

        def drop(pending: set) -> None:
            cancel.set()
            for fut in pending:
                fut.cancel()  # the queued ones; the running ones see `cancel` and kill their nvcc

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            index = {pool.submit(self.compile, *it, **extra): i for i, it in enumerate(items)}
            pending = set(index)
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.5 if stop is not None else None,
                                         return_when=FIRST_COMPLETED)
                    for fut in sorted(done, key=index.__getitem__):
                        if fut.cancelled():
                            continue
                        res = fut.result()
                        if res.error == CANCELLED:
                            continue
                        out[index[fut]] = res
                        if on_done:
                            on_done(res)
                    if stop is not None and not cancel.is_set() and pending and stop():
                        drop(pending)
            except BaseException:  # Ctrl-C or a failing on_done: do not wait for the rest of the queue to compile
                drop(pending)
                raise
        return [r for r in out if r is not None]


def run_capped(cmd: list[str], timeout_s: float, preexec, what: str,
               cancel: threading.Event | None = None) -> tuple[str, int]:
    """Run cmd in its own process group; past timeout_s, or once `cancel` is set (rc -2), the whole group (nvcc
    and the cudafe++/cicc/ptxas it started) is killed: killing nvcc alone leaves its children running and
    holding the output pipes."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=preexec, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    poll = 0.25 if cancel is not None else timeout_s  # how often `cancel` is looked at
    while True:
        try:
            out, _ = proc.communicate(timeout=max(0.0, min(deadline - time.monotonic(), poll)))
            return out or "", proc.returncode
        except subprocess.TimeoutExpired:
            cancelled = cancel is not None and cancel.is_set()
            if not cancelled and time.monotonic() < deadline:
                continue  # output is not lost across retried communicate() calls
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            if cancelled:
                return f"{what} was cancelled", _CANCELLED_RC
            return f"{what} ran longer than {timeout_s:g} s and was killed", -1


def take_kept_cubin(keep: Path, cu: Path, cubin: Path, rc: int, log: str) -> tuple[int, str]:
    """Move the cubin nvcc -keep left for ``cu`` (``<stem>.cubin``, or ``<stem>.<arch>.cubin``) to ``cubin``."""
    found = sorted(p for p in keep.glob(f"{cu.stem}*.cubin") if "dlink" not in p.name)
    if not found:
        return 1, log + f"\nnvcc -keep left no device cubin for {cu.name} in {keep}"
    os.replace(found[0], cubin)
    return rc, log


def host_library(cubin_path: str) -> str:
    """The host shared object compiled beside a launch: host candidate's cubin in the cache."""
    return str(Path(cubin_path).with_suffix(".so"))


def find_nvcc() -> str:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and Path(cand).is_file():
            return cand
    raise EvoError("nvcc not found: install the CUDA toolkit or set NVCC=/path/to/nvcc")


def toolkit_tool(name: str, *subdirs: str) -> str:
    """A CUDA toolkit executable (evo.sanitize's compute-sanitizer, evo.profile's ncu): on PATH, else in bin/ (or the
    given subfolders) of $CUDA_HOME, $CUDA_PATH or /usr/local/cuda, else beside nvcc; "" if none."""
    cands = [shutil.which(name)]
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            cands += [str(Path(root) / d / name) for d in ("bin", *subdirs)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(str(Path(nvcc).resolve().parent / name))
    return next((c for c in cands if c and Path(c).is_file() and os.access(c, os.X_OK)), "")


def cutlass_include_dirs() -> list[str]:
    """CUTLASS/CuTe headers shipped in the nvidia-cutlass wheel (cutlass_library/source/include)."""
    try:
        import cutlass_library  # type: ignore
    except ImportError:
        return []
    inc = Path(cutlass_library.__file__).parent / "source" / "include"
    return [str(inc)] if inc.is_dir() else []


def cutlass_headers_release() -> str:
    """The installed nvidia-cutlass release ("" without it): part of the cache key of code built on its headers."""
    try:
        return importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return ""


def parse_ptxas(h: str, arch: str, log: str) -> CompileResult:
    res = CompileResult(hash=h, arch=arch, ok=True, log=log[-20000:])
    if m := _REGS.findall(log):
        res.registers = max(int(x) for x in m)
    if m := _SMEM.findall(log):
        res.smem_static = max(int(x) for x in m)
    for st in _STACK.findall(log):
        res.stack_bytes = max(res.stack_bytes, int(st[0]))
        res.spill_bytes = max(res.spill_bytes, int(st[1]) + int(st[2]))
    return res


def _ptx_checks_on() -> bool:
    from .defences import defences_off

    return "ptx_checks" not in defences_off()


def ptx_gate(keep_dir: Path) -> str:
    """The static PTX gate (evo.ptx_checks) on what nvcc -keep left: '' or the one-line rejection."""
    from .ptx_checks import check_dir, gate_message

    return gate_message(check_dir(keep_dir))


def gate(res: CompileResult, log: str, reject_spills: bool) -> tuple[bool, str]:
    """The compile gate: what makes a kernel not worth timing even though it built."""
    if _C7510.search(log):
        return False, "ptxas C7510: wgmma serialized (a device assert or call inside the MMA loop?)"
    if reject_spills and res.spill_bytes:
        return False, f"ptxas: {res.spill_bytes} bytes of register spills"
    if reject_spills and res.stack_bytes:
        return False, f"ptxas: {res.stack_bytes} bytes stack frame (local memory)"
    return True, ""


def first_error(log: str) -> str:
    for line in log.splitlines():
        if " error" in line or line.startswith("error") or "fatal" in line:
            return " ".join(line.split())[:300]
    lines = [l for l in log.splitlines() if l.strip()]
    return " ".join(lines[-1].split())[:300] if lines else ""


def stored_cubin(compiler: Compiler, store, source: str, arch: str) -> str:
    """The cubin of an archived candidate on this machine.

    The archive's compile record points into the compile cache of the machine that built it; after the archive
    moves to another machine (or the cache is cleared) that file is gone, so the source is compiled again
    (through the cache) and the record updated. EvoError if it no longer compiles."""
    ks = KernelSource.parse(source)
    rec = store.compile_result(ks.hash, arch)
    if rec is not None and rec.ok and rec.cubin_path and Path(rec.cubin_path).exists():
        return rec.cubin_path
    r = compiler.compile(ks, arch)
    store.add_compile(r)
    if not r.ok:
        raise EvoError(f"kernel {ks.hash[:10]} does not compile here: {r.error}")
    return r.cubin_path
