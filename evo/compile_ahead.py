"""Compiles ahead of the search: kernels a search is going to time, compiled in the background into the shared cache.

Why: a CUTLASS SM90 instance takes 40-70 s of nvcc, and a shape's search met two of those waits one after the other
with the GPU idle: the library-tile seeds (compiled when the seeds are timed) and then the family starts refitted to
the shape (compiled in the first generation). At 0.3 minutes of budget a sweep spent 1.4-3.1 minutes per shape, most
of it in those two waits (docs/perf-search.md). The starts of a shape, refitted or not, do not depend on anything
the GPU measures, so they can compile while the seeds do, and those of the shape a sweep's GPU likely takes next
while this one is searched. A search also hands its slow generation children here (evo.search, `compile.defer_s`)
and times them once they land. A compile here goes through the same `Compiler` (one cache, one lock per kernel): a
search that reaches a kernel still compiling here waits for that compile instead of starting a second one.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from .compile import CANCELLED
from .kernel import KernelSource

if TYPE_CHECKING:
    from .config import CompileConfig


@dataclass
class AheadCounts:
    """What the background compiles did: submitted (distinct kernels), compiled anew, found in the cache, failed."""

    submitted: int = 0
    compiled: int = 0
    cached: int = 0
    failed: int = 0

    def __add__(self, other: AheadCounts) -> AheadCounts:
        return AheadCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def line(self) -> str:
        return (f"compiled ahead: {self.submitted} kernels submitted, {self.compiled} compiled, {self.cached} already "
                f"cached, {self.failed} failed")


class CompileAhead:
    """A bounded background queue of compiles into a compiler's cache. Nothing is evaluated here; what finishes is
    cached for whoever compiles the same kernel next. `close` drops the queue and kills the running compiles.
    As many compiles run here as the search's own (`compile.jobs`, 0: the CPUs), each nvcc at niceness `nice`
    (`compile.ahead_nice`): the search's compiles take the CPUs when they run, and the background every CPU they
    leave idle. Half the CPUs at the search's priority could not keep up with a 0.3-minute sweep's CUTLASS seeds and
    starts: later shapes waited 15-31 s for starts queued two shapes earlier (docs/perf-search.md)."""

    def __init__(self, compiler, jobs: int = 0, nice: int = 0):
        self.compiler = compiler
        self.workers = max(1, jobs or os.cpu_count() or 1)
        self.nice = nice
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="ahead", initializer=self._lower)
        self.cancel = threading.Event()
        self.seen: set[tuple[str, str]] = set()
        self.queued: list[tuple[Future, KernelSource, str, float]] = []  # compiles queued, with their rank (finished ones pruned)
        self.counts = AheadCounts()
        self.failures: list[str] = []  # "hash family: error" of the failed compiles not yet reported (take_failures)
        self.lock = threading.Lock()

    @classmethod
    def from_config(cls, compiler, cfg: CompileConfig) -> CompileAhead | None:
        """The background queue a search or a sweep's GPU runs with `compile` config cfg (None where `ahead` is off)."""
        return cls(compiler, cfg.jobs, cfg.ahead_nice) if cfg.ahead else None

    def submit(self, sources: list[str], arch: str, rank: float = 0.0) -> int:
        """Queue the kernels (full texts) not queued before, in order; returns how many were new. rank: a list goes
        ahead of the queued compiles of a lower rank that no worker has started (they go back behind it, in their
        order), and a kernel of it queued before at a lower rank and not started moves up to its place; among equal
        ranks, first in, first out. A search passes the time it started, so the newest search's kernels go first."""
        parsed = []
        for text in sources:
            ks = KernelSource.parse(text)
            if arch in ks.meta.archs and not self.cancel.is_set():
                parsed.append(ks)
        with self.lock:
            # take back what no worker has started (cancel() fails on a running or finished compile)
            held = [(k, a, r) for f, k, a, r in self.queued if r < rank and f.cancel()]
            self.queued = [q for q in self.queued if not q[0].done()]
            taken = {(k.hash, a) for k, a, _ in held}
            self.seen -= taken
            n = 0
            for ks in parsed:
                if (ks.hash, arch) not in self.seen:
                    self._queue(ks, arch, rank)
                    n += (ks.hash, arch) not in taken  # a kernel taken back and queued again is not new
            for ks, a, r in held:
                if (ks.hash, a) not in self.seen:
                    self._queue(ks, a, r)
            self.counts.submitted += n
        return n

    def withdraw(self, hashes: set[str], arch: str) -> int:
        """Drop these kernels' compiles that no worker has started (a search that stopped with them still queued:
        the next search's compiles need the workers); returns how many were dropped. Running ones finish."""
        with self.lock:
            dropped = [(f, k, a, r) for f, k, a, r in self.queued if k.hash in hashes and a == arch and f.cancel()]
            self.queued = [q for q in self.queued if not q[0].cancelled()]
            self.seen -= {(k.hash, a) for _, k, a, _ in dropped}
        return len(dropped)

    def _lower(self) -> None:
        """A worker thread's niceness, raised by `nice` (Linux keeps one per thread; the nvcc it starts inherits it).
        Where the system refuses, the compiles run at the search's priority."""
        if self.nice > 0:
            try:
                mine = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's (who 0: the calling thread)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), mine + self.nice)
            except (AttributeError, OSError):
                pass

    def _queue(self, ks: KernelSource, arch: str, rank: float) -> None:
        self.seen.add((ks.hash, arch))
        self.queued.append((self.pool.submit(self._one, ks, arch), ks, arch, rank))

    def _one(self, ks: KernelSource, arch: str) -> None:
        if self.cancel.is_set():
            return
        res = self.compiler.compile(ks, arch, cancel=self.cancel)
        if res.error == CANCELLED:
            return
        with self.lock:
            if not res.ok:
                self.counts.failed += 1
                self.failures.append(f"{ks.hash[:10]} {ks.meta.family}: {(res.error or 'failed').splitlines()[0][:200]}")
            elif res.cached:
                self.counts.cached += 1
            else:
                self.counts.compiled += 1

    def take_failures(self) -> list[str]:
        """The failed compiles since the last call, one line each (a shared queue's failures reach one log only)."""
        with self.lock:
            out, self.failures = self.failures, []
        return out

    def snapshot(self) -> AheadCounts:
        """The counts as they stand (a copy: the background threads keep counting)."""
        with self.lock:
            return replace(self.counts)

    def wait(self, timeout: float | None = None) -> None:
        """Block until every queued compile has finished (tests; a caller that wants the cache filled)."""
        wait([q[0] for q in self.queued], timeout=timeout)

    def close(self) -> None:
        self.cancel.set()
        for q in self.queued:
            q[0].cancel()
        self.pool.shutdown(wait=True)
