"""evo.gpu.host_sandbox: a candidate's host code runs in a process of its own, stopped between requests; what it
does there (crash, hang, print, threads) costs its candidate only and never runs in the caller (no GPU)."""
import os
import re
import signal
import struct
import time
from pathlib import Path

import pytest

from conftest import DATA
from evo.compile import Compiler, host_library
from evo.config import load_config
from evo.errors import EvoError
from evo.gpu.host_launch import HostLibrary
from evo.gpu.host_sandbox import MAGIC, SandboxedHostLibrary, SandboxSpares, _frame, _read_frame
from evo.kernel import KernelSource
from evo.problem import parse_shape

P = parse_shape("100x200x64")


@pytest.fixture(scope="module")
def hostile_so(tmp_path_factory):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path_factory.mktemp("cache"))}})
    r = Compiler.from_config(cfg.compile).compile(KernelSource.parse((DATA / "hostile_host.cu").read_text()), "sm_90a")
    assert r.ok, r.error
    return host_library(r.cubin_path)


@pytest.fixture
def lib(hostile_so):
    box = SandboxedHostLibrary(hostile_so, timeout_s=5.0)
    yield box
    box.close()


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def dead(pid: int, within_s: float = 5.0) -> bool:
    """The process exited (a zombie not yet reaped, or gone) within the time."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if state(pid) == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.nvcc
def test_sandbox_answers_like_the_library_in_process(lib, hostile_so):
    here = HostLibrary(hostile_so)
    assert lib.query(P, 132, (16, 0)) == here.query(P, 132, (16, 0))
    g, block = lib.params(P, 132, (16, 0), 0x1000, 0x2000, 0x3000, 0)
    g2, block2 = here.params(P, 132, (16, 0), 0x1000, 0x2000, 0x3000, 0)
    assert g == g2 and block.raw[:36] == block2.raw[:36] and len(block.raw) == 40  # 4 bytes of padding
    assert struct.unpack("<QQQiii", block.raw[:36]) == (0x1000, 0x2000, 0x3000, 100, 200, 64)
    with pytest.raises(EvoError, match="TILE must be"):  # the library's own refusal comes back as its message
        lib.query(P, 132, (64, 0))
    # with a device named, the sandbox makes that device's primary context current first (no driver here: skipped)
    box = SandboxedHostLibrary(hostile_so, device=0)
    assert box.query(P, 132, (16, 0)) == here.query(P, 132, (16, 0))
    box.close()


@pytest.mark.nvcc
def test_host_code_runs_in_another_process_stopped_between_requests(lib):
    with pytest.raises(EvoError, match=r"pid \d+") as e:
        lib.query(P, 132, (16, 4))
    pid = int(re.search(r"pid (\d+)", str(e.value)).group(1))
    assert pid == lib.proc.pid and pid != os.getpid()
    lib.query(P, 132, (16, 5))  # starts a thread that spins, counting
    time.sleep(0.2)
    assert state(pid) == "T"  # stopped: neither the process nor its thread runs between requests
    with pytest.raises(EvoError, match=r"ticks (\d+)") as e1:
        lib.query(P, 132, (16, 6))
    time.sleep(0.5)
    with pytest.raises(EvoError, match=r"ticks (\d+)") as e2:
        lib.query(P, 132, (16, 6))
    t1, t2 = (int(re.search(r"ticks (\d+)", str(x.value)).group(1)) for x in (e1, e2))
    assert t1 > 0 and t2 >= t1 and state(pid) == "T"
    lib.close()
    assert not Path(f"/proc/{pid}").exists() or state(pid) == "Z"


@pytest.mark.nvcc
def test_host_code_cannot_start_a_process(lib):
    """A child the library forks and detaches (setsid) would escape the stop and the kill: the sandbox forbids new
    processes (seccomp, defence host_no_spawn); threads still start (the test above counts one)."""
    assert "processes:" not in lib.note  # the filter is installed (Linux on x86_64 or aarch64)
    with pytest.raises(EvoError, match=r"fork -1 errno 1\b"):
        lib.query(P, 132, (16, 7))
    with pytest.raises(EvoError, match=r"system (-1|32512)\b"):  # glibc: 127 << 8 when posix_spawn is refused
        lib.query(P, 132, (16, 8))
    assert lib.query(P, 132, (16, 0)).grid == (13, 7, 1)  # and the library answers as before


PLAIN = """  # what the hostile library's modes 9 and 10 do to the parent, from a process without guards
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
try:
    os.close(os.open(f"/proc/{os.getppid()}/mem", os.O_RDWR)); mem = (1, 0)
