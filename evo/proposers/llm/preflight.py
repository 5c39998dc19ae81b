"""Start-up check of an LLM endpoint: one tiny chat completion that must succeed.

A ``GET /models`` is not enough (a base URL without ``/v1`` answers it with a 404 that looks like
"does not list models", and a server may list models it cannot serve), so the preflight sends the
request the search will send, with a 16-token answer. Every way it can fail ends in one line
(EvoError: exit 2) that says what to change: a wrong path (404), a rejected key (401/403), a model
the server does not serve, an unreachable host, a server that keeps failing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...errors import EvoError
from .client import RETRY_STATUS, ChatClient, _one_line, _refused, _status_message

PREFLIGHT_MARK = "evo preflight"  # the scripted server (evo.testing.fake_llm) answers it without using its script
PREFLIGHT_MESSAGES = [{"role": "user", "content": f"{PREFLIGHT_MARK}: reply with the single word OK."}]
PREFLIGHT_MAX_TOKENS = 16
_MODEL_WORDS = ("model", "does not exist", "not found: model", "unknown model", "no such model")


@dataclass
class PreflightResult:
    base_url: str
    model: str
    seconds: float
    reply: str
    tokens_in: int
    tokens_out: int


def preflight(client: ChatClient) -> PreflightResult:
    """Send one tiny chat completion through ``client``; raise EvoError (one line) unless it succeeds."""
    import openai

    ep = client.endpoint
    url = ep.base_url
    oa = client._openai().with_options(timeout=min(client.timeout_s, 30.0), max_retries=0)
    key = "max_tokens"
    t0 = time.monotonic()
    attempt = 0
    while True:
        try:
            resp = oa.chat.completions.create(model=ep.model, messages=PREFLIGHT_MESSAGES, temperature=0.0,
                                              **{key: PREFLIGHT_MAX_TOKENS})
            break
        except openai.APIConnectionError as e:  # includes timeouts
            if attempt < client.retries and not _refused(e):
                client.sleep(client._delay(attempt, e))
                attempt += 1
                continue
            raise EvoError(f"LLM endpoint {url} unreachable: {_one_line(e)}") from None
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise EvoError(f"LLM endpoint {url} rejected the API key from ${ep.key_source} "
                           f"(HTTP {e.status_code}: {_status_message(e)}); pass --llm-key-env VAR or export the right key") from None
        except openai.APIStatusError as e:
            msg = _status_message(e)
            if e.status_code == 400 and "max_completion_tokens" in msg and key == "max_tokens":
                key = "max_completion_tokens"
                continue
            if e.status_code in (400, 404, 422) and _about_model(msg, ep.model):
                raise EvoError(f"LLM endpoint {url} does not serve model {ep.model!r} ({msg.rstrip('.')}){_served(client)}") from None
            if e.status_code in (404, 405):
                hint = (f"; OpenAI-compatible servers answer under /v1: try --llm-url {url}/v1"
                        if not url.rstrip("/").endswith("/v1") else "; is this an OpenAI-compatible chat endpoint?")
                raise EvoError(f"LLM endpoint {url} answered HTTP {e.status_code} to POST {url}/chat/completions "
                               f"({msg}){hint}") from None
            if (e.status_code in RETRY_STATUS or e.status_code >= 500) and attempt < client.retries:
                client.sleep(client._delay(attempt, e))
                attempt += 1
                continue
            raise EvoError(f"LLM endpoint {url} answered HTTP {e.status_code} to a one-line chat request "
                           f"with model {ep.model!r}: {msg}") from None
        except openai.OpenAIError as e:
            raise EvoError(f"LLM endpoint {url} unusable: {_one_line(e)}") from None
    choice = resp.choices[0] if getattr(resp, "choices", None) else None
    if choice is None:
        raise EvoError(f"LLM endpoint {url} answered a chat request with no choices (model {ep.model!r})")
    usage = getattr(resp, "usage", None)
    return PreflightResult(url, ep.model, time.monotonic() - t0, str(getattr(choice.message, "content", "") or ""),
                           int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0))


def _about_model(msg: str, model: str) -> bool:
    low = msg.lower()
    return (model.lower() in low and "model" in low) or any(w in low for w in _MODEL_WORDS[1:]) and "model" in low


def _served(client: ChatClient) -> str:
    """'; it serves: a, b' when the endpoint lists its models, else ''."""
    try:
        page: Any = client._openai().with_options(timeout=10.0, max_retries=0).models.list()
        ids = [m.id for m in getattr(page, "data", []) or []]
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    if not ids:
        return ""
    return "; it serves: " + ", ".join(ids[:8]) + (" ..." if len(ids) > 8 else "")
