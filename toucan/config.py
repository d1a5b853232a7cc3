"""One frozen config per Toucan stage: preparation (phases 1-4), evaluation, K-sweep.

Defaults follow SLCA-GRPO App. C.1 (prepare), App. C.5 / Table 12 (eval) and App. C.6 (K-sweep).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field

from data.models import StrictModel

__all__ = [
    "ArgCheck",
    "PrepareConfig",
    "ResponderMode",
    "EvalConfig",
    "DistractorStrategy",
    "EmbedderName",
    "KSweepConfig",
]


class ArgCheck(StrEnum):
    """How strictly Phase 1 checks gold-call arguments against the tool's JSON schema."""

    OFF = "off"
    REQUIRED = "required"  # required keys present (what the SGLS stage-1 validator checks)
    FULL = "full"  # full jsonschema validation


class PrepareConfig(StrictModel):
    """Phases 1-4 of the Toucan SFT/RL preparation (SLCA-GRPO App. C.1)."""

    seed: int = Field(default=42, description="Seed of every random choice (held-out draw, partition).")
    drop_subsets: tuple[str, ...] = Field(
        default=("irrelevant",),
        description="Toucan subset names removed in Phase 1 (the paper drops irrelevant).",
    )
    min_question_quality: dict[str, float] = Field(
        default_factory=lambda: {"overall_score": 3.0},
        description="question_quality_assessment dimension -> minimum score (1-5); unassessed rows pass.",
    )
    min_response_quality: dict[str, float] = Field(
        default_factory=lambda: {"completeness": 3.0},
        description="response_quality_assessment dimension -> minimum score (1-5); unassessed rows pass.",
    )
    arg_check: ArgCheck = Field(default=ArgCheck.REQUIRED, description="Gold-argument schema check in Phase 1.")
    test_single_turn: int = Field(default=3000, ge=0, description="Held-out native single-turn samples (full scale).")
    test_multi_turn: int = Field(default=1000, ge=0, description="Held-out decomposed multi-turn samples (full scale).")
    reference_pool_size: int = Field(
        default=78241,
        gt=0,
        description="Valid-pool size at which the test sizes apply unscaled (paper: 78,241).",
    )
    decompose_start_turn: int = Field(
        default=2,
        ge=1,
        description="First user turn (1-based) decomposed: 2 = paper (turn >= 2), 1 = reference code.",
    )
    rl_fraction: float = Field(default=0.43, gt=0, lt=1, description="Share of the training pool given to RL.")
    rl_single_share: float = Field(
        default=2 / 3,
        ge=0,
        le=1,
        description="Share of RL samples that are native single-turn (rest: decomposed).",
    )


class ResponderMode(StrEnum):
    """Where tool observations come from during evaluation (SGLS-compatible, pure Python)."""

    TEMPLATE = "template"  # deterministic schema-shaped mock
    REPLAY = "replay"  # the recorded Toucan response when the call matches gold, else template
    LLM = "llm"  # SGLS mocker role through the LLM client (offline backend -> template)


class EvalConfig(StrictModel):
    """The in-domain Toucan evaluator (SLCA-GRPO App. C.5, Table 12)."""

    max_turns: int = Field(default=7, gt=0, description="Generations per episode (reference: 7 = 6 tool rounds).")
    max_tokens: int = Field(default=8192, gt=0, description="max_tokens per generation.")
    temperature: float = Field(default=0.0, ge=0, description="Greedy by default, as verl validation.")
    max_tool_response_chars: int = Field(default=2048, gt=0, description="Middle truncation of observations.")
    responder: ResponderMode = Field(default=ResponderMode.REPLAY, description="Tool-observation source.")
    success_threshold: float = Field(default=0.9, description="Success = 1[Process >= threshold].")
    bootstrap_samples: int = Field(default=1000, gt=0, description="Bootstrap resamples for the CIs.")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="CI level.")
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    limit: int | None = Field(default=None, ge=1, description="Evaluate only the first N samples.")


class DistractorStrategy(StrEnum):
    RANDOM = "random"
    HARD = "hard"


class EmbedderName(StrEnum):
    AUTO = "auto"  # minilm when importable, else tfidf (the choice is recorded in the stats)
    MINILM = "minilm"
    TFIDF = "tfidf"


class KSweepConfig(StrictModel):
    """Controlled candidate-set sweep (SLCA-GRPO App. C.6)."""

    ks: tuple[int, ...] = Field(default=(0, 25, 50, 100, 150), description="Target candidate-set sizes; 0 = original.")
    strategy: DistractorStrategy = DistractorStrategy.RANDOM
    embedder: EmbedderName = EmbedderName.AUTO
    max_prompt_tokens: int = Field(default=32768, gt=0, description="Skip instances whose prompt exceeds this.")
    tokenizer_path: Path | None = Field(
        default=None, description="Local HF tokenizer.json (e.g. Qwen2.5's); without it tokens ~ chars/4."
    )
    seed: int = 0
