"""LLM backend settings: one frozen model shared by every role and by the chat client."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LLMSettings", "RoleOptions", "Backend", "DEFAULT_ROLE_OPTIONS", "ENV_PREFIX"]

Backend = Literal["offline", "openai"]

ENV_PREFIX = "GUST_LLM_"


class RoleOptions(BaseModel):
    """Request options of one role (`llm.roles.<role>`); unset fields fall back to the client-wide settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int | None = Field(None, ge=1, description="Completion token cap of one request.")
    timeout_s: float | None = Field(None, gt=0, description="Per-request timeout (code generation needs minutes).")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature of this role.")
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="Sent as `chat_template_kwargs` (vLLM/SGLang), e.g. {enable_thinking: false}."
    )

    priority: int | None = Field(
        None, description="Lower goes first when requests wait for a slot (FIFO within one priority)."
    )

    def merged(self, other: RoleOptions | None) -> RoleOptions:
        """These options with `other`'s set fields winning."""
        if other is None:
            return self
        return self.model_copy(update=other.model_dump(exclude_none=True))


# Generous caps: reasoning models spend tokens on `<think>` before the answer; a whole tools module takes minutes.
# Envgen's priorities put the phase with the longest chain of requests still ahead first (refactor → database →
# codegen): every toolset's chain starts early and the last round of requests is all code generation. Measured on
# bench/llm_throughput.py (48 toolsets, 1 s, 16 slots): 1.26-1.28x ideal against 1.35-1.40x with codegen first, whose
# last toolsets' refactors waited until the end and trailed three sequential requests behind everything else.
DEFAULT_ROLE_OPTIONS: dict[str, RoleOptions] = {
    "refactor": RoleOptions(max_tokens=16384, timeout_s=300.0, priority=-3),
    "plan": RoleOptions(max_tokens=8192, timeout_s=180.0, priority=-3),  # right after refactor, same chain ahead
    "database": RoleOptions(max_tokens=16384, timeout_s=300.0, priority=-2),
    "codegen": RoleOptions(max_tokens=32768, timeout_s=600.0, priority=-1),
    "tdg_judge": RoleOptions(max_tokens=4096, timeout_s=120.0),
    "task_writer": RoleOptions(max_tokens=8192, timeout_s=180.0),
}


class LLMSettings(BaseModel):
    """How roles reach a model: `offline` (deterministic Python) or any OpenAI-compatible endpoint.

    The API key itself is never stored here; only the name of the environment variable holding it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field("offline", description="offline: role.offline(inputs); openai: HTTP endpoint.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL ending in /v1; None = api.openai.com.")
    model: str | None = Field(None, description="Model name; None = first model listed by GET /models.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight per client (independent of sandboxes).")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds (roles may override).")
    max_retries: int = Field(4, ge=0, description="Retries of transient failures (429, 5xx, timeout, connection).")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature sent with every request.")
    cache_path: Path | None = Field(None, description="SQLite response cache file; None disables caching.")
    max_repair_rounds: int = Field(1, ge=0, description="Re-asks with the validation error when JSON is invalid.")
    backoff_base_s: float = Field(0.5, ge=0, description="First retry delay before jitter; doubles per retry.")
    backoff_max_s: float = Field(30.0, ge=0, description="Upper bound of one retry delay.")
    retry_seed: int = Field(0, description="Seed of the per-client jitter RNG.")
    roles: dict[str, RoleOptions] = Field(
        default_factory=dict,
        description="Per-role options (max_tokens, timeout_s, temperature, chat_template_kwargs) over the defaults.",
    )
    refresh_roles: tuple[str, ...] = Field(
        (), description="Roles whose cached replies are ignored and re-drawn (`--refresh-llm ROLE`)."
    )
    max_total_tokens: int | None = Field(
        None, ge=1, description="Stop sending requests once this many tokens were used (items end llm_unavailable)."
    )
    breaker_threshold: int = Field(
        8, ge=1, description="Consecutive calls failing after all retries that open the circuit breaker."
    )
    breaker_cooldown_s: float = Field(
        30.0, ge=0, description="While open, calls fail at once (llm_unavailable) for this long, then one probes."
    )

    def role_options(self, role: str) -> RoleOptions:
        """The effective options of `role`: built-in defaults, then `roles[role]`."""
        return DEFAULT_ROLE_OPTIONS.get(role, RoleOptions()).merged(self.roles.get(role))

    def resolve_api_key(self) -> str:
        """The API key from `api_key_env`, or "EMPTY" (what vLLM/SGLang accept) when the variable is unset."""
        return os.environ.get(self.api_key_env) or "EMPTY"

    @classmethod
    def env_values(cls, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The `GUST_LLM_<FIELD>` variables as raw field values (JSON for `roles` / `refresh_roles`)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None or raw == "":
                continue
            if name == "refresh_roles" and not raw.lstrip().startswith("["):
                values[name] = [part.strip() for part in raw.split(",") if part.strip()]
            elif name in ("roles", "refresh_roles"):
                values[name] = json.loads(raw)
            else:
                values[name] = raw
        return values

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMSettings:
        """Build settings from `GUST_LLM_<FIELD>` variables (e.g. `GUST_LLM_BASE_URL`), then `overrides`.

        Args:
            environ: Mapping to read instead of `os.environ` (tests).
            **overrides: Field values that win over the environment.

        Returns:
            The validated settings.

        Example:
            >>> LLMSettings.from_env({"GUST_LLM_BACKEND": "openai", "GUST_LLM_MODEL": "m"}).model
            'm'
        """
        values = cls.env_values(environ)
        values.update(overrides)
        return cls.model_validate(values)
