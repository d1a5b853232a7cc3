"""Run folders are shareable: atomically written files are 0644 and folders 0755 (not mkstemp's 0600/0700), except
the environments folder, which holds untrusted code and data: owner and group only."""

from __future__ import annotations

import os
from pathlib import Path

from data.io import append_jsonl, write_json, write_parquet_rows


def test_written_files_are_world_readable(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        paths = [
            write_json(tmp_path / "a" / "x.json", {"a": 1}),
            write_parquet_rows(tmp_path / "p.parquet", [{"a": 1}]),
        ]
        append_jsonl(tmp_path / "b" / "log.jsonl", {"a": 1})
        paths.append(tmp_path / "b" / "log.jsonl")
    finally:
        os.umask(previous)
    assert [p.stat().st_mode & 0o777 for p in paths] == [0o644] * 3
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o755


def test_environment_folders_are_not_world_readable(tmp_path: Path) -> None:
    from data.envs import read_env_dir, write_env_dir

    tiny = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"
    folder = write_env_dir(tmp_path / "envs", read_env_dir(tiny))
    assert folder.stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "envs").stat().st_mode & 0o777 == 0o750
    assert read_env_dir(folder).tools_source == read_env_dir(tiny).tools_source
