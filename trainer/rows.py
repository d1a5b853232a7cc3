"""`VerlRow`: one row of the verl RL parquet (GUST and Toucan rows share it), validated on construction and on write.

Columns (what verl's `RLHFDataset` and our agent loop / tool / reward read):
  prompt        list<{role, content}> — Hermes system prompt with the `<tools>` catalogue (SLCA v1 format), the
                dialogue history, then the current user turn.
  data_source   "gust" | "toucan_toolcall".
  agent_name    the registered agent loop (`gust_tool_agent`), so rows route to it without config changes.
  reward_model  {style: "rule", ground_truth: GroundTruth}.
  extra_info    {index, split, task_id, need_tools_kwargs, original_turn_index, tools_kwargs:
                 {sgls: {create_kwargs: {env_id, env_dir, tool_schemas}}}}.
Everything whose shape varies per row (arguments, tool schemas) is a JSON string, so the parquet schema is the same
for every row and verl's `OpenAIFunctionToolSchema` (which drops `items`, `anyOf`, nested `properties`) is never
the carrier of a schema: the SGLS tool and the reward rebuild tools from `tool_schemas`.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from data.models import StrictModel

__all__ = [
    "SGLS_TOOL_NAME",
    "AGENT_NAME",
    "ChatMessage",
    "GroundTruth",
    "RewardModel",
    "CreateKwargs",
    "ToolKwargs",
    "ToolsKwargs",
    "InteractionKwargs",
    "ExtraInfo",
    "VerlRow",
]

SGLS_TOOL_NAME = "sgls"
AGENT_NAME = "gust_tool_agent"


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


def _json_list(value: str, what: str) -> list[Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(parsed, list):
        raise ValueError(f"{what} must be a JSON list")
    return parsed


class GroundTruth(StrictModel):
    """`reward_model.ground_truth`: what the reward needs (see the contract in `trainer.rewards`)."""

    allowed_tools: tuple[str, ...] = Field(description="Names of every tool offered in the prompt.")
    gold_tool_calls: str = Field(description='JSON list[list[{"name", "arguments"}]]: gold calls per step.')
    args_known: bool = Field(description="False when gold has names only (Toucan previews): arguments unknown.")
    turn_level: bool = Field(description="True when steps are agent turns (GUST stages): TARA applies.")
    tool_schemas: str = Field(description="JSON list of the original OpenAI tool dicts (with nested schemas).")
    question_content: str = Field(description="The current user turn (what the judge sees).")
    subset_name: Literal["tool_call", "irrelevant"]
    env_id: str = ""
    env_dir: str = Field(default="", description="Env folder, absolute or relative to the tool's env_root.")
    expected_final_db_hash: str = Field(default="", description="GoldenTrace.final_db_hash (GUST rows).")
    initial_db_hash: str = ""
    expected_answer: tuple[str, ...] = Field(
        default=(), description="Facts the final reply must contain (TaskText.expected_answer; empty: no check)."
    )

    @field_validator("gold_tool_calls")
    @classmethod
    def _steps(cls, value: str) -> str:
        for step in _json_list(value, "gold_tool_calls"):
            if not isinstance(step, list) or not step:
                raise ValueError("each gold step must be a non-empty list of calls")
            for call in step:
                if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
                    raise ValueError(f"gold call must be {{name, arguments}}, got {call!r}")
                if not isinstance(call["arguments"], dict):
                    raise ValueError("gold call arguments must be an object")
        return value

    @field_validator("tool_schemas")
    @classmethod
    def _tools(cls, value: str) -> str:
        for tool in _json_list(value, "tool_schemas"):
            if not isinstance(tool, dict) or tool.get("type") != "function" or "name" not in tool.get("function", {}):
                raise ValueError(f"tool must be an OpenAI function tool, got {str(tool)[:80]!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> GroundTruth:
        names = [t["function"]["name"] for t in json.loads(self.tool_schemas)]
        if sorted(set(names)) != sorted(set(self.allowed_tools)):
            raise ValueError("allowed_tools must be exactly the names in tool_schemas")
        gold_names = {c["name"] for step in json.loads(self.gold_tool_calls) for c in step}
        if not gold_names <= set(self.allowed_tools):
            raise ValueError(f"gold calls use tools not offered: {sorted(gold_names - set(self.allowed_tools))}")
        if (self.subset_name == "tool_call") != bool(gold_names):
            raise ValueError("subset_name must be 'tool_call' exactly when gold calls exist")
        if bool(self.expected_final_db_hash) and not (self.env_id and self.env_dir):
            raise ValueError("expected_final_db_hash needs env_id and env_dir")
        return self

    def gold_steps(self) -> list[list[dict[str, Any]]]:
        return json.loads(self.gold_tool_calls)

    def tools(self) -> list[dict[str, Any]]:
        return json.loads(self.tool_schemas)


class RewardModel(StrictModel):
    style: Literal["rule"] = "rule"
    ground_truth: GroundTruth


class CreateKwargs(StrictModel):
    """What the SGLS tool needs to create the trajectory's environment instance."""

    env_id: str = ""
    env_dir: str = ""
    tool_schemas: str = Field(description="JSON list of OpenAI tools (stage-1 validation and the llm backend).")


class ToolKwargs(StrictModel):
    create_kwargs: CreateKwargs


class ToolsKwargs(StrictModel):
    sgls: ToolKwargs


class InteractionKwargs(StrictModel):
    name: str
    scenario: str = Field(description="JSON `gusteval.scenario.UserScenario` (goal, facts, pick criteria).")


class ExtraInfo(StrictModel):
    index: int
    split: str = "train"
    task_id: str = ""
    need_tools_kwargs: bool = True
    original_turn_index: int = 0
    tools_kwargs: ToolsKwargs
    interaction_kwargs: InteractionKwargs | None = None  # the simulated user's scenario (gusteval.scenario)


class VerlRow(StrictModel):
    prompt: tuple[ChatMessage, ...]
    data_source: Literal["gust", "toucan_toolcall"]
    agent_name: str = AGENT_NAME
    reward_model: RewardModel
    extra_info: ExtraInfo

    @model_validator(mode="after")
    def _shape(self) -> VerlRow:
        if len(self.prompt) < 2 or self.prompt[0].role != "system" or self.prompt[-1].role != "user":
            raise ValueError("prompt must start with the system message and end with a user turn")
        if "<tools>" not in self.prompt[0].content or "</tools>" not in self.prompt[0].content:
            raise ValueError("system message must carry the Hermes <tools> catalogue")
        gt = self.reward_model.ground_truth
        if self.extra_info.tools_kwargs.sgls.create_kwargs.tool_schemas != gt.tool_schemas:
            raise ValueError("tools_kwargs tool_schemas must equal ground_truth.tool_schemas")
        return self
