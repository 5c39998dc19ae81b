"""Every LLM conversation is kept in the archive and readable from the command line."""
from __future__ import annotations

import json

import pytest

from evo import conversations
from evo.config import load_config
from evo.kernel import KernelSource
from evo.proposers.llm import LlmProposer
from evo.proposers.llm.client import DEFAULT_KEY_ENV
from evo.store import Store
from evo.testing import samples
from evo.testing.fake_llm import FakeLlmServer

PARENT = samples.simt_kernel(16)


def child(n: int) -> str:
    at = PARENT.index("---*/") + len("---*/\n")
    return PARENT[:at] + f"__device__ constexpr int evo_conv_{n} = {n};\n" + PARENT[at:]


@pytest.fixture()
def archive(tmp_path, monkeypatch):
    """A store with three conversations: a child, an unusable reply, a failed request."""
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    store = Store(tmp_path / "evo.db")
    parent = samples.individual(PARENT, time_us=100.0)
    script = [{"content": f"IDEA: a constant\n\n```cuda\n{child(1)}```\n", "prompt_tokens": 1234, "completion_tokens": 56},
              {"content": "no code, sorry"}, {"status": 404, "message": "gone"}]
    with FakeLlmServer(script) as srv:
        cfg = load_config(overrides={"llm": {"url": srv.base_url, "model": "fake", "retries": 0, "concurrency": 1,
                                             "edit_modes": ["full"]}})
        p = LlmProposer.from_config(cfg, store=store)
        props = p.propose(samples.context([parent]), 3)
    assert len(props) == 1
    return store, props[0], parent, tmp_path / "evo.db"


def test_conversations_are_stored_with_prompt_reply_tokens_and_candidate(archive):
    store, prop, parent, _ = archive
    rows = store.conversations()
    assert [r["outcome"] for r in rows] == ["proposed", "no_code", "request_failed"]
    first = rows[0]
    assert first["candidate"] == KernelSource.parse(prop.source).hash and first["parent"] == parent.hash
    assert first["model"] == "fake" and first["kind"] == "improve"
    assert (first["tokens_in"], first["tokens_out"]) == (1234, 56) and first["latency_s"] > 0
    msgs = json.loads(first["messages"])
    assert msgs[0]["role"] == "system" and "## Parent kernel" in msgs[1]["content"]
    assert "evo_conv_1" in first["reply"]
    sizes = json.loads(first["sections"])
    assert sizes["total"] == len(msgs[1]["content"]) and sizes["tokens_est"] > 0
    assert "HTTP 404" in rows[2]["detail"] and rows[2]["reply"] == ""
    assert store.conversation_ids([first["candidate"], "nope"]) == {first["candidate"]: first["id"]}


def test_cli_list_show_and_candidate(archive, capsys):
    store, prop, _, db = archive
    h = KernelSource.parse(prop.source).hash
    assert conversations.main(["--db", str(db), "list"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 4 and "proposed" in out and "no_code" in out and h[:10] in out
    assert conversations.main(["--db", str(db), "show", "1", "--sections"]) == 0
    out = capsys.readouterr().out
    assert "===== system =====" in out and "===== user =====" in out and "===== reply =====" in out
    assert "tokens 1234 in / 56 out" in out and "sections (chars):" in out and "source" in out
    assert conversations.main(["--db", str(db), "--candidate", h[:8]]) == 0
    assert f"-> candidate {h}" in capsys.readouterr().out


def test_cli_errors_are_one_line(archive, capsys, tmp_path):
    _, _, _, db = archive
    assert conversations.main(["--db", str(db), "show", "99"]) == 2
    assert conversations.main(["--db", str(db), "show"]) == 2
    assert conversations.main(["--db", str(db), "--candidate", "ffff"]) == 2
    assert conversations.main(["--db", str(tmp_path / "missing.db")]) == 2
    assert conversations.main(["--db", str(db), "list", "--shape", "12x"]) == 2  # not an empty list
    assert conversations.main(["--db", str(db), "list", "--last", "-2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 6 and "Traceback" not in err and "malformed shape '12x'" in err


def test_report_lineage_links_the_conversation(archive):
    from evo.report import lineage_tree

    store, prop, parent, _ = archive
    ks = KernelSource.parse(prop.source)
    store.add_candidate(ks, parent.hash, "llm", prop.idea, "fake")
    tree = lineage_tree(store, ks.hash, "4096x4096x1024", "gpu")
    assert tree[0][1]["conversation"] == store.conversations()[0]["id"]
