"""A real OpenAI-compatible HTTP server for tests (stdlib only), with seeded failure injection.

Example:
    >>> with FakeOpenAIServer(lambda req: {"content": "hi"}) as server:
    ...     server.base_url.endswith("/v1")
    True
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOpenAIServer", "FakeHTTPError", "Responder", "scripted_responder"]

Responder = Callable[[dict[str, Any]], dict[str, Any]]


class FakeHTTPError(Exception):
    """Raise from a responder to answer with an HTTP error status."""

    def __init__(self, status: int, message: str = "injected error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def scripted_responder(script: Sequence[dict[str, Any]]) -> Responder:
    """Answer turn k of a conversation with `script[k]`, k = number of assistant messages in the request.

    Stateless, so concurrent conversations and retries replay correctly. A conversation longer than the
    script gets HTTP 400 ("script exhausted").
    """

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        turn = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        if turn >= len(script):
            raise FakeHTTPError(400, f"script exhausted at assistant turn {turn}")
        return dict(script[turn])

    return respond


def _default_responder(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": "ok"}


def _tool_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    """Accept the OpenAI shape or a short `{"name", "arguments": dict|str}` form."""
    fn = call.get("function") or {"name": call["name"], "arguments": call.get("arguments", {})}
    args = fn.get("arguments", {})
    return {
        "id": call.get("id", f"call_{index}"),
        "type": "function",
        "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
    }


def _words(request: dict[str, Any]) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in request.get("messages", []))


class FakeOpenAIServer:
    """`POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1 (random port), in a background thread.

    Args:
        responder: request JSON → assistant message `{"content": str|None, "tool_calls": [...]}`; may raise
            `FakeHTTPError`.
        model: Name listed by `/v1/models`.
        fail_rate: Probability that a chat request gets an error status from `fail_statuses`.
        fail_statuses: Statuses to draw injected failures from.
        timeout_rate: Probability that a chat request hangs `hang_s` seconds (longer than the client timeout).
        hang_s: How long a "timeout" request hangs.
        delay_s: Latency added to every chat request.
        seed: Seeds the injection RNG (deterministic for sequential clients).

    Attributes:
        requests: Every chat request body received, failed ones included.
        statuses: The HTTP status sent for each entry of `requests` (None while hanging).
        max_in_flight: Highest number of chat requests handled at once.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        model: str = "fake-model",
        fail_rate: float = 0.0,
        fail_statuses: Sequence[int] = (500,),
        timeout_rate: float = 0.0,
        hang_s: float = 30.0,
        delay_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.responder = responder or _default_responder
        self.model = model
        self.fail_rate = fail_rate
        self.fail_statuses = tuple(fail_statuses)
        self.timeout_rate = timeout_rate
        self.hang_s = hang_s
        self.delay_s = delay_s
        self.seed = seed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # ------------------------------------------------------------------ lifecycle
    def reset(self) -> None:
        """Forget recorded requests and counters and reseed the injection RNG."""
        with self._lock:
            self.requests: list[dict[str, Any]] = []
            self.statuses: list[int | None] = []
            self.in_flight = 0
            self.max_in_flight = 0
            self.spans: list[tuple[float, float]] = []  # (start, end) of every finished chat request
            self._started: dict[int, float] = {}
            self._rng = random.Random(self.seed)
            self._counter = 0

    def start(self) -> FakeOpenAIServer:
        self._stop.clear()
        self._httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes hanging handlers
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ------------------------------------------------------------------ request handling
    def _admit(self, body: dict[str, Any]) -> tuple[int, str]:
        """Record the request and draw its fate: ("ok"|"fail"|"hang") with its index."""
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.statuses.append(None)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._started[index] = time.monotonic()
            draw = self._rng.random()
            status = self._rng.choice(self.fail_statuses) if self.fail_statuses else 500
        if draw < self.timeout_rate:
            return index, "hang"
        if draw < self.timeout_rate + self.fail_rate:
            return index, f"fail:{status}"
        return index, "ok"

    def _finish(self, index: int, status: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.statuses[index] = status
            self.spans.append((self._started.pop(index, time.monotonic()), time.monotonic()))

    def _completion(self, body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._counter += 1
            counter = self._counter
        calls = [_tool_call(c, i) for i, c in enumerate(message.get("tool_calls") or [])]
        msg: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if calls:
            msg["tool_calls"] = calls
        completion_tokens = len(str(message.get("content") or "").split()) + len(calls)
        return {
            "id": f"chatcmpl-fake-{counter}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": msg,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": _words(body),
                "completion_tokens": completion_tokens,
                "total_tokens": _words(body) + completion_tokens,
            },
        }

    def handle_chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Status and JSON answer for one chat request (runs on a handler thread)."""
        index, fate = self._admit(body)
        status, payload = HTTPStatus.OK.value, {}
        try:
            if fate == "hang":
                self._stop.wait(self.hang_s)
                status, payload = 504, _error(504, "injected hang")
            elif fate.startswith("fail:"):
                status = int(fate.split(":")[1])
                payload = _error(status, "injected failure")
            elif body.get("stream"):
                status, payload = 400, _error(400, "streaming is not supported by FakeOpenAIServer")
            else:
                if self.delay_s:
                    self._stop.wait(self.delay_s)
                payload = self._completion(body, self.responder(body))
        except FakeHTTPError as exc:
            status, payload = exc.status, _error(exc.status, exc.message)
        except Exception as exc:  # a broken responder is reported to the client, not swallowed
            status, payload = 500, _error(500, f"responder raised {type(exc).__name__}: {exc}")
        finally:
            self._finish(index, status)
        return status, payload

    def models_payload(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}],
        }


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the stdlib's 5 refuses connections under a concurrent client


def _error(status: int, message: str) -> dict[str, Any]:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            return

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout); nothing to do
                pass

        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, server.models_payload())
            else:
                self._send(404, _error(404, f"no route {self.path}"))

        def do_POST(self) -> None:  # noqa: N802 - stdlib naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, _error(404, f"no route {self.path}"))
                return
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                self._send(400, _error(400, f"invalid JSON body: {exc}"))
                return
            self._send(*server.handle_chat(body))

    return Handler
