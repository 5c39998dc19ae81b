"""A seccomp filter that keeps a process from starting other processes, and from reaching into theirs: the host-code
sandbox installs it before it loads a candidate's library.

The sandbox stops its process between requests and kills its session when the candidate is done; a process the
library forks and detaches (``setsid``) would escape both and keep running beside the timed calls. With this filter
``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD`` (what ``fork``, ``system`` and ``posix_spawn`` use) and
``execve`` / ``execveat`` fail with EPERM in every thread of the process; ``clone3`` fails with ENOSYS, so
``pthread_create`` falls back to ``clone`` with ``CLONE_THREAD`` and threads still start (they are stopped with the
process) (defence ``host_no_spawn``). The library runs as the user who runs the search: where the kernel lets that
user trace its own processes (no Yama, or ``ptrace_scope`` 0), it could read or write the GPU worker's memory, its
inputs, its expected checksums and its timings; ``ptrace``, ``process_vm_readv``, ``process_vm_writev`` and
``pidfd_getfd`` fail with EPERM too (defence ``host_no_trace``; /proc/<pid>/mem opened for writing is the read-only
file system's, evo.gpu.read_only). ``PR_SET_NO_NEW_PRIVS`` comes first, as an unprivileged filter requires. Linux on
x86_64 and aarch64 only; elsewhere, or where the kernel refuses, ``forbid_new_processes`` says why and installs
nothing.
"""
from __future__ import annotations

import ctypes
import errno
import platform

# BPF opcodes (linux/filter.h) and seccomp constants (linux/seccomp.h, linux/audit.h)
_LD_W_ABS, _JEQ_K, _JSET_K, _RET_K = 0x20, 0x15, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1

# machine -> (audit arch, seccomp syscall, {name: number}); aarch64 has no fork / vfork system calls
_ARCH = {
    "x86_64": (0xC000003E, 317, {"clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
                                 "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, 277, {"clone": 220, "execve": 221, "execveat": 281, "clone3": 435, "ptrace": 117,
                                  "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438}),
}
SPAWN = ("fork", "vfork", "execve", "execveat")                       # besides clone (a process) and clone3
TRACE = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(machine: str, spawn: bool = True, trace: bool = True) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as (code, jt, jf, k) instructions; jumps are relative, forward only. spawn: no new
    process; trace: no reaching into another's memory (at least one of them)."""
    audit, _, nr = _ARCH[machine]
    deny = [n for n in (SPAWN if spawn else ()) + (TRACE if trace else ()) if n in nr]
    # layout: the tests (arch, then each system call), ALLOW, clone's flag test, EPERM, ENOSYS, ALLOW
    allow = 5 + len(deny) if spawn else 3 + len(deny)
    clone_chk, eperm, enosys, allow2 = allow + 1, allow + 3, allow + 4, allow + 5
    ins: list[tuple[int, int, int, int]] = []

    def jump(code: int, k: int, jt: int = -1, jf: int = -1) -> None:  # targets as indices; -1: the next instruction
        here = len(ins) + 1
        ins.append((code, 0 if jt < 0 else jt - here, 0 if jf < 0 else jf - here, k))

    ins.append((_LD_W_ABS, 0, 0, 4))                      # the audit arch
    jump(_JEQ_K, audit, jf=allow)                         # another arch: allow (never here: _ARCH picks the program)
    ins.append((_LD_W_ABS, 0, 0, 0))                      # the system call number
    if spawn:
        jump(_JEQ_K, nr["clone"], jt=clone_chk)
        jump(_JEQ_K, nr["clone3"], jt=enosys)
    for n in deny:
        jump(_JEQ_K, nr[n], jt=eperm)
    ins.append((_RET_K, 0, 0, _RET_ALLOW))                # allow
    ins.append((_LD_W_ABS, 0, 0, 16))                     # clone_chk: its flags, args[0]'s low word
    jump(_JSET_K, _CLONE_THREAD, jt=allow2)               # a thread: allow; a process: EPERM
    ins.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))  # eperm
    ins.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))  # enosys
    ins.append((_RET_K, 0, 0, _RET_ALLOW))                # allow2
    assert len(ins) == allow2 + 1 and ins[allow][0] == ins[eperm][0] == _RET_K and ins[clone_chk][0] == _LD_W_ABS
    return ins


def no_new_privileges() -> str:
    """PR_SET_NO_NEW_PRIVS on this process, which an unprivileged seccomp filter or Landlock ruleset requires; "" when
    set, else why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: errno {ctypes.get_errno()}"
    return ""


def forbid_new_processes(spawn: bool = True, trace: bool = True) -> str:
    """Install the filter (program's spawn and trace) on every thread of this process; "" when installed or asked for
    nothing, else why not (nothing installed)."""
    machine = platform.machine()
    if not (spawn or trace):
        return ""
    if platform.system() != "Linux" or machine not in _ARCH:
        return f"no seccomp filter on {platform.system()} {machine}"
    ins = program(machine, spawn, trace)
    arr = (_Insn * len(ins))(*[_Insn(*x) for x in ins])
    prog = _Prog(len(ins), arr)
    libc = ctypes.CDLL(None, use_errno=True)
    why = no_new_privileges()
    if why:
        return why
    syscall_nr = _ARCH[machine][1]
    if libc.syscall(syscall_nr, _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) == 0:
        return ""
    # without TSYNC (older kernels): this thread and the threads it starts from now on
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0:
        return ""
    return f"seccomp filter refused: errno {ctypes.get_errno()}"
