"""LLM access: one client for any OpenAI-compatible endpoint, and roles that run offline or against it.

Example:
    >>> role = LLMRole("name", "Name a colour.", "Seed: {seed}", {"type": "object"}, lambda i: {"c": "red"})
    >>> run_role(role, {"seed": 1}, LLMClient(LLMSettings()))
    {'c': 'red'}
"""

from gustforge.llm.cache import ResponseCache, cache_key
from gustforge.llm.client import ChatResult, LLMClient, LLMStats, LLMUsage, is_transient
from gustforge.llm.json_repair import repair_json
from gustforge.llm.roles import (
    ROLE_BACKENDS,
    LLMRole,
    RoleBackend,
    render_messages,
    run_role,
    run_role_async,
    validate_output,
)
from gustforge.llm.settings import LLMSettings, RoleOptions
from gustforge.llm.shared import close_shared_clients, shared_client, shared_usage

__all__ = [
    "LLMSettings",
    "RoleOptions",
    "LLMUsage",
    "shared_client",
    "shared_usage",
    "close_shared_clients",
    "LLMClient",
    "ChatResult",
    "LLMStats",
    "LLMRole",
    "RoleBackend",
    "ROLE_BACKENDS",
    "run_role",
    "run_role_async",
    "render_messages",
    "validate_output",
    "repair_json",
    "ResponseCache",
    "cache_key",
    "is_transient",
]
