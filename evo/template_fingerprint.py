"""Whether a shape was searched with today's kernels: a hash of each family's template folder that changes with
what the families compile and declare, not with their comments or layout.

A sweep records this hash beside every shape it finishes and searches a shape again when the hash differs
(evo.sweep). Engineers keep their measurements in the templates' comments (family.yaml's notes on a value, a
kernel's explanation of a trick); hashing the bytes made each such note send every shape of the table back into
the nightly sweep for kernels that had not changed. What counts:

* `family.yaml` (any `.yaml` / `.yml`): the parsed document (its values and their order; comments and layout do
  not count); a file that does not parse counts byte for byte.
* CUDA / C++ sources: the code without its `//` and `/* */` comments, runs of blanks outside string and character
  literals as one; the `/*---evo ... ---*/` header (the kernel's declared launch rules) counts as its parsed values.
  A source with a raw string literal counts byte for byte (not parsed here).
* Every other file, and every file's path: byte for byte.

Errors lean one way: text this module cannot read as a comment counts, so a change it misreads searches again.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cxx", ".inl"})
YAML_SUFFIXES = frozenset({".yaml", ".yml"})
HEADER_OPEN = "/*---evo"
_RAW_STRING = re.compile(r'(?<![A-Za-z0-9_])(?:u8|u|U|L)?R"')
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def source_code(text: str) -> str | None:
    """`text` (C, C++ or CUDA) without comments, blank runs outside literals collapsed (one space, or one newline
    where the run holds a line break), the evo header as its values. None for a text with a raw string literal.
    Where it reads C differently from the compiler (a `//` comment ending in a line splice), it keeps more."""
    if _RAW_STRING.search(text):
        return None
    out: list[str] = []
    i, n = 0, len(text)
    pending = ""  # the blank run seen since the last token: "", " " or "\n"

    def emit(s: str) -> None:
        nonlocal pending
        if pending and out:
            out.append(pending)
        pending = ""
        out.append(s)

    while i < n:
        c = text[i]
        if text.startswith(HEADER_OPEN, i):
            end = text.find("*/", i + len(HEADER_OPEN))
            end = n if end < 0 else end + 2
            emit(header_content(text[i:end]))
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end  # the line break stays a blank
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            pending = pending or " "  # a comment is one blank, as the compiler reads it
            i = n if end < 0 else end + 2
        elif c in " \t\r\n\f\v":
            j = i
            while j < n and text[j] in " \t\r\n\f\v":
                j += 1
            pending = "\n" if "\n" in text[i:j] or pending == "\n" else " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            end = min(j + 1, n)
            emit(text[i:end])
            i = end
        else:
            j = i
            while j < n and text[j] not in " \t\r\n\f\v\"'/":
                j += 1
            if j == i:  # a lone '/' (division)
                j = i + 1
            emit(text[i:j])
            i = j
    return "".join(out)


def header_content(block: str) -> str:
    """The evo header `/*---evo <YAML> ---*/` as its parsed YAML (the template's `{{NAME}}` placeholders read as
    strings), so a `#` note in it does not count; verbatim where it does not parse."""
    inner = block[len(HEADER_OPEN):]
    inner = inner[:-2] if inner.endswith("*/") else inner
    inner = inner[:-3] if inner.endswith("---") else inner
    kept = yaml_content(_PLACEHOLDER.sub(r'"{{\1}}"', inner))
    return block if kept is None else f"{HEADER_OPEN}{kept}*/"


def yaml_content(text: str) -> str | None:
    """The parsed document as canonical JSON, key order kept (the first value of a space is its default); None
    where it does not parse."""
    try:
        doc: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return json.dumps(doc, separators=(",", ":"), default=str)


def file_content(path: Path) -> bytes:
    """What of one template file counts (module docstring)."""
    raw = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix in SOURCE_SUFFIXES | YAML_SUFFIXES:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
        kept = source_code(text) if suffix in SOURCE_SUFFIXES else yaml_content(text)
        if kept is not None:
            return kept.encode()
    return raw


def template_files(folder: Path) -> Iterable[Path]:
    """A family folder's files in a fixed order (compiled Python caches aside)."""
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def fingerprint(families: list) -> str:
    """A short hash of the families' template folders (each file's path and what of it counts): a shape searched
    under another fingerprint was searched with other kernels, so a sweep counts it as due again."""
    h = hashlib.sha256()
    for fam in sorted(families, key=lambda f: f.name):
        for f in template_files(Path(fam.path)):
            h.update(f"{fam.name}/{f.relative_to(fam.path).as_posix()}\0".encode())
            h.update(file_content(f))
            h.update(b"\0")
    return h.hexdigest()[:16]
