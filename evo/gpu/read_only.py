"""A Landlock ruleset that leaves the file system read-only to the host-code sandbox: the sandbox applies it (defence
``host_read_only``) before it loads a candidate's library.

The library runs as the user who runs the search: without this it could write the archive (an evaluation row with any
time), the kernel table, evo's own sources, or another process's memory through ``/proc/<pid>/mem`` opened for
writing. With it, no file may be opened for writing, created, truncated, renamed, linked or removed, except beneath
``/dev`` (the CUDA driver's device files, opened read-write); files already open (the reply pipe, stderr) stay
writable, and reading is not restricted. Landlock (Linux 5.13+, unprivileged once ``PR_SET_NO_NEW_PRIVS`` is set)
restricts the calling thread and the threads it starts later: the sandbox applies it on the thread that loads and
calls the library, after the device's context (the driver's threads, started before, stay unrestricted; the
library's code does not run on them). Where the kernel has no Landlock, ``forbid_writes`` says why and restricts
nothing.
"""
from __future__ import annotations

import ctypes
import os
import platform

from .no_spawn import no_new_privileges

# linux/landlock.h; the three system calls have one number on every architecture (the generic table)
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
WRITE_FILE = 1 << 1
# every right that changes the file system: write, remove dir / file, make char / dir / reg / sock / fifo / block /
# sym (ABI 1), refer (ABI 2: link or rename across directories), truncate (ABI 3)
_CHANGES = WRITE_FILE | (1 << 4) | (1 << 5) | sum(1 << b for b in range(6, 13))
_REFER, _TRUNCATE = 1 << 13, 1 << 14


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def handled(abi: int) -> int:
    """The rights the ruleset takes over at Landlock ABI `abi` (those it does not grant are denied)."""
    return _CHANGES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)


def forbid_writes(writable: tuple[str, ...] = ("/dev",)) -> str:
    """Make the file system read-only to this thread and the threads it starts, but files beneath `writable` open for
    writing; "" when applied, else why not (nothing restricted)."""
    if platform.system() != "Linux":
        return f"no Landlock on {platform.system()}"
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    if abi < 1:
        return f"no Landlock in this kernel (errno {ctypes.get_errno()})"
    attr = _RulesetAttr(handled(abi))
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        return f"landlock_create_ruleset failed: errno {ctypes.get_errno()}"
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # nothing there to write to
            try:
                rule = _PathBeneathAttr(WRITE_FILE, fd)
                if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return f"landlock_add_rule({path}) failed: errno {ctypes.get_errno()}"
            finally:
                os.close(fd)
        why = no_new_privileges()
        if why:
            return why
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            return f"landlock_restrict_self failed: errno {ctypes.get_errno()}"
        return ""
    finally:
        os.close(ruleset)
