"""Roles: offline twin, openai backend with JSON repair, schema validation and re-ask."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gustforge.errors import ConfigError, InputError, LLMOutputError
from gustforge.llm import LLMClient, LLMRole, LLMSettings, render_messages, run_role, run_role_async
from tests.fakes.openai_server import FakeOpenAIServer, scripted_responder

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
    "required": ["name", "count"],
    "additionalProperties": False,
}


def _offline(inputs: dict[str, Any]) -> dict[str, Any]:
    return {"name": inputs["tool"].upper(), "count": len(inputs["args"])}


ROLE = LLMRole(
    name="counter",
    system_prompt="You count arguments.",
    user_template="Tool {tool} takes {args}. Literal braces: {{x}}.",
    output_schema=SCHEMA,
    offline=_offline,
)
INPUTS = {"tool": "get_user", "args": {"user_id": "u1", "verbose": True}}


def _client(server: FakeOpenAIServer, **overrides: Any) -> LLMClient:
    base = {"backend": "openai", "base_url": server.base_url, "model": "fake-model", "backoff_base_s": 0.001}
    return LLMClient(LLMSettings(**(base | overrides)))


def _reply(obj: Any) -> dict[str, Any]:
    return {"content": obj if isinstance(obj, str) else json.dumps(obj)}


class TestRenderMessages:
    def test_system_carries_schema_and_user_renders_json_inputs(self) -> None:
        system, user = render_messages(ROLE, INPUTS)
        assert system["role"] == "system" and system["content"].startswith("You count arguments.")
        assert json.dumps(SCHEMA, sort_keys=True) in system["content"]
        assert user == {
            "role": "user",
            "content": 'Tool get_user takes {"user_id": "u1", "verbose": true}. Literal braces: {x}.',
        }

    def test_missing_field_is_an_input_error(self) -> None:
        with pytest.raises(InputError, match=r"\['args'\]"):
            render_messages(ROLE, {"tool": "t"})

    def test_invalid_output_schema_rejected_at_definition(self) -> None:
        with pytest.raises(ConfigError, match="invalid output_schema"):
            LLMRole("bad", "s", "u", {"type": "no-such-type"}, _offline)


class TestOffline:
    def test_calls_offline_twin_and_makes_no_http_call(self) -> None:
        with FakeOpenAIServer() as server:
            client = LLMClient(LLMSettings(backend="offline", base_url=server.base_url))
            assert run_role(ROLE, INPUTS, client) == {"name": "GET_USER", "count": 2}
            assert asyncio.run(run_role_async(ROLE, INPUTS, client)) == {"name": "GET_USER", "count": 2}
        assert server.requests == [] and client.stats.requests == 0

    def test_offline_twin_output_is_validated_too(self) -> None:
        broken = LLMRole("broken", "s", "u", SCHEMA, lambda i: {"name": "x", "count": -1})
        with pytest.raises(LLMOutputError, match="count: -1 is less than the minimum"):
            run_role(broken, {}, LLMClient(LLMSettings()))


class TestOpenAI:
    def test_valid_reply_is_parsed_and_validated(self) -> None:
        with FakeOpenAIServer(lambda r: _reply({"name": "GET_USER", "count": 2})) as server:
            with _client(server) as client:
                assert run_role(ROLE, INPUTS, client) == {"name": "GET_USER", "count": 2}
        (body,) = server.requests
        assert body["messages"] == render_messages(ROLE, INPUTS)
        assert body["temperature"] == 0.0

    def test_sloppy_json_is_repaired_without_reask(self) -> None:
        sloppy = "Sure:\n```json\n{'name': 'A', 'count': 3,}\n```"
        with FakeOpenAIServer(lambda r: _reply(sloppy)) as server, _client(server) as client:
            assert run_role(ROLE, INPUTS, client) == {"name": "A", "count": 3}
        assert len(server.requests) == 1

    def test_schema_violation_triggers_one_reask_with_the_error(self) -> None:
        script = [_reply({"name": "A", "count": "three"}), _reply({"name": "A", "count": 3})]
        with FakeOpenAIServer(scripted_responder(script)) as server, _client(server) as client:
            assert run_role(ROLE, INPUTS, client) == {"name": "A", "count": 3}
        assert len(server.requests) == 2
        reask = server.requests[1]["messages"]
        assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
        assert "count: 'three' is not of type 'integer'" in reask[-1]["content"]

    def test_unrepairable_output_raises_after_bounded_rounds(self) -> None:
        with FakeOpenAIServer(lambda r: _reply("I cannot answer that.")) as server:
            with (
                _client(server, max_repair_rounds=2) as client,
                pytest.raises(LLMOutputError, match="2 repair"),
            ):
                run_role(ROLE, INPUTS, client)
        assert len(server.requests) == 3

    def test_no_repair_rounds_means_one_request(self) -> None:
        with FakeOpenAIServer(lambda r: _reply({"name": "A"})) as server:
            with (
                _client(server, max_repair_rounds=0) as client,
                pytest.raises(LLMOutputError, match="'count'"),
            ):
                run_role(ROLE, INPUTS, client)
        assert len(server.requests) == 1

    def test_tool_call_only_reply_is_an_output_error(self) -> None:
        reply = {"content": None, "tool_calls": [{"name": "x", "arguments": {}}]}
        with FakeOpenAIServer(lambda r: reply) as server:
            with (
                _client(server, max_repair_rounds=0) as client,
                pytest.raises(LLMOutputError, match="empty reply"),
            ):
                run_role(ROLE, INPUTS, client)

    def test_rerun_with_cache_costs_zero_requests(self, tmp_path: Path) -> None:
        cache = tmp_path / "llm.sqlite"
        with FakeOpenAIServer(lambda r: _reply({"name": "A", "count": 1})) as server:
            with _client(server, cache_path=cache) as client:
                first = run_role(ROLE, INPUTS, client)
            with _client(server, cache_path=cache) as client:
                second = run_role(ROLE, INPUTS, client)
                assert client.stats.cache_hits == 1
        assert first == second and len(server.requests) == 1

    def test_async_roles_fan_out_concurrently(self) -> None:
        def respond(req: dict[str, Any]) -> dict[str, Any]:
            tool = req["messages"][1]["content"].split()[1]
            return _reply({"name": tool, "count": 0})

        with FakeOpenAIServer(respond, delay_s=0.05) as server, _client(server, max_concurrency=4) as client:

            async def fan_out() -> list[dict[str, Any]]:
                jobs = [run_role_async(ROLE, {"tool": f"t{i}", "args": {}}, client) for i in range(8)]
                return await asyncio.gather(*jobs)

            results = asyncio.run(fan_out())
        assert [r["name"] for r in results] == [f"t{i}" for i in range(8)]
        assert 1 < server.max_in_flight <= 4


class TestProductionPath:
    """Validated-only cache, per-role accounting and options, `<think>` drafts, breaker, token budget."""

    _ROLE = LLMRole("probe", "Answer.", "Q {q}", {"type": "object", "required": ["ok"],
                    "properties": {"ok": {"type": "boolean"}}}, lambda i: {"ok": True})  # fmt: skip

    def _settings(self, server: Any, tmp_path: Any, **extra: Any) -> LLMSettings:
        return LLMSettings(backend="openai", base_url=server.base_url, model="fake-model", timeout_s=5.0,
                           backoff_base_s=0.001, backoff_max_s=0.002, cache_path=tmp_path / "c.sqlite",
                           **extra)  # fmt: skip

    def test_think_draft_is_not_the_answer_and_only_valid_replies_are_cached(self, tmp_path: Any) -> None:
        from tests.fakes.openai_server import FakeOpenAIServer

        replies = iter(['{"nope": 1}', '<think>draft {"ok": false}</think>{"ok": true}'])
        with FakeOpenAIServer(lambda r: {"content": next(replies)}) as server:
            settings = self._settings(server, tmp_path, roles={"probe": {"max_tokens": 77,
                                      "chat_template_kwargs": {"enable_thinking": False}}})  # fmt: skip
            with LLMClient(settings) as client:
                assert run_role(self._ROLE, {"q": 1}, client) == {"ok": True}  # re-asked once, think stripped
                assert client.role_stats()["probe"].requests == 2
            first = server.requests[0]
            assert first["max_tokens"] == 77 and first["chat_template_kwargs"] == {"enable_thinking": False}
            with LLMClient(settings) as again:
                assert run_role(self._ROLE, {"q": 1}, again) == {"ok": True}  # the valid reply, under the first key
                assert again.stats.requests == 0 and again.stats.cache_hits == 1
            with LLMClient(settings.model_copy(update={"refresh_roles": ("probe",)})) as refreshed:
                replies = iter(['{"ok": false}'])
                assert run_role(self._ROLE, {"q": 1}, refreshed) == {"ok": False}  # --refresh-llm re-draws
                assert refreshed.stats.requests == 1

    def test_breaker_stops_contacting_a_dead_endpoint_and_budget_stops_spending(self, tmp_path: Any) -> None:
        from gustforge.errors import LLMBudgetExceeded, TransientLLMError
        from tests.fakes.openai_server import FakeOpenAIServer

        with FakeOpenAIServer(fail_rate=1.0, fail_statuses=(503,)) as server:
            settings = self._settings(server, tmp_path, max_retries=1, breaker_threshold=2, breaker_cooldown_s=60)
            with LLMClient(settings) as client:
                for _ in range(5):
                    with pytest.raises(TransientLLMError):
                        run_role(self._ROLE, {"q": 1}, client)
            assert len(server.requests) == 4  # two calls x two attempts, then the breaker answers alone
        with FakeOpenAIServer(lambda r: {"content": '{"ok": true}'}) as server:
            with LLMClient(self._settings(server, tmp_path, max_total_tokens=1)) as client:
                run_role(self._ROLE, {"q": 2}, client)
                with pytest.raises(LLMBudgetExceeded, match="max_total_tokens"):
                    run_role(self._ROLE, {"q": 3}, client)
            assert len(server.requests) == 1
