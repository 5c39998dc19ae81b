"""evo.gpu.read_only: a process that applies the ruleset reads as before and writes what it had open, but creates,
opens for writing, renames or removes no file outside /dev (CPU; applied in a child, never in the test process)."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evo.gpu.read_only import WRITE_FILE, handled

ROOT = Path(__file__).resolve().parent.parent


def test_the_rights_taken_over_grow_with_the_abi():
    assert handled(1) & WRITE_FILE and not handled(1) & (1 << 2)  # writing handled, reading (READ_FILE) left alone
    assert handled(1) < handled(2) < handled(3) == handled(7)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock is Linux's")
def test_a_restricted_process_reads_but_changes_no_file_outside_dev(tmp_path):
    (tmp_path / "kept").write_text("archive")
    code = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, %r)
        from evo.gpu.read_only import forbid_writes
        d = sys.argv[1]
        open_before = open(os.path.join(d, "log"), "w")
        why = forbid_writes()
        out = [repr(why), open(os.path.join(d, "kept")).read()]
        for what, act in (("create", lambda: open(os.path.join(d, "new"), "w")),
                          ("overwrite", lambda: open(os.path.join(d, "kept"), "w")),
                          ("rename", lambda: os.rename(os.path.join(d, "kept"), os.path.join(d, "moved"))),
                          ("remove", lambda: os.remove(os.path.join(d, "kept"))),
                          ("devnull", lambda: open("/dev/null", "w"))):
            try:
                act()
                out.append(what + ":done")
            except OSError as e:
                out.append(what + ":%%d" %% e.errno)
        open_before.write("still open"); open_before.close()
        print(" ".join(out))
    """ % str(ROOT))
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    why, rest = run.stdout.split(" ", 1)
    if why != "''":
        pytest.skip(f"not restricted here: {why}")
    assert rest.split() == ["archive", "create:13", "overwrite:13", "rename:13", "remove:13", "devnull:done"], rest
    assert (tmp_path / "kept").read_text() == "archive" and not (tmp_path / "new").exists()
    assert (tmp_path / "log").read_text() == "still open"
