"""The evaluator end to end against a real local OpenAI-compatible server playing scripted answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data.io import read_json, read_jsonl
from data.models import RawTool
from gustforge.llm import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer
from toucan.config import EvalConfig, ResponderMode
from toucan.eval_run import SAMPLES_FILE, run_evaluation
from toucan.export import write_prepared
from toucan.metrics import bootstrap_ci
from toucan.models import ContextAction, GoldCall, SampleKind, Step
from toucan.prepare import Prepared
from toucan.responder import ToolContext, make_responder, validate_call
from trainer.rewards.parse import Call

ADD = RawTool(
    name="calc-add",
    description="Add two numbers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)
WEATHER = RawTool(
    name="weather-get",
    description="Weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _sample(uuid: str, question: str, call: GoldCall, response: str) -> ContextAction:
    return ContextAction(
        sample_id=uuid, uuid=uuid, dialogue_hash=uuid, kind=SampleKind.NATIVE_SINGLE_TURN, turn_index=0,
        tools=(ADD, WEATHER), history=(), question=question,
        gold_steps=(Step(calls=(call,), responses=(response,)),), gold_answer="ok",
    )  # fmt: skip


def _block(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


SCRIPTS = {  # first user message -> assistant content per turn
    "Q-perfect": [_block("calc-add", {"a": 2, "b": 3}), "The sum of 2 and 3 is 5."],
    "Q-wrong-arg": [_block("weather-get", {"city": "London"}), "It is mild in London today."],
    "Q-no-call": ["I believe it is sunny."],
}


def _responder(request: dict[str, Any]) -> dict[str, Any]:
    messages = request["messages"]
    question = next(m["content"] for m in messages if m["role"] == "user")
    turn = sum(m["role"] == "assistant" for m in messages)
    return {"content": SCRIPTS[question][turn]}


@pytest.fixture()
def test_parquet(tmp_path: Path) -> Path:
    samples = [
        _sample("a", "Q-perfect", GoldCall(name="calc-add", arguments={"a": 2, "b": 3}), "5"),
        _sample("b", "Q-wrong-arg", GoldCall(name="weather-get", arguments={"city": "Paris"}), "sunny, 21C"),
        _sample("c", "Q-no-call", GoldCall(name="weather-get", arguments={"city": "Paris"}), "sunny"),
    ]
    return write_prepared(Prepared(test=samples), tmp_path / "data")["test"]


def test_end_to_end_metrics_by_hand(test_parquet: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    with FakeOpenAIServer(_responder, delay_s=0.05) as server:
        settings = LLMSettings(
            backend="openai", base_url=server.base_url, model="fake-model", max_concurrency=2, max_retries=0,
            cache_path=tmp_path / "cache.sqlite",
        )  # fmt: skip
        cfg = EvalConfig(responder=ResponderMode.REPLAY, bootstrap_samples=200)
        summary = run_evaluation(test_parquet, out, model=settings, cfg=cfg)
        first_requests = len(server.requests)
        assert server.max_in_flight <= 2
        # the perfect call matched gold: the recorded observation was replayed
        second_turn = [r for r in server.requests if len(r["messages"]) == 4]
        replayed = [r["messages"][-1]["content"] for r in second_turn if "Q-perfect" in r["messages"][1]["content"]]
        assert replayed == ["<tool_response>\n5\n</tool_response>"]
        # resumable: a rerun re-queries nothing
        again = run_evaluation(test_parquet, out, model=settings, cfg=cfg)
        assert len(server.requests) == first_requests == 5
    rows = {r["task_id"]: r for r in read_jsonl(out / SAMPLES_FILE)}
    assert len(rows) == 3
    perfect, wrong, none = rows["a:0"], rows["b:0"], rows["c:0"]
    # perfect: every HierR term is 1
    assert (perfect["name_f1"], perfect["arg_match"], perfect["process"], perfect["parallel"]) == (1, 1, 1, 1)
    assert perfect["success"] == 1 and perfect["tool_turns"] == 1 and perfect["no_call"] == 0
    # wrong argument value: S_key = 1, S_val = 0 -> ArgMatch 0.5, Process = .10 + .25 + .15 + 0 + .30 = 0.80
    assert wrong["name_f1"] == 1 and wrong["arg_match"] == 0.5 and wrong["parallel"] == 1
    assert wrong["process"] == pytest.approx(0.80) and wrong["success"] == 0
    # no call with gold present: omission guard, everything 0
    assert none["process"] == 0 and none["name_f1"] == 0 and none["summary"] == 0
    assert none["no_call"] == 1 and none["tool_turns"] == 0
    m = summary.metrics
    assert m["name_f1"].mean == pytest.approx(2 / 3)
    assert m["arg_match"].mean == pytest.approx(0.5)
    assert m["process"].mean == pytest.approx(0.6)
    assert m["success"].mean == pytest.approx(1 / 3)
    assert m["no_call"].mean == pytest.approx(1 / 3)
    assert m["tool_turns"].mean == pytest.approx(2 / 3)
    assert m["process"].low <= 0.6 <= m["process"].high
    assert summary.judge == "heuristic" and again.metrics == summary.metrics
    assert 0 <= m["summary"].mean <= 1
    assert read_json(out / "results.json")["n"] == 3
    assert "offline heuristic proxy" in (out / "report.md").read_text()
    assert (out / "metrics.png").read_bytes()[:4] == b"\x89PNG"


def test_failed_endpoint_counts_failures_and_keeps_nothing(test_parquet: Path, tmp_path: Path) -> None:
    with FakeOpenAIServer(_responder, fail_rate=1.0, fail_statuses=(500,)) as server:
        settings = LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)
        summary = run_evaluation(test_parquet, tmp_path / "e", model=settings, cfg=EvalConfig())
    assert summary.n == 0 and summary.failed == 3
    assert not (tmp_path / "e" / SAMPLES_FILE).exists()
    failures = [json.loads(line) for line in (tmp_path / "e" / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 3 and len({f["task_id"] for f in failures}) == 3
    assert all("InternalServerError" in f["error"] or "LLMError" in f["error"] for f in failures), failures


class TestResponder:
    schemas = {
        t.name: {"type": "function", "function": t.model_dump(exclude={"output_schema"})} for t in (ADD, WEATHER)
    }

    def test_stage1_texts(self) -> None:
        assert (
            validate_call(Call("nope", {}), self.schemas) == "Tool 'nope' not found in the current available tools set."
        )
        assert (
            validate_call(Call("calc-add", {"a": 1}), self.schemas)
            == "Tool 'calc-add' missing required parameters: ['b']"
        )
        assert "invalid parameter 'a'" in (validate_call(Call("calc-add", {"a": "x", "b": 1}), self.schemas) or "")
        assert validate_call(Call("calc-add", {"a": 1, "b": 2}), self.schemas) is None

    def test_replay_uses_each_recorded_response_once(self) -> None:
        import asyncio

        gold = [[Call("weather-get", {"city": "Paris"})]]
        ctx = ToolContext(schemas=self.schemas, gold=gold, gold_responses=[["sunny"]])
        responder = make_responder(ResponderMode.REPLAY)
        first = asyncio.run(responder.respond(Call("weather-get", {"city": "paris"}), ctx))
        second = asyncio.run(responder.respond(Call("weather-get", {"city": "Paris"}), ctx))
        assert first == "sunny" and json.loads(second)["result"] == "mock"


def test_bootstrap_is_seeded_and_brackets_the_mean() -> None:
    values = [0.0, 1.0] * 20
    a = bootstrap_ci(values, samples=500, confidence=0.95, seed=3)
    assert a == bootstrap_ci(values, samples=500, confidence=0.95, seed=3)
    assert a.low < 0.5 < a.high and a.mean == 0.5
