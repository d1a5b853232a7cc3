"""Tool observations for the evaluator: a pure-Python, SGLS-compatible responder.

`trainer.sgls` (the training-time SGLS tool) subclasses verl's `BaseTool`, so it cannot be imported without the
`train` extra; this module reproduces its stage-1 validation texts (SLCA reference wording) and offers three
stage-2 sources (`ResponderMode`):
  template  a deterministic JSON observation echoing the call (no LLM),
  replay    the observation recorded in the Toucan trace when the call matches a gold call (same name, loosely
            equal arguments), else template,
  llm       the SGLS mocker role through `gustforge.llm` (offline backend → the template, so tests stay offline).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
from referencing.exceptions import Unresolvable

from gustforge.llm import LLMClient, LLMRole, run_role_async
from gustforge.registry import Registry
from gustforge.schemas import safe_validator
from toucan.config import ResponderMode
from trainer.rewards.hierr import loose_eq
from trainer.rewards.parse import Call

__all__ = [
    "ToolContext",
    "Responder",
    "RESPONDERS",
    "validate_call",
    "template_observation",
    "truncate_middle",
    "MOCKER_ROLE",
    "make_responder",
]

_MOCKER_SYSTEM = (
    "You are the backend API server of the tool described below, not an assistant. Execute the incoming call "
    "and return the realistic result the real tool would return for these arguments. Never call tools and "
    "never explain."
)


@dataclass(frozen=True)
class ToolContext:
    """What a responder knows about one evaluation sample."""

    schemas: Mapping[str, dict[str, Any]]  # tool name -> OpenAI tool dict
    gold: Sequence[Sequence[Call]] = ()
    gold_responses: Sequence[Sequence[str]] = ()
    used: set[tuple[int, int]] = field(default_factory=set)  # gold (step, call) already replayed


class Responder(Protocol):
    async def respond(self, call: Call, ctx: ToolContext) -> str: ...


def validate_call(call: Call, schemas: Mapping[str, dict[str, Any]]) -> str | None:
    """SGLS stage 1: the error text the model sees, or None when the call is valid.

    Args:
        call: The executed call.
        schemas: Tool name -> OpenAI tool dict of the sample.

    Returns:
        `Tool '<n>' not found in the current available tools set.`, `Tool '<n>' missing required parameters:
        [...]`, `Tool '<n>' invalid parameter '<path>': <message>`, or None.
    """
    tool = schemas.get(call.name)
    if tool is None:
        return f"Tool '{call.name}' not found in the current available tools set."
    params = tool.get("function", tool).get("parameters") or {}
    missing = [key for key in params.get("required") or [] if key not in call.arguments]
    if missing:
        return f"Tool '{call.name}' missing required parameters: {missing}"
    try:
        error = next(iter(safe_validator(params, jsonschema.Draft7Validator).iter_errors(call.arguments)), None)
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.UnknownType, Unresolvable):
        return None  # an unusable schema cannot reject a call
    if error is None:
        return None
    path = ".".join(str(p) for p in error.absolute_path) or "(root)"
    return f"Tool '{call.name}' invalid parameter '{path}': {error.message}"


def template_observation(call: Call) -> str:
    """Deterministic schema-free observation (labelled as a mock in the text)."""
    return json.dumps({"status": "success", "tool": call.name, "arguments": call.arguments, "result": "mock"})


def truncate_middle(text: str, limit: int) -> str:
    """Keep the first and last `limit // 2` characters (the reference's `middle` truncation)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


@dataclass(frozen=True)
class _Template:
    async def respond(self, call: Call, ctx: ToolContext) -> str:
        return validate_call(call, ctx.schemas) or template_observation(call)


def _matches(call: Call, gold: Call) -> bool:
    if call.name != gold.name or set(call.arguments) != set(gold.arguments):
        return False
    return all(loose_eq(call.arguments[k], gold.arguments[k]) for k in gold.arguments)


@dataclass(frozen=True)
class _Replay:
    async def respond(self, call: Call, ctx: ToolContext) -> str:
        error = validate_call(call, ctx.schemas)
        if error:
            return error
        for s, step in enumerate(ctx.gold):
            for c, gold in enumerate(step):
                recorded = ctx.gold_responses[s][c] if s < len(ctx.gold_responses) else None
                if (s, c) not in ctx.used and recorded is not None and _matches(call, gold):
                    ctx.used.add((s, c))
                    return recorded
        return template_observation(call)


def _mock_offline(inputs: dict[str, Any]) -> dict[str, Any]:
    call = json.loads(inputs["call"])
    return {"response": template_observation(Call(call["name"], call["parameters"]))}


MOCKER_ROLE = LLMRole(
    name="sgls_mocker",
    system_prompt=_MOCKER_SYSTEM,
    user_template="Tool Definition:\n{tool}\n\nIncoming Request:\n{call}\n\nReturn the tool's output as `response`.",
    output_schema={
        "type": "object",
        "properties": {"response": {"type": "string"}},
        "required": ["response"],
    },
    offline=_mock_offline,
)


@dataclass(frozen=True)
class _LLMMock:
    client: LLMClient

    async def respond(self, call: Call, ctx: ToolContext) -> str:
        error = validate_call(call, ctx.schemas)
        if error:
            return error
        inputs = {
            "tool": json.dumps(ctx.schemas[call.name], ensure_ascii=False, indent=2),
            "call": json.dumps({"name": call.name, "parameters": call.arguments}, ensure_ascii=False),
        }
        return str((await run_role_async(MOCKER_ROLE, inputs, self.client))["response"])


RESPONDERS: Registry[Callable[[LLMClient | None], Responder]] = Registry("responder")
RESPONDERS.add(ResponderMode.TEMPLATE.value, lambda client: _Template())
RESPONDERS.add(ResponderMode.REPLAY.value, lambda client: _Replay())
RESPONDERS.add(ResponderMode.LLM.value, lambda client: _LLMMock(client) if client else _Template())


def make_responder(mode: ResponderMode, mocker: LLMClient | None = None) -> Responder:
    """The responder for `mode`; `llm` without a mocker client falls back to the template (offline)."""
    return RESPONDERS.get(mode.value)(mocker)
