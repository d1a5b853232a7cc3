"""Configuration of task verification: replay, solvability, teacher Pass@k, per-environment cap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from data.models import StrictModel

if TYPE_CHECKING:
    from gustforge.llm import LLMSettings

__all__ = ["TEACHER_SYSTEM_PROMPT", "TeacherConfig", "VerifyConfig"]

TEACHER_SYSTEM_PROMPT = (
    "You are a capable assistant that completes the user's request by calling the available tools. Use the tools "
    "to look up anything you do not know; never invent identifiers. Calls that do not depend on each other may be "
    "made together in one turn. When the request is complete, reply with a short summary and no tool call."
)


class TeacherConfig(StrictModel):
    """The teacher agent (LangGraph + ChatOpenAI on an OpenAI-compatible endpoint). No base_url = not run."""

    base_url: str | None = Field(default=None, description="OpenAI-compatible base URL ending in /v1; None = skip.")
    model: str | None = Field(default=None, description="Model name; None = first model listed by GET /models.")
    api_key_env: str = Field(default="OPENAI_API_KEY", description="Environment variable holding the API key.")
    k: int = Field(default=8, ge=1, description="Attempts per task, n of pass@k (paper: Pass@8).")
    pass_k: int = Field(
        default=4, ge=1, description="k of the unbiased pass@k recorded per task (capped at the attempts)."
    )
    max_turns: int = Field(default=12, ge=1, description="Most model calls in one attempt.")
    temperature: float = Field(default=0.7, ge=0, description="Sampling temperature (attempts should differ).")
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(default=4, ge=0, description="Retries of transient endpoint errors per model call.")
    backoff_base_s: float = Field(default=0.5, ge=0, description="First retry delay; doubles per retry, jittered.")
    backoff_max_s: float = Field(default=30.0, ge=0, description="Upper bound of one retry delay.")
    max_concurrency: int = Field(default=4, ge=1, description="Tasks verified by the teacher at once.")
    seed: int = Field(default=0, description="Base of the per-attempt request seeds and the jitter RNG.")
    system_prompt: str = Field(default=TEACHER_SYSTEM_PROMPT, description="System message of the teacher agent.")

    @property
    def enabled(self) -> bool:
        return self.base_url is not None

    @classmethod
    def from_llm_settings(cls, settings: LLMSettings, **overrides: Any) -> TeacherConfig:
        """Reuse the project's LLM settings; an offline backend means the teacher does not run."""
        values: dict[str, Any] = {
            "base_url": settings.base_url if settings.backend == "openai" else None,
            "model": settings.model,
            "api_key_env": settings.api_key_env,
            "timeout_s": settings.timeout_s,
            "max_retries": settings.max_retries,
            "backoff_base_s": settings.backoff_base_s,
            "backoff_max_s": settings.backoff_max_s,
        }
        return cls(**{**values, **overrides})


class VerifyConfig(StrictModel):
    """One frozen config for `tdg.verify.verify_tasks`."""

    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="Teacher Pass@k filter.")
    max_tasks_per_env: int = Field(default=10, ge=1, description="Most kept tasks per environment (paper: 10).")
    require_solvable: bool = Field(default=True, description="Drop tasks whose stated values are not in the text.")
    session_seed: int = Field(
        default=0, description="Seed of the sandbox's random/uuid4 in replay and teacher sessions (= reconstruction's)."
    )
