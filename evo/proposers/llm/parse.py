"""Turn a model's reply into a candidate: the IDEA line, then a SEARCH/REPLACE diff or a full rewrite.

Every failure is a short reason (a stats key) plus a one-line detail; nothing here raises.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import EvoError
from ...kernel import KernelSource, strip_comments
from ...problem import Problem

# reasons a reply is unusable (stats keys)
EMPTY = "empty_reply"
NO_CODE = "no_code"
TRUNCATED = "truncated"
SEARCH_NOT_FOUND = "search_not_found"
NO_ENTRY = "no_entry_point"
BAD_FRONT = "bad_front_matter"
WRONG_ARCH = "wrong_arch"
BAD_LAUNCH = "bad_launch"
REJECTS_PROBLEM = "rejects_problem"
DUPLICATE = "duplicate"
REQUEST_FAILED = "request_failed"

CODE_LANGS = {"", "cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp", "text"}

_IDEA = re.compile(r"^[ \t>*_#-]*IDEA[*_ \t]*[:：][*_ \t]*(.*)$", re.M | re.I)
_DIFF = re.compile(
    r"^[ \t]*<{5,9}[ \t]*SEARCH[^\n]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$",
    re.M | re.S,
)
_DIFF_START = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH", re.M)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n", re.M)


@dataclass
class Parsed:
    """The outcome of one reply: ``source`` when usable, else ``reason`` and ``detail``."""

    idea: str = ""
    mode: str = ""  # "diff" or "full"
    source: str = ""
    kernel: KernelSource | None = None
    reason: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


class DiffError(Exception):
    pass


def extract_idea(reply: str) -> str:
    """The text after ``IDEA:`` (continued on following prose lines up to a blank line or code)."""
    m = _IDEA.search(reply)
    if not m:
        return ""
    parts = [m.group(1).strip()]
    for line in reply[m.end():].split("\n")[1:]:
        s = line.strip()
        if not s or s.startswith(("```", "~~~", "<<<<<", "/*", "#include", "//")):
            break
        parts.append(s)
    idea = " ".join(p for p in parts if p).strip().strip("*_").strip()
    return idea[:500]


def diff_blocks(reply: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _DIFF.finditer(reply)]


def _lines(block: str) -> list[str]:
    lines = block.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _find_lines(hay: list[str], needle: list[str], key) -> int:
    n = len(needle)
    want = [key(x) for x in needle]
    for i in range(len(hay) - n + 1):
        if [key(x) for x in hay[i:i + n]] == want:
            return i
    return -1


def apply_diff(parent: str, blocks: list[tuple[str, str]]) -> str:
    """Apply SEARCH/REPLACE blocks in order: exact text first, then line by line ignoring
    whitespace at line ends, then ignoring indentation too. Raises DiffError."""
    text = parent
    for k, (search, replace) in enumerate(blocks, 1):
        if not search.strip():
            raise DiffError(f"SEARCH block {k} is empty")
        s = search[:-1] if search.endswith("\n") else search
        r = replace[:-1] if replace.endswith("\n") else replace
        at = text.find(s)
        if at >= 0:
            text = text[:at] + r + text[at + len(s):]
            continue
        hay = text.split("\n")
        needle = _lines(search)
        while needle and not needle[0].strip():
            needle.pop(0)
        while needle and not needle[-1].strip():
            needle.pop()
        for key in (str.rstrip, str.strip):
            i = _find_lines(hay, needle, key)
            if i >= 0:
                hay[i:i + len(needle)] = _lines(replace)
                text = "\n".join(hay)
                break
        else:
            first = next((ln.strip() for ln in needle if ln.strip()), "")
            raise DiffError(f"SEARCH block {k} of {len(blocks)} not found in the parent (it starts {first[:80]!r})")
    return text


def _pick_fence(reply: str) -> tuple[str | None, bool]:
    """The code block most likely to be the kernel, and whether its fence was closed."""
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(reply)]
    blocks = [(lang, body) for lang, body in blocks if lang in CODE_LANGS]
    if blocks:
        def score(b: tuple[str, str]) -> tuple:
            body = b[1]
            return ("/*---evo" in body, "evo_gemm" in body, len(body))
        return max(blocks, key=score)[1], True
    # an unterminated fence (the reply ran out of tokens, or the model forgot to close it)
    opens = [m for m in _FENCE_OPEN.finditer(reply) if m.group(2).lower() in CODE_LANGS]
    if opens:
        return reply[opens[-1].end():], False
    if "/*---evo" in reply:
        return reply[reply.index("/*---evo"):], True
    return None, False


def _trim_prefix(code: str) -> str:
    """Drop comments/blank lines a model put before the front matter."""
    at = code.find("/*---evo")
    if at > 0 and not strip_comments(code[:at]).strip():
        return code[at:]
    return code


def check_kernel(text: str, problem: Problem | None, arch: str, num_sms: int) -> tuple[KernelSource | None, str, str]:
    """Parse a candidate and check its launch rules for the problem: (kernel, reason, detail)."""
    try:
        ks = KernelSource.parse(text)
    except EvoError as e:
        msg = str(e)
        return None, (NO_ENTRY if "entry point" in msg else BAD_FRONT), msg
    except Exception as e:  # noqa: BLE001 - a reply must never crash the search
        return None, BAD_FRONT, f"{type(e).__name__}: {e}"
    if arch and arch not in ks.meta.archs:
        return None, WRONG_ARCH, f"front matter archs {list(ks.meta.archs)} lack {arch}"
    if problem is not None:
        try:
            if not ks.accepts(problem, num_sms):
                return None, REJECTS_PROBLEM, f"requires {ks.meta.requires!r} excludes {problem.key}"
            ks.launch(problem, num_sms)
        except Exception as e:  # noqa: BLE001
            return None, BAD_LAUNCH, " ".join(str(e).split())[:300]
    return ks, "", ""


def parse_reply(reply: str, parent: str, *, problem: Problem | None = None, arch: str = "", num_sms: int = 132,
                finish_reason: str = "") -> Parsed:
    """Make a candidate from a reply to a prompt about ``parent``."""
    reply = (reply or "").replace("\r\n", "\n").replace("\r", "\n")
    parent = parent.replace("\r\n", "\n")
    out = Parsed(idea=extract_idea(reply))
    if not reply.strip():
        out.reason, out.detail = EMPTY, "the reply is empty"
        return out
    blocks = diff_blocks(reply)
    if blocks:
        out.mode = "diff"
        try:
            text = apply_diff(parent, blocks)
        except DiffError as e:
            out.reason, out.detail = SEARCH_NOT_FOUND, str(e)
            return out
    elif _DIFF_START.search(reply):
        out.mode = "diff"
        out.reason = TRUNCATED if finish_reason == "length" else SEARCH_NOT_FOUND
        out.detail = "a SEARCH/REPLACE block is not closed by ======= and >>>>>>> REPLACE"
        return out
    else:
        out.mode = "full"
        code, closed = _pick_fence(reply)
        if code is None or not code.strip():
            out.reason = TRUNCATED if finish_reason == "length" else NO_CODE
            out.detail = "the reply has no code block" + (" (it hit max_tokens)" if finish_reason == "length" else "")
            return out
        if not closed and finish_reason == "length":
            out.reason, out.detail = TRUNCATED, "the code block was cut off at max_tokens"
            return out
        text = _trim_prefix(code)
    if not text.endswith("\n"):
        text += "\n"
    ks, reason, detail = check_kernel(text, problem, arch, num_sms)
    if ks is None:
        out.reason, out.detail = reason, detail
        return out
    out.source, out.kernel = text, ks
    return out
