"""The scripted OpenAI-compatible server: raw protocol, the --demo script, and the CLI."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from evo.config import load_config
from evo.proposers.llm import LlmProposer
from evo.proposers.llm.client import DEFAULT_KEY_ENV
from evo.testing import samples
from evo.testing.fake_llm import DemoScript, FakeLlmServer

ROOT = Path(__file__).resolve().parent.parent


def client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0, **kw)


def test_replays_script_and_records_requests():
    with FakeLlmServer([{"content": "hello", "prompt_tokens": 7, "completion_tokens": 3}, {"status": 429}],
                       models=["m1", "m2"]) as srv:
        c = client(srv.base_url)
        assert [m.id for m in c.models.list().data] == ["m1", "m2"]
        r = c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "the parent source"}])
        assert r.choices[0].message.content == "hello"
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (7, 3)
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.BadRequestError, match="script exhausted"):
            c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "y"}])
    assert srv.prompts() == ["the parent source", "x", "y"]
    assert srv.requests[0]["model"] == "m1"


def test_loop_delay_and_loopback_only():
    with FakeLlmServer([{"content": "a"}], loop=True) as srv:
        c = client(srv.base_url)
        for _ in range(3):
            assert c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "q"}]).choices[0].message.content == "a"
    with FakeLlmServer([{"delay": 0.5, "content": "late"}]) as srv:
        with pytest.raises(openai.APITimeoutError):
            client(srv.base_url, timeout=0.1).chat.completions.create(model="fake", messages=[{"role": "user", "content": "q"}])
    with pytest.raises(ValueError, match="loopback"):
        FakeLlmServer([], host="0.0.0.0")


def test_demo_script_drives_the_proposer(monkeypatch):
    """The --demo script yields full rewrites, diffs, garbage, a broken kernel and its fix, and a 429."""
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    try:
        from evo.families import load_families

        fam = next(f for f in load_families() if f.name == "simt")
        text = fam.render(fam.default_params()).text
    except Exception:  # noqa: BLE001 - templates/ may be in flux
        text = samples.simt_kernel(16)
    parent = samples.individual(text, time_us=500.0)
    with FakeLlmServer(DemoScript()) as srv:
        cfg = load_config(overrides={"llm": {"endpoints": [{"base_url": srv.base_url, "model": "fake"}],
                                             "backoff_s": 0.001, "concurrency": 1}}).llm
        p = LlmProposer(cfg, 0)
        p.check_endpoints()
        population = [parent]
        failures = []
        t = 500.0
        for _ in range(4):
            ctx = samples.context(population, failures=failures)
            props = p.propose(ctx, 3)
            done = []
            for pr in props:
                broken = "evo_demo_undefined_" in pr.source
                t -= 1.0
                ind = samples.individual(pr.source, proposer="llm", compiled=not broken, correct=not broken,
                                         time_us=0.0 if broken else t, parent=pr.parents[0], idea=pr.idea,
                                         error="identifier is undefined" if broken else "",
                                         compile_log='kernel.cu(9): error: identifier "evo_demo_undefined" is undefined' if broken else "")
                done.append(ind)
                (failures if broken else population).append(ind)
            p.observe(done)
    s = p.stats()
    assert s["unusable"].get("no_code", 0) >= 1
    assert s["retries"] >= 1  # the 429
    assert s["fix_requests"] >= 1 and s["fixed"] >= 1
    assert s["improved"] >= 3 and s["proposals"] >= 6
    assert any("Failing kernel" in q for q in srv.prompts())


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("mode", ["script", "demo"])
def test_cli(tmp_path, mode):
    port = _free_port()
    script = tmp_path / "replies.yaml"
    script.write_text("models: [qwen]\nreplies:\n  - {status: 500}\n  - content: |\n      IDEA: hi\n      no code\n")
    args = ["--script", str(script)] if mode == "script" else ["--demo"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "evo.testing.fake_llm", *args, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert "fake LLM serving" in proc.stdout.readline()
        c = client(f"http://127.0.0.1:{port}/v1")
        if mode == "script":
            assert [m.id for m in c.models.list().data] == ["qwen"]
            with pytest.raises(openai.InternalServerError):
                c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "q"}])
            r = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "q"}])
            assert r.choices[0].message.content.startswith("IDEA: hi")
        else:
            r = c.chat.completions.create(model="fake", messages=[{"role": "user", "content": "no parent here"}])
            assert "cannot write the code" in r.choices[0].message.content
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            out = ""
    assert proc.returncode == 0, out
    assert "served" in out


def test_ctrl_c_stops_it_when_started_with_sigint_ignored():
    # a background job of a script (`nohup ... &`) starts with SIGINT ignored, which Python keeps: the server
    # would never stop on Ctrl-C (the CLI test above hung this way when the suite ran as such a job)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "evo.testing.fake_llm", "--demo", "--port", str(_free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert "fake LLM serving" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "served 0 chat requests" in out
