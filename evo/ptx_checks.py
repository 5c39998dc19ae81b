"""Static checks on a candidate's PTX, run at compile time (nvcc -keep leaves the PTX beside the cubin).

Two things no run on a GPU reliably shows:

* **Publication without release ordering.** A global store (``st.global``/generic ``st``, a TMA store)
  that reaches an *arrival* atomic (an integer ``atom``/``red`` on global memory: a split-K ticket, a
  semaphore) with no release between them (``membar.gl``/``.sys``, ``fence.sc|acq_rel.gpu|sys``, or the
  atomic / a store itself ``.release``/``.acq_rel`` at gpu or system scope on global memory) lets another
  CTA see the arrival before the data: it may read stale partials (most often through the read-only
  cache). It passes on most runs, so only a static rule rejects it. Floating-point atomics (data
  accumulated in L2) are not arrivals. "Reaches" follows each function's control flow (a store at the end
  of a loop's body reaches an arrival at its top through the back edge) and into the functions it calls.
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

# The rules' version, in the compile cache's key: a result cached under older rules is not replayed past newer ones
RULES = "2"  # 2: control flow (back edges, calls) and gpu- or sys-scope releases on global memory

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


_LABEL = re.compile(r"^\s*([$\w]+):(?!:)(.*)$")  # (inlined asm may put an instruction after its label)
_BRA = re.compile(r"^\s*(@!?%\w+\s+)?bra(?:\.uni)?\s+([$\w]+)\s*;")
_BRX = re.compile(_PRED + r"brx\.idx\b")
_RET = re.compile(r"^\s*(@!?%\w+\s+)?(?:ret|exit)(?:\.uni)?\s*;")
_CALL = re.compile(_PRED + r"call(?:\.uni)?\b")
_CALL_TARGET = re.compile(r"^\s*(?:\([^)]*\)\s*,\s*)?([$\w]+)")

# Instructions that matter to the rule, in a function's blocks: ("fence",), ("store", line, text),
# ("arrival", line, text), ("call", callee, line, text)
_Ins = tuple


@dataclass
class _Flow:
    """One function as basic blocks: what each does (in order) and where it may go next (EXIT: leaves the function)."""
    name: str
    ins: list[list[_Ins]]
    succ: list[list[int]]


EXIT = -1


def _flow(name: str, text: str, base: int, line_of) -> _Flow:
    """The function's blocks. Labels are scoped by braces (inlined asm brings its own `{ ... }` with labels that
    repeat from copy to copy); a branch goes to the label of its innermost enclosing scope that has it."""
    entries: list[tuple] = []  # ("label",) | ("bra", name, scopes, conditional) | ("brx",) | ("ret", conditional) | ins
    labels: dict[tuple[int, str], int] = {}  # (scope, label) -> index in entries
    scopes, next_scope = [0], 1
    lines = list(re.finditer(r"[^\n]*", text))
    i = 0
    while i < len(lines):
        m = lines[i]
        raw = m.group(0)
        i += 1
        line = raw.split("//", 1)[0]
        if not line.strip():
            continue
        pos = base + m.start()
        for ch in line:
            if ch == "{":
                scopes.append(next_scope)
                next_scope += 1
            elif ch == "}" and len(scopes) > 1:
                scopes.pop()
        lab = _LABEL.match(line)
        if lab:
            labels[(scopes[-1], lab.group(1))] = len(entries)
            entries.append(("label",))
            line = lab.group(2)
            if not line.strip():
                continue
        b = _BRA.match(line)
        if b:
            entries.append(("bra", b.group(2), tuple(scopes), b.group(1) is not None))
            continue
        if _BRX.match(line):
            entries.append(("brx",))
            continue
        r = _RET.match(line)
        if r:
            entries.append(("ret", r.group(1) is not None))
            continue
        if _FENCE.match(line):
            entries.append(("fence",))
            continue
        if _CALL.match(line):  # the callee may sit on a later line (nvcc: `call.uni (retval0),` / `vprintf,` / ...)
            stmt = line
            while ";" not in stmt and i < len(lines):
                stmt += " " + lines[i].group(0).split("//", 1)[0]
                i += 1
            rest = _CALL.sub("", stmt, count=1)
            t = _CALL_TARGET.match(rest)
            if t:
                entries.append(("call", t.group(1), line_of(pos), " ".join(stmt.split())))
            continue
        kind = _memory_kind(line)
        if kind == "fence":
            entries.append(("fence",))
        elif kind is not None:
            entries.append((kind, line_of(pos), " ".join(line.split())))
    # blocks: a new one at every label and after every transfer of control
    leaders = {0} | {k for k, e in enumerate(entries) if e[0] == "label"}
    leaders |= {k + 1 for k, e in enumerate(entries) if e[0] in ("bra", "brx", "ret")}
    starts = sorted(k for k in leaders if k < len(entries)) or [0]
    block_of = {k: n for n, k in enumerate(starts)}
    all_blocks = list(range(len(starts)))

    def target(name: str, stack: tuple) -> list[int]:
        for sc in reversed(stack):
            k = labels.get((sc, name))
            if k is not None:
                return [block_of[k]]
        return all_blocks  # (an unknown label: anywhere)

    ins: list[list[_Ins]] = []
    succ: list[list[int]] = []
    for n, k0 in enumerate(starts):
        k1 = starts[n + 1] if n + 1 < len(starts) else len(entries)
        body = [e for e in entries[k0:k1] if e[0] in ("fence", "store", "arrival", "call")]
        last = entries[k1 - 1] if k1 > k0 else ("label",)
        nxt = [n + 1] if n + 1 < len(starts) else [EXIT]
        if last[0] == "bra":
            out = target(last[1], last[2]) + (nxt if last[3] else [])
        elif last[0] == "brx":
            out = all_blocks
        elif last[0] == "ret":
            out = [EXIT] + (nxt if last[1] else [])
        else:
            out = nxt
        ins.append(body)
        succ.append(out)
    return _Flow(name, ins, succ)


def _memory_kind(line: str) -> str | None:
    """"fence" (a release: a release atomic or store counts as one), "arrival", "store" (global, TMA) or None."""
    for rx, kind, counts in ((_ATOM, "arrival", _is_arrival), (_STORE, "store", _is_global_store)):
        m = rx.match(line)
        if m:
            op = m.group(1)
            return "fence" if _is_release(op) else kind if counts(op) else None
    return "store" if _TMA_STORE.match(line) else None


@dataclass(frozen=True)
class _Summary:
    """What a call does to its caller's state: an arrival reachable from its entry with no release before it;
    whether a caller's unreleased store may still be unreleased at its return (transparent); a store of its own it
    may return with unreleased."""
    arrives: tuple | None = None
    transparent: bool = True
    leaves: tuple | None = None


_MARK = (0, "<caller's store>")


def _run(flow: _Flow, entry: tuple, summaries: dict[str, _Summary]) -> tuple[list[tuple], tuple]:
    """Forward may-analysis: state = (a store not yet released (line, text) or None, the caller's mark or None).
    Returns (arrivals reached with an unreleased store: (store, arrival line, arrival text)), state at exit)."""
    n = len(flow.ins)
    state_in: list[tuple | None] = [None] * n
    hits: dict[tuple, tuple] = {}
    exit_state = (None, None)

    def merge(a: tuple | None, b: tuple) -> tuple:
        if a is None:
            return b
        return (a[0] or b[0], a[1] or b[1])

    if n == 0:
        return [], entry
    state_in[0] = entry
    work = [0]
    while work:
        blk = work.pop()
        store, mark = state_in[blk]
        for e in flow.ins[blk]:
            kind = e[0]
            if kind == "fence":
                store, mark = None, None
            elif kind == "store":
                store = store or (e[1], e[2])
            elif kind == "arrival":
                for p in (store, mark):
                    if p is not None:
                        hits.setdefault((p, e[1]), (p, e[1], e[2]))
            elif kind == "call":
                g = summaries.get(e[1], _Summary())
                if g.arrives is not None:
                    for p in (store, mark):
                        if p is not None:
                            hits.setdefault((p, e[2]), (p, e[2], f"{e[3]} (reaches line {g.arrives[0]}: "
                                                                 f"{g.arrives[1]})"))
                if not g.transparent:
                    store, mark = None, None
                store = store or g.leaves
        for t in flow.succ[blk]:
            if t == EXIT:
                exit_state = merge(exit_state, (store, mark))
                continue
            new = merge(state_in[t], (store, mark))
            if new != state_in[t]:
                state_in[t] = new
                work.append(t)
    return list(hits.values()), exit_state


def publication_races(text: str) -> list[Finding]:
    """Every arrival that a global store reaches along some path of its function's control flow (loops' back edges
    included) with no release between them; a call counts as what its callee does (its own arrivals, releases and
    unreleased stores), an external callee as nothing."""
    line_of = _line_index(text)
    flows = [_flow(name, text[start:end], start, line_of) for name, start, end in _functions(text)]
    # summaries of the functions some call names (none in most kernels: everything inlined)
    called = {e[1] for f in flows for block in f.ins for e in block if e[0] == "call"}
    callees = [f for f in flows if f.name in called]
    summaries: dict[str, _Summary] = {}
    for _ in range(len(callees) + 1):  # the call graph's depth at most (a recursive cycle stops here)
        changed = False
        for f in callees:
            hits, through = _run(f, (None, _MARK), summaries)
            _, own = _run(f, (None, None), summaries)
            arrives = next(((h[1], h[2]) for h in hits if h[0] == _MARK), None)
            s = _Summary(arrives, through[1] is not None, own[0])
            if summaries.get(f.name) != s:
                summaries[f.name] = s
                changed = True
        if not changed:
            break
    out: list[Finding] = []
    for f in flows:
        hits, _ = _run(f, (None, None), summaries)
        for store, line, detail in sorted(hits, key=lambda h: (h[1], h[0][0])):
            if any(x.line == line and x.function == f.name for x in out):
                continue  # one finding per arrival
            out.append(Finding("publication", f.name, line, f"{detail} after line {store[0]}: {store[1]}"))
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
