"""Docs point only inside the repository, and bench/ scripts are named for what they do, not for work items."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_point_inside_the_repository():
    docs = [ROOT / "README.md", ROOT / "kernels_out" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = [(d.name, m.group(0)) for d in docs for m in re.finditer(r"\.\./shared\S*|/work/\S+", d.read_text())]
    assert not bad, bad


def test_bench_scripts_are_named_for_what_they_do():
    names = [p.name for p in (ROOT / "bench").glob("*.sh")]
    assert names and not [n for n in names if re.search(r"issue\d|^accept_", n)]
    # every bench script a doc names exists
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    missing = sorted({m for m in re.findall(r"bench/([\w.-]+\.sh)", text) if not (ROOT / "bench" / m).exists()})
    assert not missing, missing
