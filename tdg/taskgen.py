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
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
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
    "producer",
    "role_provenance",
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
- Determinism: where a dependency value is one of several results, state the attribute or rule listed under \
"how the user singles out a choice" (e.g. "the product named Garden Hose", "the first order listed").
- Voice: write as the user would. Never quote the tool descriptions, never name the tools, never list the steps.
- No repetition: the user query is the user's next message after the dialogue history; do not repeat in it \
what the history already says (an empty history is fine).
Output Format: Return the result in JSON format containing "user_query", "dialogue_history" (a list of \
{"role": "user"|"assistant", "content": ...} turns) and "reasoning_chain" (a list of short steps)."""

TASK_USER_TEMPLATE = """\
Tool definitions:
{tool_definitions_json}

Tool Dependency Graph (incoming edges of the tools in the trace, [source, target]):
{dependency_edges_json}

Values the user must state (stage, tool, argument, value):
{stated_values_json}

How the user singles out a choice (stage, tool, argument, statement):
{pick_criteria_json}

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

_OPENERS = ("", "", "Hi!", "Hello,", "Hey there.", "Good morning.", "Quick one:", "Hi, hoping you can help.",
            "Hello again.", "Morning!", "I have a request.", "Got a minute?", "Hi team,")  # fmt: skip
_WANTS = (
    "I'd like to {goal}.", "Could you {goal}?", "Please {goal}.", "I need to {goal}.", "Can you help me {goal}?",
    "I want to {goal}.", "Would you {goal} for me?", "My plan is to {goal}.", "Today I have to {goal}.",
    "I'm hoping you can {goal}.", "The job: {goal}.", "Help me {goal}, please.",
)  # fmt: skip
_CLOSERS = ("", "", "Thanks!", "Thank you.", "Let me know when it's done.", "Appreciate it.", "Cheers.",
            "Tell me once everything is through.", "Thanks in advance.", "That's all for now.")  # fmt: skip
_ASKS = ("Sure, what exactly should I do?", "Happy to help. What do you need done?", "Of course. What would you like?",
         "Glad to. What's the plan?")  # fmt: skip
_ACKS = ("Thanks, noted. What would you like me to do with these?", "Got it. What should I do?",
         "Thanks. What do you need?", "Noted. How can I help?")  # fmt: skip
_CONTEXT = ("I have some details ready: {}.", "Here's my information: {}.", "For reference: {}.",
            "Some details first: {}.")  # fmt: skip
