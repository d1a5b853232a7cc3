"""Streaming reader of `.parquet` inputs (Toucan-1.5M and any table whose rows are supported records).

Rows are read one record batch at a time with pyarrow, so a multi-gigabyte corpus never sits in memory. Each row
becomes a JSON object (string columns that hold JSON stay strings; `envgen.ingest` parses them per format).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["iter_parquet_rows", "BATCH_ROWS"]

BATCH_ROWS = 512


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def iter_parquet_rows(path: Path, *, batch_rows: int = BATCH_ROWS) -> Iterator[tuple[str, str, Any, str | None]]:
    """Yield `(record_id, text, value, error)` per row: `row:<n>`, the row as canonical JSON, the row dict.

    A file pyarrow cannot open yields one `("file", name, None, error)` entry instead of raising.
    """
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is one quarantined record
        yield "file", Path(path).name, None, f"unreadable parquet: {type(exc).__name__}: {exc}"
        return
    number = 0
    try:
        for batch in reader.iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                value = _jsonable(row)
                yield f"row:{number}", json.dumps(value, ensure_ascii=False, sort_keys=True), value, None
                number += 1
    except Exception as exc:  # noqa: BLE001 - a corrupt row group ends the file with a quarantined record
        yield f"row:{number}", Path(path).name, None, f"unreadable parquet: {type(exc).__name__}: {exc}"
