"""evo.gpu.no_spawn: the seccomp program's jumps land where they should, and a process that installs it can start
threads but no process (CPU; the filter is installed in a child, never in the test process)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evo.gpu.no_spawn import _ARCH, _JEQ_K, _JSET_K, _RET_K, program

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("machine", sorted(_ARCH))
def test_program_jumps_forward_to_returns(machine):
    ins = program(machine)
    for i, (code, jt, jf, _) in enumerate(ins):
        if code in (_JEQ_K, _JSET_K):
            for off in (jt, jf):
                assert 0 <= off < 256 and i + 1 + off < len(ins)
    assert ins[-1][0] == _RET_K and len(ins) < 32
    nr = _ARCH[machine][2]
    denied = {k for _, _, _, k in ins if k in nr.values()}
    assert denied == set(nr.values())  # every listed call is tested


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
        print(repr(why), ran, fork, spawn)
    """ % str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    why, rest = out.stdout.split(" ", 1)
    if why != "''":
        pytest.skip(f"no filter here: {why}")
    assert rest.split() == ["[1]", "refused", "1", "refused", "1"]
