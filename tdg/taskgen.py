"""Task writing: turn a golden trace into a user-facing task (ToolVerse §3.2.3, App. B.3, prompt F.1).

The task writer is an `LLMRole`: the paper's "Long-horizon Task Synthesis" prompt over the golden trace, the tool
definitions and the incoming dependency edges; the offline twin writes the task from templates. Either way the
task must state every value the agent cannot obtain from a tool (the *stated* arguments: every argument that is
not a dependency argument) and keep dependency values implicit, so the agent has to chain the calls.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from data.models import GoldenTrace, QuarantineRecord, StageReport, StrictModel, TaskRecord, TaskText, TraceCall
from gustforge.errors import UNAVAILABLE_REASON, InputError, LLMError, LLMOutputError, TransientLLMError
from gustforge.hashing import canonical_json, content_hash, sha256_text, short_hash
from gustforge.llm import LLMClient, LLMRole, run_role

if TYPE_CHECKING:
    from envgen.runtime import Environment

__all__ = [
    "TASK_SYSTEM_PROMPT",
    "TASK_USER_TEMPLATE",
    "TASK_OUTPUT_SCHEMA",
    "make_task_writer_role",
    "task_inputs",
    "offline_task",
    "stated_arguments",
    "format_value",
    "write_task",
    "make_task_record",
    "graph_complexity",
    "TaskgenOutcome",
    "write_tasks",
]

logger = logging.getLogger(__name__)

STAGE = "taskgen"

TASK_SYSTEM_PROMPT = """\
Role: You are an expert AI dataset synthesizer specializing in constructing long-horizon reasoning tasks.
Input Data: Tool Dependency Graph: A logical graph defining the causal links between tools. Golden Trace: A \
sequence of executed tool calls T = [t1, t2, ..., tn], including input arguments and return values.
Task: Based on the provided Golden Trace and dependency logic, generate a natural language User Query and a \
Multi-turn Dialogue History that would naturally lead to this specific sequence of tool executions.
Requirements:
- Implicit Dependencies: The user query should not explicitly list every step. Instead, it should state a \
high-level goal that implicitly requires the agent to figure out the dependencies (e.g., "Book me a flight" \
implies checking availability first).
- Information Gap: Ensure the dialogue reflects a realistic interaction where the agent might need to ask for \
clarification if parameters were missing in the early stages, matching the structure of the Golden Trace.
- Consistency: The generated user intent must strictly align with the final output of the last tool in the trace.
- Grounding: state verbatim every argument value listed under "values the user must state" (IDs, names, \
amounts, dates), and never state a value that a dependency argument copies from an earlier tool output.
Output Format: Return the result in JSON format containing "user_query", "dialogue_history" (a list of \
{"role": "user"|"assistant", "content": ...} turns) and "reasoning_chain" (a list of short steps)."""

TASK_USER_TEMPLATE = """\
Tool definitions:
{tool_definitions_json}

Tool Dependency Graph (incoming edges of the tools in the trace, [source, target]):
{dependency_edges_json}

Values the user must state (stage, tool, argument, value):
{stated_values_json}

