"""A candidate's host code (``launch: host``) run in a process of its own, stopped between requests.

The host shared object of a candidate is code the search did not write: loaded into the GPU worker it would run
there with the worker's CUDA context and pointers (constructors at ``dlopen``, threads it starts, work it launches
on streams of its own outside the timing window). The evaluator therefore never loads it: ``SandboxedHostLibrary``
starts ``python -m evo.gpu.host_sandbox <lib.so>``, which loads the library and answers ``evo_host_query`` /
``evo_host_params`` requests, and keeps that process stopped (``SIGSTOP``) except while it answers. The worker gets
back plain bytes (the ``EvoHostLaunch`` struct and the parameter block) and checks them as it checks an in-process
answer (``host_launch.queried`` / ``built``); the addresses it passes are numbers there, in another address space
whose CUDA context (the device's primary context of that process, which the driver's tensor-map encoder needs) holds
none of the worker's allocations, streams or modules, so the code cannot touch the inputs, the output or the
worker's streams. Before it loads the library the process forbids itself new processes (``evo.gpu.no_spawn``: a
child forked and detached with ``setsid`` would escape the stop and the kill); its threads still run, stopped with
it. A library that crashes, hangs past the deadline or garbles the replies costs its candidate, not the worker.
What it leaves running on the GPU from its own context while stopped is bounded by its phase (the process is killed
when the kernel is closed) and slows every contender of an interleaved window alike.

Protocol: one JSON line per request on the child's stdin; each reply on the child's original stdout (its fd 1 is
pointed at stderr first, so the library's own prints cannot reach it): ``EVOH`` + status (0: the library answered,
1: it could not be loaded or the request was bad) + the library's return code + three length-prefixed fields (the
struct, the parameter block, a message), little-endian int32s. The sandbox forwards the answer unchecked; the worker
checks it exactly as an in-process one.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..defences import defences_off
from ..errors import EvoError
from ..problem import Problem, parse_shape
from .host_launch import PARAMS_CAP, EvoHostLaunch, HostGeometry, HostLibrary, built, queried
from .no_spawn import forbid_new_processes
from .read_only import forbid_writes

MAGIC = b"EVOH"
SPARE = "--spare"  # in the library's place on the command line: a process started ahead (SandboxSpares)
MAX_MESSAGE = 4096
STRUCT_BYTES = ctypes.sizeof(EvoHostLaunch)


def _frame(status: int, rc: int = 0, struct_bytes: bytes = b"", params: bytes = b"", message: str = "") -> bytes:
    msg = message.encode(errors="replace")[:MAX_MESSAGE]
    return (MAGIC + struct.pack("<ii", status, rc)
            + b"".join(struct.pack("<i", len(x)) + x for x in (struct_bytes, params, msg)))


def _read_exact(fd: int, n: int, deadline: float) -> bytes:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _read_frame(fd: int, deadline: float) -> tuple[int, int, bytes, bytes, str]:
    if _read_exact(fd, 4, deadline) != MAGIC:
        raise ValueError("garbled reply")
    status, rc = struct.unpack("<ii", _read_exact(fd, 8, deadline))
    fields = []
    for cap in (STRUCT_BYTES, PARAMS_CAP, MAX_MESSAGE):
        n = struct.unpack("<i", _read_exact(fd, 4, deadline))[0]
        if not 0 <= n <= cap:
            raise ValueError(f"a reply field of {n} bytes")
        fields.append(_read_exact(fd, n, deadline) if n else b"")
    return status, rc, fields[0], fields[1], fields[2].decode(errors="replace")


def _die_with_parent(parent: int) -> None:
    """In the sandbox, first thing: be killed when the worker that started it dies (a worker killed for a timeout
    must not leave a hung library spinning). Set here, not in a pre-exec hook: the worker has threads, and code run
    between fork and exec may deadlock on a lock one of them held. A parent gone before this ran: exit."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:
        os._exit(0)


