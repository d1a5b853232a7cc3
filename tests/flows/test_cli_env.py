"""`gust env run` through typer's CliRunner on the tiny orders env."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from flows.cli_env import app

TINY = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"
runner = CliRunner()


def _run(*argv: str):
    return runner.invoke(app, ["run", *argv, "--cpu-seconds", "1", "--memory-mb", "256", "--wall-seconds", "4"])


def test_run_prints_tool_output() -> None:
    result = _run(str(TINY), "list_orders", "--args", '{"customer_id": "C-1"}')
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "success" and out["count"] == 2


def test_bad_arguments_are_structured_with_exit_0() -> None:
    for args in ('{"order_id": 7}', "not json", "[1, 2]"):
        result = _run(str(TINY), "get_order", "--args", args)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["status"] == "error" and out["message"].startswith("invalid arguments"), out


def test_unknown_tool_and_tool_error_exit_0() -> None:
    assert json.loads(_run(str(TINY), "nope").stdout)["message"].startswith("unknown tool")
    out = json.loads(_run(str(TINY), "get_order", "--args", '{"order_id": "X"}').stdout)
    assert out == {"status": "error", "message": "order X not found"}


def test_missing_env_exits_2(tmp_path: Path) -> None:
    result = _run(str(tmp_path / "nope"), "get_order")
    assert result.exit_code == 2
    assert "environment folder not found" in result.stderr


def test_rejected_tools_module_exits_2(tmp_path: Path) -> None:
    shutil.copytree(TINY, tmp_path / "env")
    (tmp_path / "env" / "tools.py").write_text("import os\n")
    result = _run(str(tmp_path / "env"), "get_order", "--args", '{"order_id": "ORD-1001"}')
    assert result.exit_code == 2 and "SandboxViolation" in result.stderr


def test_sandbox_fault_exits_3(tmp_path: Path) -> None:
    shutil.copytree(TINY, tmp_path / "env")
    tools = tmp_path / "env" / "tools.py"
    tools.write_text(tools.read_text() + "\n\ndef get_order(db, order_id):\n    x = 'a' * 10**10\n")
    result = _run(str(tmp_path / "env"), "get_order", "--args", '{"order_id": "ORD-1001"}')
    assert result.exit_code == 3 and "SandboxMemoryError" in result.stderr
