"""The LLM path of the stage functions on real Toucan toolsets: concurrency, accounting, outages, the token budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgen.stage import ingest_inputs, run_envgen
from gustforge.config import BuildConfig, load_config
from gustforge.llm import close_shared_clients
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.twin_responder import TwinResponder

pytestmark = pytest.mark.slow


def _cfg(server: FakeOpenAIServer, out: Path, *extra: str) -> BuildConfig:
    return load_config(None, ["llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model",
                              "llm.max_retries=0", *extra], environ={}, out=out)  # fmt: skip


def _toolsets(corpora_dir: Path, cfg: BuildConfig, n: int) -> list[dict]:
    servers = corpora_dir / "toucan" / "toucan_mcp_servers.remote_valid.jsonl"
    return list(ingest_inputs([servers], cfg).toolsets[:n])


def test_envgen_keeps_the_endpoint_busy_and_accounts_per_role(corpora_dir: Path, tmp_path: Path) -> None:
    with FakeOpenAIServer(TwinResponder(), delay_s=0.5) as server:
        cfg = _cfg(server, tmp_path, "llm.max_concurrency=8")
        items = _toolsets(corpora_dir, cfg, 24)
        result = run_envgen(items, cfg, cfg.out)
        close_shared_clients()
    assert result.report.produced == 24, result.report
    assert server.max_in_flight >= 7  # >= 0.9 x max_concurrency, with only 2 sandbox workers
    assert {role: counts["requests"] for role, counts in result.llm.items()} == {
        "refactor": 24, "plan": 24, "database": 24, "codegen": 24}  # fmt: skip


def test_token_budget_stops_cleanly_and_resumes(corpora_dir: Path, tmp_path: Path) -> None:
    with FakeOpenAIServer(TwinResponder()) as server:
        cfg = _cfg(server, tmp_path, "llm.max_total_tokens=4000", "envgen.sandbox_workers=1",
                   "llm.max_concurrency=1")  # fmt: skip
        items = _toolsets(corpora_dir, cfg, 6)
        stopped = run_envgen(items, cfg, cfg.out)
        close_shared_clients()
        assert 0 < stopped.report.dropped.get("llm_unavailable", 0) and stopped.report.balanced
        assert all("max_total_tokens" in q.detail for q in stopped.quarantine)
        sent = len(server.requests)
        unlimited = _cfg(server, tmp_path, "envgen.sandbox_workers=1", "llm.max_concurrency=1")
        resumed = run_envgen(items, unlimited, cfg.out)
        close_shared_clients()
    assert resumed.report.produced == 6
    cached = sum(counts["cache_hits"] for counts in resumed.llm.values())
    assert cached >= stopped.report.produced * 3 and len(server.requests) > sent