_TOPICS = ("I need some help with {}.", "It's about {}.", "I have a request about {}.", "Can you help me with {}?")
_DETAIL_LEADS = ("Details: {}.", "Here is what you need: {}.", "For reference: {}.", "The details: {}.")
_PICK_LEADS = ("Go with {}.", "I mean {}.", "Pick {}.", "It should be {}.")
_MAX_GOALS = 4
_VALUE_FORMS = ("{name} {value}", "{name} is {value}", "the {name} {value}", "{value} as the {name}")
_PICK_FIELD = ("the {entity} whose {key} is {value}", "the {entity} with {key} {value}")
_PICK_POSITION = ("the {position} {entity} listed", "the {position} {entity} in the list")
_ARTICLE_VERBS = frozenset(
    "get list search find fetch read show view check create add make register book update set edit modify change "
    "delete remove cancel close archive send submit assign reschedule extend issue generate approve reject suspend "
    "escalate transfer restock open post publish upload download convert calculate compute translate analyze "
    "summarize schedule reserve pay refund track start stop run execute record log rate review query lookup "
    "retrieve verify validate move rename share invite notify apply renew return ship place".split()
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


def _verb_object(tool: str, definitions: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """(verb, object) of a tool's purpose in plain words: 'cancel_order' -> ('cancel', 'order').

    The verb is the name's first word when it is one, else the first word of the description (one word, never a
    sentence: 'Charges a card ...' -> 'charge'), else one fitting the tool's kind ('look up' for a read).
    """
    from tdg.quality import ACTION_VERBS

    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", tool).replace("_", " ").replace("-", " ").lower().split()
    if not words:
        return "finish", "my request"
    if words[0] in ACTION_VERBS and len(words) > 1 and words[1] in ("and", "or", "to", "from", "by", "with"):
        return " ".join(words), ""  # "drag_and_drop" -> "drag and drop"
    if words[0] in ACTION_VERBS and len(words) > 1:
        return words[0], " ".join(words[1:])
    first = (re.findall(r"[A-Za-z]+", str(definitions.get(tool, {}).get("description", ""))) or [""])[0].lower()
    for candidate in (first, first[:-1], first[:-2]):
        if candidate and candidate in ACTION_VERBS and candidate not in words:
            return candidate, " ".join(words)
    kind = str(definitions.get(tool, {}).get("kind", "read"))
    verb = {"read": "look up", "create": "create", "update": "update", "delete": "remove"}.get(kind, "run")
    return verb, " ".join(words)


def _goal(tool: str, definitions: Mapping[str, Mapping[str, Any]]) -> str:
    """A short goal phrase from the tool's name ("cancel_order" -> "cancel the order"); never its description."""
    verb, obj = _verb_object(tool, definitions)
    return f"{verb} the {obj}" if obj else verb


def _id_items(node: Any) -> Iterable[tuple[str, Any]]:
    """(key, scalar) pairs of every mapping nested in `node`."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if isinstance(value, Mapping | list | tuple):
                yield from _id_items(value)
            else:
                yield str(key), value
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _id_items(item)


def _goal_phrase(calls: Sequence[TraceCall], definitions: Mapping[str, Mapping[str, Any]], rng: random.Random) -> str:
    """What the user wants done, each object named once: "create a rental, extend it and then cancel it".

    "it" only when the call acts on the record the previous one named or made (a shared id), so "extend the
    rental, then create a rental" stays two rentals.
    """
    from tdg.quality import id_values

    def own_ids(call: TraceCall, obj: str) -> set[str]:  # ids of the object itself ("order_id"), not its FKs
        noun = obj.split()[-1] if obj else ""
        output = call.output if isinstance(call.output, Mapping) else {}
        found = id_values(call.arguments) | id_values(output)
        keyed = {repr(v) for k, v in _id_items([call.arguments, output]) if k in ("id", f"{noun}_id", f"{noun}Id")}
        return found & keyed

    chosen: dict[tuple[str, str], set[str]] = {}
    for call in calls:
        pair = _verb_object(call.name, definitions)
        chosen.setdefault(pair, own_ids(call, pair[1]))
    items = list(chosen.items())
    if len(items) > _MAX_GOALS:  # a goal, not the step list: the first write and the last ones
        items = [items[0], *items[-(_MAX_GOALS - 1) :]]
    phrases = []
    previous: tuple[str, set[str]] = ("", set())
    for (verb, obj), ids in items:
        if not obj:
            phrases.append(verb)
        elif obj == previous[0] and ids & previous[1]:
            phrases.append(f"{verb} it")
        else:
            article = "a" if verb in ("create", "add", "make", "book", "open", "register", "place") else "the"
            article = "an" if article == "a" and obj[:1] in "aeiou" else article
            phrases.append(f"{verb} {article} {obj}")
        previous = (obj, ids)
    if len(phrases) == 1:
        return phrases[0]
    joiner = rng.choice((" and then ", ", and after that ", " and finally ", ", then "))
    return ", ".join(phrases[:-1]) + joiner + phrases[-1]


def _values_clause(values: Mapping[str, Any], rng: random.Random | None = None) -> str:
    form = rng.choice(_VALUE_FORMS) if rng is not None else _VALUE_FORMS[0]
    return ", ".join(
        form.format(name=_humanize(name), value=format_value(value)) for name, value in sorted(values.items())
    )


def _trace_calls(trace: Mapping[str, Any]) -> list[tuple[int, TraceCall]]:
    return [
        (index, TraceCall.model_validate(call))
        for index, stage in enumerate(trace["stages"], start=1)
        for call in stage["calls"]
    ]


# ----------------------------------------------------------------------------------------------- the role


def _pick_statements(calls: Sequence[tuple[int, TraceCall]], rng: random.Random) -> list[str]:
    """How the user singles out each list pick ("the product whose name is "Hose""), from the recorded criteria."""
    from tdg.quality import list_pick

    outputs: dict[str, Any] = {}
    statements: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for _, call in calls:
        for arg, criterion in sorted(call.pick_criteria.items()):
            tool, _, path = call.dependency_args.get(arg, "").partition(".")
            picked = list_pick(outputs.get(tool), path) if tool in outputs else None
            if picked is None:
                continue
            element, _siblings, _ = picked
            last = list(re.finditer(r"\[\d+\]", path))[-1]
            entity = singular_noun(re.split(r"[.\]]", path[: last.start()])[-1] or arg)
            kind, _, spec = criterion.partition("=")
            key = (entity, criterion, canonical_json(element.get(spec)) if isinstance(element, Mapping) else "")
            if key in seen:
                continue
            seen.add(key)
            if kind == "field" and isinstance(element, Mapping) and spec in element:
                statements.append(rng.choice(_PICK_FIELD).format(entity=entity, key=_humanize(spec),
                                                                 value=format_value(element[spec])))  # fmt: skip
            elif kind == "position":
                statements.append(rng.choice(_PICK_POSITION).format(entity=entity, position=spec))
        outputs[call.name] = call.output
    return statements


def singular_noun(word: str) -> str:
    """'products' -> 'product', 'categories' -> 'category' (enough for task text)."""
    word = _humanize(word)
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def _sentence(text: str) -> str:
    text = re.sub(r"(, )([A-Z])(?=[a-z])", lambda m: m.group(1) + m.group(2).lower(), text.strip())
    return text[:1].upper() + text[1:] if text else text


def _details(
    calls: Sequence[tuple[int, TraceCall]], definitions: Mapping[str, Any], rng: random.Random, goals: Collection[str]
) -> list[str]:
    """One clause per call with stated values; a value said once; a field stated twice with different values
    names what each is for ("to extend the rental: days 30")."""
    stated = [(c, v) for _, c in calls if (v := stated_arguments(c))]
    names = Counter(name for _, values in stated for name in values)
    seen: set[tuple[str, str]] = set()
    clauses = []
    for call, values in stated:
        fresh = {k: v for k, v in values.items() if (k, canonical_json(v)) not in seen}
        seen.update((k, canonical_json(v)) for k, v in values.items())
        if not fresh:
            continue
        clause = _values_clause(fresh, rng)
        if any(names[k] > 1 for k in fresh):  # what the value is for: the goal, or the thing a lookup is about
            purpose = f"to {_goal(call.name, definitions)}" if call.name in goals else \
                f"for the {_verb_object(call.name, definitions)[1]}"  # fmt: skip
            clause = f"{clause} {purpose}"
        clauses.append(clause)
    return clauses


def _exchange(user_parts: Sequence[str], assistant: str) -> list[dict[str, str]]:
    user = _sentence(" ".join(p for p in user_parts if p))
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def offline_task(inputs: dict[str, Any]) -> dict[str, Any]:
    """Deterministic template writer (the role's offline twin); reads the same inputs as the prompt.

    The query always states the goal (the writes the user wants, else the final lookup, object named once), and
    the text holds every value the user must state and how to single out each list pick, in seeded wording;
    dependency values, tool names, description sentences and the step list never appear. Some tasks (by seed) play
    the information gap as a dialogue — the user first gives the details or names the topic, the assistant asks
    what to do — and the query is then the user's request, so the prompt (history + query) says nothing twice.
    """
    trace = _as_obj(inputs["golden_trace_json"])
    definitions = {d["name"]: d for d in _as_obj(inputs["tool_definitions_json"])}
    edges = [tuple(e) for e in _as_obj(inputs["dependency_edges_json"])]
    rng = random.Random(canonical_json([inputs["seed"], trace["trace_id"]]))
    calls = _trace_calls(trace)
    last_stage = calls[-1][0] if calls else 0
    writes = [c for _, c in calls if str(definitions.get(c.name, {}).get("kind", "read")) != "read"]
    targets = writes or [c for s, c in calls if s == last_stage]
    goal = _goal_phrase(targets, definitions, rng) if targets else "finish my request"
    details = _details(calls, definitions, rng, {c.name for c in targets})
    rng.shuffle(details)
    picks = list(dict.fromkeys(_pick_statements(calls, rng)))
    want = rng.choice(_WANTS).format(goal=goal)
    opener, closer = rng.choice(_OPENERS), rng.choice(_CLOSERS)
    detail_text = "; ".join(details)
    pick_text = rng.choice(_PICK_LEADS).format(" and ".join(picks)) if picks else ""
    detail_sentence = rng.choice(_DETAIL_LEADS).format(detail_text) if details else ""
    dialogue: list[dict[str, str]] = []
    mode = rng.random()
    if details and mode < 0.3:  # the user gives the details first, then says what to do with them
        dialogue = _exchange((opener, rng.choice(_CONTEXT).format(detail_text)), rng.choice(_ACKS))
        query = " ".join(p for p in (want, pick_text, closer) if p)
    elif mode < 0.5:  # the user names the topic, the assistant asks what exactly to do
        noun = _verb_object(targets[0].name, definitions)[1] if targets else "account"
        topic = f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"
        dialogue = _exchange((opener, rng.choice(_TOPICS).format(topic)), rng.choice(_ASKS))
        query = " ".join(p for p in (want, detail_sentence, pick_text, closer) if p)
    else:
        query = " ".join(p for p in (opener, want, detail_sentence, pick_text, closer) if p)
    return {"user_query": _sentence(query), "dialogue_history": dialogue,
            "reasoning_chain": _reasoning(calls, edges, definitions)}  # fmt: skip


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
        {"name": s.name, "description": s.description, "parameters": s.parameters, "kind": str(s.kind)}
        for s in env.schemas
        if s.name in used
    ]
    stated = [
        [index, call.name, arg, value]
        for index, stage in enumerate(trace.stages, start=1)
        for call in stage.calls
        for arg, value in sorted(stated_arguments(call).items())
    ]
    calls = [(index, call) for index, stage in enumerate(trace.stages, start=1) for call in stage.calls]
    statements = iter(_pick_statements(calls, random.Random(0)))
    picks = [[index, call.name, arg, next(statements, criterion)]
             for index, call in calls for arg, criterion in sorted(call.pick_criteria.items())]  # fmt: skip
    return {
        "golden_trace_json": trace.model_dump(mode="json"),
        "tool_definitions_json": definitions,
        "dependency_edges_json": sorted({(src, dst) for src, dst in incoming_edges if dst in used}),
        "stated_values_json": stated,
        "pick_criteria_json": picks,
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


def producer(backend: str, model: str | None, *, offline: str = "deterministic templates") -> str:
    """How a part's producer is recorded: 'offline (deterministic templates)' or 'openai:<model>'."""
    return f"offline ({offline})" if backend == "offline" else f"{backend}:{model or 'endpoint default model'}"


def role_provenance(env: Environment, trace: GoldenTrace, writer: str) -> dict[str, str]:
    """`role:<part>` -> producer, for the parts known when a task is written (verification is added later)."""
    manifest = env.manifest
    built = producer(manifest.backend, manifest.model) if manifest is not None else "not recorded"
    source = trace.graph_source or "not recorded"
    graphs = "offline (deterministic rules)" if source == "deterministic" else source
    return {"role:schemas": built, "role:db": built, "role:code": built, "role:graphs": graphs, "role:tasks": writer}


def make_task_record(trace: GoldenTrace, text: TaskText, env: Environment, *, seed: int,
                     writer: str = "offline (deterministic templates)") -> TaskRecord:  # fmt: skip
    """Bundle a trace and its text into an unverified `TaskRecord` (task_id = content hash of both).

    `writer` records who wrote the text (see `producer`). Example: see `tests/tdg/test_taskgen.py`.
    """
    task_id = short_hash({"trace": trace.model_dump(mode="json"), "text": text.model_dump(mode="json")}, 16)
    provenance = {
        "toolset_id": env.manifest.toolset_id if env.manifest is not None else "",
        "schemas_sha256": content_hash([s.model_dump(mode="json") for s in env.schemas]),
        "tools_source_sha256": sha256_text(env.tools_source),
        "initial_db_sha256": content_hash(env.initial_db),
        **role_provenance(env, trace, writer),
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
    settings = client.settings
    writer = producer(settings.backend, settings.model)
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
        records.append(make_task_record(trace, text, env, seed=task_seed, writer=writer))
    counts: dict[str, int] = {}
    for q in dropped:
        counts[q.reason] = counts.get(q.reason, 0) + 1
    report = StageReport(stage=STAGE, inputs=len(traces), produced=len(records), dropped=counts)
    return TaskgenOutcome(records=tuple(records), dropped=tuple(dropped), report=report)
