"""LLMClient against the real openai client and a local FakeOpenAIServer: cache, retries, concurrency."""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gustforge.errors import ConfigError, LLMError, TransientLLMError
from gustforge.llm import LLMClient, LLMSettings, ResponseCache, cache_key
from tests.fakes.openai_server import FakeHTTPError, FakeOpenAIServer


def _settings(server: FakeOpenAIServer, **overrides: Any) -> LLMSettings:
    base: dict[str, Any] = {
        "backend": "openai",
        "base_url": server.base_url,
        "model": "fake-model",
        "timeout_s": 5.0,
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.01,
    }
    return LLMSettings(**(base | overrides))


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


class TestChat:
    def test_content_tool_calls_and_request_shape(self) -> None:
        def respond(req: dict[str, Any]) -> dict[str, Any]:
            return {"content": None, "tool_calls": [{"name": "get_user", "arguments": {"user_id": "u1"}}]}

        tools = [{"type": "function", "function": {"name": "get_user", "parameters": {"type": "object"}}}]
        with FakeOpenAIServer(respond) as server, LLMClient(_settings(server, temperature=0.3)) as client:
            result = client.chat(_user("hi"), tools=tools, max_tokens=64)
        assert result.content is None and not result.cached
        assert result.tool_calls == [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_user", "arguments": '{"user_id": "u1"}'},
            }
        ]
        assert result.finish_reason == "tool_calls"
        (body,) = server.requests
        assert body["model"] == "fake-model" and body["tools"] == tools
        assert body["temperature"] == 0.3 and body["max_tokens"] == 64

    def test_model_discovered_from_models_endpoint(self) -> None:
        with (
            FakeOpenAIServer(model="served-7b") as server,
            LLMClient(_settings(server, model=None)) as client,
        ):
            assert client.chat(_user("hi")).content == "ok"
        assert server.requests[0]["model"] == "served-7b"

    def test_offline_backend_cannot_chat(self) -> None:
        with LLMClient(LLMSettings()) as client, pytest.raises(ConfigError, match="no chat endpoint"):
            client.chat(_user("hi"))

    def test_closed_client_refuses(self) -> None:
        with FakeOpenAIServer() as server:
            client = LLMClient(_settings(server))
            client.chat(_user("a"))
            client.close()
            client.close()  # idempotent
            with pytest.raises(ConfigError, match="closed"):
                client.chat(_user("b"))

    def test_achat_from_callers_own_event_loop(self) -> None:
        with FakeOpenAIServer(lambda r: {"content": r["messages"][0]["content"].upper()}) as server:
            with LLMClient(_settings(server)) as client:

                async def both() -> list[str | None]:
                    results = await asyncio.gather(client.achat(_user("a")), client.achat(_user("b")))
                    return [r.content for r in results]

                assert asyncio.run(both()) == ["A", "B"]
                assert asyncio.run(both()) == ["A", "B"]  # a second, fresh caller loop works too


class TestCache:
    def test_rerun_costs_zero_requests(self, tmp_path: Path) -> None:
        cache = tmp_path / "cache" / "llm.sqlite"
        with FakeOpenAIServer(lambda r: {"content": "answer"}) as server:
            with LLMClient(_settings(server, cache_path=cache)) as first:
                assert first.chat(_user("q")).cached is False
            with LLMClient(_settings(server, cache_path=cache)) as second:
                again = second.chat(_user("q"))
                assert second.stats.cache_hits == 1 and second.stats.requests == 0
        assert again.cached is True and again.content == "answer"
        assert len(server.requests) == 1

    def test_key_covers_model_messages_tools_params(self, tmp_path: Path) -> None:
        with FakeOpenAIServer() as server:
            with LLMClient(_settings(server, cache_path=tmp_path / "c.sqlite")) as client:
                client.chat(_user("q"))
                client.chat(_user("q"), seed=1)
                client.chat(_user("q"), tools=[{"type": "function", "function": {"name": "t"}}])
                client.chat(_user("other"))
                client.chat(_user("q"))
            assert len(server.requests) == 4 and client.stats.cache_hits == 1

    def test_key_is_order_insensitive_canonical_json(self) -> None:
        a = cache_key(model="m", messages=_user("x"), tools=None, params={"temperature": 0, "seed": 1})
        b = cache_key(model="m", messages=_user("x"), tools=None, params={"seed": 1, "temperature": 0})
        assert a == b != cache_key(model="m2", messages=_user("x"), tools=None, params={"seed": 1, "temperature": 0})

    def test_cache_is_wal_and_thread_safe(self, tmp_path: Path) -> None:
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: cache.put(f"k{i}", {"i": i}), range(200)))
            assert len(cache) == 200 and cache.get("k7") == {"i": 7} and cache.get("nope") is None
            mode = cache._conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


