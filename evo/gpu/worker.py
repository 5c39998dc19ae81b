"""The parent's handle on the GPU worker process.

The worker owns the CUDA context. A request that outlives its deadline, or a crash
that kills or poisons the worker, is reported as a WorkerFault; the worker is then
killed and a fresh one started, so one bad kernel never takes the search down.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
from typing import Any

from ..config import Config
from ..errors import EvoError, NoGpuError
from ..problem import GpuInfo


class WorkerFault(Exception):
    """The request killed, hung or poisoned the worker; it has been restarted."""


def _worker_main(serve, conn, cfg_dict: dict, device_id: int) -> None:
    """The worker process: Ctrl-C (SIGINT to the foreground process group) is the parent's to handle. The parent
    stores what it has and exits, which ends this daemon process; a worker interrupted mid-request would instead
    die with a traceback on the terminal and its measurement lost."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(conn, cfg_dict, device_id)


class GpuWorker:
    def __init__(self, cfg: Config, device_id: int = 0, start_timeout_s: float = 180.0, serve_target=None,
                 probe: bool = True):
        """serve_target: the worker's main function (tests pass a stand-in); probe: check for a GPU in
        this process first, so a machine without one fails at once with one line."""
        self.cfg = cfg
        self.serve_target = serve_target
        self.probe = probe
        self.device_id = device_id
        self.start_timeout_s = start_timeout_s
        self.ctx = mp.get_context("spawn")
        self.proc: mp.Process | None = None
        self.conn = None
        self.info: GpuInfo | None = None
        self.restarts = 0

    def start(self) -> GpuInfo:
        if self.probe and self.serve_target is None:
            from .device import require_gpu

            require_gpu()
        parent, child = self.ctx.Pipe()
        if self.serve_target is None:
            from .session import serve  # imported here only for its module path; runs in the child
        else:
            serve = self.serve_target

        self.proc = self.ctx.Process(target=_worker_main, args=(serve, child, self.cfg.to_dict(), self.device_id),
                                     daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout_s):
            self.stop()
            raise EvoError(f"the GPU worker did not start within {self.start_timeout_s:.0f} s")
        try:
            msg = parent.recv()
        except EOFError:
            code = self.proc.exitcode
            self.stop()
            raise EvoError(f"the GPU worker died while starting (exit code {code})") from None
        if msg[0] != "ok":
            self.stop()
            if "no CUDA GPU" in msg[1]:
                raise NoGpuError(msg[1])
            raise EvoError(msg[1])
        self.info = msg[1]
        return self.info

    def stop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self.proc is not None:
            self.proc.join(timeout=2)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=5)
        self.proc = None
        self.conn = None

    def restart(self) -> None:
        self.stop()
        self.restarts += 1
        self.start()

    def call(self, op: str, timeout_s: float, **kwargs: Any) -> Any:
        """Run one request; raise WorkerFault (after restarting) if it hangs or crashes, EvoError if it failed cleanly."""
        if self.proc is None or not self.proc.is_alive():
            self.start()
        assert self.conn is not None
        t0 = time.monotonic()
        try:
            self.conn.send((op, kwargs))
        except (OSError, BrokenPipeError):
            self.restart()
            raise WorkerFault("the GPU worker was gone; restarted") from None
        if not self.conn.poll(timeout_s):
            self.proc.kill() if self.proc else None
            self.restart()
            raise WorkerFault(f"timeout: no answer within {timeout_s:.0f} s (hung kernel?); worker killed and restarted")
        try:
            msg = self.conn.recv()
        except (EOFError, OSError):
            if self.proc is not None:
                self.proc.join(timeout=5)  # reap it, so its exit status is known
            code = self.proc.exitcode if self.proc else None
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            self.restart()
            raise WorkerFault(f"crash: the GPU worker died ({how}) after {time.monotonic() - t0:.1f} s; restarted") from None
        if msg[0] == "ok":
            return msg[1]
        _, detail, fatal = msg
        if fatal:
            self.restart()
            raise WorkerFault(f"crash: {detail}; worker restarted")
        raise EvoError(detail)

    def __enter__(self) -> "GpuWorker":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
