"""Stage functions survive a flaky LLM endpoint: bounded retries, every trace accounted for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envgen.stage import ingest_inputs, run_envgen
from gustforge.accounting import check_budget
from gustforge.config import load_config
from gustforge.errors import GustError
from tdg.stage import run_reconstruct, run_sample, run_tasks, run_tdg
from tests.fakes.openai_server import FakeOpenAIServer


def _task_json(request: dict[str, Any]) -> dict[str, Any]:
    prompt = request["messages"][-1]["content"]
    return {"content": json.dumps({"user_query": f"Please do the task ({len(prompt)} chars of context).",
                                   "dialogue_history": [], "reasoning_chain": ["plan", "act"]})}  # fmt: skip


@pytest.fixture(scope="module")
def traces(samples_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("faults")
    inputs = [samples_dir / "raw" / "openai_tools" / "car_rental.json"]
    cfg = load_config(None, [], out=out)
    items: Any = ingest_inputs(inputs, cfg).toolsets
    for run in (run_envgen, run_tdg, run_sample, run_reconstruct):
        items = run(items, cfg, out).items
    assert items and items[0]["traces"]
    return out, list(items)


def test_tasks_stage_completes_against_endpoint_failing_30_percent(traces: tuple[Path, list[dict[str, Any]]]
                                                                  ) -> None:  # fmt: skip
    out, items = traces
    n_traces = sum(len(i["traces"]) for i in items)
    with FakeOpenAIServer(_task_json, fail_rate=0.3, fail_statuses=(500, 503), timeout_rate=0.05, hang_s=3,
                          seed=7) as server:  # fmt: skip
        cfg = load_config(None, [f"llm.base_url={server.base_url}", "llm.model=fake-model", "llm.backend=openai",
                                 "llm.max_retries=8", "llm.timeout_s=1", "llm.backoff_base_s=0.01",
                                 "llm.backoff_max_s=0.05", f"llm.cache_path={out / 'faults.sqlite'}"], out=out)  # fmt: skip
        result = run_tasks(items, cfg, out)
        failed = sum(1 for status in server.statuses if status >= 500)
    assert result.report.balanced and result.report.inputs == n_traces
    assert result.report.produced == n_traces, result.report
    assert failed > 0, "the fake endpoint injected no failure"
    assert len(server.requests) <= n_traces * (1 + 8)


def test_budget_exceeded_names_the_stage(traces: tuple[Path, list[dict[str, Any]]]) -> None:
    out, items = traces
    with FakeOpenAIServer(_task_json, fail_rate=1.0, fail_statuses=(500,), seed=1) as server:
        cfg = load_config(None, [f"llm.base_url={server.base_url}", "llm.model=fake-model", "llm.backend=openai",
                                 "llm.max_retries=1", "llm.backoff_base_s=0.01", "llm.backoff_max_s=0.01",
                                 f"llm.cache_path={out / 'down.sqlite'}"], out=out)  # fmt: skip
        result = run_tasks(items, cfg, out)
    assert result.report.produced == 0 and result.report.balanced
    assert result.report.dropped == {"llm_unavailable": result.report.inputs}
    assert result.retryable == result.report.inputs
    with pytest.raises(GustError, match="tasks.*error budget"):
        check_budget(result.report, 0.5)


def test_a_judge_answering_garbage_quarantines_and_the_next_build_asks_again(samples_dir: Path, tmp_path: Path) -> None:
    """Never an edgeless graph from unusable replies: the environment is quarantined as `malformed_judge_reply`
    (a bad-reply reason, counted against the budget); with a healthy judge the next run re-asks and produces it."""
    inputs = [samples_dir / "raw" / "openai_tools" / "car_rental.json"]
    cfg = load_config(None, [], out=tmp_path)
    envs = run_envgen(ingest_inputs(inputs, cfg).toolsets, cfg, tmp_path).items
    assert envs

    def settings(url: str) -> list[str]:
        return [f"llm.base_url={url}", "llm.model=fake-model", "llm.backend=openai", "tdg.inferer=llm",
                "llm.max_retries=0", "llm.max_repair_rounds=0", f"llm.cache_path={tmp_path / 'judge.sqlite'}"]  # fmt: skip

    with FakeOpenAIServer(lambda request: {"content": "certainly! here is my verdict"}) as garbage:
        bad = run_tdg(envs, load_config(None, settings(garbage.base_url), out=tmp_path), tmp_path)
    assert not bad.items and bad.report.balanced
    assert {q.reason for q in bad.quarantine} == {"malformed_judge_reply"}

    def healthy(request: dict[str, Any]) -> dict[str, Any]:
        return {"content": json.dumps({"edge": False, "type": "none", "confidence": 0.1, "evidence": ""})}

    with FakeOpenAIServer(healthy) as server:
        good = run_tdg(envs, load_config(None, settings(server.base_url), out=tmp_path), tmp_path)
        asked = len(server.requests)
    assert asked > 0, "the judge's unusable replies were cached"
    assert len(good.items) == len(envs) and not good.quarantine
