"""A scripted, OpenAI-compatible chat server on 127.0.0.1 for tests and GPU runs without a model.

It answers ``POST /v1/chat/completions`` (and ``GET /v1/models``) by replaying a script,
one item per request, in arrival order:

    {"content": "IDEA: ...\\n```cuda\\n...\\n```"}   # a reply (optional "finish_reason",
                                                     #   "prompt_tokens", "completion_tokens")
    {"status": 429}                                  # an HTTP error (any status; optional "message")
    {"status": 500}
    {"delay": 2.5}                                   # sleep first (a client timeout); may carry
                                                     #   "content" or "status" to answer afterwards
    callable(request_json) -> one of the above      # computed from the request (see DemoScript)

Usage counts are reported in every reply (about 4 characters per token unless the item
gives them).  Like vLLM, the server answers only under ``/v1`` (anything else is a 404), a
model it does not serve is a 404 "The model `x` does not exist.", and with ``api_key=...``
a request without ``Authorization: Bearer <key>`` is a 401.  The start-up preflight's tiny
chat request (evo.proposers.llm.preflight.PREFLIGHT_MARK) gets a canned "OK" and does not
consume a script item; it is counted in ``server.preflights``.  When the script runs out the server answers HTTP 400 "script exhausted"
(or starts over with ``loop=True``).  Every request body is kept in ``server.requests``
so tests can assert what the prompt contained.

    with FakeLlmServer([{"content": reply}]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY")

Manual / GPU runs::

    python -m evo.testing.fake_llm --demo --port 8011          # built-in demo script
    python -m evo.testing.fake_llm --script replies.yaml --port 8011

then point ``llm.endpoints`` at ``http://127.0.0.1:8011/v1`` (model ``fake``, key EMPTY).
The demo answers with children of whatever parent the prompt carries: a full rewrite, a
SEARCH/REPLACE diff, garbage, a kernel that does not compile and, when asked to fix it, the
fix, and a 429 now and then.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Item = dict[str, Any]
_PREFLIGHT = "evo preflight"  # evo.proposers.llm.preflight.PREFLIGHT_MARK (kept here: no import from the package)
Script = list[Item | Callable[[dict], Item]]

LOOPBACK = "127.0.0.1"


class FakeLlmServer:
    """Context manager: an HTTP server thread on 127.0.0.1 replaying ``script``."""

    def __init__(self, script: Script | Callable[[dict], Item], *, port: int = 0, models: list[str] | None = None,
                 loop: bool = False, host: str = LOOPBACK, quiet: bool = True, api_key: str | None = None,
                 prefix: str = "/v1"):
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"FakeLlmServer serves loopback only, not {host}")
        self.script = script
        self.models = list(models or ["fake"])
        self.loop = loop
        self.quiet = quiet
        self.api_key = api_key
        self.prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        self.preflights = 0  # preflight chat requests answered (not in self.requests)
        self.requests: list[dict] = []  # request bodies of chat completions, in arrival order
        self.paths: list[str] = []  # every request path, in arrival order
        self._lock = threading.Lock()
        self._next = 0
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{self.prefix}"

    @property
    def root_url(self) -> str:
        """The server without its /v1 prefix (what a user might wrongly configure)."""
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> "FakeLlmServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeLlmServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- scripting
    def prompts(self) -> list[str]:
        """The user-message text of every chat request received."""
        return [_prompt_text(r) for r in self.requests]

    def _take(self, body: dict) -> Item:
        with self._lock:
            self.requests.append(body)
            if callable(self.script):
                item: Any = self.script
            else:
                if self._next >= len(self.script):
                    if not self.loop or not self.script:
                        return {"status": 400, "message": "fake_llm: script exhausted"}
                    self._next = 0
                item = self.script[self._next]
                self._next += 1
        if callable(item):
            item = item(body)
        return dict(item)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:
                if not server.quiet:
                    sys.stderr.write("fake_llm: " + fmt % args + "\n")

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to do

            def _refused(self) -> bool:
                """A path outside the prefix (404, like vLLM) or a missing / wrong key (401)."""
                path = self.path.split("?")[0].rstrip("/")
                if server.prefix and not path.startswith(server.prefix + "/"):
                    self._send(404, {"detail": "Not Found"})
                    return True
                if server.api_key is not None and self.headers.get("Authorization", "") != f"Bearer {server.api_key}":
                    self._send(401, _error("Invalid API key", 401))
                    return True
                return False

            def do_GET(self) -> None:
                server.paths.append(self.path)
                if self._refused():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "evo-fake"} for m in server.models]})
                else:
                    self._send(404, _error("not found", 404))

            def do_POST(self) -> None:
                server.paths.append(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self._refused():
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, _error("not found", 404))
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, _error("body is not JSON", 400))
                    return
                model = body.get("model")
                if model not in server.models:
                    self._send(404, _error(f"The model `{model}` does not exist.", 404))
                    return
                if _PREFLIGHT in _prompt_text(body):
                    with server._lock:
                        server.preflights += 1
                    self._send(200, _completion(body, {"content": "OK"}))
                    return
                item = server._take(body)
                if item.get("delay"):
                    time.sleep(float(item["delay"]))
                    if "content" not in item and "status" not in item:
                        item["content"] = "IDEA: (late reply)\nno code"
                status = int(item.get("status", 200))
                if status != 200:
                    self._send(status, _error(item.get("message", f"scripted HTTP {status}"), status))
                    return
                self._send(200, _completion(body, item))

        return Handler


def _error(message: str, status: int) -> dict:
    kind = {429: "rate_limit_error", 400: "invalid_request_error", 404: "not_found_error", 401: "authentication_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "code": status}}


def _prompt_text(body: dict) -> str:
    parts = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, list):
            c = "".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(str(c or ""))
    return "\n".join(parts)


def _completion(body: dict, item: Item) -> dict:
    content = str(item.get("content", ""))
    prompt_tokens = int(item.get("prompt_tokens", max(1, len(_prompt_text(body)) // 4)))
    completion_tokens = int(item.get("completion_tokens", max(1, len(content) // 4)))
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "finish_reason": item.get("finish_reason", "stop"),
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


# --------------------------------------------------------------------------- demo script

_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_BROKEN = re.compile(r"^.*evo_demo_undefined_\d+.*\n?", re.M)


def _kernel_after(prompt: str, heading: str) -> str | None:
    at = prompt.find(heading)
    if at < 0:
        return None
    m = _FENCE.search(prompt, at)
    return m.group(1) if m and "/*---evo" in m.group(1) else None


def _after_front_matter(src: str) -> int:
    end = src.find("---*/")
    return src.index("\n", end) + 1 if end >= 0 and "\n" in src[end:] else 0


def _insert(src: str, line: str) -> str:
    at = _after_front_matter(src)
    return src[:at] + line + "\n" + src[at:]


class DemoScript:
    """Replies computed from the request: valid children of the prompt's parent, a diff,
    garbage, a kernel that does not compile and its fix, and a 429, in rotation."""

    CYCLE = ("full", "diff", "garbage", "broken", "rate_limit", "full", "diff")

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict) -> Item:
        with self._lock:
            self.n += 1
            n = self.n
        prompt = _prompt_text(body)
        failing = _kernel_after(prompt, "## Failing kernel")
        if failing is not None:
            return self._fix(failing, n)
        parent = _kernel_after(prompt, "## Parent kernel")
        kind = self.CYCLE[(n - 1) % len(self.CYCLE)]
        if parent is None or kind == "garbage":
            return {"content": "I would suggest trying a larger tile size, but I cannot write the code right now."}
        if kind == "rate_limit":
            return {"status": 429, "message": "demo: slow down"}
        if kind == "full":
            child = _insert(parent, f"__device__ constexpr int evo_demo_variant_{n} = {n};  // demo full rewrite")
            return {"content": f"IDEA: Demo full rewrite #{n}: declare a harmless constant so the child is new.\n\n"
                               f"```cuda\n{child}```\n"}
        if kind == "diff":
            at = _after_front_matter(parent)
            anchor = next((ln for ln in parent[at:].split("\n") if ln.strip()), None)
            if anchor is None:
                return {"content": "IDEA: nothing to change\n"}
            return {"content": f"IDEA: Demo diff #{n}: add a harmless constant after `{anchor.strip()}`.\n\n"
                               f"<<<<<<< SEARCH\n{anchor}\n=======\n{anchor}\n"
                               f"__device__ constexpr int evo_demo_diff_{n} = {n};\n>>>>>>> REPLACE\n"}
        # broken: compiles to an error the fix prompt will show
        child = _insert(parent, f"__device__ int evo_demo_broken_{n} = evo_demo_undefined_{n};")
        return {"content": f"IDEA: Demo #{n}: a kernel that does not compile (undefined identifier).\n\n"
                           f"```cuda\n{child}```\n"}

    def _fix(self, failing: str, n: int) -> Item:
        m = _BROKEN.search(failing)
        if not m:
            return {"content": f"IDEA: Demo fix #{n}: I cannot see what is wrong.\n"}
        bad = m.group(0).rstrip("\n")
        return {"content": f"IDEA: Demo fix #{n}: define the missing identifier.\n\n"
                           f"<<<<<<< SEARCH\n{bad}\n=======\n"
                           f"__device__ int evo_demo_fixed_{n} = {n};\n>>>>>>> REPLACE\n"}


# --------------------------------------------------------------------------- CLI

def load_script(path: str) -> tuple[Script, list[str] | None]:
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f)
    models = None
    if isinstance(data, dict):
        models = data.get("models")
        data = data.get("replies")
    if not isinstance(data, list) or not all(isinstance(i, dict) for i in data):
        raise SystemExit(f"error: {path}: expected a list of reply items (or {{models: [...], replies: [...]}})")
    return data, models


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evo.testing.fake_llm", description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--script", help="YAML list of reply items (or {models: [...], replies: [...]})")
    src.add_argument("--demo", action="store_true", help="built-in script answering with children of the prompt's parent")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--model", action="append", help="model name(s) listed by /v1/models (default: fake)")
    ap.add_argument("--loop", action="store_true", help="start the script over when it runs out")
    ap.add_argument("--verbose", action="store_true", help="log every request")
    ap.add_argument("--api-key", help="require this bearer key (a wrong or missing one is a 401)")
    args = ap.parse_args(argv)
    if args.demo:
        script: Any = DemoScript()
        models = None
    else:
        script, models = load_script(args.script)
    srv = FakeLlmServer(script, port=args.port, models=args.model or models, loop=args.loop, quiet=not args.verbose,
                        api_key=args.api_key)
    # Ctrl-C stops it even where it was started with SIGINT ignored (`nohup ... &`, a background job of a script),
    # and from the moment it says it serves
    signal.signal(signal.SIGINT, signal.default_int_handler)
    srv.start()
    try:
        print(f"fake LLM serving {srv.base_url} (models: {', '.join(srv.models)}); Ctrl-C to stop", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.close()
        print(f"fake LLM: served {len(srv.requests)} chat requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
