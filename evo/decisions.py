"""Dispatch decisions made by measurement, persisted so that each is made once per (GPU, driver, shape).

A kernel borrowed from another shape serves a shape only after it was timed against the library on that shape;
the outcome (who serves, the measured times and their ratio, the cuBLASLt algorithm where one was tuned) is kept
in a JSON file (default ``~/.cache/evo/dispatch.json``, ``dispatch.decisions`` in evo/defaults.yaml, or
``$EVO_DISPATCH_DECISIONS``). Writes are atomic (temporary file + rename) and merge with what another process
wrote meanwhile; a corrupt or unreadable file is set aside, never fatal.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .atomic_file import atomic_write

DEFAULT_PATH = "~/.cache/evo/dispatch.json"
# How decisions are measured now: cuBLAS and every planned cuBLASLt algorithm, nvmath's autotune pick among them (and
# borrowed kernels) interleaved, flushed, medians; library near-ties (within the paired ratio's noise) timed again,
# alone, for more rounds, the fastest median kept (evo.dispatch.near_ties). A decision recorded another way (or by an
# older evo) is measured again, not trusted.
METHOD = "interleaved-all-algorithms+settled-near-ties"


@dataclass
class Decision:
    serve: str  # "evo", "cublas" or "cublaslt"
    hash: str = ""  # the evo kernel that serves (serve == "evo")
    source_shape: str = ""  # the table row it was borrowed from
    evo_us: float = 0.0
    lib_us: float = 0.0  # the fastest library measured alongside
    library: str = ""  # which library that was
    ratio: float = 0.0  # lib_us / evo_us
    band: float = 0.0  # noise band the ratio had to clear
    algorithm: dict[str, Any] = field(default_factory=dict)  # cuBLASLt algorithm config (serve == "cublaslt")
    note: str = ""
    date: str = ""
    method: str = ""  # METHOD when measured the current way


def key(gpu: str, driver: str, shape: str, kind: str = "shape") -> str:
    return f"{gpu}|{driver}|{shape}|{kind}"


class Decisions:
    def __init__(self, path: str | Path | None = None):
        raw = path or os.environ.get("EVO_DISPATCH_DECISIONS") or DEFAULT_PATH
        self.path = Path(raw).expanduser()
        self._cache: dict[str, dict] | None = None

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            try:  # keep the broken file for a look, start afresh
                os.replace(self.path, self.path.with_name(self.path.name + ".corrupt"))
            except OSError:
                pass
            return {}

    def get(self, k: str) -> Decision | None:
        if self._cache is None:
            self._cache = self._read()
        d = self._cache.get(k)
        if not isinstance(d, dict):
            return None
        try:
            return Decision(**{f: v for f, v in d.items() if f in Decision.__dataclass_fields__})
        except TypeError:
            return None

    def put(self, k: str, d: Decision) -> None:
        d.date = d.date or time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        data = self._read()  # merge with what others wrote meanwhile
        data[k] = asdict(d)
        self._cache = data
        try:
            atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True))
        except OSError:
            pass  # a read-only home: the decision still holds for this process
