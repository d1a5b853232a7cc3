"""`gust toucan`: counts on stdout, folders and pretty-printed .json accepted, nothing produced → non-zero exit,
no metrics for n = 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data.io import read_json
from flows.cli import app
from gustforge.llm import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer
from tests.toucan.test_evaluate import _responder, test_parquet  # noqa: F401  (fixture)
from toucan.config import EvalConfig
from toucan.eval_run import run_evaluation

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "samples" / "toucan" / "toucan_sample.jsonl"
runner = CliRunner()


def test_no_metrics_for_n_zero(test_parquet: Path, tmp_path: Path) -> None:  # noqa: F811
    with FakeOpenAIServer(_responder, fail_rate=1.0, fail_statuses=(500,)) as server:
        settings = LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)
        summary = run_evaluation(test_parquet, tmp_path / "e", model=settings, cfg=EvalConfig())
    assert summary.n == 0 and summary.metrics == {}
    report = (tmp_path / "e" / "report.md").read_text()
    assert "No metrics are reported for n = 0" in report and "0.0000" not in report
    assert read_json(tmp_path / "e" / "results.json")["metrics"] == {}
    assert not (tmp_path / "e" / "metrics.png").exists()


def test_eval_against_a_dead_endpoint_fails_before_work(test_parquet: Path, tmp_path: Path) -> None:  # noqa: F811
    result = runner.invoke(app, ["toucan", "eval", "--data", str(test_parquet), "--endpoint", "http://127.0.0.1:9/v1",
                                 "--out", str(tmp_path / "e")])  # fmt: skip
    assert result.exit_code == 2 and "does not answer GET /models" in result.stderr
    assert not (tmp_path / "e").exists()


def test_prepare_rejects_unknown_file_types(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text("a,b\n")
    result = runner.invoke(app, ["toucan", "prepare", "--input", str(tmp_path / "rows.csv"), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "expected .parquet, .jsonl, .json" in result.stderr


@pytest.mark.slow
@pytest.mark.prefect
def test_prepare_reads_a_folder_with_pretty_json_and_prints_counts(prefect_server: None, tmp_path: Path) -> None:
    lines = [line for line in SAMPLE.read_text().splitlines() if line.strip()]
    rows = []
    for line in lines[:40]:
        try:
            rows.append(json.loads(line))
        except ValueError:  # the sample holds a deliberately broken line
            continue
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(rows, indent=2))
    (folder / "b.jsonl").write_text("\n".join(lines[40:]) + "\n")
    result = runner.invoke(app, ["toucan", "prepare", "--input", str(folder), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert f"{len(rows) + len(lines) - 40} rows in" in result.stdout and "outputs: test " in result.stdout


@pytest.mark.slow
@pytest.mark.prefect
def test_prepare_of_garbage_exits_non_zero_with_reasons(prefect_server: None, tmp_path: Path) -> None:
    (tmp_path / "garbage.jsonl").write_text('not json\n{"a": 1}\n')
    result = runner.invoke(app, ["toucan", "prepare", "--input", str(tmp_path / "garbage.jsonl"),
                                 "--out", str(tmp_path / "out")])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "nothing prepared from 2 input rows" in result.stderr
