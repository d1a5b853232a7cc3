"""What a simulated user knows about a GUST task, and the held-out split by environment.

A `UserScenario` holds exactly three things (τ²-bench's user instructions, grounded in the golden trace):
  * the **goal**: what the user wants done, in words (the first sentences of the descriptions of the tools the
    trace uses), without any argument value;
  * the **facts**: the values the task states (`tdg.taskgen.stated_arguments`: every argument that is not copied
    from an earlier tool output), each with a human name and the sub-goal it serves;
  * the **pick criteria**: how to choose when the trace picked one element of a list an earlier tool returned
    (a distinguishing attribute of the picked element, else its position), never the picked identifier itself.
Nothing else: no tool names, no dependency values (IDs the agent must look up), no outputs.

It travels to verl as `extra_info.interaction_kwargs = {"name": "gust_user", "scenario": <JSON>}` (JSON so the parquet
schema is the same for every row; verl passes `interaction_kwargs` through to the agent loop).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from data.gust import split_by_environment  # re-exported: the export writes the held-out split with it
from data.models import StrictModel, TaskRecord, ToolSchema, TraceCall
from gustforge.errors import InputError
from gustforge.hashing import canonical_json
from tdg.fields import resolve_path, singular
from tdg.taskgen import format_value, stated_arguments

__all__ = [
    "INTERACTION_NAME",
    "Fact",
    "PickCriterion",
    "UserScenario",
    "build_scenario",
    "build_interaction_kwargs",
    "scenario_from_kwargs",
    "split_by_environment",
]

INTERACTION_NAME = "gust_user"
_INDEXED = re.compile(r"^(?P<list>.*?)\[(?P<index>\d+)\](?:\.(?P<rest>.+))?$")
_ID_LIKE = re.compile(r"(^id$|_id$|_ids$|_key$|_code$|_number$|_no$|_uuid$|_ref$)")


class Fact(StrictModel):
    """One value the user holds and gives when asked."""

    name: str = Field(description="Human name of the value, e.g. 'customer id'.")
    key: str = Field(description="The argument name it fills (not a tool name).")
    value: Any
    purpose: str = Field(description="The sub-goal that needs it, in words.")

    def text(self) -> str:
        return f"{self.name} {format_value(self.value)}"


class PickCriterion(StrictModel):
    """How the user chooses one of several listed items."""

    about: str = Field(description="What is chosen, e.g. 'product'.")
    criterion: str = Field(description="e.g. 'the one whose category is \"toys\"' or 'the 4th one listed'.")


class UserScenario(StrictModel):
    """The simulated user's instructions for one task (goal, facts, pick criteria; nothing else)."""

    task_id: str
    goal: str = Field(description="The user's goal without any value.")
    facts: tuple[Fact, ...] = ()
    pick_criteria: tuple[PickCriterion, ...] = ()

    def opening(self) -> str:
        """The user's first message (the goal; the facts are given only when asked)."""
        details = " I can give you the details you need — just ask." if self.facts else ""
        return f"Hi! {self.goal}{details}"

    def to_kwargs(self) -> dict[str, str]:
        """verl's `extra_info.interaction_kwargs` (fixed parquet shape)."""
        return {"name": INTERACTION_NAME, "scenario": canonical_json(self.model_dump(mode="json"))}


def _humanize(name: str) -> str:
    return re.sub(r"[_\W]+", " ", re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)).strip().lower()


