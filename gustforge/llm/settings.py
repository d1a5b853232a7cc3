"""LLM backend settings: one frozen model shared by every role and by the chat client."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LLMSettings", "Backend"]

Backend = Literal["offline", "openai"]

_ENV_PREFIX = "GUST_LLM_"


class LLMSettings(BaseModel):
    """How roles reach a model: `offline` (deterministic Python) or any OpenAI-compatible endpoint.

    The API key itself is never stored here; only the name of the environment variable holding it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Backend = Field("offline", description="offline: role.offline(inputs); openai: HTTP endpoint.")
    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL ending in /v1; None = api.openai.com."
    )
    model: str | None = Field(None, description="Model name; None = first model listed by GET /models.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight per client.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        4, ge=0, description="Retries of transient failures (429, 5xx, timeout, connection)."
    )
    temperature: float = Field(0.0, ge=0, description="Sampling temperature sent with every request.")
    cache_path: Path | None = Field(None, description="SQLite response cache file; None disables caching.")
    max_repair_rounds: int = Field(
        1, ge=0, description="Re-asks with the validation error when JSON is invalid."
    )
    backoff_base_s: float = Field(
        0.5, ge=0, description="First retry delay before jitter; doubles per retry."
    )
    backoff_max_s: float = Field(30.0, ge=0, description="Upper bound of one retry delay.")
    retry_seed: int = Field(0, description="Seed of the per-client jitter RNG.")

    def resolve_api_key(self) -> str:
        """The API key from `api_key_env`, or "EMPTY" (what vLLM/SGLang accept) when the variable is unset."""
        return os.environ.get(self.api_key_env) or "EMPTY"

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
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            name: env[_ENV_PREFIX + name.upper()]
            for name in cls.model_fields
            if _ENV_PREFIX + name.upper() in env
        }
        values.update(overrides)
        return cls.model_validate(values)
