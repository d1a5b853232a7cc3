"""Canonical JSON and content hashes: IDs are hashes of content, so reruns produce the same IDs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "sha256_text", "content_hash", "short_hash"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; the basis of every content hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def content_hash(value: Any) -> str:
    """sha256 of the canonical JSON of `value`."""
    return sha256_text(canonical_json(value))


def short_hash(value: Any, length: int = 12) -> str:
    return content_hash(value)[:length]
