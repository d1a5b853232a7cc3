"""The FakeOpenAIServer test helper itself (plain HTTP, no openai client)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAIServer, scripted_responder


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_completion_shape_and_models_listing() -> None:
    with FakeOpenAIServer(lambda r: {"content": "hello", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}) as s:
        status, body = _post(s.base_url + "/chat/completions", {"model": "m", "messages": [{"role": "user"}]})
        with urllib.request.urlopen(s.base_url + "/models", timeout=5) as response:
            models = json.loads(response.read())
    assert status == 200 and body["object"] == "chat.completion" and body["model"] == "m"
    message = body["choices"][0]["message"]
    assert message["content"] == "hello"
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls" and "usage" in body
    assert models["data"][0]["id"] == "fake-model"


def test_scripted_responder_picks_answer_by_assistant_turns() -> None:
    with FakeOpenAIServer(scripted_responder([{"content": "one"}, {"content": "two"}])) as s:
        url = s.base_url + "/chat/completions"
        first = [{"role": "user", "content": "q"}]
        second = first + [{"role": "assistant", "content": "one"}, {"role": "user", "content": "more"}]
        third = second + [{"role": "assistant", "content": "two"}]
        assert _post(url, {"messages": first})[1]["choices"][0]["message"]["content"] == "one"
        assert _post(url, {"messages": second})[1]["choices"][0]["message"]["content"] == "two"
        status, body = _post(url, {"messages": third})
    assert status == 400 and "script exhausted" in body["error"]["message"]


def test_failure_injection_is_seeded_and_reset_replays_it() -> None:
    with FakeOpenAIServer(fail_rate=0.5, fail_statuses=[500, 503, 429], seed=3) as s:
        url = s.base_url + "/chat/completions"
        first = [_post(url, {"messages": []})[0] for _ in range(12)]
        s.reset()
        assert s.requests == []
        second = [_post(url, {"messages": []})[0] for _ in range(12)]
    assert first == second == s.statuses
    assert {200, 500, 503, 429} >= set(first) and 200 in first and len(set(first)) > 1


@pytest.mark.parametrize(("path", "body"), [("/v1/other", {}), ("/v1/chat/completions", {"stream": True})])
def test_unsupported_requests_get_client_errors(path: str, body: dict[str, Any]) -> None:
    with FakeOpenAIServer() as s:
        status, payload = _post(f"http://127.0.0.1:{s.port}{path}", body)
    assert status in (400, 404) and "error" in payload


def test_broken_responder_becomes_a_500_with_its_message() -> None:
    with FakeOpenAIServer(lambda r: {}["missing"]) as s:
        status, payload = _post(s.base_url + "/chat/completions", {"messages": []})
    assert status == 500 and "KeyError" in payload["error"]["message"]
