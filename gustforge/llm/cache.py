"""On-disk SQLite cache of chat completions, keyed by the content hash of the request.

WAL mode lets several processes share one cache file; a lock makes one connection safe across threads.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from gustforge.errors import InputError
from gustforge.hashing import content_hash

__all__ = ["ResponseCache", "cache_key", "cache_entries", "merge_caches"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def cache_key(
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    params: Mapping[str, Any],
) -> str:
    """sha256 of the canonical JSON of `{model, messages, tools, params}`.

    Example:
        >>> a = cache_key(model="m", messages=[{"role": "user", "content": "hi"}], tools=None, params={})
        >>> a == cache_key(model="m", messages=[{"content": "hi", "role": "user"}], tools=None, params={})
        True
    """
    return content_hash({"model": model, "messages": list(messages), "tools": tools, "params": dict(params)})


class ResponseCache:
    """Thread-safe key → JSON object store in one SQLite file.

    Args:
        path: SQLite file; parent folders are created.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored object for `key`, or None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        """Store `value` under `key` (last write wins)."""
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", (key, text))

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _query(source: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql` on a cache file opened read-only; InputError when `source` is not a cache."""
    if not Path(source).is_file():
        raise InputError(f"{source}: no such cache file")
    try:
        conn = sqlite3.connect(f"file:{Path(source).resolve()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InputError(f"{source}: cannot open ({exc})") from exc
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.DatabaseError as exc:  # not SQLite, or SQLite without our table
        raise InputError(f"{source}: not a gust LLM cache ({exc})") from exc
    finally:
        conn.close()


def cache_entries(path: Path) -> int:
    """Entries stored in the cache file `path` (read-only; InputError when it is not a cache)."""
    return int(_query(path, "SELECT COUNT(*) FROM responses")[0][0])


def merge_caches(target: Path, sources: Sequence[Path]) -> int:
    """Copy every entry of the `sources` cache files into `target` (multi-node builds: one local cache per
    worker, merged onto shared storage afterwards, so no SQLite file is ever written over NFS).

    Every source is read before `target` is touched: a bad source (InputError) leaves `target` unchanged.

    Returns:
        Entries copied.
    """
    rows = [row for source in sources for row in _query(source, "SELECT key, value FROM responses")]
    with ResponseCache(target) as merged:
        for key, value in rows:
            merged.put(key, json.loads(value))
    return len(rows)
