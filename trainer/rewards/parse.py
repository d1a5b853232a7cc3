"""Parsing Hermes-format trajectories: `<tool_call>` blocks, `<tool_response>` blocks, agent turns, gold calls.

`solution_str` is what verl's reward loop decodes with `skip_special_tokens=True`: the agent's generations with the
injected observations in between. For Qwen chat templates a two-turn response reads
`<tool_call>\\n{...}\\n</tool_call>\\nuser\\n<tool_response>\\n...\\n</tool_response>\\nassistant\\nFinal answer`
(the role special tokens vanish, their role words stay).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Call",
    "BlockParse",
    "strip_think",
    "extract_tool_calls",
    "parse_calls_lenient",
    "split_agent_turns",
    "tool_responses",
    "final_response",
    "normalize_gold",
    "remove_call_blocks",
    "first_step_calls",
]

_THINK_RE = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL)
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE_RE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
# One observation = consecutive <tool_response> blocks separated by whitespace or the role glue words.
_OBSERVATION_RE = re.compile(
    r"(?:[ \t]*\n?(?:user|tool)?[ \t]*\n?<tool_response>.*?</tool_response>[ \t]*\n?)+(?:assistant[ \t]*\n?)?",
    re.DOTALL,
)
_OPEN_TAG = "<tool_call>"
_CLOSE_TAG = "</tool_call>"


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call: a name and a JSON-object argument dict."""

    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class BlockParse:
    """Block-level parse of a response (SLCA §6.3): counts of tags and the calls of the valid blocks."""

    open_n: int
    close_n: int
    blocks: tuple[tuple[Call, ...], ...] = ()
    error_type: str = "none"
    calls: tuple[Call, ...] = field(default=())

    @property
    def denom(self) -> int:
        return max(self.open_n, self.close_n)

    @property
    def valid_n(self) -> int:
        return len(self.blocks)


def strip_think(text: str) -> str:
    """Remove `<think>…</think>` and `<thinking>…</thinking>` spans."""
    return _THINK_RE.sub("", text)


def _block_calls(content: str, allowed: frozenset[str] | None) -> tuple[tuple[Call, ...] | None, str]:
    """Strict block validation: every object is a dict with an allowed str name and dict arguments."""
    content = content.strip()
    if not content:
        return None, "json_error"
    try:
        payload = json.loads(content)
    except json.JSONDecodeError:
        return None, "json_error"
    items = payload if isinstance(payload, list) else [payload]
    if not isinstance(payload, (list, dict)):
        return None, "json_error"
    calls: list[Call] = []
    for obj in items:
        if not isinstance(obj, dict):
            return None, "json_error"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, "json_error"
        if allowed is not None and name not in allowed:
            return None, "tool_not_found"
        arguments = obj.get("arguments") or obj.get("parameters") or {}
        if not isinstance(arguments, dict):
            return None, "json_error"
        calls.append(Call(name, arguments))
    return tuple(calls), "none"


def extract_tool_calls(text: str, allowed_tools: list[str] | tuple[str, ...] | None) -> BlockParse:
    """Parse all `<tool_call>` blocks of an (already think-stripped) text, SLCA-style.

    A block is valid only if every object in it is valid; invalid blocks contribute no calls.

    Args:
        text: Response text, think spans already removed.
        allowed_tools: Names the sample offers; `None` accepts any name.

    Returns:
        Tag counts, the calls of each valid block, all valid calls, and the first error type seen.
    """
    allowed = frozenset(allowed_tools) if allowed_tools is not None else None
    open_n, close_n = text.count(_OPEN_TAG), text.count(_CLOSE_TAG)
    if open_n == 0 and close_n == 0:
        return BlockParse(0, 0, (), "no_tool_call", ())
    blocks: list[tuple[Call, ...]] = []
    error = "none"
    for match in _CALL_RE.finditer(text):
        calls, err = _block_calls(match.group(1), allowed)
        if calls is None:
            error = err if error == "none" else error
            continue
        blocks.append(calls)
    if error == "none" and (open_n != close_n or len(blocks) != max(open_n, close_n)):
        error = "partial"
    flat = tuple(call for block in blocks for call in block)
    return BlockParse(open_n, close_n, tuple(blocks), error, flat)


def remove_call_blocks(text: str) -> str:
    """The text with every complete `<tool_call>…</tool_call>` block removed."""
    return _CALL_RE.sub("", text)


