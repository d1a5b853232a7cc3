"""Summary judge: rating parse/map, short-circuits, the deterministic heuristic, and the LLM protocol over a real
local OpenAI-compatible server (tests/fakes/openai_server.py)."""

from __future__ import annotations

import asyncio

import pytest

from gustforge.llm import LLMClient, LLMSettings
from tests.fakes.openai_server import FakeHTTPError, FakeOpenAIServer
from trainer.rewards.judge import (
    JUDGES,
    LLMJudge,
    make_judge_input,
    parse_rating,
    rating_to_score,
    render_judge_prompt,
    short_circuit,
)

INP = make_judge_input(
    "What is the status of order 42?",
    ['{"status": "success", "order": {"id": 42, "state": "shipped", "carrier": "DHL"}}'],
    "Order 42 has been shipped with DHL and is on its way to you.",
)


def _reply(label: str) -> str:
    inner = f"<response_quality><reasoning>ok</reasoning><rating>{label}</rating></response_quality>"
    return f"<response>{inner}</response>"


@pytest.mark.parametrize(
    ("label", "score"), [("very poor", 0.0), ("poor", 0.25), ("acceptable", 0.5), ("good", 0.75), ("excellent", 1.0)]
)
def test_rating_map(label, score):
    assert parse_rating(_reply(label.upper())) == label
    assert rating_to_score(label) == score


@pytest.mark.parametrize(
    "text", [None, "", "<rating>good</rating>", _reply("4"), _reply("great"), "<response_quality><rating>good"]
)
def test_parse_failures(text):
    assert parse_rating(text) is None


def test_short_circuits():
    none = short_circuit(make_judge_input("q", [], "a long enough final reply"))
    assert none is not None and none.no_tool_response and none.score == 0.0
    short = short_circuit(make_judge_input("q", ["x"], " tiny "))
    assert short is not None and short.rating == "very poor" and short.backend == "none"
    assert short_circuit(INP) is None


def test_prompt_shows_responses_not_calls():
    prompt = render_judge_prompt(INP)
    assert "[Tool Response 1]" in prompt and "shipped" in prompt and INP.question in prompt
    assert "<tool_call>" not in prompt.split("## User Question")[1]


def test_heuristic_is_deterministic_and_grounded():
    judge = JUDGES.get("heuristic")({})
    assert judge.name == "heuristic"
    good = judge.rate(INP)
    bad = judge.rate(make_judge_input(INP.question, INP.tool_responses, "I cannot help with that request today."))
    assert good == judge.rate(INP)
    assert good.score > bad.score
    assert good.rating in ("good", "excellent") and bad.rating in ("very poor", "poor")


def _llm_judge(server: FakeOpenAIServer, **kw) -> LLMJudge:
    settings = LLMSettings(backend="openai", base_url=server.base_url, model="judge", max_retries=2,
                           backoff_base_s=0.0, api_key_env="GUST_TEST_NO_KEY", **kw)
    return LLMJudge(LLMClient(settings), max_tokens=256)


def test_llm_judge_over_fake_endpoint():
    with FakeOpenAIServer(lambda req: {"content": _reply("good")}) as server:
        judge = _llm_judge(server)
        result = judge.rate(INP)
        body = server.requests[0]
    assert (result.score, result.rating, result.backend, result.failed) == (0.75, "good", "llm", False)
    assert body["temperature"] == 0.0 and body["max_tokens"] == 256
    assert "Order 42 has been shipped" in body["messages"][0]["content"]


def test_llm_judge_parse_failure_is_zero():
    with FakeOpenAIServer(lambda req: {"content": "I would rate this 4/5."}) as server:
        result = _llm_judge(server).rate(INP)
    assert (result.score, result.parse_failed, result.failed) == (0.0, True, False)


def test_llm_judge_call_failure_is_zero():
    def refuse(req):
        raise FakeHTTPError(400, "bad request")

    with FakeOpenAIServer(refuse) as server:
        result = _llm_judge(server).rate(INP)
    assert (result.score, result.failed) == (0.0, True)


def test_llm_judge_retries_transient_errors():
    with FakeOpenAIServer(lambda req: {"content": _reply("excellent")}, fail_rate=0.5, seed=3) as server:
        judge = _llm_judge(server)
        results = [judge.rate(make_judge_input(f"q{i}", ["r"], "a final reply text")) for i in range(4)]
        statuses = list(server.statuses)
    assert all(r.score == 1.0 for r in results)
    assert 500 in statuses


def test_llm_judge_async():
    with FakeOpenAIServer(lambda req: {"content": _reply("poor")}) as server:
        result = asyncio.run(_llm_judge(server).arate(INP))
    assert result.score == 0.25


def test_llm_judge_concurrency_is_a_reward_option() -> None:
    """judge_max_concurrency bounds the in-flight requests of one reward worker; timeout/retries reach the client."""
    import asyncio as aio
    from types import SimpleNamespace

    from trainer.compute_score import config_from_kwargs
    from trainer.launch import compose_config
    from trainer.rewards.judge import JudgeInput, LLMJudge

    class SlowClient:
        def __init__(self) -> None:
            self.inflight = self.peak = 0

        async def achat(self, messages, **_):
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            await aio.sleep(0.01)
            self.inflight -= 1
            return SimpleNamespace(content="<response_quality><rating>good</rating></response_quality>")

    client = SlowClient()
    judge = LLMJudge(client, max_concurrency=2)
    inp = JudgeInput("q", ("tool output",), "a final answer that is long enough")

    async def many() -> list:
        return await aio.gather(*(judge.arate(inp) for _ in range(7)))

    results = aio.run(many())
    assert client.peak == 2 and all(r.score == 0.75 for r in results)
    kwargs = compose_config("slca").reward.custom_reward_function.reward_kwargs
    options = config_from_kwargs(dict(kwargs) | {"judge": "llm"}).judge_options
    assert (options["timeout_s"], options["max_retries"], options["max_concurrency"]) == (120, 3, 64)
