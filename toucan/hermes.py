"""The Hermes text protocol shared by RL rows, the evaluator and the K-sweep.

Tools are listed as one JSON object per line inside `<tools>` in the system message (LLaMA-Factory's Qwen
layout, as in the SLCA RL previews); a call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
parallel calls are a JSON list inside ONE block (so HierR's first-block count sees them); observations
come back as a `user` message of `<tool_response>` blocks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from data.models import RawTool
from gustforge.errors import InputError
from toucan.models import GoldCall, Step, Turn

__all__ = [
    "openai_tool",
    "tools_json",
    "render_system_prompt",
    "render_call_block",
    "render_responses",
    "turn_messages",
    "prompt_messages",
    "replace_tool_block",
]

_TOOLS_HEADER = (
    "You have access to the following tools:\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_FOOTER = (
    "\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
    "To call several functions in parallel, put a JSON list of such objects in one "
    "<tool_call></tool_call> block."
    "\n\nUse them when appropriate to help answer the user's questions."
)


def openai_tool(tool: RawTool) -> dict[str, Any]:
    """The OpenAI function envelope of a tool."""
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def tools_json(tools: Sequence[RawTool]) -> str:
    """The JSON-string tool list of verl rows (`tools`, `ground_truth.tool_schemas`)."""
    return json.dumps([openai_tool(t) for t in tools], ensure_ascii=False)


def render_system_prompt(tools: Sequence[RawTool], system: str = "") -> str:
    """System message: the row's own system text (if any), then the tool catalogue and the call format.

    Args:
        tools: The candidate tools, in order.
        system: The dialogue's own system message.

    Returns:
        The system message content.
    """
    catalogue = "\n".join(json.dumps(openai_tool(t), ensure_ascii=False) for t in tools)
    prefix = f"{system.strip()}\n\n" if system.strip() else ""
    return prefix + _TOOLS_HEADER + catalogue + _TOOLS_FOOTER


def render_call_block(calls: Sequence[GoldCall]) -> str:
    """One `<tool_call>` block: a single object, or a JSON list for parallel calls."""
    objects = [{"name": c.name, "arguments": c.arguments or {}} for c in calls]
    payload = objects[0] if len(objects) == 1 else objects
    return "<tool_call>\n" + json.dumps(payload, ensure_ascii=False) + "\n</tool_call>"


def render_responses(responses: Sequence[str]) -> str:
    """Observations of one step as consecutive `<tool_response>` blocks."""
    return "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in responses)


def _step_messages(step: Step) -> list[dict[str, str]]:
    text = f"{step.preamble.strip()}\n" if step.preamble.strip() else ""
    messages = [{"role": "assistant", "content": text + render_call_block(step.calls)}]
    if step.responses:
        messages.append({"role": "user", "content": render_responses(step.responses)})
    return messages


def turn_messages(turn: Turn) -> list[dict[str, str]]:
    """A complete turn as chat messages: user, (assistant call, user observation)*, assistant answer."""
    messages = [{"role": "user", "content": turn.user}]
    for step in turn.steps:
        messages.extend(_step_messages(step))
    if turn.answer is not None:
        messages.append({"role": "assistant", "content": turn.answer})
    return messages


def prompt_messages(
    tools: Sequence[RawTool], history: Sequence[Turn], question: str, *, system: str = ""
) -> list[dict[str, str]]:
    """The verl `prompt`: system (tools), the replayed history, and the current user question.

    Args:
        tools: Candidate tools shown in the system message.
        history: Earlier complete turns.
        question: The current user message.
        system: The dialogue's own system message.

    Returns:
        `[{"role", "content"}, ...]` ending with the user question.
    """
    messages = [{"role": "system", "content": render_system_prompt(tools, system)}]
    for turn in history:
        messages.extend(turn_messages(turn))
    messages.append({"role": "user", "content": question})
    return messages


_TOOLS_BLOCK_RE = re.compile(r"(^<tools>\n)(.*?)(\n</tools>$)", re.DOTALL | re.MULTILINE)


def replace_tool_block(system_content: str, tools: Sequence[RawTool]) -> str:
    """The same system message with the `<tools>` catalogue replaced by `tools` (everything else kept).

    Raises:
        InputError: The message has no `<tools>` block.
    """
    catalogue = "\n".join(json.dumps(openai_tool(t), ensure_ascii=False) for t in tools)
    new, count = _TOOLS_BLOCK_RE.subn(lambda m: m.group(1) + catalogue + m.group(3), system_content, count=1)
    if count == 0:
        raise InputError("system message has no <tools> block")
    return new