def first_step_calls(solution_str: str, allowed_tools: list[str] | tuple[str, ...] | None) -> tuple[Call, ...] | None:
    """The valid calls of the agent's first *step*: the first generation turn that opens a `<tool_call>`.

    SLCA-GRPO's S_par compares the number of calls of the first step (turn) with the first gold step; the rollout
    executes every call of a turn together, so a turn with one call per block is one step.

    Args:
        solution_str: The decoded response (generations and observations).
        allowed_tools: Names the sample offers; `None` accepts any name.

    Returns:
        The valid calls of that turn, or None when no turn holds a call tag.
    """
    for turn in split_agent_turns(solution_str):
        parsed = extract_tool_calls(strip_think(turn), allowed_tools)
        if parsed.open_n or parsed.close_n:
            return parsed.calls
    return None


def _lenient_arguments(obj: dict[str, Any]) -> dict[str, Any] | None:
    arguments = obj.get("arguments") or obj.get("parameters") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return arguments if isinstance(arguments, dict) else None


def parse_calls_lenient(text: str) -> list[Call]:
    """All calls in a text the way a rollout would execute them (unknown names kept, string arguments decoded).

    Args:
        text: One agent turn (think spans already removed).

    Returns:
        The calls in order; malformed objects are skipped.
    """
    calls: list[Call] = []
    for match in _CALL_RE.finditer(text):
        try:
            payload = json.loads(match.group(1).strip())
        except json.JSONDecodeError:
            continue
        for obj in payload if isinstance(payload, list) else [payload]:
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
                continue
            arguments = _lenient_arguments(obj)
            if arguments is not None:
                calls.append(Call(obj["name"], arguments))
    return calls


def split_agent_turns(solution_str: str) -> list[str]:
    """Split a decoded multi-turn response into the agent's generations (observations removed).

    Turn t here is the t-th run of `response_mask == 1` tokens in verl's agent loop. A trailing empty segment
    (the episode ended right after an observation) is not a turn.

    Args:
        solution_str: The decoded response (generations and injected observations).

    Returns:
        The text of each agent generation, in order.
    """
    turns: list[str] = []
    last = 0
    for match in _OBSERVATION_RE.finditer(solution_str):
        turns.append(solution_str[last : match.start()])
        last = match.end()
    tail = solution_str[last:]
    if tail.strip() or not turns:
        turns.append(tail)
    return turns


def tool_responses(solution_str: str) -> list[str]:
    """The stripped contents of every `<tool_response>` block of the raw response."""
    return [m.group(1).strip() for m in _RESPONSE_RE.finditer(solution_str)]


def final_response(text: str) -> str:
    """The agent's final reply (SLCA §6.8), computed on think-stripped text.

    Args:
        text: Think-stripped response.

    Returns:
        Text after the last `</tool_response>` if non-empty; else the text after the last `</tool_call>` (empty
        if it still holds a `<tool_response>` or starts with `<tool_call>`); else the text without call blocks.
    """
    if "</tool_response>" in text:
        tail = text.rsplit("</tool_response>", 1)[1].strip()
        if tail:
            return tail
    if _CLOSE_TAG in text:
        tail = text.rsplit(_CLOSE_TAG, 1)[1].strip()
        if "<tool_response>" in tail or tail.startswith(_OPEN_TAG):
            return ""
        return tail
    return _CALL_RE.sub("", text).strip()


def _as_call(item: Any) -> Call | None:
    if isinstance(item, str):
        return Call(item, {}) if item else None
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        arguments = _lenient_arguments(item)
        return Call(item["name"], arguments or {})
    return None


def _to_python(value: Any) -> Any:
    """numpy arrays (pandas-loaded parquet) to lists, JSON strings to values."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("[") or stripped.startswith("{"):
            return json.loads(stripped)
    return value


def normalize_gold(gold: Any) -> list[list[Call]]:
    """Gold calls as steps of calls (SLCA `_normalize_gold_tool_calls_nested`).

    Accepts a nested list of steps (JSON string or list), a flat list of names or call dicts (one step holding all
    calls), numpy arrays, or nothing.

    Args:
        gold: The `gold_tool_calls` value of a ground-truth dict.

    Returns:
        Steps, each a list of calls; `[]` when there is no gold.
    """
    gold = _to_python(gold)
    if gold is None or gold == "" or gold == []:
        return []
    if isinstance(gold, (str, dict)):
        gold = [gold]
    if not isinstance(gold, list):
        return []
    if all(isinstance(step, list) or hasattr(step, "tolist") for step in gold):
        steps = [[c for c in (_as_call(i) for i in _to_python(step)) if c] for step in gold]
        return [step for step in steps if step]
    flat = [c for c in (_as_call(i) for i in gold) if c]
    return [flat] if flat else []
