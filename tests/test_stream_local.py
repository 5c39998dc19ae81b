"""evo.stream_local: one instance of a GPU call per CUDA stream (streams and captures faked)."""
from __future__ import annotations

import threading
import time
import warnings
from types import SimpleNamespace

import pytest

from evo.stream_local import StreamLocal


class Streams:
    """A fake current stream and the set of streams capturing a graph."""

    def __init__(self):
        self.current = 0
        self.capturing: set[int] = set()

    def is_capturing(self, s: int) -> bool:
        return s in self.capturing


def instance(tag: str, log: list):
    def call(a, b, c):
        log.append((tag, a))
    return call


def make_local(streams: Streams, cap: int = 8):
    log: list = []
    made: list[str] = []

    def make():
        made.append(f"i{len(made) + 1}")
        return instance(made[-1], log)

    local = StreamLocal(instance("first", log), make, lambda: streams.current, streams.is_capturing, cap)
    return local, log, made


def test_the_first_stream_runs_the_first_instance_and_each_new_stream_its_own():
    st = Streams()
    local, log, made = make_local(st)
    st.current = 7
    local(1, None, None)
    local(2, None, None)
    st.current = 9
    local(3, None, None)
    st.current = 7
    local(4, None, None)
    st.current = 11
    local(5, None, None)
    st.current = 9
    local(6, None, None)
    assert log == [("first", 1), ("first", 2), ("i1", 3), ("first", 4), ("i2", 5), ("i1", 6)]
    assert made == ["i1", "i2"] and local.instances == 3


def test_a_capturing_stream_uses_the_first_instance_and_gets_its_own_once_the_capture_ends():
    st = Streams()
    local, log, made = make_local(st)
    local(1, None, None)  # stream 0: the first instance
    st.current, st.capturing = 5, {5}
    local(2, None, None)
    local(3, None, None)
    assert made == [] and log[-2:] == [("first", 2), ("first", 3)]
    st.capturing = set()
    local(4, None, None)
    assert made == ["i1"] and log[-1] == ("i1", 4)


def test_a_failing_capture_query_counts_as_capturing():
    st = Streams()
    calls: list = []

    def query(s):
        raise RuntimeError("cudaErrorStreamCaptureImplicit")

    local = StreamLocal(instance("first", calls), lambda: pytest.fail("made an instance"), lambda: st.current, query)
    local(1, None, None)
    st.current = 3
    local(2, None, None)
    assert calls == [("first", 1), ("first", 2)]


def test_past_the_cap_new_streams_share_the_first_instance_with_one_warning():
    st = Streams()
    local, log, made = make_local(st, cap=3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for s in range(6):
            st.current = s
            local(s, None, None)
    assert made == ["i1", "i2"] and local.instances == 3
    assert [t for t, _ in log] == ["first", "i1", "i2", "first", "first", "first"]
    assert len(w) == 1 and issubclass(w[0].category, RuntimeWarning) and "stream_instances" in str(w[0].message)


def test_threads_on_one_new_stream_make_one_instance():
    st = Streams()
    made: list = []
    gate = threading.Event()

    def make():
        gate.wait(1.0)
        time.sleep(0.01)
        made.append(1)
        return lambda a, b, c: None

    local = StreamLocal(lambda a, b, c: None, make, lambda: st.current, st.is_capturing)
    local(0, None, None)  # stream 0 takes the first instance
    st.current = 4
    threads = [threading.Thread(target=local, args=(i, None, None)) for i in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert made == [1] and local.instances == 2


def test_the_cupy_backend_gives_loaded_kernels_and_cublaslt_calls_an_instance_per_stream():
    """CupyBackend.per_stream reads the current stream and the capture state from CuPy (faked here)."""
    from evo.dispatch import CupyBackend

    cur = SimpleNamespace(ptr=1)
    capturing: set[int] = set()
    fake = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: cur,
                                                runtime=SimpleNamespace(streamIsCapturing=lambda s: s in capturing)))
    be = CupyBackend.__new__(CupyBackend)
    be.cupy, be.stream_instances = fake, 2
    log: list = []
    fn = be.per_stream(instance("first", log), lambda: instance("other", log))
    fn(1, None, None)
    cur.ptr = 2
    capturing.add(2)
    fn(2, None, None)
    capturing.clear()
    fn(3, None, None)
    assert log == [("first", 1), ("first", 2), ("other", 3)]
    assert isinstance(fn, StreamLocal) and fn.cap == 2
