"""LlmProposer end to end: the real openai client against the scripted server on 127.0.0.1."""
from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from evo.config import load_config
from evo.errors import EvoError
from evo.proposers.llm import LlmProposer
from evo.proposers.llm.client import DEFAULT_KEY_ENV
from evo.records import Individual
from evo.testing import samples
from evo.testing.fake_llm import FakeLlmServer


def _parent_text() -> str:
    """The default simt instance when the templates render, else a tiny valid kernel."""
    try:
        from evo.families import load_families

        fam = next(f for f in load_families() if f.name == "simt")
        return fam.render(fam.default_params()).text
    except Exception:  # noqa: BLE001 - templates/ is being written by others
        return samples.simt_kernel(16)


PARENT_TEXT = _parent_text()
OTHER_TEXT = samples.simt_kernel(32, family="mma_sm80")


def child_text(n: int, base: str = PARENT_TEXT) -> str:
    at = base.index("---*/") + len("---*/\n")
    return base[:at] + f"__device__ constexpr int evo_test_variant_{n} = {n};\n" + base[at:]


def full(n: int, idea: str = "") -> dict:
    return {"content": f"IDEA: {idea or f'variant {n}'}\n\n```cuda\n{child_text(n)}```\n"}


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")


def make(urls, max_requests: int = 0, store=None, profiler=None, **llm) -> LlmProposer:
    if isinstance(urls, str):
        urls = [{"base_url": urls, "model": "fake"}]
    base = {"endpoints": urls, "backoff_s": 0.001, "timeout_s": 5, "retries": 2, "concurrency": 1, "edit_modes": ["full"]}
    base.update(llm)
    return LlmProposer(load_config(overrides={"llm": base}).llm, 0, max_requests=max_requests, store=store,
                       profiler=profiler)


def population():
    parent = samples.individual(PARENT_TEXT, time_us=500.0, registers=96, smem=8192)
    other = samples.individual(OTHER_TEXT, time_us=300.0, idea="bigger tiles")
    return parent, other


def ctx_for(*inds, failures=None):
    return samples.context(list(inds), failures=failures)


def evaluated(prop, *, compiled=True, correct=True, time_us=0.0, error="", log="") -> Individual:
    ind = samples.individual(prop.source, compiled=compiled, correct=correct, time_us=time_us, proposer="llm",
                             parent=",".join(prop.parents), error=error, compile_log=log, idea=prop.idea)
    return ind


# ---------------------------------------------------------------- reply types

def test_good_full_kernel():
    parent, other = population()
    with FakeLlmServer([full(1, "Declare a constant so the child differs.")]) as srv:
        p = make(srv.base_url)
        p.check_endpoints()
        props = p.propose(ctx_for(parent, other), 1)
    assert len(props) == 1
    pr = props[0]
    assert pr.proposer == "llm" and pr.model == "fake" and pr.parents == (parent.hash,)
    assert pr.idea == "Declare a constant so the child differs."
    assert "evo_test_variant_1" in pr.source
    assert pr.tokens_in > 0 and pr.tokens_out > 0
    assert srv.requests[0]["model"] == "fake" and srv.requests[0]["temperature"] == pytest.approx(0.7)
    assert srv.paths[0] == "/v1/chat/completions" and srv.preflights == 1  # the preflight: a real chat request


def test_diff_reply():
    parent, other = population()
    line = next(ln for ln in PARENT_TEXT.split("\n") if ln.startswith("extern \"C\""))
    reply = f"IDEA: Add a constant before the entry.\n<<<<<<< SEARCH\n{line}\n=======\n__device__ int evo_k = 3;\n{line}\n>>>>>>> REPLACE\n"
    with FakeLlmServer([{"content": reply}]) as srv:
        p = make(srv.base_url, edit_modes=["diff"])
        props = p.propose(ctx_for(parent, other), 1)
    assert len(props) == 1 and "__device__ int evo_k = 3;\n" + line in props[0].source
    assert "<<<<<<< SEARCH" in srv.prompts()[0]  # the diff instructions were sent


