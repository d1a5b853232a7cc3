"""`gust runs`: a run folder's builds with state, config digest and rows, from its own records (issue 25)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from data.models import StageReport
from flows.cli import app
from flows.runs import recent_runs
from gustforge.config import BuildConfig
from gustforge.manifest import config_digest, read_manifest, run_record
from gustforge.run_summary import RunSummary


def _summary(out: Path, rows: int) -> RunSummary:
    report = StageReport(stage="export", inputs=rows, produced=rows)
    return RunSummary(out=str(out), stages={"export": report}, seconds={}, gust_rows=rows, gust_dir="gust",
                      teacher="not run")  # fmt: skip


def test_runs_lists_completed_failed_and_killed_builds_newest_first(tmp_path: Path) -> None:
    a, b = BuildConfig(out=tmp_path), BuildConfig(out=tmp_path, seed=7)
    with run_record(tmp_path, a, command="build") as run:
        run.finish(_summary(tmp_path, 45))
    try:
        with run_record(tmp_path, b, command="build"):
            raise RuntimeError("stage 'tasks' failed on 100% of 12 inputs")
    except RuntimeError:
        pass
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = read_manifest(tmp_path)
    assert left is not None
    running = left.model_copy(update={"run_id": "k", "state": "running", "pid": int(dead.stdout), "error": None,
                                      "started_at": left.started_at + 1})  # fmt: skip
    (tmp_path / "manifest.json").write_text(running.model_dump_json())  # a SIGKILLed build's record
    rows = recent_runs(tmp_path)
    assert [r["state"] for r in rows] == ["killed", "failed", "completed"]
    assert rows[2]["rows"] == 45 and rows[2]["config"] == config_digest(a) != rows[1]["config"]
    assert "100% of 12 inputs" in rows[1]["note"]
    listed = CliRunner().invoke(app, ["runs", "--out", str(tmp_path), "--json"])
    assert listed.exit_code == 0 and [json.loads(x)["state"] for x in listed.stdout.splitlines()] == [
        "killed", "failed", "completed"]  # fmt: skip
    table = CliRunner().invoke(app, ["runs", "--out", str(tmp_path)])
    assert table.stdout.splitlines()[0].split("\t")[:5] == ["started", "state", "command", "config", "rows"]


def test_runs_of_a_missing_folder_is_a_message(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["runs", "--out", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "not a run folder" in result.output
