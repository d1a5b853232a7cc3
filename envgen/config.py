"""The one frozen configuration of the envgen stage (ingest → refactor → DB → code → tests → build)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from data.models import StrictModel
from envgen.limits import IngestLimits
from gustforge.llm import LLMSettings

__all__ = ["EnvGenConfig", "PAPER_MIN_TOOLS", "PAPER_MAX_TOOLS", "PAPER_MAX_PARAMS"]

PAPER_MIN_TOOLS = 5  # ToolVerse §4.1 keeps toolsets with 5..20 tools
PAPER_MAX_TOOLS = 20
PAPER_MAX_PARAMS = 4  # ToolVerse App. F.1: "limit to a maximum of 4 parameters"


class EnvGenConfig(StrictModel):
    """Settings of the environment-synthesis stage.

    The defaults are the paper's filter (5..20 tools, at most 4 parameters per tool); the bundled sample fits it.
    `paper_filter_overridden` says when a run departs from it (the CLI prints a notice).
    """

    backend: Literal["offline", "openai"] = Field(
        default="offline", description="Who refactors schemas and writes code: deterministic templates or an LLM."
    )
    llm: LLMSettings = Field(
        default_factory=LLMSettings,
        description="Endpoint, model and cache of the openai backend (its own `backend` field is overridden).",
    )
    seed: int = Field(default=0, description="Seed of the mock-database synthesis; part of every env's identity.")
    min_tools: int = Field(default=PAPER_MIN_TOOLS, ge=1, description="Toolsets with fewer tools are quarantined.")
    max_tools: int = Field(default=PAPER_MAX_TOOLS, ge=1, description="Toolsets with more tools are quarantined.")
    max_params: int | None = Field(
        default=PAPER_MAX_PARAMS,
        ge=1,
        description="Cap on parameters per tool (paper: 4). Optional parameters beyond it are dropped with a note; "
        "a tool with more required parameters than the cap quarantines its toolset.",
    )
    max_repairs: int = Field(default=2, ge=0, description="Regenerate/repair attempts after a failed test run.")
    records_per_entity: tuple[int, int] = Field(
        default=(3, 5), description="Inclusive range of mock records per entity (paper: 3-5)."
    )
    max_description_chars: int = Field(
        default=1024, ge=16, description="Longer descriptions are truncated with a '[truncated]' note."
    )
    hard_description_chars: int = Field(
        default=20_000, ge=16, description="Descriptions longer than this quarantine the toolset."
    )
    sandbox_cpu_seconds: float = Field(default=5.0, gt=0, description="CPU-time limit of a sandbox worker.")
    sandbox_memory_mb: int = Field(default=512, gt=0, description="Address-space limit of a sandbox worker.")
    sandbox_wall_seconds: float = Field(default=10.0, gt=0, description="Wall-clock limit of one sandbox request.")
    sandbox_workers: int = Field(
        default=2, ge=1, description="Warm sandbox workers (and build threads) used by `build_environments`."
    )
    test_budget_seconds: float = Field(default=60.0, gt=0, description="Wall budget of one tests-module run.")
    max_log_only_share: float = Field(
        default=0.5, ge=0, le=1,
        description="A toolset whose share of log-only tools (no behaviour family fits) exceeds this is "
        "quarantined as `mostly_echo` instead of shipped.",
    )  # fmt: skip
    min_mutation_score: float = Field(
        default=0.8, ge=0, le=1,
        description="Envs whose tests kill a smaller share of seeded bugs are repaired, then quarantined "
        "(`weak_tests`).",
    )  # fmt: skip
    mutation_testing: bool = Field(default=True, description="Score every env's test suite by mutation.")

    @property
    def paper_filter_overridden(self) -> bool:
        """True when the tool-count window or the parameter cap differs from the paper's filter."""
        return (self.min_tools, self.max_tools, self.max_params) != (PAPER_MIN_TOOLS, PAPER_MAX_TOOLS, PAPER_MAX_PARAMS)
    limits: IngestLimits = Field(default_factory=IngestLimits, description="Depth/size/count limits of raw input.")

    @model_validator(mode="after")
    def _check_ranges(self) -> EnvGenConfig:
        low, high = self.records_per_entity
        if not 1 <= low <= high:
            raise ValueError(f"records_per_entity must satisfy 1 <= low <= high, got {self.records_per_entity}")
        if self.min_tools > self.max_tools:
            raise ValueError(f"min_tools ({self.min_tools}) > max_tools ({self.max_tools})")
        if self.max_description_chars > self.hard_description_chars:
            raise ValueError("max_description_chars must not exceed hard_description_chars")
        return self
