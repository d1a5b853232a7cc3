"""Issue 25: what a build reports is what is on disk — A→B→A config toggles, deleted output folders, `gust stage`
with a changed config, and a second build into a locked run folder (real CLI, real Prefect test server)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from gustforge.manifest import check_manifest, read_manifest

pytestmark = [pytest.mark.slow, pytest.mark.prefect]


def _gust(*args: str) -> Any:
    from flows.cli import app

    return CliRunner().invoke(app, list(args))


def _printed_rows(output: str) -> int:
    match = re.search(r"GUST rows: (\d+) in (\S+);", output)
    assert match, output[-2000:]
    assert Path(match.group(2)).is_dir(), f"the summary names {match.group(2)}, which does not exist"
    return int(match.group(1))


def _assert_agree(out: Path, rows: int, max_tasks_per_env: int) -> None:
    """Printed rows, run_summary.json, parquet, card, quality report, verl parquet and config.json agree."""
    frame = pd.concat(pd.read_parquet(p) for p in sorted((out / "gust").rglob("*.parquet")))
    summary = json.loads((out / "run_summary.json").read_text())
    assert len(frame) == rows == summary["gust_rows"]
    card = (out / "gust" / "README.md").read_text()
    assert f"| tasks | {rows} |" in card
    quality = json.loads((out / "reports" / "quality.json").read_text())
    assert quality["dataset"]["tasks"] == summary["stages"]["quality"]["inputs"]
    assert summary["stages"]["quality"]["produced"] == rows
    verl = [pd.read_parquet(p) for p in (out / "verl").glob("*.parquet")]
    assert sum(len(v) for v in verl) == rows
    assert json.loads((out / "config.json").read_text())["verify"]["max_tasks_per_env"] == max_tasks_per_env
    assert frame.groupby("env_id").size().max() <= max_tasks_per_env
    manifest = read_manifest(out)
    assert manifest is not None and manifest.state == "completed" and manifest.gust_rows == rows
    assert check_manifest(out) == []


def test_config_toggles_and_deleted_outputs_leave_summary_card_and_files_in_agreement(
    prefect_server: None, tmp_path: Path
) -> None:
    out = tmp_path / "sA"
    a = _gust("build", "--out", str(out))
    assert a.exit_code == 0, a.output[-3000:]
    rows_a = _printed_rows(a.output)
    _assert_agree(out, rows_a, 10)

    b = _gust("build", "--out", str(out), "--set", "verify.max_tasks_per_env=2")
    assert b.exit_code == 0, b.output[-3000:]
    rows_b = _printed_rows(b.output)
    assert rows_b < rows_a
    _assert_agree(out, rows_b, 2)

    again = _gust("build", "--out", str(out))  # A's export/convert are cached, but B's files are on disk
    assert again.exit_code == 0, again.output[-3000:]
    assert _printed_rows(again.output) == rows_a
    _assert_agree(out, rows_a, 10)

    for folder in ("gust", "verl"):
        for path in sorted((out / folder).rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        (out / folder).rmdir()
    rebuilt = _gust("build", "--out", str(out))
    assert rebuilt.exit_code == 0, rebuilt.output[-3000:]
    assert _printed_rows(rebuilt.output) == rows_a
    _assert_agree(out, rows_a, 10)
    history = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [h["gust_rows"] for h in history] == [rows_a, rows_b, rows_a, rows_a]
    assert len({h["config_digest"] for h in history}) == 2

    # gust stage with a changed config re-runs what depends on it and records the config it ran with
    stage = _gust("stage", "export", "--from", str(out), "--out", str(out), "--set", "export.heldout_fraction=0.5")
    assert stage.exit_code == 0, stage.output[-3000:]
    assert "convert:" in stage.output
    train = pd.read_parquet(out / "verl" / "train.parquet")
    test = pd.read_parquet(out / "verl" / "test.parquet")
    gust_test = pd.concat(pd.read_parquet(p) for p in (out / "gust").rglob("*.parquet") if "test" in p.name)
    assert set(test["extra_info"].map(lambda e: e["task_id"])) == set(gust_test["task_id"])
    assert not set(train["extra_info"].map(lambda e: e["task_id"])) & set(gust_test["task_id"])
    assert json.loads((out / "config.json").read_text())["export"]["heldout_fraction"] == 0.5
    assert check_manifest(out) == []


def test_a_second_build_into_a_locked_folder_is_refused(prefect_server: None, tmp_path: Path) -> None:
    from gustforge.runlock import run_lock

    with run_lock(tmp_path, "build"):
        refused = _gust("build", "--out", str(tmp_path))
    assert refused.exit_code == 1
    assert "is in use by pid" in " ".join(refused.output.split()), refused.output[-2000:]
    assert not (tmp_path / "gust").exists()
