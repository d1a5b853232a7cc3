"""Goal-first statistics of golden traces and tasks (issue 20): which calls serve the goal, which dependencies carry
information, how deep the chains are, and whether the task changes state.

- A **real dependency** is a dependency argument (`TraceCall.dependency_args`) whose value an earlier call's
  output produced and the task does not state: the value is no context argument of any call of the trace (those
  are stated in the text) and, when the task text is given, does not occur in it; and, when the schemas are
  given, the argument is no enum or boolean (a choice among a few values the user states, e.g. a sort order
  copied from a listed item). A dependency whose value is stated carries no information: the agent can use the
  stated value without the earlier call.
- **Real-dependency depth**: the number of calls on the longest chain of real dependencies (1: no real dependency;
  2: one call feeds another). Goal-first traces are staged by it (`tdg.reconstruct`), so it is their stage count.
- A call is **required** when its purpose (`TraceCall.purpose`) is ``requested``, or ``provides:<tool>.<arg>`` and
  that later call's `<arg>` is a real dependency on it. Rows built before purposes were recorded (purpose '') are
  judged structurally: a call is required when it is a real provider, or a goal that a chain reaches (it consumes a
  real dependency), or it changes the DB, or it is the trace's only call.
- A stage is **order-sensitive** when two of its calls change the DB and either touch one record
  (`tdg.quality.calls_conflict`) or both create records of one collection: the final DB (generated ids) then
  depends on the order of calls inside the turn.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import Field

from data.models import GoldenTrace, StrictModel, TaskRecord, ToolKind, ToolSchema, TraceCall

__all__ = [
    "RealDependency",
    "TraceGoals",
    "source_call",
    "stated_values",
    "real_dependencies",
    "depth_levels",
    "analyze_trace",
    "order_sensitive",
    "goal_summary",
    "PROVIDES",
    "REQUESTED",
]

REQUESTED = "requested"
PROVIDES = "provides:"


class RealDependency(StrictModel):
    """Call `consumer`'s argument `arg` takes a value call `provider` produced (indexes in execution order)."""

    provider: int
    consumer: int
    arg: str


class TraceGoals(StrictModel):
    """Goal-first figures of one trace."""

    calls: int
    required: int = Field(description="Calls that are requested or necessary providers.")
    isolated: int = Field(description="Calls (of a trace with >= 2) with no real dependency in or out.")
    real_dependencies: int
    depth: int = Field(description="Calls on the longest chain of real dependencies (1: none).")
    changes_state: bool
    order_sensitive_stages: int


def source_call(source: str, earlier: Sequence[str]) -> int | None:
    """Index in `earlier` of the most recent call named by a dependency source 'tool.path' (longest name first)."""
    for index in range(len(earlier) - 1, -1, -1):
        name = earlier[index]
        if source == name or source.startswith(name + ".") or source.startswith(name + "["):
            if not any(len(other) > len(name) and source.startswith(other + ".") for other in earlier[:index]):
                return index
    return None


def _flat(calls: Sequence[TraceCall] | GoldenTrace) -> list[TraceCall]:
    if isinstance(calls, GoldenTrace):
        return [call for stage in calls.stages for call in stage.calls]
    return list(calls)


def _parts(value: Any) -> Iterator[Any]:
    """`value` and every list item and object value inside it, at any depth."""
    yield value
    children = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
    for child in children:
        yield from _parts(child)


def stated_values(calls: Sequence[TraceCall]) -> set[str]:
    """repr() of every context argument value and of every value nested in one (a relation's `source` inside the
    stated `relations` list): what the task text states."""
    return {repr(part) for call in calls for arg in call.context_args for part in _parts(call.arguments.get(arg))}


def _choice(schema: ToolSchema | None, arg: str) -> bool:
    """The argument takes one of a few values (an enum or a boolean), not information an output must carry."""
    if schema is None:
        return False
    sub = (schema.parameters.get("properties") or {}).get(arg)
    if not isinstance(sub, Mapping):
        return False
    kind = sub.get("type")
    return bool(sub.get("enum")) or kind == "boolean" or (isinstance(kind, list) and "boolean" in kind)


def _said(value: Any, text: str, vocabulary: set[str]) -> bool:
    """The task text states `value`. A value with no letter or digit ("." as a path) is never said by the
    punctuation of a sentence; a one-word value that is also a word of a tool name of the trace ("docs",
    "category", "tasks") is said only when quoted, not by the goal phrase that names the call ("browse the docs by
    category")."""
    from tdg.quality import _in_text, _norm

    if isinstance(value, str):
        needle = _norm(value)
        if not any(ch.isalnum() for ch in needle):
            return False
        if needle.rstrip("s") in {w.rstrip("s") for w in vocabulary} and " " not in needle:
            return f'"{needle}"' in text
    return _in_text(value, text)