except OSError as e:
    mem = (0, e.errno)
lo = int(open(f"/proc/{os.getppid()}/maps").readline().split("-")[0], 16)
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
word = ctypes.c_uint64()
here, there = IoVec(ctypes.addressof(word), 8), IoVec(lo, 8)
got = libc.process_vm_readv(os.getppid(), ctypes.byref(here), 1, ctypes.byref(there), 1, 0)
peek = (got, ctypes.get_errno() if got < 0 else 0)
traced = libc.ptrace(16, 0x3fffffff, None, None)
print(f"mem {mem[0]} errno {mem[1]} peek {peek[0]} errno {peek[1]} trace {traced} errno {ctypes.get_errno()}")
"""


def _what_a_plain_process_may() -> str:
    """What an unguarded process of this user may do to its parent here (the kernel's and the container's rules)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.nvcc
def test_host_code_can_neither_change_a_file_nor_reach_into_another_process(hostile_so, tmp_path, monkeypatch):
    """The library runs as the search's user: it must not write the archive or the table (host_read_only, Landlock),
    nor the worker's memory through /proc/<pid>/mem, ptrace or process_vm_readv / writev (host_no_trace, seccomp)."""
    monkeypatch.setenv("EVO_HOSTILE_DIR", str(tmp_path))
    box = SandboxedHostLibrary(hostile_so, timeout_s=5.0)
    if "files:" in box.note:
        pytest.skip(f"no Landlock here: {box.note}")
    with pytest.raises(EvoError, match=r"write 0 errno 13 mem 0 errno 13\b"):
        box.query(P, 132, (16, 9))
    assert not (tmp_path / "written").exists()
    with pytest.raises(EvoError, match=r"peek -1 errno 1 trace -1 errno 1\b"):
        box.query(P, 132, (16, 10))
    assert box.query(P, 132, (16, 0)).grid == (13, 7, 1)  # and the library answers as before
    box.close()


@pytest.mark.nvcc
def test_without_those_guards_host_code_writes_files_and_reads_its_callers_memory(hostile_so, tmp_path, monkeypatch):
    monkeypatch.setenv("EVO_HOSTILE_DIR", str(tmp_path))
    monkeypatch.setenv("EVO_TEST_DEFENCES_OFF", "host_read_only,host_no_trace")
    box = SandboxedHostLibrary(hostile_so, timeout_s=5.0)
    with pytest.raises(EvoError, match=r"write 1 errno 0 (mem \d errno \d+)") as files:
        box.query(P, 132, (16, 9))
    assert (tmp_path / "written").exists()
    with pytest.raises(EvoError, match=r"peek -?\d+ errno \d+ trace -?\d+ errno \d+") as memory:
        box.query(P, 132, (16, 10))
    box.close()
    # to the worker's stand-in (this test's process), the library did whatever any process of this user may here
    # (on this development machine, no Yama: open its memory for writing and read it)
    did = re.search(r"mem \d errno \d+", str(files.value)).group(0) + " " + \
        re.search(r"peek -?\d+ errno \d+ trace -?\d+ errno \d+", str(memory.value)).group(0)
    assert did == _what_a_plain_process_may()