@pytest.mark.parametrize("content,reason", [
    ("Sorry, I can only describe the idea: use bigger tiles.", "no_code"),
    ("IDEA: x\n<<<<<<< SEARCH\nnot in the parent at all\n=======\nfoo\n>>>>>>> REPLACE\n", "search_not_found"),
    ("IDEA: x\n```cuda\n" + child_text(2).replace("evo_gemm(", "gemm_kernel(") + "```", "no_entry_point"),
    ("IDEA: x\n```cuda\n" + child_text(3).split("---*/\n", 1)[1] + "```", "bad_front_matter"),
], ids=["garbage", "search_mismatch", "wrong_entry", "no_front_matter"])
def test_unusable_replies_are_recorded_not_returned(content, reason):
    parent, other = population()
    with FakeLlmServer([{"content": content}]) as srv:
        p = make(srv.base_url)
        assert p.propose(ctx_for(parent, other), 1) == []
    assert p.rejected == [(reason, "fake")]
    assert p.stats()["models"]["fake"]["unusable"] == {reason: 1}
    assert p.stats()["unusable"] == {reason: 1}
    assert any(reason in line for line in p.summary_lines())


def test_non_compiling_kernel_then_fix_prompt():
    parent, other = population()
    broken = child_text(7).replace("evo_test_variant_7 = 7", "evo_test_variant_7 = evo_undefined_7")
    long_symbol = "_ZN3evo6detail" + "Q" * 300 + "EvT_"
    log = ("nvcc -arch=sm_90a kernel.cu\n" + "".join(f"note: context line {i}\n" for i in range(400))
           + f'kernel.cu(11): error: identifier "evo_undefined_7" is undefined\n'
           + f"ptxas info    : Compiling entry function '{long_symbol}' for 'sm_90a'\n"
           + "1 error detected in the compilation of \"kernel.cu\".\n")
    fixed = child_text(8)
    bad_line = next(ln for ln in broken.split("\n") if "evo_undefined_7" in ln)
    fix_reply = f"IDEA: Define the missing identifier.\n<<<<<<< SEARCH\n{bad_line}\n=======\n__device__ constexpr int evo_fixed = 8;\n>>>>>>> REPLACE\n"
    script = [{"content": f"IDEA: Try something.\n```cuda\n{broken}```\n"}, {"content": fix_reply}]
    with FakeLlmServer(script) as srv:
        p = make(srv.base_url, log_chars=3000, edit_modes=["diff", "full"])
        ctx = ctx_for(parent, other)
        (bad,) = p.propose(ctx, 1)
        failed = evaluated(bad, compiled=False, correct=False, error='kernel.cu(11): error: identifier "evo_undefined_7" is undefined', log=log)
        p.observe([failed])
        ctx2 = ctx_for(parent, other, failures=[failed])
        (fix,) = p.propose(ctx2, 1)
        fix_prompt = srv.prompts()[1]
    assert "## Failing kernel" in fix_prompt and "compile stage" in fix_prompt
    assert broken.rstrip("\n") in fix_prompt
    assert 'kernel.cu(11): error: identifier "evo_undefined_7" is undefined' in fix_prompt
    assert long_symbol in fix_prompt  # long C++ symbols reach the model intact
    assert "lines omitted" in fix_prompt  # the 400 notes were cut
    assert "It tried: Try something." in fix_prompt
    assert "<<<<<<< SEARCH" in fix_prompt  # fixes are asked as diffs
    assert fix.parents == (failed.hash,) and "evo_fixed" in fix.source and "evo_undefined_7" not in fix.source
    p.observe([evaluated(fix, time_us=450.0)])
    st = p.stats()["models"]["fake"]
    assert st["fix_requests"] == 1 and st["fixed"] == 1 and st["compiled"] == 1 and st["correct"] == 1
    # a fixed lineage is not sent back again
    with FakeLlmServer([full(9)]) as srv2:
        p.clients["fake"].endpoint  # noqa: B018
        p2_ctx = ctx_for(parent, other)
        p.clients["fake"] = type(p.clients["fake"])(replace(p.endpoints[0], base_url=srv2.base_url), timeout_s=5, retries=0, backoff_s=0)
        p.propose(p2_ctx, 1)
        assert "## Failing kernel" not in srv2.prompts()[0]


def test_incorrect_kernel_fix_prompt_has_the_check_error():
    parent, other = population()
    with FakeLlmServer([full(11), {"content": "IDEA: nothing"}]) as srv:
        p = make(srv.base_url)
        (c,) = p.propose(ctx_for(parent, other), 1)
        p.observe([evaluated(c, correct=False, error="rel_err 0.31 > rtol 0.01 (seed 0); first bad element C[0,17]")])
        p.propose(ctx_for(parent, other), 1)
    assert "correctness check" in srv.prompts()[1] and "rel_err 0.31 > rtol 0.01" in srv.prompts()[1]