def real_dependencies(
    calls: Sequence[TraceCall] | GoldenTrace, text: str | None = None,
    schemas: Mapping[str, ToolSchema] | None = None,
) -> list[RealDependency]:  # fmt: skip
    """The real dependencies among `calls` (in execution order); `text`, when given, is the normalized task text
    (`tdg.quality._shown_text`) whose values count as stated too; with `schemas`, enum and boolean arguments are
    never real dependencies."""

    flat = _flat(calls)
    stated = stated_values(flat)
    names = [call.name for call in flat]
    vocabulary = {word for name in names for word in re.split(r"[^a-z0-9]+", name.lower()) if word}
    found = []
    for index, call in enumerate(flat):
        for arg, source in sorted(call.dependency_args.items()):
            provider = source_call(source, names[:index])
            value = call.arguments.get(arg)
            if provider is None or repr(value) in stated or _choice((schemas or {}).get(call.name), arg):
                continue
            if text is not None and not isinstance(value, list) and _said(value, text, vocabulary):
                continue
            found.append(RealDependency(provider=provider, consumer=index, arg=arg))
    return found


def depth_levels(n: int, deps: Sequence[RealDependency]) -> list[int]:
    """Level (0-based) of each of `n` calls: 1 + the highest level of its real providers, 0 without any."""
    level = [0] * n
    for consumer in range(n):
        providers = [d.provider for d in deps if d.consumer == consumer]
        level[consumer] = 1 + max((level[p] for p in providers), default=-1)
    return level


def _kind(call: TraceCall, schemas: Mapping[str, ToolSchema] | None) -> ToolKind | None:
    schema = (schemas or {}).get(call.name)
    return schema.kind if schema is not None else None


def order_sensitive(calls: Sequence[TraceCall], schemas: Mapping[str, ToolSchema] | None = None) -> bool:
    """Two DB-changing calls of one stage touch one record or create records of one collection (see module doc).

    Without schemas, two DB-changing calls of one tool count (two creates of one collection)."""
    from tdg.infer import tool_entity
    from tdg.quality import calls_conflict

    writes = [c for c in calls if c.db_changed]
    for i, a in enumerate(writes):
        for b in writes[i + 1 :]:
            if schemas is None:
                if a.name == b.name:
                    return True
                continue
            if calls_conflict(a, b, schemas):
                return True
            sa, sb = schemas.get(a.name), schemas.get(b.name)
            creates = sa is not None and sb is not None and sa.kind is ToolKind.CREATE is sb.kind
            if creates and tool_entity(sa) == tool_entity(sb):
                return True
    return False


def _required(index: int, call: TraceCall, flat: Sequence[TraceCall], deps: Sequence[RealDependency]) -> bool:
    if call.purpose == REQUESTED:
        return True
    if call.purpose.startswith(PROVIDES):
        target, _, arg = call.purpose[len(PROVIDES) :].rpartition(".")
        return any(d.provider == index and d.arg == arg and flat[d.consumer].name == target for d in deps)
    if call.purpose:
        return False
    outgoing = any(d.provider == index for d in deps)
    incoming = any(d.consumer == index for d in deps)
    return outgoing or incoming or bool(call.db_changed) or len(flat) == 1


def analyze_trace(
    trace: GoldenTrace, schemas: Mapping[str, ToolSchema] | None = None, text: str | None = None
) -> TraceGoals:
    """Goal-first figures of one trace (see the module doc)."""
    flat = _flat(trace)
    deps = real_dependencies(flat, text, schemas)
    linked = {d.provider for d in deps} | {d.consumer for d in deps}
    levels = depth_levels(len(flat), deps)
    return TraceGoals(
        calls=len(flat),
        required=sum(_required(i, c, flat, deps) for i, c in enumerate(flat)),
        isolated=sum(i not in linked for i in range(len(flat))) if len(flat) > 1 else 0,
        real_dependencies=len(deps),
        depth=1 + max(levels, default=0) if flat else 0,
        changes_state=trace.initial_db_hash != trace.final_db_hash or any(c.db_changed for c in flat),
        order_sensitive_stages=sum(order_sensitive(s.calls, schemas) for s in trace.stages),
    )


def _share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def goal_summary(
    records: Sequence[TaskRecord], schemas: Mapping[str, Mapping[str, ToolSchema]] | None = None
) -> dict[str, Any]:
    """Dataset figures for `gust quality`: required-call share, isolated-call share, real-dependency depth
    (median, share of tasks with >= 1), state-changing share (all tasks, and tasks of environments with a write
    tool), share of tasks with an order-sensitive stage."""
    from tdg.quality import _shown_text

    figures = [analyze_trace(r.trace, (schemas or {}).get(r.env_id), _shown_text(r)) for r in records]
    calls = sum(f.calls for f in figures)
    writable = [
        f for r, f in zip(records, figures, strict=True)
        if any(s.kind is not ToolKind.READ for s in ((schemas or {}).get(r.env_id) or {}).values())
    ]  # fmt: skip
    n = len(figures)
    return {
        "required_call_share": _share(sum(f.required for f in figures), calls),
        "isolated_call_share": _share(sum(f.isolated for f in figures), calls),
        "real_dependency_task_share": _share(sum(f.real_dependencies > 0 for f in figures), n),
        "real_dependency_depth_median": float(statistics.median([f.depth for f in figures])) if figures else 0.0,
        "real_dependency_depth_distribution": {
            str(d): sum(f.depth == d for f in figures) for d in sorted({f.depth for f in figures})
        },
        "state_changing_task_share": _share(sum(f.changes_state for f in figures), n),
        "state_changing_share_writable_envs": _share(sum(f.changes_state for f in writable), len(writable)),
        "order_sensitive_task_share": _share(sum(f.order_sensitive_stages > 0 for f in figures), n),
    }
