"""evo.gpu.no_spawn: the seccomp program's jumps land where they should, and a process that installs it can start
threads but no process, and cannot ptrace (CPU; the filter is installed in a child, never in the test process)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evo.gpu.no_spawn import _ARCH, _JEQ_K, _JSET_K, _RET_K, TRACE, program

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("machine", sorted(_ARCH))
@pytest.mark.parametrize("spawn,trace", [(True, True), (True, False), (False, True)])
def test_program_jumps_forward_to_returns(machine, spawn, trace):
    ins = program(machine, spawn, trace)
    for i, (code, jt, jf, _) in enumerate(ins):
        if code in (_JEQ_K, _JSET_K):
            for off in (jt, jf):
                assert 0 <= off < 256 and i + 1 + off < len(ins)
    assert ins[-1][0] == _RET_K and len(ins) < 32
    nr = _ARCH[machine][2]
    tested = {k for code, _, _, k in ins if code == _JEQ_K and k in nr.values()}
    want = {n for n in nr if (spawn and n not in TRACE) or (trace and n in TRACE)}
    assert tested == {nr[n] for n in want}  # every listed call of the groups asked for is tested, and no other


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
def test_a_filtered_process_starts_threads_but_no_process():
    code = textwrap.dedent("""
        import os, subprocess, sys, threading
        sys.path.insert(0, %r)
        from evo.gpu.no_spawn import forbid_new_processes
        why = forbid_new_processes()
        ran = []
        t = threading.Thread(target=lambda: ran.append(1)); t.start(); t.join()
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            fork = "forked"
        except OSError as e:
            fork = "refused %%d" %% e.errno
        try:
            subprocess.run(["true"]); spawn = "ran"
        except OSError as e:
            spawn = "refused %%d" %% e.errno
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        traced = libc.ptrace(16, 0x3fffffff, None, None)  # PTRACE_ATTACH, no such process: ESRCH where allowed
        print(repr(why), ran, fork, spawn, traced, ctypes.get_errno())
    """ % str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    why, rest = out.stdout.split(" ", 1)
    if why != "''":
        pytest.skip(f"no filter here: {why}")
    assert rest.split() == ["[1]", "refused", "1", "refused", "1", "-1", "1"]