def test_rate_limit_then_success_retries_with_backoff():
    parent, other = population()
    sleeps = []
    with FakeLlmServer([{"status": 429}, {"status": 500}, full(12)]) as srv:
        cfg = load_config(overrides={"llm": {"endpoints": [{"base_url": srv.base_url, "model": "fake"}],
                                             "backoff_s": 0.01, "retries": 3, "concurrency": 1}}).llm
        p = LlmProposer(cfg, 0, sleep=sleeps.append)
        props = p.propose(ctx_for(parent, other), 1)
    assert len(props) == 1 and len(srv.requests) == 3
    assert sleeps == [0.01, 0.02]  # exponential
    st = p.stats()["models"]["fake"]
    assert st["retries"] == 2 and st["failed_requests"] == 0 and st["requests"] == 1


def test_retries_exhausted_is_one_recorded_failure():
    parent, other = population()
    with FakeLlmServer([{"status": 503}] * 3) as srv:
        p = make(srv.base_url, retries=2)
        assert p.propose(ctx_for(parent, other), 1) == []
    assert p.rejected == [("request_failed", "fake")]
    assert "HTTP 503" in p.last_error and "after 3 attempts" in p.last_error
    assert "\n" not in p.last_error


def test_non_retryable_status_is_not_retried():
    parent, other = population()
    with FakeLlmServer([{"status": 400, "message": "model too small"}, full(13)]) as srv:
        p = make(srv.base_url, retries=3)
        assert p.propose(ctx_for(parent, other), 1) == []
        assert len(srv.requests) == 1
    assert "HTTP 400: model too small" in p.last_error


def test_timeout_then_retry():
    parent, other = population()
    with FakeLlmServer([{"delay": 1.0}, full(14)]) as srv:
        p = make(srv.base_url, timeout_s=0.2, retries=1)
        props = p.propose(ctx_for(parent, other), 1)
    assert len(props) == 1 and p.stats()["models"]["fake"]["retries"] == 1
    with FakeLlmServer([{"delay": 1.0}]) as srv:
        p = make(srv.base_url, timeout_s=0.2, retries=0)
        assert p.propose(ctx_for(parent, other), 1) == []
    assert "timed out" in p.last_error


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_endpoint_is_one_line():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    p = make(url, retries=0)
    with pytest.raises(EvoError) as e:
        p.check_endpoints()
    msg = str(e.value)
    assert msg.startswith(f"LLM endpoint {url} unreachable: ")
    assert "\n" not in msg and "Traceback" not in msg


def test_missing_key_and_wrong_model_are_one_line(monkeypatch):
    with FakeLlmServer([], models=["Qwen/Qwen2.5-Coder-32B-Instruct"]) as srv:
        p = make([{"base_url": srv.base_url, "model": "qwen"}])
        with pytest.raises(EvoError, match=r"does not serve model 'qwen' .*; it serves: Qwen/Qwen2.5-Coder-32B-Instruct$"):
            p.check_endpoints()
        monkeypatch.delenv(DEFAULT_KEY_ENV)
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        p = make([{"base_url": srv.base_url, "model": "Qwen/Qwen2.5-Coder-32B-Instruct"}])
        with pytest.raises(EvoError, match=f"{DEFAULT_KEY_ENV} is not set"):
            p.check_endpoints()


def test_config_errors():
    with pytest.raises(EvoError, match="at least one entry"):
        make([])
    with pytest.raises(EvoError, match="needs base_url"):
        make([{"model": "m"}])
    with pytest.raises(EvoError, match="unknown key"):
        make([{"base_url": "http://x/v1", "model": "m", "apikey": "x"}])
    with pytest.raises(EvoError, match="needs a price"):
        make("http://127.0.0.1:1/v1", budget_usd=1.0)
    with pytest.raises(EvoError, match="edit_modes"):
        make("http://127.0.0.1:1/v1", edit_modes=["patch"])


# ---------------------------------------------------------------- novelty

