"""User-facing errors: one clear line, exit code 2, no traceback."""
from __future__ import annotations

import functools
import sys
from typing import Callable


class EvoError(Exception):
    """An error the user can act on. Printed as one line, never with a traceback."""

    exit_code = 2


class NoGpuError(EvoError):
    """No CUDA GPU is visible to this process."""


class LibraryMissing(EvoError):
    """A baseline library the configuration asks to time cannot be loaded on this machine."""


class CompileError(EvoError):
    """A kernel did not compile (raised only where the user asked for that one kernel)."""


def cli_entry(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI main so EvoError and Ctrl-C end with one line and a nonzero code."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except EvoError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt:
            print("interrupted; everything measured so far is stored, rerun to resume", file=sys.stderr)
            return 130

    return wrapper
