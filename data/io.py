"""The edge of the system: JSON / JSONL files, written atomically (temp file + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = [
    "atomic_write_text",
    "atomic_write_bytes",
    "write_json",
    "read_json",
    "write_jsonl",
    "read_jsonl",
    "write_models_jsonl",
    "read_models_jsonl",
    "iter_jsonl_lines",
    "append_jsonl",
    "iter_parquet_rows",
    "write_parquet_rows",
    "FILE_MODE",
    "DIR_MODE",
]

M = TypeVar("M", bound=BaseModel)

FILE_MODE = 0o644  # run folders are shared with other users and containers: never mkstemp's private 0600
DIR_MODE = 0o755


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write to a temp file in the same folder, fsync, rename: a killed run never leaves a half file."""
    path = Path(path)
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def _dumps(value: Any) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def write_json(path: Path, value: Any) -> Path:
    return atomic_write_text(path, _dumps(value) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_jsonl(path: Path, rows: Iterable[Any]) -> Path:
    lines = []
    for row in rows:
        if isinstance(row, BaseModel):
            lines.append(row.model_dump_json())
        else:
            lines.append(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str))
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


def read_jsonl(path: Path) -> Iterator[Any]:
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def write_models_jsonl(path: Path, models: Iterable[BaseModel]) -> Path:
    return write_jsonl(path, models)


def read_models_jsonl(path: Path, model: type[M]) -> list[M]:
    return [model.model_validate(row) for row in read_jsonl(path)]


def iter_jsonl_lines(path: Path) -> Iterator[str]:
    """The non-blank lines of a JSONL file, unparsed (for readers that count and quarantine bad lines)."""
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield line


def append_jsonl(path: Path, row: Any) -> None:
    """Append one JSON line and fsync it (resumable logs: a killed run keeps every completed line)."""
    path = Path(path)
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if isinstance(row, BaseModel):
        line = row.model_dump_json()
    else:
        line = json.dumps(row, sort_keys=True, ensure_ascii=False)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def iter_parquet_rows(path: Path, *, batch_size: int = 1024) -> Iterator[dict[str, Any]]:
    """Stream the rows of a parquet file as Python dicts, one record batch at a time."""
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(Path(path)).iter_batches(batch_size=batch_size):
        yield from batch.to_pylist()


def write_parquet_rows(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write dict rows as one zstd parquet file, atomically; the schema is inferred from the rows."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows)), buffer, compression="zstd")
    return atomic_write_bytes(path, buffer.getvalue())