def test_duplicates_are_skipped():
    parent, other = population()
    same_as_parent = PARENT_TEXT.replace("\n", "\n\n").replace("---*/\n\n", "---*/\n// only a comment\n", 1)
    script = [
        {"content": f"IDEA: nothing\n```cuda\n{same_as_parent}```"},  # the parent, modulo comments/whitespace
        {"content": f"IDEA: steal\n```cuda\n{OTHER_TEXT}```"},  # already in the population
        full(20),
        full(20, "same child again"),
    ]
    with FakeLlmServer(script) as srv:
        p = make(srv.base_url)
        props = p.propose(ctx_for(parent, other), 4)
    assert [x.idea for x in props] == ["variant 20"]
    assert p.rejected == [("duplicate", "fake")] * 3
    with FakeLlmServer([full(20)]) as srv:  # and in a later generation
        p.clients["fake"] = type(p.clients["fake"])(replace(p.endpoints[0], base_url=srv.base_url), timeout_s=5, retries=0, backoff_s=0)
        assert p.propose(ctx_for(parent, other), 1) == []


# ---------------------------------------------------------------- accounting

def _prompt_chars(parent) -> int:
    """Characters of the messages one improve request of ``parent`` sends (measured against the server)."""
    with FakeLlmServer([full(29)]) as srv:
        make(srv.base_url).propose(ctx_for(parent), 1)
    return sum(len(m["content"]) for m in srv.requests[0]["messages"])


@pytest.mark.parametrize("concurrency", [1, 3])
def test_token_cap_is_checked_before_each_request(concurrency):
    """A request goes out only if spent + held + (prompt chars / 4 + max_tokens) stays within the cap:
    the cap holds, also with requests in flight together."""
    parent, _ = population()
    est = _prompt_chars(parent) // 4 + 1 + 300
    item = lambda n: {**full(n), "completion_tokens": 300}  # noqa: E731 - prompt tokens: chars / 4, like the estimate
    budget = int(2.5 * est)
    with FakeLlmServer([item(30), item(31), item(32)]) as srv:
        p = make(srv.base_url, budget_tokens=budget, max_tokens=300, concurrency=concurrency)
        props = p.propose(ctx_for(parent), 3)
        assert len(srv.requests) == 2 and len(props) == 2 and p.exhausted
        assert p.propose(ctx_for(parent), 3) == [] and len(srv.requests) == 2
    s = p.stats()
    assert s["tokens_in"] + s["tokens_out"] <= budget and s["refused_by_budget"] >= 1
    assert s["requests"] == 2  # what was not sent is not counted as a request
    assert props[0].tokens_out == 300
    assert any("budget" in line for line in p.summary_lines())


def test_first_request_over_the_cap_is_never_sent():
    parent, _ = population()
    with FakeLlmServer([full(33)]) as srv:
        p = make(srv.base_url, budget_tokens=1000, max_tokens=8192)  # 8192 answer tokens alone pass the cap
        assert p.propose(ctx_for(parent), 1) == []
    assert srv.requests == [] and p.exhausted and p.stop_reason == "LLM token/cost budget spent"


