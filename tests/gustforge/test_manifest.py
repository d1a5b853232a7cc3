"""`OUT/manifest.json` is written last and says whether summary, card and files still agree (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data.models import StageReport
from gustforge.config import BuildConfig
from gustforge.manifest import check_manifest, config_digest, read_history, read_manifest, run_record
from gustforge.run_summary import RunSummary


def _summary(out: Path, rows: int, problems: tuple[str, ...] = ()) -> RunSummary:
    report = StageReport(stage="export", inputs=rows, produced=rows)
    return RunSummary(out=str(out), stages={"export": report}, seconds={}, gust_rows=rows, gust_dir="gust",
                      teacher="not run", problems=problems)  # fmt: skip


def test_completed_run_records_rows_config_and_file_digests(tmp_path: Path) -> None:
    cfg = BuildConfig(out=tmp_path)
    (tmp_path / "gust").mkdir()
    (tmp_path / "gust" / "README.md").write_text("45 rows")
    with run_record(tmp_path, cfg, command="build") as run:
        assert read_manifest(tmp_path).state == "running"  # type: ignore[union-attr]
        run.finish(_summary(tmp_path, 45))
    manifest = read_manifest(tmp_path)
    assert manifest is not None and manifest.state == "completed" and manifest.gust_rows == 45
    assert manifest.config_digest == config_digest(cfg) and check_manifest(tmp_path) == []
    (tmp_path / "gust" / "README.md").write_text("24 rows")  # someone else's build changed the card
    assert check_manifest(tmp_path) == ["gust"]
    assert [r.state for r in read_history(tmp_path)] == ["completed"]


def test_failed_and_problem_runs_are_recorded_as_failed(tmp_path: Path) -> None:
    cfg = BuildConfig(out=tmp_path)
    with pytest.raises(RuntimeError), run_record(tmp_path, cfg, command="build"):
        raise RuntimeError("stage 'verify' over budget")
    with run_record(tmp_path, cfg, command="build") as run:
        run.finish(_summary(tmp_path, 0, ("the build produced 0 GUST row(s)",)))
    history = read_history(tmp_path)
    assert [(r.state, r.error) for r in history] == [("failed", "RuntimeError: stage 'verify' over budget"),
                                                     ("failed", None)]  # fmt: skip
    assert history[1].problems and history[1].gust_rows == 0


def test_config_digest_ignores_the_run_folder_only(tmp_path: Path) -> None:
    assert config_digest(BuildConfig(out=tmp_path / "a")) == config_digest(BuildConfig(out=tmp_path / "b"))
    assert config_digest(BuildConfig(seed=1)) != config_digest(BuildConfig(seed=2))


def test_a_record_left_running_is_kept_as_killed_by_the_next_run(tmp_path: Path) -> None:
    cfg = BuildConfig(out=tmp_path)
    with pytest.raises(KeyboardInterrupt), run_record(tmp_path, cfg, command="build"):
        raise KeyboardInterrupt
    left = read_manifest(tmp_path)
    assert left is not None and left.state == "interrupted"
    running = left.model_copy(update={"state": "running", "run_id": "killed-one", "finished_at": None})
    (tmp_path / "manifest.json").write_text(running.model_dump_json())  # what a SIGKILLed run leaves behind
    with run_record(tmp_path, cfg, command="build") as run:
        run.finish(_summary(tmp_path, 3))
    assert [(r.run_id == "killed-one", r.state) for r in read_history(tmp_path)] == [
        (False, "interrupted"), (True, "killed"), (False, "completed")]  # fmt: skip