@pytest.mark.nvcc
def test_without_the_filter_a_forked_child_outlives_the_candidate(hostile_so, monkeypatch):
    """With host_no_spawn off, the same library's child leaves the sandbox's session, so neither the stop between
    requests nor the kill at close reaches it: what the filter prevents."""
    monkeypatch.setenv("EVO_TEST_DEFENCES_OFF", "host_no_spawn")
    box = SandboxedHostLibrary(hostile_so, timeout_s=5.0)
    with pytest.raises(EvoError, match=r"fork (\d+) errno 0") as e:
        box.query(P, 132, (16, 7))
    child = int(re.search(r"fork (\d+)", str(e.value)).group(1))
    box.close()
    try:
        time.sleep(0.2)
        assert Path(f"/proc/{child}").exists() and state(child) not in ("T", "Z")  # running, after the sandbox died
    finally:
        os.kill(child, signal.SIGKILL)


@pytest.mark.nvcc
def test_a_crash_or_a_hang_costs_the_candidate_not_the_caller(hostile_so):
    box = SandboxedHostLibrary(hostile_so, timeout_s=5.0)
    with pytest.raises(EvoError, match=r"host code crashed \(killed by signal 11\)"):
        box.query(P, 132, (16, 1))  # not a crash of this process
    with pytest.raises(EvoError, match="closed"):
        box.query(P, 132, (16, 0))
    box = SandboxedHostLibrary(hostile_so, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(EvoError, match="did not answer within 1 s"):
        box.query(P, 132, (16, 2))
    assert time.monotonic() - t0 < 4.0 and box.proc is None


@pytest.mark.nvcc
def test_prints_of_the_host_code_do_not_reach_the_replies(lib):
    assert lib.query(P, 132, (16, 3)).grid == (13, 7, 1)
    assert lib.query(P, 132, (16, 0)).grid == (13, 7, 1)


@pytest.mark.nvcc
def test_a_spare_process_started_ahead_serves_the_next_library_alone(hostile_so):
    """SandboxSpares: the process for the next candidate library starts (interpreter, imports, context) while this
    one works; taken, it loads that library only then, answers like a cold start, stays stopped between requests, has
    the no-spawn filter, and is killed with its library. Each library still gets a process of its own."""
    spares = SandboxSpares()
    t0 = time.monotonic()
    first = SandboxedHostLibrary(hostile_so, timeout_s=10.0, spares=spares)  # no spare yet: a cold start
    cold_s = time.monotonic() - t0
    spare = spares._spares[0].proc.pid
    assert spare != first.proc.pid
    time.sleep(max(1.0, 3 * cold_s))  # the spare is up and waiting
    assert hostile_so not in Path(f"/proc/{spare}/maps").read_text()  # no candidate code in it before it is taken
    t0 = time.monotonic()
    second = SandboxedHostLibrary(hostile_so, timeout_s=10.0, spares=spares)
    warm_s = time.monotonic() - t0
    assert second.proc.pid == spare and spares._spares[0].proc.pid not in (spare, first.proc.pid)
    assert warm_s < cold_s / 2, (warm_s, cold_s)  # the start was paid ahead
    assert "processes:" not in second.note
    assert second.query(P, 132, (16, 0)) == HostLibrary(hostile_so).query(P, 132, (16, 0))
    with pytest.raises(EvoError, match=r"fork -1 errno 1\b"):
        second.query(P, 132, (16, 7))
    first.query(P, 132, (16, 5))  # a thread counting in the first library's process only
    with pytest.raises(EvoError, match=r"ticks 0\b"):
        second.query(P, 132, (16, 6))
    assert state(spare) == "T"
    second.close()
    assert dead(spare)
    nxt = spares._spares[0].proc.pid
    assert spares.take(7) is None  # waiting for another device: not used (killed), and a new one started
    assert not Path(f"/proc/{nxt}").exists() or state(nxt) == "Z"
    last = spares._spares[0].proc
    spares.close()
    first.close()
    assert last.poll() is not None and spares._spares == []


@pytest.mark.nvcc
def test_spares_started_ahead_serve_the_phases_of_one_evaluation_in_a_row(hostile_so):
    """A host-launched candidate loads its library anew for every phase (check, screening, full timing): `depth`
    processes wait, so phases that follow each other closely each find one up, oldest first, every library in a
    process of its own; each take tops the pool up again; with depth 0 none waits."""
    spares = SandboxSpares(3)
    first = SandboxedHostLibrary(hostile_so, timeout_s=10.0, spares=spares)  # none yet: a cold start, three started
    ahead = [s.proc.pid for s in spares._spares]
    assert len(ahead) == 3 and first.proc.pid not in ahead
    time.sleep(3.0)  # all three up and waiting
    libs = [SandboxedHostLibrary(hostile_so, timeout_s=10.0, spares=spares) for _ in range(3)]
    assert [x.proc.pid for x in libs] == ahead  # oldest first
    assert len(spares._spares) == 3 and not {s.proc.pid for s in spares._spares} & set(ahead)
    assert all(x.query(P, 132, (16, 0)) == HostLibrary(hostile_so).query(P, 132, (16, 0)) for x in libs)
    for x in [first, *libs]:
        x.close()
    waiting = [s.proc for s in spares._spares]
    spares.close()
    assert all(p.poll() is not None for p in waiting)
    none = SandboxSpares(0)
    assert none.take(None) is None and none._spares == []


@pytest.mark.nvcc
def test_a_closed_library_is_killed_at_once_and_reaped_off_the_callers_path(hostile_so):
    """A library's process is killed when its kernel closes (none of its code runs after) but not waited for there:
    its exit (a CUDA context torn down) took 0.1 s a phase. The spares reap it later; none is left behind."""
    spares = SandboxSpares(1)
    libs = [SandboxedHostLibrary(hostile_so, timeout_s=10.0, spares=spares) for _ in range(3)]
    pids = [x.proc.pid for x in libs]
    for x in libs:
        x.close()
        assert x.proc is None
    assert all(dead(pid) for pid in pids)
    spares.take(None)  # reaps what has exited
    assert not [p for p, _ in spares._dying if p.pid in pids]
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # no zombie left
    spares.close()
    assert spares._dying == [] and spares._spares == []


def test_a_missing_library_is_one_line(tmp_path):
    with pytest.raises(EvoError, match="cannot load the host library"):
        SandboxedHostLibrary(str(tmp_path / "nowhere.so"))


def test_replies_are_framed_and_bounded():
    r, w = os.pipe()
    os.write(w, _frame(0, 7, b"s" * 8, b"p" * 3, "hi"))
    assert _read_frame(r, time.monotonic() + 1) == (0, 7, b"s" * 8, b"ppp", "hi")
    os.write(w, MAGIC + struct.pack("<iii", 0, 0, 1 << 30))  # a struct field of 1 GiB: refused before reading it
    with pytest.raises(ValueError, match="reply field"):
        _read_frame(r, time.monotonic() + 1)
    os.write(w, b"XXXX")
    with pytest.raises(ValueError, match="garbled"):
        _read_frame(r, time.monotonic() + 1)
    with pytest.raises(TimeoutError):
        _read_frame(r, time.monotonic() + 0.1)
    os.close(w)
    with pytest.raises(EOFError):
        _read_frame(r, time.monotonic() + 1)
    os.close(r)


# ---- GPU: the host-launched families evaluate with their host code in the sandbox (the evaluator's default) ------
@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    from conftest import gpu_worker_session

    yield from gpu_worker_session(tmp_path_factory.mktemp("gpu"), reps=10)


@pytest.mark.gpu
def test_host_launched_families_evaluate_through_the_sandbox(gpu):
    """Correct on off-tile shapes: naive_host, the hostile library's honest mode and a CUTLASS SM90 instance changed
    by a comment (a candidate's own code: its host code in the sandbox, which encodes the TMA descriptors with
    cuTensorMapEncodeTiled in a context of its own), and the same instance as the family renders it (the family's
    own host code, run in the worker: evo.gpu.session.Session._family_host_code)."""
    from evo.families import load_families

    w, comp, _ = gpu
    cutlass = next(f for f in load_families(arch=w.info.arch) if f.name == "cutlass_sm90")
    rendered = cutlass.render(cutlass.instances_for_ci()[0]).text
    texts = [(DATA / "naive_host.cu").read_text(), (DATA / "hostile_host.cu").read_text(), rendered,
             rendered + "\n// a candidate's own copy\n"]
    for text in texts:
        ks = KernelSource.parse(text)
        r = comp.compile(ks, w.info.arch)
        assert r.ok, r.error
        for shape in ("200x136x72", "1000x1000x1000"):
            ev = w.call("evaluate", timeout_s=120, problem=parse_shape(shape), source=text, cubin=r.cubin_path, h=ks.hash)
            assert ev.ok, f"{ks.meta.family} {shape}: {ev.error}"


@pytest.mark.gpu
def test_a_crashing_host_library_costs_its_candidate_not_the_worker(gpu):
    w, comp, _ = gpu
    text = (DATA / "hostile_host.cu").read_text().replace("params: {TILE: 16, MODE: 0}", "params: {TILE: 16, MODE: 1}")
    ks = KernelSource.parse(text)
    r = comp.compile(ks, w.info.arch)
    restarts = w.restarts
    ev = w.call("evaluate", timeout_s=120, problem=parse_shape("200x136x72"), source=text, cubin=r.cubin_path, h=ks.hash)
    assert not ev.ok and "host code crashed (killed by signal 11)" in ev.error
    assert w.restarts == restarts  # the worker went on


@pytest.mark.nvcc
def test_the_sandbox_dies_with_the_process_that_started_it(hostile_so, tmp_path):
    """A worker killed (for a timeout) while its sandbox hangs in host code leaves no process behind."""
    import subprocess
    import sys

    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
              "from evo.gpu.host_sandbox import SandboxedHostLibrary\n"
              "from evo.problem import parse_shape\n"
              f"box = SandboxedHostLibrary({hostile_so!r}, timeout_s=60)\n"
              "print(box.proc.pid, flush=True)\n"
              "box.query(parse_shape('100x200x64'), 132, (16, 2))\n")  # hangs in the library
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    time.sleep(0.5)
    assert Path(f"/proc/{pid}").exists() and state(pid) != "T"  # running (hung), not stopped
    parent.kill()
    parent.wait()
    for _ in range(50):
        if not Path(f"/proc/{pid}").exists() or state(pid) == "Z":
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or state(pid) == "Z"


def test_load_kernel_sandboxes_host_code_only_when_asked(monkeypatch):
    """The evaluator asks (isolate_host: the host_sandbox defence); evo.dispatch and the benchmarks do not."""
    import sys
    import types

    import evo.gpu.host_launch as hl
    import evo.gpu.host_sandbox as hs

    made = []
    monkeypatch.setattr(hl, "HostLibrary", lambda path: made.append(("here", path)) or types.SimpleNamespace())
    monkeypatch.setattr(hs, "SandboxedHostLibrary", lambda path, device=None, spares=None:
                        made.append(("sandbox", path, device, spares)) or types.SimpleNamespace())
    monkeypatch.setattr(hl.HostLaunchedKernel, "_set_up", lambda self, *a: None)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 3))))
    ks = KernelSource.parse((DATA / "naive_host.cu").read_text())
    hl.load_kernel(ks, "/x/k.cubin", P, 132, 227 * 1024, isolate_host=True, spares="the worker's spares")
    hl.load_kernel(ks, "/x/k.cubin", P, 132, 227 * 1024)
    assert made == [("sandbox", "/x/k.so", 3, "the worker's spares"), ("here", "/x/k.so")]
