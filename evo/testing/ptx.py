"""PTX of a kernel source, for tests that check what nvcc makes of a template (needs nvcc; tests mark it)."""
from __future__ import annotations

import subprocess
from pathlib import Path


def ptx_of(source: str, folder: Path, arch: str = "90a", name: str = "k") -> str:
    """nvcc -ptx -O3 of `source` for sm_<arch>, written under `folder`; AssertionError with nvcc's message if it fails."""
    cu, ptx = Path(folder) / f"{name}.cu", Path(folder) / f"{name}.ptx"
    cu.write_text(source)
    r = subprocess.run(["nvcc", "-ptx", "-std=c++17", f"-gencode=arch=compute_{arch},code=sm_{arch}", "-O3", "-o", str(ptx),
                        str(cu)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return ptx.read_text()
