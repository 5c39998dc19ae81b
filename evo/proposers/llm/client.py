"""One OpenAI-compatible endpoint: config, reachability check, chat with retries and backoff."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import EvoError

DEFAULT_KEY_ENV = "EVO_LLM_API_KEY"
FALLBACK_KEY_ENV = "OPENAI_API_KEY"  # read when the default variable is not set
BASE_URL_ENV = "OPENAI_BASE_URL"  # the endpoint when neither --llm-url nor llm.endpoints gives one
MODEL_ENV = "EVO_LLM_MODEL"  # the model when neither --llm-model nor the config gives one
RETRY_STATUS = {408, 409, 429}
ENDPOINT_KEYS = {"name", "base_url", "model", "api_key_env", "weight", "extra_body"}
MAX_SLEEP_S = 60.0


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str
    model: str
    api_key_env: str = DEFAULT_KEY_ENV
    weight: float = 1.0
    extra_body: dict = field(default_factory=dict, hash=False, compare=False)

    @staticmethod
    def from_config(d: Any, index: int) -> "Endpoint":
        where = f"config llm.endpoints[{index}]"
        if not isinstance(d, dict):
            raise EvoError(f"{where} must be a mapping {{name, base_url, model, api_key_env, weight}}")
        unknown = set(d) - ENDPOINT_KEYS
        if unknown:
            raise EvoError(f"{where} has unknown key {', '.join(sorted(unknown))}; known: {', '.join(sorted(ENDPOINT_KEYS))}")
        for key in ("base_url", "model"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                raise EvoError(f"{where} needs {key} (e.g. base_url: http://host:8000/v1, model: <served model name>)")
        base_url = d["base_url"].strip().rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise EvoError(f"{where}: base_url {base_url!r} must start with http:// or https://")
        weight = d.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise EvoError(f"{where}: weight must be a non-negative number, not {weight!r}")
        extra = d.get("extra_body") or {}
        if not isinstance(extra, dict):
            raise EvoError(f"{where}: extra_body must be a mapping")
        return Endpoint(
            name=str(d.get("name") or d["model"]),
            base_url=base_url,
            model=d["model"].strip(),
            api_key_env=str(d.get("api_key_env") or DEFAULT_KEY_ENV),
            weight=float(weight),
            extra_body=dict(extra),
        )

    def api_key(self) -> str:
        key = os.environ.get(self.api_key_env, "")
        if not key and self.api_key_env == DEFAULT_KEY_ENV:
            key = os.environ.get(FALLBACK_KEY_ENV, "")
        if not key:
            nor = f" (nor {FALLBACK_KEY_ENV})" if self.api_key_env == DEFAULT_KEY_ENV else ""
            raise EvoError(f"LLM endpoint {self.base_url}: environment variable {self.api_key_env} is not set{nor} "
                           f"(export {self.api_key_env}=EMPTY for a vLLM/SGLang server started without --api-key)")
        return key

    @property
    def key_source(self) -> str:
        """The variable the key was read from (for messages)."""
        if self.api_key_env == DEFAULT_KEY_ENV and not os.environ.get(DEFAULT_KEY_ENV) and os.environ.get(FALLBACK_KEY_ENV):
            return FALLBACK_KEY_ENV
        return self.api_key_env


def resolve_endpoints(url: str, model: str, key_env: str, configured: list, env: dict | None = None) -> list[dict]:
    """The endpoint list a run uses: --llm-url (llm.url) replaces llm.endpoints; with no endpoint configured,
    $OPENAI_BASE_URL is one; --llm-model / --llm-key-env set the model / key variable of every endpoint.
    Raises EvoError (one line) when no endpoint or no model can be found."""
    env = os.environ if env is None else env
    env_model = env.get(MODEL_ENV, "")
    if url:
        eps = [{"name": model or env_model or "llm", "base_url": url, "model": model or env_model}]
    elif configured:
        eps = [dict(d) if isinstance(d, dict) else d for d in configured]
        eps = [{**d, "model": model or d.get("model") or env_model} if isinstance(d, dict) else d for d in eps]
    elif env.get(BASE_URL_ENV):
        eps = [{"name": model or env_model or "llm", "base_url": env[BASE_URL_ENV], "model": model or env_model}]
    else:
        raise EvoError("the llm proposer needs an endpoint: --llm-url URL --llm-model NAME, or $OPENAI_BASE_URL, "
                       "or llm.endpoints in a --config file (docs/llm.md)")
    for d in eps:
        if isinstance(d, dict) and not d.get("model"):
            raise EvoError(f"LLM endpoint {d.get('base_url')}: no model given; pass --llm-model NAME "
                           f"(or set ${MODEL_ENV}, or model: in llm.endpoints)")
        if key_env and isinstance(d, dict):
            d["api_key_env"] = key_env
    return eps


@dataclass
class Reply:
    content: str
    finish_reason: str
    tokens_in: int
    tokens_out: int
    estimated: bool  # the endpoint reported no usage: tokens estimated as chars / 4
    seconds: float
    attempts: int


class RequestFailed(Exception):
    """A chat request that failed after its retries (or could not be retried)."""

    def __init__(self, message: str, attempts: int = 1):
        super().__init__(message)
        self.attempts = attempts


def _one_line(e: BaseException) -> str:
    """The most telling one-line description of an exception (its root cause for connection errors)."""
    root: BaseException = e
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    text = " ".join(str(root).split()) or type(root).__name__
    if root is not e:
        outer = " ".join(str(e).split())
        text = f"{outer} ({text})" if outer and outer not in text else text
    return text[:300]


def _status_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else None
        if msg:
            return " ".join(str(msg).split())[:300]
    return " ".join(str(getattr(e, "message", "") or e).split())[:300]


class ChatClient:
    """Chat completions against one endpoint, retrying 408/409/429/5xx, timeouts and connection
    errors with exponential backoff (backoff_s * 2**attempt, or the server's Retry-After)."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float, retries: int, backoff_s: float,
                 sleep: Callable[[float], None] = time.sleep):
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s) if timeout_s else 120.0
        self.retries = max(0, int(retries))
        self.backoff_s = max(0.0, float(backoff_s))
        self.sleep = sleep
        self._client: Any = None
        self._max_tokens_key = "max_tokens"

    def _openai(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.endpoint.base_url, api_key=self.endpoint.api_key(),
                                         timeout=self.timeout_s, max_retries=0)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001
                pass
            self._client = None

    def _delay(self, attempt: int, e: Any = None) -> float:
        delay = self.backoff_s * (2 ** attempt)
        resp = getattr(e, "response", None)
        try:
            ra = float(resp.headers.get("retry-after")) if resp is not None and resp.headers.get("retry-after") else 0.0
        except (TypeError, ValueError):
            ra = 0.0
        return min(MAX_SLEEP_S, max(delay, ra))

    def check(self) -> list[str]:
        """GET /models: the model ids served, [] if the endpoint does not list them.
        Raises EvoError with one line when the endpoint cannot be used."""
        import openai

        url = self.endpoint.base_url
        client = self._openai().with_options(timeout=min(self.timeout_s, 15.0), max_retries=0)
        for attempt in range(self.retries + 1):
            try:
                page = client.models.list()
                return [m.id for m in getattr(page, "data", []) or []]
            except openai.APIConnectionError as e:  # includes APITimeoutError
                if attempt < self.retries and not _refused(e):
                    self.sleep(self._delay(attempt, e))
                    continue
                raise EvoError(f"LLM endpoint {url} unreachable: {_one_line(e)}") from None
            except openai.AuthenticationError as e:
                raise EvoError(f"LLM endpoint {url} rejected the API key from ${self.endpoint.api_key_env}: "
                               f"{_status_message(e)}") from None
            except openai.APIStatusError as e:
                if e.status_code in (404, 405, 501):
                    return []  # the server does not list models; chat may still work
                if e.status_code in RETRY_STATUS:
                    return []  # reachable, just busy
                if e.status_code >= 500 and attempt < self.retries:
                    self.sleep(self._delay(attempt, e))
                    continue
                raise EvoError(f"LLM endpoint {url} answered HTTP {e.status_code} to GET /models: "
                               f"{_status_message(e)}") from None
            except openai.OpenAIError as e:
                raise EvoError(f"LLM endpoint {url} unusable: {_one_line(e)}") from None
        return []

    def chat(self, messages: list[dict], *, temperature: float, max_tokens: int, seed: int | None = None) -> Reply:
        import openai

        ep = self.endpoint
        last = "no attempt"
        t0 = time.monotonic()
        for attempt in range(self.retries + 1):
            kwargs: dict[str, Any] = {"model": ep.model, "messages": messages, "temperature": temperature}
            if max_tokens:
                kwargs[self._max_tokens_key] = max_tokens
            if seed is not None:
                kwargs["seed"] = seed
            if ep.extra_body:
                kwargs["extra_body"] = ep.extra_body
            try:
                resp = self._openai().chat.completions.create(**kwargs)
            except openai.APITimeoutError as e:
                last = f"timed out after {self.timeout_s:g} s"
                err: Any = e
            except openai.APIConnectionError as e:
                last = f"connection error: {_one_line(e)}"
                err = e
            except openai.APIStatusError as e:
                msg = _status_message(e)
                if (e.status_code == 400 and "max_completion_tokens" in msg and self._max_tokens_key == "max_tokens"):
                    self._max_tokens_key = "max_completion_tokens"  # newer OpenAI models; try again at once
                    continue
                if e.status_code in RETRY_STATUS or e.status_code >= 500:
                    last = f"HTTP {e.status_code}: {msg}"
                    err = e
                else:
                    raise RequestFailed(f"{ep.base_url} HTTP {e.status_code}: {msg}", attempt + 1) from None
            except openai.OpenAIError as e:
                raise RequestFailed(f"{ep.base_url}: {_one_line(e)}", attempt + 1) from None
            else:
                return self._reply(resp, messages, time.monotonic() - t0, attempt + 1)
            if attempt < self.retries:
                self.sleep(self._delay(attempt, err))
        raise RequestFailed(f"{ep.base_url}: {last} (after {self.retries + 1} attempts)", self.retries + 1)

    @staticmethod
    def _reply(resp: Any, messages: list[dict], seconds: float, attempts: int) -> Reply:
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        content = (getattr(getattr(choice, "message", None), "content", None) or "") if choice else ""
        finish = str(getattr(choice, "finish_reason", "") or "") if choice else ""
        usage = getattr(resp, "usage", None)
        tin = getattr(usage, "prompt_tokens", None) if usage else None
        tout = getattr(usage, "completion_tokens", None) if usage else None
        estimated = tin is None or tout is None
        if tin is None:
            tin = sum(len(str(m.get("content", ""))) for m in messages) // 4
        if tout is None:
            tout = len(content) // 4
        return Reply(content=content, finish_reason=finish, tokens_in=int(tin), tokens_out=int(tout),
                     estimated=estimated, seconds=seconds, attempts=attempts)


def _refused(e: BaseException) -> bool:
    """A connection refused / unknown host: retrying at start-up only delays the error."""
    text = _one_line(e).lower()
    return any(s in text for s in ("refused", "name or service not known", "nodename nor servname", "no route"))
