"""Faults the search must survive, on any machine (no GPU): runaway compiles, a worker killed
mid-request, a full disk, a corrupt or foreign database. The GPU faults (hang, illegal address,
too much shared memory, SIGKILL of a real worker) are in test_gpu_pipeline.py and test_cheats_gpu.py."""
import hashlib
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from evo.compile import Compiler
from evo.config import load_config
from evo.errors import EvoError
from evo.gpu.worker import GpuWorker, WorkerFault
from evo.kernel import KernelSource
from evo.store import Store

DATA = Path(__file__).parent / "data"

# a template whose instantiation doubles at every level: 2^40 distinct types, neither time nor memory suffice
EXPLODING = """
#include <cuda_fp16.h>
template <int N, unsigned long long X> struct E {
    static constexpr unsigned long long v = E<N - 1, X * 2 + 1>::v ^ E<N - 1, X * 2 + 2>::v;
};
template <unsigned long long X> struct E<0, X> { static constexpr unsigned long long v = X; };
extern "C" __global__ void evo_gemm(const __half* A, const __half* B, __half* C, int M, int N, int K, float* w) {
    if (threadIdx.x == 0) C[0] = __float2half_rn((float)(E<40, 0>::v & 1));
}
"""


def _exploding() -> KernelSource:
    front = (DATA / "naive.cu").read_text().split("---*/")[0].replace("family: naive", "family: boom") + "---*/\n"
    return KernelSource.parse(front + EXPLODING)


