"""Toucan domain models: parsed dialogue (turns → steps → calls), context-action sample, phase accounting."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from data.models import RawTool, StrictModel
from gustforge.errors import InputError

__all__ = [
    "SourceShape",
    "DropReason",
    "SampleKind",
    "GoldCall",
    "Step",
    "Turn",
    "Dialogue",
    "ContextAction",
    "PhaseReport",
    "RowRejected",
]


class SourceShape(StrEnum):
    """Which of the three accepted row layouts a row came in."""

    TOUCAN = "toucan"  # HF Agent-Ark/Toucan-1.5M columns (messages with function_call / function roles)
    SFT_PREVIEW = "sft_preview"  # SLCA SFT preview (roles tool_call / tool_response, Python-repr calls)
    RL_PREVIEW = "rl_preview"  # SLCA RL preview (verl prompt + reward_model.ground_truth)


class DropReason(StrEnum):
    """Why Phase 1 dropped a row (one code per row; the first check that fails wins)."""

    UNPARSEABLE_ROW = "unparseable_row"
    BROKEN_JSON = "broken_json"
    BAD_ARGUMENTS = "bad_arguments"
    MISSING_TOOLS = "missing_tools"
    INVALID_TOOL_SCHEMA = "invalid_tool_schema"
    EMPTY_DIALOGUE = "empty_dialogue"
    INCOMPLETE_DIALOGUE = "incomplete_dialogue"
    NONSTANDARD_TOOL_TOKENS = "nonstandard_tool_tokens"
    UNKNOWN_TOOL = "unknown_tool"
    ARGUMENTS_SCHEMA_MISMATCH = "arguments_schema_mismatch"
    GOLD_ARGUMENTS_MISSING = "gold_arguments_missing"
    IRRELEVANT_SUBSET = "irrelevant_subset"
    LOW_QUESTION_QUALITY = "low_question_quality"
    LOW_RESPONSE_QUALITY = "low_response_quality"
    DUPLICATE_DIALOGUE = "duplicate_dialogue"


class SampleKind(StrEnum):
    NATIVE_SINGLE_TURN = "native_single_turn"
    DECOMPOSED_MULTI_TURN = "decomposed_multi_turn"


class GoldCall(StrictModel):
    """One tool call of a teacher trace. `arguments is None` means unknown (flat-name previews)."""

    name: str
    arguments: dict[str, Any] | None = None


class Step(StrictModel):
    """Calls issued together (parallel), their observations, and any assistant text just before them."""

    calls: tuple[GoldCall, ...]
    responses: tuple[str, ...] = ()
    preamble: str = ""


class Turn(StrictModel):
    """One user message and the assistant's work on it (`answer is None`: no final reply in the row)."""

    user: str
    steps: tuple[Step, ...] = ()
    answer: str | None = None

    @property
    def has_calls(self) -> bool:
        return any(step.calls for step in self.steps)


class Dialogue(StrictModel):
    """A parsed, repaired Toucan row."""

    uuid: str
    dialogue_hash: str = Field(description="Content hash of tools + turns: identical dialogues share it.")
    subset_name: str = ""
    shape: SourceShape
    system: str = Field(default="", description="The row's own system message (not the tool prompt).")
    tools: tuple[RawTool, ...]
    turns: tuple[Turn, ...]
    question: str = ""
    target_tools: tuple[str, ...] = ()
    question_quality: dict[str, Any] | None = None
    response_quality: dict[str, Any] | None = None
    repairs: tuple[str, ...] = Field(default=(), description="Repair codes applied while parsing.")
    row_index: int = Field(description="0-based position of the row in its input file.")

    @property
    def multi_turn(self) -> bool:
        return len(self.turns) > 1


class ContextAction(StrictModel):
    """A decision point: the dialogue up to user turn `turn_index` (0-based) and the gold action for it."""

    sample_id: str
    uuid: str
    dialogue_hash: str
    kind: SampleKind
    turn_index: int
    system: str = ""
    tools: tuple[RawTool, ...]
    history: tuple[Turn, ...] = Field(description="Complete earlier turns (context).")
    question: str = Field(description="The current user message.")
    gold_steps: tuple[Step, ...] = Field(description="Nested gold: steps of calls with arguments and observations.")
    gold_answer: str | None = None
    subset_name: str = ""


class PhaseReport(StrictModel):
    """Accounting of one phase: `sum(outputs) + sum(dropped) == inputs` in the phase's unit."""

    phase: str
    unit: str = Field(description="What is counted: rows, dialogues, samples.")
    inputs: int
    outputs: dict[str, int] = Field(default_factory=dict)
    dropped: dict[str, int] = Field(default_factory=dict)
    info: dict[str, int] = Field(default_factory=dict, description="Side counts (repairs, samples) not in the sum.")

    @property
    def balanced(self) -> bool:
        return sum(self.outputs.values()) + sum(self.dropped.values()) == self.inputs


class RowRejected(InputError):
    """A Toucan row that cannot be used; `reason` is the quarantine code."""

    def __init__(self, reason: DropReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail
