"""Files written whole or not at all: a killed run leaves the old file, never half of a new one."""
from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text, or bytes as they are) so that a killed run leaves the old file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