class SandboxedHostLibrary:
    """HostLibrary's interface (query, params), answered by the library loaded in a stopped child process."""

    def __init__(self, path: str, timeout_s: float = 30.0, device: int | None = None,
                 spares: SandboxSpares | None = None):
        """device: the CUDA device whose primary context the sandbox makes current (its own, in its own process:
        the driver's tensor-map encoder wants one); None for none (host code that makes no driver call).
        spares: where processes started ahead wait (SandboxSpares): this library takes the oldest and another starts
        for a later one, so the Python start and the context are paid off the caller's path."""
        self.path = path
        self.timeout_s = timeout_s
        self._spares = spares  # where this process is reaped once killed (SandboxSpares.bury); None: here, at once
        self.note = ""  # the ready frame's message: which guard could not be put up, and why ("files: ...")
        spare = spares.take(device) if spares is not None else None
        self.proc, self._err = spare if spare is not None else _start(path, device)
        if spare is not None:  # a process waiting with no library yet: this one's path is its first line
            try:
                self.proc.stdin.write((json.dumps({"op": "load", "path": path}) + "\n").encode())
                self.proc.stdin.flush()
            except OSError:
                pass  # gone: the ready frame's read below says how
        self._request(None)  # the library loaded (or why not)

    def _request(self, req: dict | None) -> tuple[int, bytes, bytes]:
        p = self.proc
        if p is None:
            raise EvoError("the host-code sandbox is closed")
        try:
            if req is not None:
                os.killpg(p.pid, signal.SIGCONT)
                p.stdin.write((json.dumps(req) + "\n").encode())
                p.stdin.flush()
            status, rc, st, params, message = _read_frame(p.stdout.fileno(), time.monotonic() + self.timeout_s)
        except TimeoutError:
            self.close()
            raise EvoError(f"host code did not answer within {self.timeout_s:.0f} s (hung?); its process was killed") from None
        except (EOFError, BrokenPipeError, ProcessLookupError, OSError, ValueError) as e:
            try:
                code = p.wait(timeout=5)  # a crash closes the pipe a moment before the process is gone
            except subprocess.TimeoutExpired:
                code = None
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            tail = self._stderr_tail()
            self.close()
            what = "garbled its reply" if isinstance(e, ValueError) else f"crashed ({how})"
            raise EvoError(f"host code {what}" + (f": {tail}" if tail else "")) from None
        try:
            os.killpg(p.pid, signal.SIGSTOP)  # nothing of it runs between requests:
            os.waitpid(p.pid, os.WUNTRACED)   # stopped (every thread) before the caller goes on
        except (ProcessLookupError, ChildProcessError):
            pass
        if status:
            raise EvoError(message or "host code failed")
        if req is None:
            self.note = message
        return rc, st, params

    def _stderr_tail(self) -> str:
        try:
            self._err.seek(0)
            lines = [x for x in self._err.read().decode(errors="replace").splitlines() if x.strip()]
            return lines[-1][:300] if lines else ""
        except OSError:
            return ""

    @staticmethod
    def _struct(raw: bytes) -> EvoHostLaunch:
        if len(raw) != STRUCT_BYTES:
            raise EvoError(f"host code sent a {len(raw)}-byte launch struct (expected {STRUCT_BYTES})")
        return EvoHostLaunch.from_buffer_copy(raw)

    def query(self, problem: Problem, num_sms: int, args: tuple[int, ...] = ()) -> HostGeometry:
        rc, st, _ = self._request({"op": "query", "shape": problem.key, "sms": num_sms, "args": list(args)})
        return queried(problem, rc, self._struct(st))

    def params(self, problem: Problem, num_sms: int, args: tuple[int, ...], a: int, b: int, c: int,
               workspace: int) -> tuple[HostGeometry, ctypes.Array]:
        rc, st, raw = self._request({"op": "params", "shape": problem.key, "sms": num_sms, "args": list(args),
                                     "ptrs": [int(a), int(b), int(c), int(workspace)]})
        return built(problem, rc, self._struct(st), raw)

    def close(self) -> None:
        p, self.proc = getattr(self, "proc", None), None
        err, self._err = getattr(self, "_err", None), None
        spares = getattr(self, "_spares", None)
        if p is not None and spares is not None:
            spares.bury(p, err)
        elif p is not None:
            _kill(p, err)
        elif err is not None:
            err.close()

    def __del__(self) -> None:
        self.close()


def _start(path: str | None, device: int | None) -> tuple[subprocess.Popen, Any]:
    """A sandbox process for the library at `path`, or with None one that starts (its interpreter, the device's
    context) and waits for the path on its first line: a spare (SandboxSpares). Its stderr goes to a temporary file."""
    err = tempfile.TemporaryFile()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the evo package
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    argv = [sys.executable, "-m", "evo.gpu.host_sandbox", f"--parent={os.getpid()}", path or SPARE] \
        + ([] if device is None else [str(int(device))])
    try:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                start_new_session=True), err
    except OSError as e:
        err.close()
        raise EvoError(f"cannot start the host-code sandbox: {e}") from None


@dataclass
class _Spare:
    device: int | None  # whose primary context it made current
    proc: subprocess.Popen
    err: Any            # its stderr's temporary file


