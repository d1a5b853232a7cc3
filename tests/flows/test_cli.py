"""`gust` as a user meets it: messages instead of tracebacks, pre-flight in seconds, results on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app, reason_text
from gustforge import preflight
from tests.fakes.openai_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
TINY_ENV = REPO / "tests" / "envgen" / "fixtures" / "tiny_env"
runner = CliRunner()


def _gust(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in a subprocess (stdout and stderr apart, not a terminal)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "flows.cli", *argv], capture_output=True, text=True, env=full_env,
                          cwd=cwd, timeout=120)  # fmt: skip


def test_version_and_help_without_bool_metavars() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("gust ")
    for command in (["build", "--help"], ["export", "--help"], ["deploy", "--help"], ["env", "run", "--help"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 0 and "<bool>" not in result.stdout, command


def test_reason_text_is_plain() -> None:
    assert reason_text({"b": 1, "a": 3, "c": 1}) == "a=3, b=1, c=1"
    assert reason_text({"b": 1, "a": 3, "c": 1}, 1) == "a=3, +2 more"
    assert reason_text({}) == "-"


def test_out_pointing_at_a_file_is_a_message(tmp_path: Path) -> None:
    file = tmp_path / "taken"
    file.write_text("x")
    for command in (["build", "--out", str(file)], ["stage", "envgen", "--from", str(REPO / "data/samples/raw"),
                                                     "--out", str(file)]):  # fmt: skip
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and "is a file, not a folder" in result.stderr, result.output


def test_stage_checks_from_before_prefect(tmp_path: Path) -> None:
    home = tmp_path / "prefect-home"
    proc = _gust("stage", "verify", "--from", str(tmp_path), "--out", str(tmp_path / "o"),
                 env={"PREFECT_HOME": str(home)})  # fmt: skip
    assert proc.returncode == 2 and "needs" in proc.stderr and "work/tasks.jsonl" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()
    assert not home.exists()  # no Prefect server was started (it would have created its home and log)
    assert runner.invoke(app, ["stage", "nope", "--from", str(tmp_path)]).exit_code == 2


def test_dead_endpoint_fails_preflight_before_any_work(tmp_path: Path) -> None:
    result = runner.invoke(app, ["build", "--out", str(tmp_path / "o"), "--backend", "openai",
                                 "--set", "llm.base_url=http://127.0.0.1:9/v1"])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "does not answer GET /models" in result.stderr and "--backend offline" in result.stderr
    assert not (tmp_path / "o").exists()  # refused before the run folder, the server or any stage
    result = runner.invoke(app, ["build", "--out", str(tmp_path / "o"), "--teacher-url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 2 and "teacher endpoint" in result.stderr


def test_endpoint_model_check_against_a_real_server() -> None:
    with FakeOpenAIServer(model="served-model") as server:
        assert preflight.check_endpoint(server.base_url, "served-model") is None
        assert preflight.check_endpoint(server.base_url, None) is None
        problem = preflight.check_endpoint(server.base_url, "other-model")
    assert problem is not None and "does not serve model 'other-model'" in problem.line()
    assert "served-model" in problem.line()


def test_missing_extra_is_one_line_with_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(preflight.EXTRA_MODULES, "ray", ("surely_not_installed_module",))
    result = runner.invoke(app, ["build", "--runner", "ray", "--out", "unused-out"])
    assert result.exit_code == 2
    assert "pip install 'gustforge[ray]'" in result.stderr  # Rich markup did not swallow [ray]
    assert result.stderr.count("\n") == 1


def test_export_hub_without_token_is_a_message(tmp_path: Path) -> None:
    gust = tmp_path / "gust"
    gust.mkdir()
    (gust / "README.md").write_text("card")
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "export", "--from", str(gust), "--hub", "me/x"],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO)}, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "HF_TOKEN is not set" in proc.stderr and "Traceback" not in proc.stderr


def test_deploy_refuses_on_an_ephemeral_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "deploy", "--cron", "0 3 * * *", "--out",
                           str(tmp_path / "o")], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "ph")}, timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "prefect server start" in proc.stderr and "prefect worker start --pool" in proc.stderr
    assert "serving deployment" not in proc.stderr + proc.stdout


@pytest.mark.slow
@pytest.mark.prefect
def test_bad_cron_is_a_message(prefect_server: None, tmp_path: Path) -> None:
    result = runner.invoke(app, ["deploy", "--cron", "every night", "--register", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "not a valid cron string" in result.stderr, result.output


def test_env_tools_and_memory_limit() -> None:
    result = runner.invoke(app, ["env", "tools", str(TINY_ENV)])
    assert result.exit_code == 0 and "get_order(order_id: string)  [read]" in result.stdout
    result = runner.invoke(app, ["env", "tools", str(TINY_ENV), "--json"])
    assert [t["function"]["name"] for t in json.loads(result.stdout)][0] == "get_order"
    result = runner.invoke(app, ["env", "run", str(TINY_ENV), "list_orders", "--memory-mb", "1"])
    assert result.exit_code == 2 and "--memory-mb" in result.output and "Traceback" not in result.output


@pytest.mark.slow
@pytest.mark.prefect
def test_piped_stage_output_is_not_wrapped(tmp_path: Path) -> None:
    out = tmp_path / ("a-long-folder-name-" * 4)
    proc = _gust("stage", "envgen", "--only", "--from", str(REPO / "data/samples/raw"), "--out", str(out),
                 env={"PREFECT_HOME": str(tmp_path / "ph")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ingest: 18 inputs, 12 toolsets, 6 quarantined at ingest (")
    assert "non_object_parameters=1" in lines[0] and "{" not in lines[0]
    assert lines[1].startswith("envgen: 12 inputs, 12 produced") and lines[1].endswith("envgen.jsonl")
    assert len(lines) == 2


def test_stage_direct_mode_runs_without_prefect(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _gust("stage", "envgen", "--only", "--from", str(REPO / "data/samples/raw"), "--out", str(out), "--direct",
                 env={"PREFECT_HOME": str(tmp_path / "ph")})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ingest: 18 inputs, 12 toolsets, 6 quarantined at ingest (") and "{" not in lines[0]
    assert lines[1].startswith("envgen: 12 inputs, 12 produced")
    assert len(list((out / "envs").glob("*/manifest.json"))) == 12 and (out / "work" / "envgen.jsonl").is_file()
    assert not (tmp_path / "ph").exists()  # Prefect never started
    assert (out / "quarantine.jsonl").stat().st_mode & 0o777 == 0o644


def test_overriding_the_paper_filter_is_noted(tmp_path: Path) -> None:
    source = str(REPO / "data/samples/raw")
    default = _gust("stage", "envgen", "--only", "--from", source, "--out", str(tmp_path / "a"), "--direct")
    assert default.returncode == 0, default.stderr[-2000:]
    assert "differs from the paper's" not in default.stderr
    widened = _gust("stage", "envgen", "--only", "--from", source, "--out", str(tmp_path / "b"), "--direct",
                    "--set", "envgen.min_tools=2")  # fmt: skip
    assert widened.returncode == 0, widened.stderr[-2000:]
    assert "note: envgen filter (min_tools=2, max_tools=20, max_params=4) differs from the paper's" in widened.stderr


def test_train_without_its_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(preflight.EXTRA_MODULES, "train", ("surely_not_installed_module",))
    result = runner.invoke(app, ["train", "--algo", "slca", "--dry-run"])
    assert result.exit_code == 2 and "pip install 'gustforge[train]'" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_garbage_input_fails_with_the_reason_and_no_traceback(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.json"
    garbage.write_text("garbage{{")
    proc = _gust("build", "--input", str(garbage), "--out", str(tmp_path / "out"),
                 env={"PREFECT_HOME": str(tmp_path / "ph")})  # fmt: skip
    assert proc.returncode == 1
    assert "stage 'ingest' failed on 100% of 1 inputs" in proc.stderr and "malformed_json=1" in proc.stderr
    # a single stage that produces nothing fails too, naming what ingest rejected
    stage = _gust("stage", "envgen", "--only", "--from", str(garbage), "--out", str(tmp_path / "s"), "--direct")
    assert stage.returncode == 1 and "malformed_json=1" in stage.stdout + stage.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = _gust("stage", "envgen", "--only", "--from", str(empty), "--out", str(tmp_path / "e"), "--direct")
    assert nothing.returncode == 1 and "produced nothing (no input items)" in nothing.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_the_printed_training_step_uses_tara_for_gust_rows(tmp_path: Path) -> None:
    from flows.cli import _next_commands

    env = tmp_path / "envs" / "shop-1"
    env.mkdir(parents=True)
    (env / "manifest.json").write_text("{}")
    (env / "schemas.json").write_text('[{"name": "list_items", "parameters": {"type": "object"}}]')
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "train.parquet").write_bytes(b"")
    train = [line for line in _next_commands(tmp_path) if line.startswith("gust train")]
    # slca's paper caps (6 tool turns) refuse GUST rows with longer golds; tara's caps fit them
    assert len(train) == 1 and "--algo tara" in train[0] and "--dry-run" in train[0]


def test_rehearsal_rows_are_capped_by_default_and_say_so() -> None:
    from flows.cli_train import DEFAULT_REHEARSE_ROWS, rehearsal_rows

    assert rehearsal_rows(None, 5) == (None, "rehearsing all 5 rows")
    rows, line = rehearsal_rows(None, 758)
    assert rows == DEFAULT_REHEARSE_ROWS and "758" in line and "--rehearse-rows" in line
    assert rehearsal_rows(0, 758)[0] is None and rehearsal_rows(100, 758)[0] == 100
    assert rehearsal_rows(100, 40)[0] == 40
