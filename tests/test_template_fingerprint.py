"""The template fingerprint a sweep compares: code and declared values count, comments and layout do not."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from evo.families import load_families, templates_root
from evo.template_fingerprint import HEADER_OPEN, fingerprint, source_code, yaml_content

KERNEL = """/*---evo
family: toy
params: {{PARAMS}}
block: [128, 1, 1]   # one warpgroup
---*/
// what the kernel does
#define TILE 64  // rows per CTA
__global__ void k(float* c) {
  /* a block
     comment */
  const char* s = "a // not a comment /* nor this */";
  char q = '"';
  c[threadIdx.x] = TILE / 2;  // halves
}
"""

FAMILY = """name: toy
params:
  BM: [128, 64]   # tile rows
  STAGES: [4, 3]
starts:
  - {BM: 64, STAGES: 3}   # measured 1.1x somewhere
"""


@dataclass
class Fam:
    name: str
    path: Path


def toy(tmp_path: Path, kernel: str = KERNEL, family: str = FAMILY, extra: dict | None = None) -> list[Fam]:
    d = tmp_path / "toy"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "kernel.cu").write_text(kernel)
    (d / "family.yaml").write_text(family)
    for name, text in (extra or {}).items():
        (d / name).write_text(text)
    return [Fam("toy", d)]


def test_comments_and_layout_do_not_count(tmp_path):
    base = fingerprint(toy(tmp_path))
    edits = [
        KERNEL.replace("// what the kernel does", "// what the kernel does, measured 3 % faster (Run 48)"),
        KERNEL.replace("/* a block\n     comment */", "/* another\n   block */"),
        KERNEL.replace("// rows per CTA", ""),
        KERNEL.replace("  c[threadIdx.x] = TILE / 2;", "\tc[threadIdx.x]   =   TILE / 2;\n\n"),
        KERNEL + "\n// a closing note\n",
        KERNEL.replace("# one warpgroup", "# one warpgroup of 128 threads"),   # a note inside the evo header
    ]
    for e in edits:
        assert fingerprint(toy(tmp_path, kernel=e)) == base, e
    for f in (FAMILY.replace("# tile rows", "# tile rows (256 measured slower)"), FAMILY + "# end\n",
              FAMILY.replace("  BM: [128, 64]", "  BM:   [128,   64]")):
        assert fingerprint(toy(tmp_path, family=f)) == base, f


def test_code_and_values_count(tmp_path):
    base = fingerprint(toy(tmp_path))
    edits = [
        KERNEL.replace("#define TILE 64", "#define TILE 32"),
        KERNEL.replace("TILE / 2", "TILE/2"),   # layout inside a token run counts (errs towards searching again)
        KERNEL.replace("a // not a comment", "b // not a comment"),   # inside a string literal
        KERNEL.replace("/* nor this */", "/* nor that */"),
        KERNEL.replace("block: [128, 1, 1]", "block: [256, 1, 1]"),   # the evo header's values
        KERNEL + "__device__ int extra;\n",
    ]
    for e in edits:
        assert fingerprint(toy(tmp_path, kernel=e)) != base, e
    for f in (FAMILY.replace("BM: 64, STAGES: 3", "BM: 64, STAGES: 4"),   # a start
              FAMILY.replace("BM: [128, 64]", "BM: [64, 128]")):          # the default (first value)
        assert fingerprint(toy(tmp_path, family=f)) != base, f
    assert fingerprint(toy(tmp_path, extra={"notes.md": "x"})) != base   # a new file
    toy(tmp_path)
    (tmp_path / "toy" / "notes.md").write_text("x")
    first = fingerprint([Fam("toy", tmp_path / "toy")])
    (tmp_path / "toy" / "notes.md").write_text("y")
    assert fingerprint([Fam("toy", tmp_path / "toy")]) != first   # other files: byte for byte


def test_unparsed_text_counts_byte_for_byte(tmp_path):
    raw = KERNEL.replace('const char* s = "a', 'const char* r = R"(x)"; const char* s = "a')
    assert source_code(raw) is None
    base = fingerprint(toy(tmp_path, kernel=raw))
    assert fingerprint(toy(tmp_path, kernel=raw.replace("// halves", "// half"))) != base
    broken = "name: toy\nparams: [unclosed\n"
    assert yaml_content(broken) is None
    b = fingerprint(toy(tmp_path, family=broken))
    assert fingerprint(toy(tmp_path, family=broken + "# note\n")) != b


@pytest.mark.skipif(shutil.which("cpp") is None, reason="needs the C preprocessor")
def test_the_families_code_is_what_the_preprocessor_keeps():
    """Every real template, header aside: the comment stripper keeps exactly the preprocessor's tokens (whitespace
    aside), so a note in a kernel never hides a change of code."""
    for fam in load_families(templates_root()):
        for f in sorted(Path(fam.path).glob("*.cu")):
            text = f.read_text()
            body = text[text.index("---*/") + 5:] if text.startswith(HEADER_OPEN) else text
            ref = subprocess.run(["cpp", "-fpreprocessed", "-dD", "-E", "-P", "-x", "c++", "-"], input=body,
                                 capture_output=True, text=True, check=True).stdout
            mine = source_code(body)
            assert mine is not None and "".join(mine.split()) == "".join(ref.split()), f


def test_a_note_in_a_real_family_keeps_its_fingerprint(tmp_path):
    """The committed templates: a comment added to each kernel and family.yaml keeps the fingerprint; one start
    changed does not."""
    root = tmp_path / "templates"
    shutil.copytree(templates_root(), root)
    base = fingerprint(load_families(root))
    for f in root.glob("*/kernel.cu"):
        f.write_text(f.read_text().replace("---*/\n", "---*/\n// measured again (Run 99)\n", 1) + "/* the end */\n")
    for f in root.glob("*/family.yaml"):
        f.write_text(f.read_text().replace("\nparams:", "\n# measured again (Run 99)\nparams:", 1) + "# the end\n")
    assert fingerprint(load_families(root)) == base
    y = root / "wgmma_sm90" / "family.yaml"
    y.write_text(y.read_text().replace("STAGES: 5}", "STAGES: 4}", 1))
    assert fingerprint(load_families(root)) != base
