"""Reply parsing, diff application, template filling and log truncation (no server)."""
from __future__ import annotations

import pytest

from evo.errors import EvoError
from evo.problem import Problem
from evo.proposers.llm import parse
from evo.proposers.llm.prompt import Templates, fill, truncate_log
from evo.testing.samples import simt_kernel

PARENT = simt_kernel(16)
PROBLEM = Problem(4096, 4096, 1024)


def child(n: int = 1) -> str:
    return PARENT.replace("#define TILE 16\n", f"#define TILE 16\n__device__ constexpr int variant = {n};\n")


def run(reply: str, finish: str = "stop") -> parse.Parsed:
    return parse.parse_reply(reply, PARENT, problem=PROBLEM, arch="sm_90a", num_sms=132, finish_reason=finish)


@pytest.mark.parametrize("lang", ["cuda", "cpp", "c++", "cu", ""])
def test_full_rewrite_any_fence(lang):
    p = run(f"Some prose first.\n\nIDEA: Add a constant.\n\n```{lang}\n{child()}```\nThanks!")
    assert p.ok, p.detail
    assert p.mode == "full" and p.idea == "Add a constant."
    assert "variant = 1" in p.source and p.kernel is not None


def test_crlf_reply_and_idea_markdown():
    p = run(f"**IDEA:** Use a bigger tile.\r\nIt should help.\r\n\r\n```cuda\r\n{child()}```\r\n".replace("\n", "\r\n").replace("\r\r", "\r"))
    assert p.ok, p.detail
    assert "\r" not in p.source
    assert p.idea == "Use a bigger tile. It should help."


def test_picks_the_kernel_among_several_blocks():
    reply = f"IDEA: x\n```bash\nnvcc -O3 k.cu\n```\n```cpp\nint helper();\n```\n```cuda\n{child()}```\n"
    p = run(reply)
    assert p.ok and "variant = 1" in p.source


def test_leading_comment_before_front_matter_is_dropped():
    p = run(f"IDEA: x\n```cuda\n// kernel.cu\n{child()}```")
    assert p.ok, p.detail
    assert p.source.startswith("/*---evo")


def test_diff_exact_and_trailing_whitespace_tolerant():
    reply = ("IDEA: Unroll.\n<<<<<<< SEARCH\n    for (int k = 0; k < K; ++k) {   \n=======\n"
             "    #pragma unroll 4\n    for (int k = 0; k < K; ++k) {\n>>>>>>> REPLACE\n")
    p = run(reply)
    assert p.ok, p.detail
    assert p.mode == "diff"
    assert "#pragma unroll 4\n    for (int k = 0; k < K; ++k) {" in p.source


def test_diff_indentation_mismatch_and_crlf():
    reply = "IDEA: x\r\n<<<<<<< SEARCH\r\nfloat acc = 0.0f;\r\n=======\r\n    float acc = 0.0f; // init\r\n    int unused_n = N;\r\n>>>>>>> REPLACE\r\n"
    p = run(reply)
    assert p.ok, p.detail
    assert "int unused_n = N;" in p.source


def test_diff_inside_fence_and_multiple_blocks():
    reply = ("IDEA: two edits\n```cuda\n<<<<<<< SEARCH\n#define TILE 16\n=======\n#define TILE 16\n#define UNROLL 2\n>>>>>>> REPLACE\n"
             "<<<<<<< SEARCH\n    float acc = 0.0f;\n=======\n    float acc = 0.0f * UNROLL;\n>>>>>>> REPLACE\n```\n")
    p = run(reply)
    assert p.ok, p.detail
    assert "#define UNROLL 2" in p.source and "0.0f * UNROLL" in p.source


def test_diff_search_not_found():
    p = run("IDEA: x\n<<<<<<< SEARCH\nthis line is not in the parent\n=======\nfoo\n>>>>>>> REPLACE\n")
    assert p.reason == parse.SEARCH_NOT_FOUND
    assert "not found" in p.detail and "this line is not in the parent" in p.detail


def test_unclosed_diff():
    p = run("IDEA: x\n<<<<<<< SEARCH\n#define TILE 16\n=======\n#define TILE 32\n")
    assert p.reason == parse.SEARCH_NOT_FOUND
    assert run("IDEA: x\n<<<<<<< SEARCH\n#define TILE 16\n", finish="length").reason == parse.TRUNCATED


def test_garbage_and_empty():
    assert run("I cannot help with that.").reason == parse.NO_CODE
    assert run("   ").reason == parse.EMPTY


def test_truncated_fence():
    p = run(f"IDEA: x\n```cuda\n{child()[:200]}", finish="length")
    assert p.reason == parse.TRUNCATED


def test_wrong_entry_point():
    p = run(f"IDEA: x\n```cuda\n{child().replace('evo_gemm', 'my_gemm')}```")
    assert p.reason == parse.NO_ENTRY


def test_missing_front_matter():
    body = child().split("---*/\n", 1)[1]
    p = run(f"IDEA: x\n```cuda\n{body}```")
    assert p.reason == parse.BAD_FRONT and "front-matter" in p.detail


def test_launch_rules_checked():
    bad = child().replace('grid: ["cdiv(N, TILE)"', 'grid: ["cdiv(N, TILEX)"')
    assert run(f"```cuda\n{bad}```").reason == parse.BAD_LAUNCH
    arch = child().replace("archs: [sm_80, sm_90a]", "archs: [sm_80]")
    assert run(f"```cuda\n{arch}```").reason == parse.WRONG_ARCH
    req = child().replace("workspace: 0\n", 'workspace: 0\nrequires: "K % 3 == 0"\n')
    assert run(f"```cuda\n{req}```").reason == parse.REJECTS_PROBLEM


def test_fill_leaves_cxx_braces_alone():
    src = "struct S { int a[2] = {{0}}; }; template<int N> { {BM} }"
    out = fill("A {{source}} B {{ n }}", {"source": src, "n": "{{n}}"})
    assert out == f"A {src} B {{{{n}}}}"
    with pytest.raises(EvoError, match="unknown_key"):
        fill("{{unknown_key}}", {})


def test_templates_override_dir(tmp_path):
    (tmp_path / "system.md").write_text("CUSTOM SYSTEM {{nothing_here}}")
    t = Templates(str(tmp_path))
    assert t.text["system"].startswith("CUSTOM")
    assert "SEARCH" in t.text["edit_diff"]  # others fall back to the shipped ones
    with pytest.raises(EvoError, match="not a folder"):
        Templates(str(tmp_path / "missing"))


def test_truncate_log_keeps_head_errors_and_long_symbols():
    sym = "_ZN4cute6detail" + "X" * 400 + "E"
    lines = [f"note: line {i}" for i in range(2000)]
    lines[1500] = f'kernel.cu(120): error: identifier "evo_undefined" is undefined in {sym}'
    lines[1700] = f"ptxas info    : Used 255 registers, 1024 bytes spill stores for {sym}"
    out = truncate_log("\n".join(lines), 4000)
    assert len(out) <= 4200
    assert out.startswith("note: line 0")
    assert lines[1500] in out and lines[1700] in out  # whole, never redacted
    assert "lines omitted" in out
    assert truncate_log("short", 4000) == "short"