class TestRetries:
    def test_recovers_from_30_percent_500s_with_bounded_attempts(self) -> None:
        with FakeOpenAIServer(fail_rate=0.3, fail_statuses=[500], seed=7) as server:
            with LLMClient(_settings(server, max_retries=4)) as client:
                contents = [client.chat(_user(f"q{i}")).content for i in range(20)]
                stats = client.stats
        assert contents == ["ok"] * 20
        assert stats.retries > 0 and stats.failures == 0
        assert len(server.requests) == stats.requests == 20 + stats.retries
        # consecutive failures before each success never exceed max_retries (5 attempts per call)
        runs = [len(list(g)) for failed, g in itertools.groupby(server.statuses, key=lambda s: s != 200) if failed]
        assert max(runs) <= 4

    @pytest.mark.parametrize("status", [429, 500, 503])
    def test_exhausted_transient_errors_raise_after_max_retries(self, status: int) -> None:
        with FakeOpenAIServer(fail_rate=1.0, fail_statuses=[status]) as server:
            with LLMClient(_settings(server, max_retries=2)) as client:
                with pytest.raises(TransientLLMError, match="after 3 attempts"):
                    client.chat(_user("q"))
                assert client.stats.failures == 1 and client.stats.retries == 2
        assert len(server.requests) == 3

    @pytest.mark.parametrize("status", [400, 401, 404, 422])
    def test_client_errors_are_not_retried(self, status: int) -> None:
        def respond(req: dict[str, Any]) -> dict[str, Any]:
            raise FakeHTTPError(status, "bad request")

        with FakeOpenAIServer(respond) as server, LLMClient(_settings(server, max_retries=4)) as client:
            with pytest.raises(LLMError) as info:
                client.chat(_user("q"))
            assert client.stats.retries == 0
        assert not isinstance(info.value, TransientLLMError)
        assert len(server.requests) == 1

    def test_timeouts_are_transient_and_bounded(self) -> None:
        with FakeOpenAIServer(timeout_rate=1.0, hang_s=5.0) as server:
            with LLMClient(_settings(server, timeout_s=0.3, max_retries=1)) as client:
                start = time.monotonic()
                with pytest.raises(TransientLLMError, match="Timeout"):
                    client.chat(_user("q"))
                elapsed = time.monotonic() - start
        assert len(server.requests) == 2
        assert elapsed < 2 * 5.0  # not a speed figure: unbounded, the two hung requests alone would take 10 s

    def test_backoff_is_jittered_exponential_and_capped(self) -> None:
        settings = LLMSettings(backend="openai", model="m", backoff_base_s=1.0, backoff_max_s=4.0, retry_seed=3)
        client = LLMClient(settings)
        delays = [client._backoff(attempt, RuntimeError()) for attempt in range(5)]
        for attempt, delay in enumerate(delays):
            cap = min(4.0, 2.0**attempt)
            assert cap / 2 <= delay <= cap
        assert delays != [
            LLMClient(settings.model_copy(update={"retry_seed": 4}))._backoff(a, RuntimeError()) for a in range(5)
        ]


class TestConcurrency:
    def test_semaphore_bounds_in_flight_requests_async(self) -> None:
        with FakeOpenAIServer(delay_s=0.1) as server:
            with LLMClient(_settings(server, max_concurrency=2)) as client:

                async def fan_out() -> None:
                    await asyncio.gather(*(client.achat(_user(f"q{i}")) for i in range(8)))

                asyncio.run(fan_out())
        assert len(server.requests) == 8
        assert server.max_in_flight == 2

    def test_bound_holds_across_threads_using_sync_chat(self) -> None:
        with FakeOpenAIServer(delay_s=0.1) as server:
            with LLMClient(_settings(server, max_concurrency=3)) as client:
                with ThreadPoolExecutor(8) as pool:
                    results = list(pool.map(lambda i: client.chat(_user(f"t{i}")).content, range(9)))
        assert results == ["ok"] * 9
        assert server.max_in_flight == 3


def test_per_worker_caches_merge_into_one(tmp_path: Path) -> None:
    from gustforge.llm.cache import merge_caches

    for worker in ("a", "b"):
        with ResponseCache(tmp_path / f"{worker}.sqlite") as cache:
            cache.put(f"key-{worker}", {"from": worker})
    assert merge_caches(tmp_path / "shared.sqlite", [tmp_path / "a.sqlite", tmp_path / "b.sqlite"]) == 2
    with ResponseCache(tmp_path / "shared.sqlite") as merged:
        assert merged.get("key-a") == {"from": "a"} and merged.get("key-b") == {"from": "b"}


def test_waiting_requests_get_slots_by_priority() -> None:
    with FakeOpenAIServer(delay_s=0.2) as server:
        with LLMClient(_settings(server, max_concurrency=1)) as client:

            async def fan_out() -> None:
                first = asyncio.ensure_future(client.achat(_user("first"), priority=9))
                await asyncio.sleep(0.1)  # "first" holds the only slot; the rest queue
                later = [client.achat(_user(f"p{p}"), priority=p) for p in (5, -1, 0)]
                await asyncio.gather(first, *later)

            asyncio.run(fan_out())
    assert [r["messages"][0]["content"] for r in server.requests] == ["first", "p-1", "p0", "p5"]
    assert server.max_in_flight == 1
