"""Static checks on a candidate's PTX, run at compile time (nvcc -keep leaves the PTX beside the cubin).

Two things no run on a GPU reliably shows:

* **Publication without release ordering.** A global store (``st.global``/generic ``st``, a TMA store)
  followed, in a function's program order, by an *arrival* atomic (an integer ``atom``/``red`` on global
  memory: a split-K ticket, a semaphore) with no release between them (``membar.gl``/``.sys``,
  ``fence.sc|acq_rel.gpu|sys``, or the atomic / a store itself ``.release``/``.acq_rel`` at gpu or system
  scope) lets another
  CTA see the arrival before the data: it may read stale partials (most often through the read-only
  cache). It passes on most runs, so only a static rule rejects it. Floating-point atomics (data
  accumulated in L2) are not arrivals. A loop's back edge is not followed: the scan is linear.
* **Module-scope mutable state.** A ``.global`` variable written by the kernel (a ``__device__`` counter
  or results cache) or whose address is taken, and device-side ``malloc``: state that outlives a launch
  lets a kernel count calls or replay results. State belongs in the workspace, which the evaluator
  gives anew to every phase. String literals (``$str``, printf/assert) are exempt.

``check_ptx(text)`` returns findings; ``gate_message(findings)`` the one-line rejection.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", re.M)
_PRED = r"^\s*(?:@!?%\w+\s+)?"
_FENCE = re.compile(_PRED + r"(?:membar\.(?:gl|sys)\b|fence\.(?:sc|acq_rel)\.(?:gpu|sys)\b|fence\.(?:sc|acq_rel)\s*;)")
_STORE = re.compile(_PRED + r"(st(?:\.[\w:]+)*)\s")
_TMA_STORE = re.compile(_PRED + r"(?:cp\.async\.bulk(?:\.tensor)?(?:\.\w+)*\.global\.shared|cp\.reduce\.async\.bulk(?:\.tensor)?(?:\.\w+)*\.global)")
_ATOM = re.compile(_PRED + r"((?:atom|red)(?:\.[\w:]+)*)\s")
_INT_TYPE = re.compile(r"\.(?:u32|s32|u64|s64|b32|b64)\b")
_GLOBAL_DECL = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.global\s+[^;]*?([\w$]+)\s*(?:\[\d*\])?\s*(?:=[^;]*)?;", re.M)
_MALLOC = re.compile(r"\bcall(?:\.uni)?\s*(?:\([^)]*\)\s*,\s*)?malloc\b")


@dataclass
class Finding:
    kind: str  # "publication" | "state"
    function: str
    line: int  # 1-based line in the PTX
    detail: str


def _functions(text: str) -> list[tuple[str, int, int]]:
    """(name, start offset, end offset) of every .entry/.func body."""
    heads = list(_FUNC.finditer(text))
    out = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out.append((m.group(2), m.start(), end))
    return out


def _qualifiers(op: str) -> set[str]:
    return set(op.split(".")[1:])


def _is_global_store(op: str) -> bool:
    q = _qualifiers(op)
    if q & {"shared", "local", "param", "async", "bulk"} or any(x.startswith("shared::") for x in q):
        return False
    return True  # .global or generic (may point to global memory)


def _is_release(op: str) -> bool:
    """A release another CTA's acquire can pair with: .release/.acq_rel at .gpu or .sys scope (an atomic's or a
    store's default scope is .gpu) on global (or generic) memory. One at .cta or .cluster scope, or on a CTA's shared
    memory, which no other CTA's acquire reads, orders nothing for the CTAs that read the partials."""
    q = _qualifiers(op)
    local = q & {"shared", "local"} or any(x.startswith("shared::") for x in q)
    return bool(q & {"release", "acq_rel"}) and not q & {"cta", "cluster"} and not local


def _is_arrival(op: str) -> bool:
    q = _qualifiers(op)
    if q & {"shared", "local"} or any(x.startswith("shared::") for x in q):
        return False
    return bool(_INT_TYPE.search(op))


def publication_races(text: str) -> list[Finding]:
    out: list[Finding] = []
    line_of = _line_index(text)
    for name, start, end in _functions(text):
        pending: tuple[int, str] | None = None  # the first global store since the last release
        for m in re.finditer(r"[^\n]*", text[start:end]):
            line = m.group(0)
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            pos = start + m.start()
            if _FENCE.match(line):
                pending = None
                continue
            a = _ATOM.match(line)
            if a:
                op = a.group(1)
                if _is_release(op):
                    pending = None
                elif pending is not None and _is_arrival(op):
                    out.append(Finding("publication", name, line_of(pos),
                                       f"{' '.join(line.split())} after line {pending[0]}: {pending[1]}"))
                    pending = None  # one finding per store run
                continue
            s = _STORE.match(line)
            if s:
                op = s.group(1)
                if _is_release(op):
                    pending = None
                elif _is_global_store(op) and pending is None:
                    pending = (line_of(pos), " ".join(line.split()))
                continue
            if _TMA_STORE.match(line) and pending is None:
                pending = (line_of(pos), " ".join(line.split()))
    return out


def module_state(text: str) -> list[Finding]:
    out: list[Finding] = []
    line_of = _line_index(text)
    for d in _GLOBAL_DECL.finditer(text):
        var = d.group(1)
        if var.startswith("$str"):
            continue
        v = re.escape(var)
        written = re.search(_PRED + r"(?:st|atom|red)(?:\.[\w:]+)*\s+\[" + v + r"\b", text, re.M)
        taken = re.search(r"\b(?:mov|cvta(?:\.to)?(?:\.global)?)\.u(?:64|32)\s+%\w+\s*,\s*" + v + r"\b", text)
        if written or taken:
            how = "written by the kernel" if written else "its address taken"
            out.append(Finding("state", "", line_of(d.start()), f"module-scope variable {var} ({how})"))
    for m in _MALLOC.finditer(text):
        out.append(Finding("state", "", line_of(m.start()), "device-side malloc"))
    return out


def check_ptx(text: str) -> list[Finding]:
    return publication_races(text) + module_state(text)


def check_dir(folder: str | Path) -> list[Finding]:
    """Every .ptx file nvcc -keep left in folder."""
    out: list[Finding] = []
    for p in sorted(Path(folder).glob("*.ptx")):
        out += check_ptx(p.read_text(errors="replace"))
    return out


def gate_message(findings: list[Finding]) -> str:
    """One line for the compile record, '' when there is nothing to reject."""
    if not findings:
        return ""
    f = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    if f.kind == "publication":
        return (f"PTX publication race in {f.function}: a global store reaches the arrival atomic with no release "
                f"ordering (membar.gl/fence.acq_rel.gpu, or .release/.acq_rel on the atomic) between them: "
                f"line {f.line}: {f.detail}"[:400] + more)
    return (f"PTX module-scope state: {f.detail} at line {f.line}: state that outlives a launch is not allowed; "
            f"keep it in the workspace" + more)


def _line_index(text: str):
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def line_of(pos: int) -> int:
        import bisect

        return bisect.bisect_right(starts, pos)

    return line_of