def test_cost_cap_is_checked_before_each_request():
    parent, _ = population()
    chars = _prompt_chars(parent)
    item = lambda n: {**full(n), "completion_tokens": 2_000}  # noqa: E731
    prices = {"fake": {"input_per_mtok": 0.5, "output_per_mtok": 2.0}}
    per_request = ((chars // 4 + 1) * 0.5 + 2_000 * 2.0) / 1e6
    with FakeLlmServer([item(40), item(41), item(42)]) as srv:
        p = make(srv.base_url, budget_usd=2.5 * per_request, prices=prices, max_tokens=2_000)
        assert len(p.propose(ctx_for(parent), 3)) == 2
    s = p.stats()
    assert len(srv.requests) == 2
    assert s["cost_usd"] <= 2.5 * per_request
    assert s["models"]["fake"]["cost_usd"] == pytest.approx(s["cost_usd"])
    assert p.exhausted


def test_request_limit_bounds_requests_including_fixes():
    """max_requests (the search's candidate limit) bounds every chat request, fix prompts included."""
    parent, _ = population()
    broken = {"content": "IDEA: broken\n\n```cuda\n" + child_text(60).replace("evo_test_variant_60 = 60", "evo_x = undefined_y") + "```\n"}
    with FakeLlmServer([broken, full(61), full(62), full(63)], loop=True) as srv:
        p = make(srv.base_url, max_requests=0)
        p.max_requests = 2
        props = p.propose(ctx_for(parent), 1)
        p.observe([evaluated(props[0], compiled=False, correct=False, error="undefined", log="error: undefined")])
        props2 = p.propose(ctx_for(parent), 5)  # one fix + improves: only 1 more request allowed
        assert p.propose(ctx_for(parent), 5) == []
    assert len(srv.requests) == 2 and len(props2) == 1
    assert p.stats()["requests"] == 2 and "request limit" in p.stop_reason
    assert not p.exhausted  # the limit stops this proposer, not the search


def test_two_models_by_weight_with_per_model_stats():
    parent, other = population()
    counter = {"n": 0}

    def reply(body):
        counter["n"] += 1
        n = counter["n"]
        if body["model"] == "small" and n % 2:
            return {"content": "no code today", "prompt_tokens": 100, "completion_tokens": 10}
        return {**full(100 + n), "prompt_tokens": 1000, "completion_tokens": 200}

    eps = [{"name": "big", "base_url": "", "model": "big-model", "weight": 3},
           {"name": "small", "base_url": "", "model": "small", "weight": 1}]
    with FakeLlmServer(reply, models=["big-model", "small"]) as srv:
        for e in eps:
            e["base_url"] = srv.base_url
        p = make(eps, concurrency=4, prices={"big-model": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}})
        p.check_endpoints()
        props = p.propose(ctx_for(parent, other), 40)
    sent = [r["model"] for r in srv.requests]
    st = p.stats()["models"]
    assert st["big"]["requests"] == sent.count("big-model") and st["small"]["requests"] == sent.count("small")
    assert st["big"]["requests"] + st["small"]["requests"] == 40
    assert st["big"]["requests"] > 2 * st["small"]["requests"] > 0
    assert st["big"]["model"] == "big-model"
    assert st["big"]["proposals"] == sum(1 for x in props if x.model == "big")
    assert st["small"]["unusable"].get("no_code", 0) >= 1
    assert st["big"]["cost_usd"] == pytest.approx(st["big"]["requests"] * (1000 * 1.0 + 200 * 4.0) / 1e6)
    assert st["small"]["cost_usd"] == 0.0
    # outcomes per model: one big child improves, one small child compiles but is wrong
    big = next(x for x in props if x.model == "big")
    small = next(x for x in props if x.model == "small")
    p.observe([evaluated(big, time_us=400.0), evaluated(small, correct=False, error="wrong"),
               samples.individual(OTHER_TEXT, time_us=1.0)])  # not ours: ignored
    st = p.stats()["models"]
    assert (st["big"]["compiled"], st["big"]["correct"], st["big"]["improved"]) == (1, 1, 1)
    assert st["big"]["best_speedup"] == pytest.approx(500.0 / 400.0)
    assert (st["small"]["compiled"], st["small"]["correct"], st["small"]["improved"]) == (1, 0, 0)
    lines = p.summary_lines()
    assert lines[0].startswith("llm: 40 requests") and any(l.strip().startswith("big (big-model):") for l in lines)


# ---------------------------------------------------------------- prompt

def test_prompt_contents():
    parent, other = population()
    with FakeLlmServer([full(50)]) as srv:
        p = make(srv.base_url, inspirations=2)
        p.propose(ctx_for(parent, other), 1)
    body = srv.requests[0]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    text = srv.prompts()[0]
    for needle in (
        "M = 4096, N = 4096, K = 1024", "layout TN", "Inputs fp16, accumulation fp32, output fp16",
        "NVIDIA H100 80GB HBM3", "132 SMs", "232448 bytes of shared memory", "sm_90a",
        'extern "C" __global__ void evo_gemm',  # the ABI
        PARENT_TEXT.rstrip("\n"),  # the parent, verbatim
        "500.00 µs", "68.7 TFLOP/s", "vs cublas (100.00 µs", "0.200x (slower)", "vs cublaslt_autotune",
        "% of the roofline", "registers per thread: 96", "shared memory per block: 8192 bytes",
        "## Inspirations", "family `mma_sm80`, 300.00 µs", "idea: bigger tiles", OTHER_TEXT.rstrip("\n"),
        "line starting with `IDEA:`", "```cuda fenced block",
    ):
        assert needle in text, needle
