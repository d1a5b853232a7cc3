"""The LLM planning role: the model chooses each tool's behaviour and collection; the name-based plan is a hint.

`plan_toolset` shows the model every tool (name, description, parameters) with the registered behaviours
(`envgen.entities.PLAN_CHOICES`, one line of meaning each) and the heuristic plan's choice phrased as a
name-based guess that may be wrong. Each answer is checked before it is applied:
    unknown tool / behaviour         rejected, with the reason
    breaks the description's promise a read for a tool that promises a change, or a change for a read
                                     (`envgen.fidelity.contradiction`): rejected
    the parameters cannot carry it   no id parameter for `read_one`, no amount for `payment`...: rejected
    agrees with the guess            nothing to override
    otherwise                        a `PlanOverride` with the reason (reaches `ToolPlan.reason`, manifest notes)
With no client, the offline backend, or an endpoint that fails or answers garbage, the heuristic plan stays whole
(the fallback says why). `apply_decision` stores the overrides on the refactored toolset, so every module that
plans the environment from it (`plan_environment(..., refactored.plan_overrides)`) builds the same plan.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import Field

from data.models import PlanOverride, RefactoredToolset, StrictModel, ToolSchema
from envgen import prompts
from envgen.entities import PLAN_CHOICES, ToolPlan, choice_of, collection_name, plan_choice, plan_environment
from envgen.fidelity import contradiction, promise
from envgen.refactor import finalize_tools
from gustforge.errors import LLMError
from gustforge.llm import LLMClient, LLMRole, run_role

__all__ = ["PLAN_ROLE", "PLANNER_NOTE", "PlanDecision", "plan_toolset", "apply_decision"]

logger = logging.getLogger(__name__)

PLANNER_NOTE = "(planner)"  # manifest-notes key of a whole-plan fallback (tool names are snake_case: no clash)


class PlanDecision(StrictModel):
    """What the planning role decided for one toolset."""

    overrides: dict[str, PlanOverride] = Field(
        default_factory=dict, description="tool -> the model's choice where it overruled the name-based guess."
    )
    rejected: dict[str, str] = Field(default_factory=dict, description="tool -> why the model's choice was refused.")
    fallback: str | None = Field(default=None, description="Why the heuristic plan was kept whole (LLM failure).")


_PLAN_OUTPUT = {
    "type": "object",
    "required": ["tools"],
    "properties": {
        "tools": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "behaviour", "collection"],
                "properties": {
                    "name": {"type": "string"},
                    "behaviour": {"type": "string"},
                    "collection": {"type": ["string", "null"]},
                    "why": {"type": "string"},
                },
            },
        }
    },
}


def _offline_reply(inputs: dict[str, Any]) -> dict[str, Any]:
    """The deterministic twin: every tool keeps its name-based guess."""
    tools = json.loads(inputs["tools"]) if isinstance(inputs["tools"], str) else inputs["tools"]
    return {"tools": [{"name": t["name"], **t["name_based_guess"], "why": "the name-based guess"} for t in tools]}


PLAN_ROLE = LLMRole(
    name="plan",
    system_prompt=prompts.PLAN_SYSTEM,
    user_template=prompts.PLAN_USER,
    output_schema=_PLAN_OUTPUT,
    offline=_offline_reply,
)


def _guess(plan: ToolPlan) -> dict[str, Any]:
    return {"behaviour": choice_of(plan), "collection": plan.entity}


def _inputs(refactored: RefactoredToolset, heuristic: dict[str, ToolPlan]) -> dict[str, Any]:
    behaviours = "\n".join(f"- {name}: {PLAN_CHOICES.get(name).meaning}" for name in PLAN_CHOICES)
    tools = [
        {"name": t.name, "description": t.description, "parameters": t.parameters,
         "name_based_guess": _guess(heuristic[t.name])}
        for t in refactored.tools
    ]  # fmt: skip
    return {"behaviours": behaviours, "tools": json.dumps(tools, ensure_ascii=False)}


def _judge(tool: ToolSchema, guess: ToolPlan, answer: dict[str, Any]) -> PlanOverride | str | None:
    """The override an answer asks for, a rejection reason, or None when it agrees with the guess."""
    behaviour, collection = str(answer["behaviour"]), answer.get("collection")
    if behaviour not in PLAN_CHOICES:
        return f"unknown behaviour {behaviour!r} (valid: {', '.join(PLAN_CHOICES.names())})"
    if behaviour == choice_of(guess) and collection_name(collection) in (collection_name(guess.entity), None):
        return None
    if (behaviour, collection) == (choice_of(guess), guess.entity):
        return None
    broken = contradiction(promise(tool), PLAN_CHOICES.get(behaviour).family)
    if broken is not None:
        return f"'{behaviour}' breaks the description: {broken}"
    built = plan_choice(tool, behaviour, collection)
    if built is None:
        return f"its parameters cannot carry '{behaviour}' on {collection!r}"
    if (choice_of(built), built.entity) == (choice_of(guess), guess.entity):
        return None
    why = str(answer.get("why") or "no reason given").strip()
    reason = (f"the planning model chose '{behaviour}' on {built.entity!r} over the name-based guess "
              f"'{choice_of(guess)}' on {guess.entity!r}: {why}")  # fmt: skip
    return PlanOverride(behaviour=behaviour, entity=built.entity, reason=reason)


def _decide(refactored: RefactoredToolset, heuristic: dict[str, ToolPlan], reply: dict[str, Any]) -> PlanDecision:
    tools = {t.name: t for t in refactored.tools}
    overrides: dict[str, PlanOverride] = {}
    rejected: dict[str, str] = {}
    seen: set[str] = set()
    for answer in reply["tools"]:
        name = str(answer["name"])
        if name not in tools:
            rejected[name] = "the planning model named a tool the toolset does not have"
            continue
        if name in seen or name in refactored.log_only:
            continue  # a repeated answer, or a tool the repair loop already forced to log-only
        seen.add(name)
        verdict = _judge(tools[name], heuristic[name], answer)
        if isinstance(verdict, PlanOverride):
            overrides[name] = verdict
        elif verdict is not None:
            rejected[name] = f"planner choice rejected: {verdict}"
    return PlanDecision(overrides=overrides, rejected=rejected)


def plan_toolset(refactored: RefactoredToolset, client: LLMClient | None) -> PlanDecision:
    """Let the LLM choose each tool's behaviour and collection, checked against its description.

    Args:
        refactored: the refactored toolset (its `plan_overrides` are ignored: the guess is the name-based plan).
        client: the LLM client; None or the offline backend keeps the heuristic plan (no request is made).

    Returns:
        A `PlanDecision`: the accepted overrides (each with its reason), the refused answers with theirs, and
        `fallback` set when the endpoint failed or answered garbage (then there are no overrides).
    """
    if client is None or client.settings.backend == "offline":
        return PlanDecision()
    plan = plan_environment(refactored.tools, refactored.log_only)
    heuristic = {p.name: p for p in plan.tools}
    try:
        reply = run_role(PLAN_ROLE, _inputs(refactored, heuristic), client)
    except LLMError as exc:
        logger.warning("plan %s: the planning model failed, name-based plan kept: %s", refactored.toolset_id, exc)
        return PlanDecision(fallback=f"llm_plan_failed: name-based plan kept: {exc}")
    return _decide(refactored, heuristic, reply)


def apply_decision(refactored: RefactoredToolset, decision: PlanDecision) -> RefactoredToolset:
    """The toolset planned as decided: overrides stored, response schemas of overridden tools rebuilt, and the
    refusals and a fallback noted (manifest notes).

    Args:
        refactored: the refactored toolset the decision was made for.
        decision: `plan_toolset`'s decision.

    Returns:
        `refactored` itself when the decision is empty; otherwise a copy with `plan_overrides`, re-finalized
        tools (an overridden tool's response follows its new behaviour) and notes.
    """
    if decision == PlanDecision():
        return refactored
    tools = list(refactored.tools)
    kept = finalize_tools(tools, keep_responses=True, log_only=refactored.log_only, overrides=decision.overrides)
    fresh = finalize_tools(tools, log_only=refactored.log_only, overrides=decision.overrides)
    final = tuple(new if new.name in decision.overrides else old for old, new in zip(kept, fresh, strict=True))
    notes = dict(refactored.notes)
    names = {t.name for t in refactored.tools}
    for name, why in decision.rejected.items():
        key, why = (name, why) if name in names else (PLANNER_NOTE, f"{name}: {why}")
        notes[key] = f"{notes[key]}; {why}" if key in notes else why
    if decision.fallback:
        notes[PLANNER_NOTE] = decision.fallback
    return refactored.model_copy(update={"tools": final, "plan_overrides": decision.overrides, "notes": notes})