def _purpose(tool: str, schemas: Mapping[str, ToolSchema]) -> str:
    """A verb phrase for a tool: the first sentence of its description, else its humanized name."""
    schema = schemas.get(tool)
    description = (schema.description if schema else "").strip()
    sentence = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0].rstrip(".!? ") if description else ""
    phrase = sentence or _humanize(tool)
    return phrase[:1].lower() + phrase[1:]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _pick_criterion(arg: str, source: str, earlier: Sequence[TraceCall]) -> PickCriterion | None:
    """A criterion for a dependency argument copied from element i of a list with several elements."""
    tool, _, path = source.partition(".")
    match = _INDEXED.match(path)
    producer = next((c for c in reversed(earlier) if c.name == tool), None)
    if match is None or producer is None:
        return None
    found = resolve_path(producer.output, match["list"]) if match["list"] else [("", producer.output)]
    items = found[0][1] if found else None
    index = int(match["index"])
    if not isinstance(items, list) or len(items) < 2 or index >= len(items):
        return None
    about = singular(_humanize(match["list"].rsplit(".", 1)[-1])) if match["list"] else _humanize(arg)
    picked = items[index]
    if isinstance(picked, Mapping):
        for field, value in sorted(picked.items()):
            if _ID_LIKE.search(field) or isinstance(value, (dict, list)) or value in (None, ""):
                continue
            if sum(1 for item in items if isinstance(item, Mapping) and item.get(field) == value) == 1:
                criterion = f"the one whose {_humanize(field)} is {format_value(value)}"
                return PickCriterion(about=about, criterion=criterion)
    return PickCriterion(about=about, criterion=f"the {_ordinal(index + 1)} one listed")


def build_scenario(record: TaskRecord, schemas: Sequence[ToolSchema]) -> UserScenario:
    """The simulated user's scenario for one GUST task.

    Args:
        record: The task with its golden trace.
        schemas: The environment's tool schemas (for the words of the goal).

    Returns:
        The scenario: goal from the last stage's tools, sub-goals that need stated values, the stated values as
        facts (deduplicated by argument and value), and pick criteria for list picks.
    """
    by_name = {s.name: s for s in schemas}
    calls = [call for stage in record.trace.stages for call in stage.calls]
    if not calls:
        raise InputError(f"task {record.task_id} has no calls")
    last = record.trace.stages[-1].calls or record.trace.stages[-2].calls
    final_steps = list(dict.fromkeys(_purpose(c.name, by_name) for c in last))
    final_goal = " and ".join(final_steps)
    facts: dict[tuple[str, str], Fact] = {}
    criteria: dict[tuple[str, str], PickCriterion] = {}
    steps: list[str] = []
    for position, call in enumerate(calls):
        purpose = _purpose(call.name, by_name)
        stated = stated_arguments(call)
        if stated and purpose not in steps and purpose not in final_steps:
            steps.append(purpose)
        for arg, value in sorted(stated.items()):
            facts.setdefault((arg, canonical_json(value)), Fact(name=_humanize(arg), key=arg, value=value,
                                                                purpose=purpose))  # fmt: skip
        for arg, source in sorted(call.dependency_args.items()):
            crit = _pick_criterion(arg, source, calls[:position])
            if crit is not None:
                criteria.setdefault((crit.about, crit.criterion), crit)
    goal = f"My end goal: {final_goal}."
    if steps:
        goal += f" Along the way: {'; '.join(steps)}."
    return UserScenario(task_id=record.task_id, goal=goal, facts=tuple(facts.values()),
                        pick_criteria=tuple(criteria.values()))  # fmt: skip


def build_interaction_kwargs(record: TaskRecord, schemas: Sequence[ToolSchema]) -> dict[str, str] | None:
    """`extra_info.interaction_kwargs` of the task's verl row (see the module docstring); None for a task without
    calls (no goal to play: the row keeps its fixed prompt in every mode)."""
    if not any(stage.calls for stage in record.trace.stages):
        return None
    return build_scenario(record, schemas).to_kwargs()


def scenario_from_kwargs(kwargs: Mapping[str, Any] | None) -> UserScenario:
    """Parse `interaction_kwargs` back.

    Raises:
        InputError: The row carries no (or another kind of) user scenario.
    """
    if not kwargs or kwargs.get("name") != INTERACTION_NAME or not kwargs.get("scenario"):
        raise InputError(f"row has no {INTERACTION_NAME!r} interaction_kwargs (rebuild it with `gust build`)")
    return UserScenario.model_validate(json.loads(str(kwargs["scenario"])))
