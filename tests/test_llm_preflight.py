"""Endpoints from flags and environment, and the start-up preflight: one real chat request through the
openai client against the scripted server; every failure is one line and exit 2, before (and without) a GPU."""
from __future__ import annotations

import socket

import pytest

import evo.search as search_mod
from evo.config import load_config
from evo.errors import EvoError
from evo.proposers.llm import LlmProposer
from evo.proposers.llm.client import BASE_URL_ENV, DEFAULT_KEY_ENV, FALLBACK_KEY_ENV, MODEL_ENV, resolve_endpoints
from evo.testing.fake_llm import FakeLlmServer


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for v in (DEFAULT_KEY_ENV, FALLBACK_KEY_ENV, BASE_URL_ENV, MODEL_ENV):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the LLM check must come first, with or without a GPU


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_search(tmp_path, capsys, *flags: str) -> tuple[int, str, str]:
    code = search_mod.main(["--shape", "256x256x256", "--proposer", "llm", "--db", str(tmp_path / "evo.db"),
                            "--out", str(tmp_path / "out"), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *needles: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_base_url_without_v1_is_a_404_with_a_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    with FakeLlmServer([]) as srv:
        code, _, err = run_search(tmp_path, capsys, "--llm-url", srv.root_url, "--llm-model", "fake")
    assert code == 2
    assert_one_line(err, "HTTP 404", f"try --llm-url {srv.root_url}/v1")
    assert srv.requests == []


def test_rejected_key_is_a_401(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MY_KEY", "wrong")
    with FakeLlmServer([], api_key="right") as srv:
        code, _, err = run_search(tmp_path, capsys, "--llm-url", srv.base_url, "--llm-model", "fake", "--llm-key-env", "MY_KEY")
    assert code == 2
    assert_one_line(err, "rejected the API key from $MY_KEY", "HTTP 401")


def test_unknown_model_lists_the_served_ones(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(FALLBACK_KEY_ENV, "EMPTY")  # OPENAI_API_KEY is read when EVO_LLM_API_KEY is not set
    with FakeLlmServer([], models=["qwen-coder"]) as srv:
        code, _, err = run_search(tmp_path, capsys, "--llm-url", srv.base_url, "--llm-model", "gpt-9")
    assert code == 2
    assert_one_line(err, "does not serve model 'gpt-9'", "it serves: qwen-coder")


def test_unreachable_host(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    url = f"http://127.0.0.1:{_free_port()}/v1"
    code, _, err = run_search(tmp_path, capsys, "--llm-url", url, "--llm-model", "fake")
    assert code == 2
    assert_one_line(err, f"LLM endpoint {url} unreachable")


def test_no_endpoint_and_no_model_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    code, _, err = run_search(tmp_path, capsys)
    assert code == 2
    assert_one_line(err, "needs an endpoint", "--llm-url")
    code, _, err = run_search(tmp_path, capsys, "--llm-url", "http://127.0.0.1:9/v1")
    assert code == 2
    assert_one_line(err, "no model given", "--llm-model")


def test_good_endpoint_from_the_environment_passes_then_the_gpu_check_runs(tmp_path, capsys, monkeypatch):
    """OPENAI_BASE_URL, EVO_LLM_MODEL and OPENAI_API_KEY are enough; the preflight is a chat request that took
    no script item; then (no GPU here) the GPU check ends the run."""
    monkeypatch.setenv(FALLBACK_KEY_ENV, "sk-test")
    with FakeLlmServer([], api_key="sk-test", models=["m"]) as srv:
        monkeypatch.setenv(BASE_URL_ENV, srv.base_url)
        monkeypatch.setenv(MODEL_ENV, "m")
        code, out, err = run_search(tmp_path, capsys)
    assert srv.preflights == 1 and srv.paths == ["/v1/chat/completions"]
    assert f"LLM endpoint {srv.base_url} (m) answered a preflight chat request" in out
    assert code == 2 and "GPU" in err and "LLM" not in err


def test_flags_override_config_and_environment(monkeypatch):
    monkeypatch.setenv(BASE_URL_ENV, "http://env-host/v1")
    configured = [{"name": "a", "base_url": "http://cfg/v1", "model": "cfg-model"}]
    assert resolve_endpoints("", "", "", configured)[0]["base_url"] == "http://cfg/v1"
    assert resolve_endpoints("", "flag-model", "K", configured)[0] == {
        "name": "a", "base_url": "http://cfg/v1", "model": "flag-model", "api_key_env": "K"}
    assert resolve_endpoints("http://flag/v1", "m", "", configured) == [
        {"name": "m", "base_url": "http://flag/v1", "model": "m"}]
    assert resolve_endpoints("", "m", "", [])[0]["base_url"] == "http://env-host/v1"


def test_server_errors_are_retried_then_one_line(monkeypatch):
    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    with FakeLlmServer([]) as srv:
        cfg = load_config(overrides={"llm": {"url": srv.base_url, "model": "fake", "backoff_s": 0.001, "retries": 1}})
        p = LlmProposer.from_config(cfg)
        srv.models.clear()  # now every chat is refused as an unknown model
        with pytest.raises(EvoError, match="does not serve model 'fake'"):
            p.check_endpoints()


def test_a_failing_endpoint_mid_run_stops_the_proposer_with_a_reason(monkeypatch):
    from evo.testing import samples

    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    parent = samples.individual(samples.simt_kernel(16), time_us=100.0)
    with FakeLlmServer([{"status": 404, "message": "gone"}], loop=True) as srv:
        cfg = load_config(overrides={"llm": {"url": srv.base_url, "model": "fake", "retries": 0, "concurrency": 1}})
        p = LlmProposer.from_config(cfg)
        p.check_endpoints()
        for _ in range(3):
            p.propose(samples.context([parent]), 3)
    assert p.exhausted and p.stop_reason.startswith("LLM endpoint failing: 6 requests in a row failed")
    assert "HTTP 404" in p.stop_reason


def test_sweep_checks_the_endpoint_first(tmp_path, capsys, monkeypatch):
    from evo import sweep

    monkeypatch.setenv(DEFAULT_KEY_ENV, "EMPTY")
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("shapes: [256x256x256]\n")
    with FakeLlmServer([]) as srv:
        code = sweep.main(["--shapes", str(shapes), "--proposer", "llm", "--db", str(tmp_path / "evo.db"),
                           "--llm-url", srv.root_url, "--llm-model", "fake"])
    err = capsys.readouterr().err
    assert code == 2
    assert_one_line(err, "HTTP 404", "/v1")
