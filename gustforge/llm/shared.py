"""One LLM client per build and process, shared by every role and stage shard.

Every stage shard of a build that runs in this process borrows a `view()` of the same client: one connection
pool, one `max_concurrency` semaphore, one cache, one circuit breaker and one token budget, with the shard's own
counters. The registry lives for the process (Prefect runs shards on worker threads that cannot be handed a
client object); `close_shared_clients()` ends it at the end of a build.
"""

from __future__ import annotations

import threading
from pathlib import Path

from gustforge.llm.client import LLMClient, LLMStats
from gustforge.llm.settings import LLMSettings

__all__ = ["shared_client", "close_shared_clients", "shared_usage", "stage_client", "role_usage", "llm_workers"]

_LOCK = threading.Lock()
_CLIENTS: dict[str, LLMClient] = {}  # process-wide on purpose: see the module docstring


def shared_client(settings: LLMSettings) -> LLMClient:
    """The process's client for `settings` (created on first use); callers take `.view()`s and never close it."""
    key = settings.model_dump_json()
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = LLMClient(settings)
        return client


def shared_usage() -> dict[str, LLMStats]:
    """Counters per role over every shared client of this process (what this process actually sent)."""
    with _LOCK:
        clients = list(_CLIENTS.values())
    usage: dict[str, LLMStats] = {}
    for client in clients:
        for role, stats in client.role_stats().items():
            usage[role] = usage.get(role, LLMStats()) + stats
    return dict(sorted(usage.items()))


def close_shared_clients() -> None:
    """Close and forget every shared client (end of a build)."""
    with _LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.close()


def stage_client(settings: LLMSettings, out: Path) -> LLMClient:
    """A per-shard view of the build's one LLM client; replies are cached under `OUT/cache/llm.sqlite` unless a
    cache path is set. Offline settings get a plain client (no loop, no cache)."""
    if settings.backend != "openai":
        return LLMClient(settings.model_copy(update={"cache_path": None}))
    if settings.cache_path is None:
        settings = settings.model_copy(update={"cache_path": Path(out).resolve() / "cache" / "llm.sqlite"})
    return shared_client(settings).view()


def role_usage(client: LLMClient) -> dict[str, dict[str, int]]:
    """The client's counters per role, as plain dicts (what a stage shard reports)."""
    return {role: stats.as_dict() for role, stats in client.role_stats().items()}


def llm_workers(client: LLMClient) -> int:
    """Threads worth running LLM-bound work on: the endpoint's concurrency, or 1 offline."""
    return int(client.settings.max_concurrency) if client.settings.backend == "openai" else 1