Input Trace: {golden_trace_json}"""

TASK_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_query": {"type": "string", "minLength": 1},
        "dialogue_history": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "role": {"type": "string", "enum": ["user", "assistant"]},
                    "content": {"type": "string"},
                },
                "required": ["role", "content"],
                "additionalProperties": False,
            },
        },
        "reasoning_chain": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["user_query", "dialogue_history", "reasoning_chain"],
    "additionalProperties": False,
}

_OPENERS = (
    "I need your help with a multi-step request.",
    "Could you take care of something for me?",
    "Here is what I want to get done.",
    "I have a task for you.",
)
_CLOSERS = (
    "Please figure out any other information you need with the available tools.",
    "Anything else you need, look it up yourself with the tools.",
    "Use the tools to find whatever else is required.",
)


# ----------------------------------------------------------------------------------------------- helpers


def stated_arguments(call: TraceCall) -> dict[str, Any]:
    """Arguments the task must state: all but the dependency arguments (which come from earlier outputs)."""
    return {name: value for name, value in call.arguments.items() if name not in call.dependency_args}


def format_value(value: Any) -> str:
    """How a value is written into task text: strings quoted, everything else as JSON.

    Example:
        >>> format_value("u1"), format_value(5), format_value(["a", 2])
        ('"u1"', '5', '["a", 2]')
    """
    if isinstance(value, str):
        return f'"{value}"'
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _humanize(name: str) -> str:
    return re.sub(r"[_\W]+", " ", name).strip()


def _goal(tool: str, definitions: Mapping[str, Mapping[str, Any]]) -> str:
    """A verb phrase for a tool: the first sentence of its description, else its humanized name."""
    description = str(definitions.get(tool, {}).get("description", "")).strip()
    sentence = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0].rstrip(".!? ") if description else ""
    phrase = sentence or _humanize(tool)
    return phrase[:1].lower() + phrase[1:]


def _values_clause(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{_humanize(name)} {format_value(value)}" for name, value in sorted(values.items()))


def _trace_calls(trace: Mapping[str, Any]) -> list[tuple[int, TraceCall]]:
    return [
        (index, TraceCall.model_validate(call))
        for index, stage in enumerate(trace["stages"], start=1)
        for call in stage["calls"]
    ]


# ----------------------------------------------------------------------------------------------- the role


def offline_task(inputs: dict[str, Any]) -> dict[str, Any]:
    """Deterministic template writer (the role's offline twin); reads the same inputs as the prompt.

    The query names the final goal and every stated value (grouped by the sub-goal that needs it); dependency
    values never appear. The dialogue plays the paper's information gap: the user states the goal, the agent
    asks for the missing details, the user supplies them.
    """
    trace = _as_obj(inputs["golden_trace_json"])
    definitions = {d["name"]: d for d in _as_obj(inputs["tool_definitions_json"])}
    edges = [tuple(e) for e in _as_obj(inputs["dependency_edges_json"])]
    rng = random.Random(canonical_json([inputs["seed"], trace["trace_id"]]))
    calls = _trace_calls(trace)
    last_stage = calls[-1][0] if calls else 0
    final_goal = " and ".join(_goal(c.name, definitions) for s, c in calls if s == last_stage) or "finish my request"
    details = [f"to {_goal(c.name, definitions)}: {_values_clause(v)}" for _, c in calls if (v := stated_arguments(c))]
    opener, closer = rng.choice(_OPENERS), rng.choice(_CLOSERS)
    detail_text = f" Details you will need — {'; '.join(details)}." if details else ""
    query = f"{opener} My end goal: {final_goal}.{detail_text} {closer}"
    dialogue = [{"role": "user", "content": f"{opener} My end goal: {final_goal}."}]
    if details:
        names = sorted({_humanize(n) for _, c in calls for n in stated_arguments(c)})
        dialogue.append({"role": "assistant", "content": f"Happy to help. Could you give me the {', '.join(names)}?"})
        dialogue.append({"role": "user", "content": f"Sure — {'; '.join(details)}."})
    return {"user_query": query, "dialogue_history": dialogue, "reasoning_chain": _reasoning(calls, edges, definitions)}


def _reasoning(
    calls: Sequence[tuple[int, TraceCall]], edges: Sequence[tuple[str, ...]], definitions: Mapping[str, Any]
) -> list[str]:
    steps: list[str] = []
    for stage, call in calls:
        parts = [f"Stage {stage}: call {call.name} to {_goal(call.name, definitions)}"]
        if stated := stated_arguments(call):
            parts.append(f"with {', '.join(sorted(stated))} given by the user")
        for arg, source in sorted(call.dependency_args.items()):
            parts.append(f"taking {arg} from the output {source}")
        after = sorted({src for src, dst in edges if dst == call.name and src != call.name})
        if after:
            parts.append(f"after {', '.join(after)}")
        steps.append(", ".join(parts) + ".")
    return steps


def _as_obj(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def make_task_writer_role() -> LLMRole:
    """The task-writer `LLMRole` (prompt F.1 + grounding rule; offline twin `offline_task`)."""
    return LLMRole(
        name="task_writer",
        system_prompt=TASK_SYSTEM_PROMPT,
        user_template=TASK_USER_TEMPLATE,
        output_schema=TASK_OUTPUT_SCHEMA,
        offline=offline_task,
    )


def task_inputs(
    trace: GoldenTrace, env: Environment, *, incoming_edges: Iterable[tuple[str, str]], seed: int
) -> dict[str, Any]:
    """The role inputs for one trace: trace, definitions of the tools it uses, edges, stated values, seed."""
    used = {call.name for stage in trace.stages for call in stage.calls}
    definitions = [
        {"name": s.name, "description": s.description, "parameters": s.parameters}
        for s in env.schemas
        if s.name in used
    ]
    stated = [
        [index, call.name, arg, value]
        for index, stage in enumerate(trace.stages, start=1)
        for call in stage.calls
        for arg, value in sorted(stated_arguments(call).items())
    ]
    return {
        "golden_trace_json": trace.model_dump(mode="json"),
        "tool_definitions_json": definitions,
        "dependency_edges_json": sorted({(src, dst) for src, dst in incoming_edges if dst in used}),
        "stated_values_json": stated,
        "seed": seed,
    }


# ----------------------------------------------------------------------------------------------- public API


def write_task(
    trace: GoldenTrace,
    env: Environment,
    *,
    incoming_edges: Iterable[tuple[str, str]],
    client: LLMClient,
    seed: int,
    role: LLMRole | None = None,
) -> TaskText:
    """Write the user-facing task for one golden trace.

    Args:
        trace: The golden trace.
        env: Its environment (tool definitions).
        incoming_edges: TDG edges `(source, target)` into the tools of the trace.
        client: LLM client; its backend picks the offline templates or the endpoint.
        seed: Seed of the template choices (offline) / part of the prompt (openai).
        role: Task-writer role; default `make_task_writer_role()`.

    Returns:
        The validated `TaskText`.

    Raises:
        InputError: The trace belongs to another environment or has no calls.
        LLMOutputError: The endpoint's reply does not validate against `TASK_OUTPUT_SCHEMA`.
        LLMError: The endpoint failed for good.
    """
    if trace.env_id != env.env_id:
        raise InputError(f"trace {trace.trace_id} is for env {trace.env_id}, not {env.env_id}")
    if not any(stage.calls for stage in trace.stages):
        raise InputError(f"trace {trace.trace_id} has no calls")
    inputs = task_inputs(trace, env, incoming_edges=incoming_edges, seed=seed)
    out = run_role(role or make_task_writer_role(), inputs, client)
    return TaskText(
        user_query=out["user_query"],
        dialogue_history=tuple({"role": t["role"], "content": t["content"]} for t in out["dialogue_history"]),
        reasoning_chain=tuple(out["reasoning_chain"]),
    )


def graph_complexity(trace: GoldenTrace) -> int:
    """Size of the trace subgraph: tool calls plus dependency edges used (ToolVerse Fig. 4b)."""
    return sum(len(stage.calls) for stage in trace.stages) + len(trace.edges_used)


def make_task_record(trace: GoldenTrace, text: TaskText, env: Environment, *, seed: int) -> TaskRecord:
    """Bundle a trace and its text into an unverified `TaskRecord` (task_id = content hash of both).

    Example: see `tests/tdg/test_taskgen.py`.
    """
    task_id = short_hash({"trace": trace.model_dump(mode="json"), "text": text.model_dump(mode="json")}, 16)
    provenance = {
        "toolset_id": env.manifest.toolset_id if env.manifest is not None else "",
        "schemas_sha256": content_hash([s.model_dump(mode="json") for s in env.schemas]),
        "tools_source_sha256": sha256_text(env.tools_source),
        "initial_db_sha256": content_hash(env.initial_db),
    }
    return TaskRecord(
        task_id=task_id,
        env_id=env.env_id,
        text=text,
        trace=trace,
        tools=tuple(s.name for s in env.schemas),
        graph_complexity=graph_complexity(trace),
        seed=seed,
        provenance=provenance,
    )


class TaskgenOutcome(StrictModel):
    """Task records written for a batch of traces, the quarantined traces and the stage accounting."""

    records: tuple[TaskRecord, ...]
    dropped: tuple[QuarantineRecord, ...] = ()
    report: StageReport = Field(description="inputs = traces; produced = records.")


def write_tasks(
    traces: Sequence[GoldenTrace],
    env: Environment,
    *,
    client: LLMClient,
    seed: int,
    incoming_edges: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> TaskgenOutcome:
    """Write tasks for every trace of one environment, quarantining traces the writer cannot handle.

    Args:
        traces: Golden traces of `env`.
        env: The environment.
        client: LLM client.
        seed: Base seed; each trace gets a seed derived from it and its trace_id.
        incoming_edges: trace_id -> TDG edges into its tools; default each trace's `edges_used`.

    Returns:
        A `TaskgenOutcome` whose report balances (produced + dropped == len(traces)).
    """
    records: list[TaskRecord] = []
    dropped: list[QuarantineRecord] = []
    for trace in traces:
        task_seed = int(short_hash([seed, trace.trace_id], 8), 16)
        edges = (incoming_edges or {}).get(trace.trace_id, trace.edges_used)
        try:
            text = write_task(trace, env, incoming_edges=edges, client=client, seed=task_seed)
        except (InputError, LLMError) as exc:
            if isinstance(exc, TransientLLMError):
                reason = UNAVAILABLE_REASON
            elif isinstance(exc, InputError):
                reason = "invalid_trace"
            else:
                reason = "writer_bad_output" if isinstance(exc, LLMOutputError) else "writer_llm_error"
            logger.warning("task writer dropped trace %s: %s", trace.trace_id, exc)
            dropped.append(QuarantineRecord(item_id=trace.trace_id, stage=STAGE, reason=reason, detail=str(exc)))
            continue
        records.append(make_task_record(trace, text, env, seed=task_seed))
    counts: dict[str, int] = {}
    for q in dropped:
        counts[q.reason] = counts.get(q.reason, 0) + 1
    report = StageReport(stage=STAGE, inputs=len(traces), produced=len(records), dropped=counts)
    return TaskgenOutcome(records=tuple(records), dropped=tuple(dropped), report=report)
