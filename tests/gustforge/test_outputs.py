"""Output digests decide whether a cached stage result may be served (issue 25)."""

from __future__ import annotations

from pathlib import Path

from gustforge.outputs import ABSENT, outputs_key, owned_paths, path_digest, record_outputs, stale_outputs


def test_path_digest_tracks_files_folders_and_absence(tmp_path: Path) -> None:
    folder = tmp_path / "gust"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "a.parquet").write_bytes(b"rows-A")
    first = path_digest(folder)
    (folder / ".card.md.123.tmp").write_text("half a write")  # an interrupted atomic write is no output
    assert path_digest(folder) == first
    (folder / "data" / "a.parquet").write_bytes(b"rows-B")
    assert path_digest(folder) != first
    (folder / "data" / "a.parquet").rename(folder / "data" / "b.parquet")  # same bytes, other name
    assert path_digest(folder) not in (first, path_digest(tmp_path / "nothing"))
    assert path_digest(tmp_path / "nothing") == ABSENT


def test_owned_paths_reads_item_keys_and_declared_files() -> None:
    items = [{"env_dir": "envs/a", "graphs": ["tdg/a/0.json", "tdg/a/1.json"]}, {"env_dir": "envs/b"}]
    assert owned_paths(items, item_keys=("env_dir",), files=("gust",)) == ["envs/a", "envs/b", "gust"]
    assert owned_paths(items, item_keys=("graphs",), files=()) == ["tdg/a/0.json", "tdg/a/1.json"]


def test_stale_outputs_names_changed_deleted_and_leftover_paths(tmp_path: Path) -> None:
    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "train.parquet").write_bytes(b"45 rows")
    recorded = record_outputs(tmp_path, ["verl/train.parquet", "verl/test.parquet"])
    assert recorded["verl/test.parquet"] == ABSENT
    assert stale_outputs(tmp_path, recorded, owns_outputs=True) == []
    (tmp_path / "verl" / "test.parquet").write_bytes(b"another build's split")  # a leftover counts too
    (tmp_path / "verl" / "train.parquet").write_bytes(b"24 rows")
    assert stale_outputs(tmp_path, recorded, owns_outputs=True) == ["verl/test.parquet", "verl/train.parquet"]
    assert stale_outputs(tmp_path, None, owns_outputs=True)  # recorded before digests existed: cannot prove it
    assert stale_outputs(tmp_path, None, owns_outputs=False) == []


def test_outputs_key_changes_with_any_recorded_digest() -> None:
    assert outputs_key([{"a": "1"}, None]) == outputs_key([{"a": "1"}])
    assert outputs_key([{"a": "1"}]) != outputs_key([{"a": "2"}])
