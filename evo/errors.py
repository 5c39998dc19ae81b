"""User-facing errors: one clear line, exit code 2, no traceback."""
from __future__ import annotations

import functools
import signal
import sys
import threading
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


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a batch scheduler's time limit) raised where Ctrl-C would be, so a terminated run
    stops the same orderly way: the search or sweep stores what it has and says how to resume."""


def _terminate(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during the orderly stop ends the process at once
    raise Terminated()


def _catch_sigterm():
    """Install _terminate where SIGTERM would kill the process outright (a handler an embedding program set stays);
    returns what to restore, or None."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def cli_entry(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """Wrap a CLI main so EvoError, Ctrl-C and SIGTERM end with one line and a nonzero code (2, 130, 143)."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        previous = _catch_sigterm()
        try:
            return main(argv)
        except EvoError as e:
            print(f"error: {e}", file=sys.stderr)
            return e.exit_code
        except KeyboardInterrupt as e:
            word = "terminated" if isinstance(e, Terminated) else "interrupted"
            print(f"{word}; everything measured so far is stored, rerun to resume", file=sys.stderr)
            return 143 if isinstance(e, Terminated) else 130
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    return wrapper
