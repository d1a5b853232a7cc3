"""A whole `gust build` with every LLM role served over HTTP by a local OpenAI-compatible endpoint.

The endpoint (`FakeOpenAIServer` + `TwinResponder`) answers refactor, database, codegen, judge, writer and teacher
with `<think>` drafts left in the content; settings come from `GUST_LLM_*` variables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from prefect.settings import PREFECT_TASKS_REFRESH_CACHE, temporary_settings

from flows.build import run_build
from gustforge.config import BuildConfig, load_config
from gustforge.errors import BudgetExceededError
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.twin_responder import TwinResponder

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

ROLES = {"refactor", "plan", "database", "codegen", "tdg_judge", "task_writer", "teacher"}


def _cfg(server: FakeOpenAIServer, out: Path) -> BuildConfig:
    env = {"GUST_LLM_BACKEND": "openai", "GUST_LLM_BASE_URL": server.base_url, "GUST_LLM_MODEL": "fake-model",
           "GUST_LLM_MAX_RETRIES": "1", "GUST_LLM_BACKOFF_BASE_S": "0.01", "GUST_LLM_BACKOFF_MAX_S": "0.02"}  # fmt: skip
    return load_config(None, ["verify.teacher.k=1", "verify.teacher.max_retries=0"], environ=env, out=out)


def _rows(out: Path) -> pd.DataFrame:
    return pd.concat(pd.read_parquet(p) for p in sorted((out / "gust").rglob("*.parquet")))


def test_every_role_on_a_local_endpoint(prefect_server: None, tmp_path: Path) -> None:
    twin = TwinResponder(think=True)
    with FakeOpenAIServer(twin) as server:
        cfg = _cfg(server, tmp_path / "run")
        assert (cfg.envgen.backend, cfg.tdg.inferer, cfg.verify.teacher.base_url) == ("openai", "llm", server.base_url)
        summary = run_build(cfg)
        assert set(twin.calls) == ROLES, twin.calls  # every role went over HTTP
        assert summary.gust_rows > 0 and summary.problems == () and summary.teacher == "ran"
        assert set(_rows(cfg.out)["teacher_status"]) == {"passed"}
        usage = json.loads((cfg.out / "run_summary.json").read_text())["llm"]
        for role in ROLES - {"teacher"}:  # the teacher talks through LangChain, counted by the endpoint only
            assert usage[role]["requests"] == twin.calls[role] and usage[role]["completion_tokens"] > 0, role
        sent = len(server.requests)

        # unchanged rebuild with the stage cache ignored: every stage recomputes, every reply comes from the cache
        with temporary_settings(updates={PREFECT_TASKS_REFRESH_CACHE: True}):
            again = run_build(cfg)
        new = server.requests[sent:]
        assert all(r.get("tools") for r in new), "a cached role was asked again"  # only the uncached teacher
        assert again.gust_rows == summary.gust_rows
        assert all(u["requests"] == 0 for u in json.loads((cfg.out / "run_summary.json").read_text())["llm"].values())


def test_endpoint_down_then_up_loses_nothing(prefect_server: None, samples_dir: Path, tmp_path: Path) -> None:
    from flows.build import run_stage

    twin = TwinResponder()
    with FakeOpenAIServer(twin, fail_rate=1.0, fail_statuses=(503,)) as server:
        cfg = _cfg(server, tmp_path / "run")
        with pytest.raises(BudgetExceededError, match="llm_unavailable="):
            run_stage("envgen", samples_dir / "raw", cfg, only=True)  # loud: the stage lost everything to the outage
        report = json.loads((cfg.out / "reports" / "envgen.jsonl").read_text().splitlines()[-1])["summary"]
        assert report["produced"] == 0 and set(report["dropped"]) == {"llm_unavailable"}
        down = len(server.requests)
        assert down > 0
        server.fail_rate = 0.0  # the endpoint comes back: the next run asks it again and loses nothing
        result = run_stage("envgen", samples_dir / "raw", cfg, only=True).stages["envgen"]
    assert len(server.requests) > down and twin.calls["refactor"] == report["inputs"]
    assert result.dropped == {} and result.produced == report["inputs"]


def test_cli_build_of_nothing_exits_non_zero_naming_why(prefect_server: None, tmp_path: Path) -> None:
    import os

    from typer.testing import CliRunner

    from flows.cli import app

    empty = tmp_path / "empty"
    empty.mkdir()
    saved = dict(os.environ)
    try:
        result = CliRunner().invoke(app, ["build", "--input", str(empty), "--out", str(tmp_path / "out")])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "0 GUST row(s), fewer than min_rows=1" in text
    assert json.loads((tmp_path / "out" / "run_summary.json").read_text())["problems"]
