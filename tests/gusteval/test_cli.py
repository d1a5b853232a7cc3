"""`gust eval gust` through typer's CliRunner and the Prefect flow (slow: starts a Prefect test server)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app
from gusteval.replay import ReplayServer, load_policy
from tests.fakes.openai_server import FakeOpenAIServer
from tests.gusteval._tasks import dependent_task, tiny_records, write_export

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


def test_gust_eval_cli_reports_pass_k_and_fails_loudly(harness, tmp_path):
    gust_dir, verl_file = write_export(tmp_path / "run", [*tiny_records(), dependent_task()])
    with ReplayServer(load_policy(gust_dir)) as server:
        done = CliRunner().invoke(app, ["eval", "gust", "--data", str(verl_file), "--endpoint", server.base_url,
                                        "--trials", "2", "--out", str(tmp_path / "ok")])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "| 2 | 1.0000 |" in done.output
    assert json.loads((tmp_path / "ok" / "results.json").read_text())["pass_k"]["2"]["mean"] == 1.0
    with FakeOpenAIServer(fail_rate=1.0, fail_statuses=(400,)) as server:
        lost = CliRunner().invoke(app, ["eval", "gust", "--data", str(gust_dir), "--endpoint", server.base_url,
                                        "--trials", "1", "--out", str(tmp_path / "lost")])  # fmt: skip
    assert lost.exit_code == 1 and "3 trials lost" in lost.output
    bad = CliRunner().invoke(app, ["eval", "gust", "--data", str(gust_dir), "--endpoint", "http://127.0.0.1:9/v1",
                                   "--user", "llm"])  # fmt: skip
    assert bad.exit_code == 2 and "--user-endpoint" in bad.output
