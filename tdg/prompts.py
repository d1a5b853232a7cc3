"""The TDG judge: an LLM role deciding whether tool B depends on tool A (ToolVerse §3.2.1, App. B.2).

The paper gives the two principles but not the prompt text; this prompt states them, fixes the evidence format
that `tdg.sanitize` checks against the schemas, and asks for a calibrated confidence (used to break cycles).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gustforge.llm import LLMRole

__all__ = ["JUDGE_SYSTEM_PROMPT", "JUDGE_USER_TEMPLATE", "JUDGE_OUTPUT_SCHEMA", "make_judge_role", "tool_json"]

JUDGE_SYSTEM_PROMPT = """\
You are an expert in API workflows. You build tool dependency graphs for executable tool environments whose
tools read and write one shared mock database. Decide whether tool B depends on tool A. There are two kinds of
dependency:
1. parameter: a field of A's response provides a required argument of B (e.g. get_order returns order.order_id,
   cancel_order needs order_id). Only claim it when the field really exists in A's response schema and the
   argument really exists in B's parameters.
2. semantic: B can only sensibly be invoked after A in the logical sequence of the scenario (e.g. create a
   booking before paying for it), even though no value flows from A to B. Claim it only with evidence beyond
   similar names: a description that says so ("call A first"), a state B needs that A establishes, or a record
   (an id) B works on that A creates.
Answer "edge": false when B does not depend on A (independent tools, tools that merely look alike or work on the
same kind of data, a field of the same name that A does not produce, or the dependency runs from B to A).
Evidence format: for a parameter edge list every mapping as "<A>.response.<field path> -> <B>.<argument>",
separated by "; ", where a field path uses dots for nested objects and "[]" for array items
(e.g. "list_orders.response.orders[].id -> cancel_order.order_id"); the field must hold a value the argument
accepts (type, format such as date or email, and the same entity). For a semantic edge quote or name the evidence
in one short sentence; a semantic edge without evidence is discarded. confidence is your probability (0..1)
that the dependency is real."""

JUDGE_USER_TEMPLATE = """\
Tool A:
{tool_a}

Tool B:
{tool_b}

Field matches found by name (hints; they may be wrong or incomplete):
{hints}

Does B depend on A?"""

JUDGE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "edge": {"type": "boolean"},
        "type": {"type": "string", "enum": ["parameter", "semantic", "none"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "evidence": {"type": "string"},
    },
    "required": ["edge", "type", "confidence", "evidence"],
    "additionalProperties": False,
}


def make_judge_role(offline: Callable[[dict[str, Any]], dict[str, Any]]) -> LLMRole:
    """The judge role with the given deterministic offline twin.

    The inputs are ``tool_a`` / ``tool_b`` (JSON text of the tool definitions: name, description, kind, entity,
    parameters, response) and ``hints`` (text).
    """
    return LLMRole(
        name="tdg_judge",
        system_prompt=JUDGE_SYSTEM_PROMPT,
        user_template=JUDGE_USER_TEMPLATE,
        output_schema=JUDGE_OUTPUT_SCHEMA,
        offline=offline,
        params={"response_format": {"type": "json_object"}},
    )


def tool_json(tool: dict[str, Any]) -> str:
    """Stable JSON text of a tool definition for the prompt."""
    return json.dumps(tool, sort_keys=True, ensure_ascii=False, indent=1)
