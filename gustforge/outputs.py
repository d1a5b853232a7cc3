"""Content digests of the files a stage wrote, so a stage-cache hit is served only when its outputs are on disk.

A cached shard result describes files (environments, graphs, the GUST folder, the verl parquet, the quality
report). Another build into the same run folder (a different config), a `gust quality` or an `rm -rf` can change
or remove them while the cache still holds the old result. Each shard result therefore records the sha256 of every
file or folder it owns (`record_outputs`), and the flow re-runs a shard whose recorded outputs no longer match the
disk (`stale_outputs`) instead of reporting outputs it did not write.

Which outputs a stage owns is declared in the stage table (`tasks.stage_table.StageSpec.outputs`): item keys that
hold paths (`env_dir`, `graphs`) and run-folder paths (`gust`, `reports/quality.json`). A declared path that does
not exist is recorded as absent, so a leftover file from another build is noticed too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gustforge.hashing import content_hash

__all__ = ["ABSENT", "path_digest", "owned_paths", "record_outputs", "stale_outputs", "outputs_key"]

ABSENT = "absent"
_CHUNK = 1 << 20


def _file_digest(path: Path, digest: Any) -> None:
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)


def path_digest(path: Path) -> str:
    """sha256 of a file's bytes, or of a folder's relative file names and bytes (sorted); `ABSENT` if missing.

    Temp files of an interrupted atomic write (`.NAME.*.tmp`) are not outputs and are skipped.
    """
    path = Path(path)
    if path.is_file():
        digest = hashlib.sha256(b"file\0")
        _file_digest(path, digest)
        return digest.hexdigest()
    if not path.is_dir():
        return ABSENT
    digest = hashlib.sha256(b"tree\0")
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not _is_temp(p)):
        digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        _file_digest(file, digest)
        digest.update(b"\0")
    return digest.hexdigest()


def _is_temp(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(".tmp")


def owned_paths(items: Iterable[Mapping[str, Any]], *, item_keys: Sequence[str], files: Sequence[str]) -> list[str]:
    """Run-folder-relative (or absolute) paths a stage's result owns: item path values plus declared files."""
    paths: set[str] = set(files)
    for item in items:
        for key in item_keys:
            value = item.get(key)
            if isinstance(value, str):
                paths.add(value)
            elif isinstance(value, list):
                paths.update(v for v in value if isinstance(v, str))
    return sorted(paths)


def _resolve(out: Path, path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else Path(out) / candidate


def record_outputs(out: Path, paths: Iterable[str]) -> dict[str, str]:
    """{path: digest} of each owned path as it is on disk now (right after the stage wrote it)."""
    return {path: path_digest(_resolve(out, path)) for path in sorted(set(paths))}


def stale_outputs(out: Path, recorded: Mapping[str, str] | None, *, owns_outputs: bool) -> list[str]:
    """Owned paths whose content on disk differs from what the (possibly cached) result recorded.

    A result that recorded nothing (`None`: written before digests existed) is stale whenever its stage owns
    outputs: it cannot prove its files are on disk.
    """
    if recorded is None:
        return ["<no output digests recorded>"] if owns_outputs else []
    return [path for path, digest in sorted(recorded.items()) if path_digest(_resolve(out, path)) != digest]


def outputs_key(recorded: Iterable[Mapping[str, str] | None]) -> str:
    """One hash of several results' recorded outputs: keys a later stage's cache on the files it reads."""
    merged: dict[str, str] = {}
    for outputs in recorded:
        merged.update(outputs or {})
    return content_hash(merged)
