"""One instance of a GPU call per CUDA stream, for calls that own device state (evo.dispatch).

A loaded evo kernel keeps its split-K partial sums and arrival counters in a workspace of its own, and a bound cuBLASLt
algorithm its workspace: both are safe while calls run in one stream's order, but two streams running the same shape
at once would share them (wrong sums, or a reduce-scatter's splits waiting on counts the other launch moved). cuBLAS
keeps its workspace per stream itself. `StreamLocal` gives each stream that calls it an instance of its own, made on
that stream's first call (a kernel: its module loaded again with a zeroed workspace; cuBLASLt: a workspace bound
again), and reuses it after that; the instance the dispatcher loaded and checked serves the first stream that calls.

While a stream is capturing a CUDA graph nothing new is made (loading a module or allocating memory is not allowed
inside a global-mode capture): the captured call uses the first instance, as every call did before, so branches of
one graph that run the same shape concurrently still share it. Past `cap` streams the first instance serves too,
with one RuntimeWarning (streams created per call would otherwise pile up modules and workspaces).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

Fn = Callable[[Any, Any, Any], None]


class StreamLocal:
    """A call of C = A.B^T that runs, on each CUDA stream, an instance of its own (see the module doc)."""

    def __init__(self, first: Fn, make: Callable[[], Fn], stream: Callable[[], int],
                 capturing: Callable[[int], bool], cap: int = 8):
        """first: the instance already made (loaded, checked); make: a new instance; stream: the current stream's
        handle; capturing: whether that stream is capturing a graph (an error counts as capturing); cap: most
        instances kept."""
        self.first = first
        self._make = make
        self._stream = stream
        self._capturing = capturing
        self.cap = max(1, cap)
        self._fns: dict[int, Fn] = {}
        self._lock = threading.Lock()
        self._warned = False

    @property
    def instances(self) -> int:
        """Instances made so far (the first included once a stream has called it)."""
        return len({id(f) for f in self._fns.values()})

    def __call__(self, a: Any, b: Any, c: Any) -> None:
        s = self._stream()
        fn = self._fns.get(s)
        if fn is None:
            fn = self._for_new_stream(s)
        fn(a, b, c)

    def _for_new_stream(self, s: int) -> Fn:
        with self._lock:
            fn = self._fns.get(s)
            if fn is not None:  # another thread made it meanwhile
                return fn
            if not self._fns:
                self._fns[s] = self.first
                return self.first
            try:
                capturing = bool(self._capturing(s))
            except Exception:  # noqa: BLE001 - e.g. the legacy stream queried during another stream's global capture
                capturing = True
            if capturing:
                return self.first  # not kept: once the capture ends, this stream gets its own instance
            if self.instances >= self.cap:
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"evo.dispatch: more than {self.cap} CUDA streams called one shape's kernel; "
                                  f"streams beyond them share the first stream's instance (dispatch.stream_instances): "
                                  "keep their calls of this shape in one order", RuntimeWarning, stacklevel=3)
                self._fns[s] = self.first
                return self.first
            fn = self._make()
            self._fns[s] = fn
            return fn
