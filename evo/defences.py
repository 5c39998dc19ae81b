"""Named evaluator defences that a test may switch off, to show that its adversarial kernel then gets through.

Switched off by ``check.defences_off`` in the config or by ``EVO_TEST_DEFENCES_OFF=name,name`` in the
environment (the GPU worker and the sanitizer's vetting read both; the compiler's ``ptx_checks`` reads the
environment only, as a Compiler is built from the compile section alone); never for a real search. docs/evaluator.md
records, per defence, the test that fails when it is off.
"""
from __future__ import annotations

import os

from .errors import EvoError

ENV = "EVO_TEST_DEFENCES_OFF"

DEFENCES = {
    "fresh_inputs": "new device-generated inputs before every timed call (off: 3 input sets repeat)",
    "random_checks": "full elementwise checks at random timed calls (off: they check warm-up calls only)",
    "tight_bound": "per-element bound calibrated to fp32 accumulation, sampled rows/cols every call, "
                   "exact test on ordinary data (off: 1e-2 relative error and a loose checksum)",
    "roofline": "times below the roofline bound are refused (off: any time is accepted)",
    "fresh_module": "a fresh cuModuleLoad and workspace per phase (off: cupy's per-process module cache)",
    "ptx_checks": "static PTX gate: publication without release ordering, module-scope mutable state",
    "sanitizer_padding": "compute-sanitizer runs with --padding on exact cudaMalloc allocations",
    "host_sandbox": "a launch: host candidate's host code runs in a process of its own, stopped between requests, "
                    "unless it is its family's template rendered unchanged (off: loaded into the GPU worker, with its "
                    "context and pointers)",
    "host_no_spawn": "the host-code sandbox cannot start processes (seccomp: no fork, vfork, clone of a process, "
                     "exec; off: a child it forks and detaches outlives the candidate)",
    "host_no_trace": "the host-code sandbox cannot reach into another process's memory (seccomp: no ptrace, "
                     "process_vm_readv / writev, pidfd_getfd; off: it reads the worker's memory where the kernel "
                     "lets one user trace its own processes)",
    "host_read_only": "the file system is read-only to the host-code sandbox but /dev (Landlock; off: it writes any "
                      "file the user may, the archive and /proc/<pid>/mem among them)",
}


def defences_off(configured: list | tuple | None = None, environ: dict | None = None) -> frozenset[str]:
    """The defences switched off by the config list and the environment; an unknown name is an EvoError."""
    env = os.environ if environ is None else environ
    names = [str(x).strip() for x in (configured or [])]
    names += [x.strip() for x in env.get(ENV, "").split(",")]
    names = [x for x in names if x]
    bad = sorted(set(names) - set(DEFENCES))
    if bad:
        raise EvoError(f"unknown defence {', '.join(bad)} in check.defences_off / {ENV}; known: {', '.join(DEFENCES)}")
    return frozenset(names)