class SandboxSpares:
    """Sandbox processes started ahead for the next candidate libraries, per worker. Starting one (an interpreter, its
    imports, the device's primary context) took most of a CUTLASS candidate's evaluation: a median 0.75 s against
    0.04 s for a kernel launched without host code, 76 % of a sweep's evaluation time on an H200 (docs/perf-search.md).
    Every phase of an evaluation (the check, the screening window, the full window) loads the candidate anew, so one
    evaluation takes two to four in a row: `depth` of them wait (started in parallel, each topped up as one is taken);
    with one, the second and third phases waited for a start (0.50 s a CUTLASS evaluation). A spare holds no candidate
    code until it is taken: each library still gets a process of its own, loaded only then, stopped between requests
    and killed with its kernel. Each holds a CUDA context of its own on the device. A library's process, killed when
    its phase ends, is reaped later (bury): its exit (the driver tearing its context down) took 0.1 s a phase."""

    def __init__(self, depth: int = 1) -> None:
        self.depth = max(0, int(depth))
        self._spares: list[_Spare] = []  # oldest first
        self._dying: list[tuple[subprocess.Popen, Any]] = []  # killed, not yet reaped

    def bury(self, proc: subprocess.Popen, err: Any) -> None:
        """A library's process done with: its session killed now (none of its code runs past this), its exit
        reaped later, by take or close, so the next phase does not wait on it."""
        _signal_kill(proc)
        _close(proc.stdin, proc.stdout)
        self._dying.append((proc, err))
        self._reap(block=False)

    def _reap(self, block: bool) -> None:
        left = []
        for proc, err in self._dying:
            if block:
                proc.wait()
            if proc.poll() is None:
                left.append((proc, err))
            else:
                _close(err)
        self._dying = left

    def take(self, device: int | None) -> tuple[subprocess.Popen, Any] | None:
        """The oldest waiting process for `device` (None where there is none: all died, or wait for another device,
        killed then), and the waiting ones topped up to `depth`."""
        self._reap(block=False)
        got, keep = None, []
        for spare in self._spares:
            if spare.device != device or spare.proc.poll() is not None:
                _kill(spare.proc, spare.err)
            elif got is None:
                got = spare
            else:
                keep.append(spare)
        self._spares = keep
        while len(self._spares) < self.depth:
            try:
                self._spares.append(_Spare(device, *_start(None, device)))
            except EvoError:
                break  # none more ahead: the next library starts its own (and says why if that fails too)
        return None if got is None else (got.proc, got.err)

    def close(self) -> None:
        """Every spare killed, then every process reaped: the exits (contexts torn down) overlap."""
        spares, self._spares = self._spares, []
        for spare in spares:
            self.bury(spare.proc, spare.err)
        self._reap(block=True)

    def __del__(self) -> None:
        self.close()


def _kill(proc: subprocess.Popen, err: Any) -> None:
    """A sandbox process and its session gone, its pipes and stderr file closed."""
    _signal_kill(proc)
    proc.wait()
    _close(proc.stdin, proc.stdout, err)


def _signal_kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its session: threads and any children it started
    except (ProcessLookupError, PermissionError):
        pass


def _close(*files: Any) -> None:
    for f in files:
        try:
            if f is not None:
                f.close()
        except OSError:
            pass


def _context(device: int) -> None:
    """Make the device's primary context current on this thread: cuTensorMapEncodeTiled (a CUTLASS kernel's TMA
    descriptors) fails with CUDA_ERROR_INVALID_CONTEXT without one. This process's own context: the worker's
    allocations, streams and modules are not in it."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), device) == 0 \
            and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0:
        cu.cuCtxSetCurrent(ctx)


def serve(path: str | None, device: int | None = None, parent: int = 0) -> int:
    """The sandbox process: load the library, then answer requests until stdin closes. path None: a spare, which
    makes the device's context current first and then reads the library's path from its first line."""
    _die_with_parent(parent)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # the library's prints go to stderr, never into a reply
    if device is not None:
        _context(device)
    # no process of the library's outlives the candidate: it cannot start one (the driver's own threads, started
    # above, and the library's threads are unaffected), nor reach into another's memory, nor change a file (but the
    # device files); put up before a spare waits (off the caller's path); the ready frame says why where a guard
    # could not be put up
    off = defences_off()
    why = {"processes": forbid_new_processes("host_no_spawn" not in off, "host_no_trace" not in off),
           "files": "" if "host_read_only" in off else forbid_writes()}
    guard = "; ".join(f"{what}: {reason}" for what, reason in why.items() if reason)
    if path is None:
        first = sys.stdin.buffer.readline()
        if not first:
            return 0  # never taken
        try:
            path = str(json.loads(first)["path"])
        except (ValueError, KeyError, TypeError) as e:
            out.write(_frame(1, message=f"bad request: {e}"))
            return 0
    try:
        lib = HostLibrary(path)
    except EvoError as e:
        out.write(_frame(1, message=str(e)))
        return 0
    out.write(_frame(0, message=guard))
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            p = parse_shape(req["shape"])
            args = tuple(int(x) for x in req["args"])
            if req["op"] == "query":
                (rc, st), raw = lib.raw_query(p, int(req["sms"]), args), b""
            else:
                rc, st, raw = lib.raw_params(p, int(req["sms"]), args, *(int(x) for x in req["ptrs"]))
            # as the library answered: the caller checks it (host_launch.queried / built), as it would in-process
            out.write(_frame(0, rc, ctypes.string_at(ctypes.addressof(st), STRUCT_BYTES), raw))
        except (ValueError, KeyError, TypeError) as e:
            out.write(_frame(1, message=f"bad request: {e}"))
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    parent = int(argv.pop(0).split("=", 1)[1]) if argv and argv[0].startswith("--parent=") else 0
    if len(argv) not in (1, 2):
        sys.stderr.write(f"usage: python -m evo.gpu.host_sandbox [--parent=PID] (LIBRARY.so | {SPARE}) [DEVICE]\n")
        raise SystemExit(2)
    raise SystemExit(serve(None if argv[0] == SPARE else argv[0], int(argv[1]) if len(argv) == 2 else None, parent))