def _group_alive(marker: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(d.name)
            except OSError:
                pass
    return out


@pytest.mark.nvcc
def test_runaway_compile_is_killed_in_time(tmp_path):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache"), "timeout_s": 3}})
    t0 = time.monotonic()
    r = Compiler.from_config(cfg.compile).compile(_exploding(), "sm_90a")
    assert time.monotonic() - t0 < 20
    assert not r.ok and "ran longer than 3 s and was killed" in r.error
    time.sleep(0.5)
    assert not _group_alive(str(tmp_path / "cache")), "nvcc's children (cudafe++/cicc) outlived the timeout"


@pytest.mark.nvcc
def test_runaway_compile_memory_capped(tmp_path):
    cfg = load_config(overrides={"compile": {"cache_dir": str(tmp_path / "cache"), "timeout_s": 120, "memory_mb": 400}})
    t0 = time.monotonic()
    r = Compiler.from_config(cfg.compile).compile(_exploding(), "sm_90a")
    assert time.monotonic() - t0 < 100
    assert not r.ok and ("out of memory" in r.error or "killed" in r.error), r.error


# --- the worker killed with SIGKILL mid-request (a stand-in worker: no GPU needed) ------------------

def fake_serve(conn, cfg_dict, device_id):
    """Answers 'sleep' requests slowly, so the test can kill it mid-request."""
    import time as _t

    conn.send(("ok", "fake-gpu"))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        op, kw = msg
        if op == "sleep":
            _t.sleep(kw["s"])
        conn.send(("ok", os.getpid()))


def test_worker_sigkill_mid_request_recorded_and_restarted(cfg):
    w = GpuWorker(cfg, serve_target=fake_serve, start_timeout_s=60)
    w.start()
    try:
        pid = w.proc.pid
        assert w.call("ping", timeout_s=30) == pid
        import threading

        threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        with pytest.raises(WorkerFault, match=r"crash: the GPU worker died \(killed by signal 9\)"):
            w.call("sleep", timeout_s=30, s=20)
        assert time.monotonic() - t0 < 15
        assert w.restarts == 1 and w.proc.pid != pid
        assert w.call("ping", timeout_s=30) == w.proc.pid  # the fresh worker answers
    finally:
        w.stop()


def test_ctrl_c_is_the_parents_to_handle(cfg):
    """SIGINT reaches the worker too (the terminal's process group): it finishes its request instead of dying with
    a traceback; the parent decides what an interrupt means."""
    w = GpuWorker(cfg, serve_target=fake_serve, start_timeout_s=60)
    w.start()
    try:
        pid = w.proc.pid
        import threading

        threading.Timer(0.5, lambda: os.kill(pid, signal.SIGINT)).start()
        assert w.call("sleep", timeout_s=30, s=2) == pid
        assert w.restarts == 0 and w.proc.is_alive()
    finally:
        w.stop()


def test_worker_hang_times_out_and_restarts(cfg):
    w = GpuWorker(cfg, serve_target=fake_serve, start_timeout_s=60)
    w.start()
    try:
        with pytest.raises(WorkerFault, match="timeout"):
            w.call("sleep", timeout_s=1, s=60)
        assert w.restarts == 1 and w.call("ping", timeout_s=30) == w.proc.pid
    finally:
        w.stop()


# --- a full disk -----------------------------------------------------------------------------------

def test_full_disk_is_one_line_and_loses_nothing(tmp_path, naive_source):
    db = tmp_path / "evo.db"
    st = Store(db)
    ks = KernelSource.parse(naive_source)
    assert st.add_candidate(ks)
    pages = st.db.execute("PRAGMA page_count").fetchone()[0]
    st.db.execute(f"PRAGMA max_page_count = {pages + 1}")  # the disk is full from here on
    big = KernelSource.parse(naive_source.replace("float acc = 0.f;", "float acc = 0.0f;"))
    with pytest.raises(EvoError) as e:
        st.add_candidate(big, idea="x" * 200_000)
    msg = str(e.value)
    assert "database or disk is full" in msg and "\n" not in msg
    st.close()
    again = Store(db)
    assert again.has_candidate(ks.hash) and not again.has_candidate(big.hash)


def test_full_disk_through_the_cli_entry(tmp_path, naive_source, capsys):
    from evo.errors import cli_entry

    db = tmp_path / "evo.db"
    st = Store(db)
    st.db.execute(f"PRAGMA max_page_count = {st.db.execute('PRAGMA page_count').fetchone()[0]}")

    @cli_entry
    def main(argv=None):
        st.add_candidate(KernelSource.parse(naive_source), idea="y" * 100_000)
        return 0

    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write") and "disk is full" in err[0]


# --- a corrupt or foreign database file -------------------------------------------------------------

def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_random_bytes_database_refused_untouched(tmp_path):
    db = tmp_path / "evo.db"
    db.write_bytes(os.urandom(65536))
    before = _digest(db)
    with pytest.raises(EvoError, match="not an evo database"):
        Store(db)
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evo.db"]  # no -wal/-shm left behind


def test_foreign_sqlite_database_refused_untouched(tmp_path):
    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ada');")
    con.commit()
    con.close()
    before = _digest(db)
    with pytest.raises(EvoError, match="another program"):
        Store(db)
    assert _digest(db) == before
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["users"]
    con.close()


def test_archive_is_marked_before_its_tables(tmp_path, monkeypatch):
    """A second process may open the archive while the first creates it: the first marks the file as evo's
    (application_id) before it makes any table, so the second never finds evo's tables unmarked, which it would refuse
    as another program's database (a sweep's reader once did, mid-creation). And a file marked but without tables yet
    opens, its tables made."""
    import evo.store as store_mod

    statements: list[str] = []
    real_connect = sqlite3.connect

    def traced(*a, **kw):
        con = real_connect(*a, **kw)
        con.set_trace_callback(statements.append)
        return con

    monkeypatch.setattr(store_mod.sqlite3, "connect", traced)
    db = tmp_path / "evo.db"
    Store(db).close()
    monkeypatch.undo()
    mark = next(i for i, q in enumerate(statements) if q.startswith("PRAGMA application_id="))
    first_table = next(i for i, q in enumerate(statements) if "CREATE TABLE" in q)
    assert mark < first_table
    marked = tmp_path / "marked.db"
    con = sqlite3.connect(marked)
    con.execute(f"PRAGMA application_id={store_mod.APP_ID}")
    con.close()
    s = Store(marked)  # evo's mark, no tables yet: the creator's state a second opener can find
    assert "evaluations" in {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    s.close()


def test_corrupt_database_refused_through_cli(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "evo.db"
    db.write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    before = _digest(db)
    res = subprocess.run([sys.executable, "-m", "evo.search", "--shape", "64x64x64", "--compile-only", "--db", str(db)],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "evo database" in res.stderr
    assert _digest(db) == before
