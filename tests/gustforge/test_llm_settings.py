"""LLMSettings: defaults, environment loading, API key resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gustforge.llm import LLMSettings


def test_defaults_are_offline_and_frozen() -> None:
    settings = LLMSettings()
    assert (settings.backend, settings.max_concurrency, settings.max_retries, settings.cache_path) == (
        "offline",
        8,
        4,
        None,
    )
    with pytest.raises(ValidationError):
        settings.backend = "openai"  # type: ignore[misc]  # frozen model: assignment must fail


def test_unknown_fields_and_backends_rejected() -> None:
    with pytest.raises(ValidationError):
        LLMSettings(backend="anthropic")  # type: ignore[arg-type]  # invalid on purpose
    with pytest.raises(ValidationError):
        LLMSettings(modle="typo")  # type: ignore[call-arg]  # invalid on purpose


def test_from_env_reads_prefixed_variables_and_overrides_win() -> None:
    env = {
        "GUST_LLM_BACKEND": "openai",
        "GUST_LLM_BASE_URL": "http://127.0.0.1:8000/v1",
        "GUST_LLM_MAX_CONCURRENCY": "32",
        "GUST_LLM_CACHE_PATH": "out/cache/llm.sqlite",
        "UNRELATED": "x",
    }
    settings = LLMSettings.from_env(env, model="Qwen/Qwen3-8B")
    assert settings.backend == "openai" and settings.base_url == "http://127.0.0.1:8000/v1"
    assert settings.max_concurrency == 32 and settings.cache_path == Path("out/cache/llm.sqlite")
    assert settings.model == "Qwen/Qwen3-8B"


def test_api_key_from_named_variable_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = LLMSettings(api_key_env="GUST_TEST_KEY")
    monkeypatch.delenv("GUST_TEST_KEY", raising=False)
    assert settings.resolve_api_key() == "EMPTY"
    monkeypatch.setenv("GUST_TEST_KEY", "sk-test")
    assert settings.resolve_api_key() == "sk-test"
