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
    "is_requested",
    "AnswerFact",
    "answer_facts",
    "text_rejection",
    "TEXT_REJECTIONS",
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
sequence of executed tool calls T = [t1, t2, ..., tn], including input arguments and return values, each with its \
purpose: "requested" (the user asks for it) or "provides:<tool>.<arg>" (its output supplies an argument of a later \
call; the user does not ask for it, the agent has to discover it).
Task: Based on the provided Golden Trace and dependency logic, generate a natural language User Query and a \
Multi-turn Dialogue History that would naturally lead to this specific sequence of tool executions.
Requirements:
- Implicit Dependencies: The user query should not explicitly list every step. Instead, it should state the \
goals that implicitly require the agent to figure out the dependencies (e.g., "Book me a flight" implies checking \
availability first).
- Goals in the user's words: state the goal of every requested call from what it does and the record it acts on \
("Cancel my Lisbon booking and put the refund on the card I used"), never from the tool's name: no tool name, with \
or without underscores ("create an openproject create project" is wrong), no step list, no tool descriptions. \
Never ask for a call whose purpose is "provides:...".
- Values in context: state verbatim every argument value listed under "values the user must state" (IDs, names, \
amounts, dates) inside the request it serves, as a user would say it ("book the room for 2 nights from \
2025-03-04"); never list values apart from their purpose ("Details: ...", "... as the uuid for the coin price") \
and never state a value that a dependency argument copies from an earlier tool output.
- Determinism: where a dependency value is one of several results, give the statement listed under "how the user \
singles out a choice" together with what it is for ("for the refund, use the order placed on 3 March"), so each \
criterion names the call it serves.
- Answer facts: ask the questions whose answers are listed under "facts the final reply must contain" (e.g. "and \
tell me its status"); do not state those values yourself.
- Voice: write as the user would, in plain, grammatical sentences (no dangling articles, no empty quotes); a short \
persona or situation and a condition ("if it is already closed, just tell me") are welcome when they fit.
- Information Gap: the dialogue may reflect a realistic interaction where the agent asks what the user wants; \
the user query is the user's next message after the dialogue history; do not repeat in it what the history \
already says (an empty history is fine).
- Consistency: The generated user intent must strictly align with the final output of the last tool in the trace.
Output Format: Return the result in JSON format containing "user_query", "dialogue_history" (a list of \
{"role": "user"|"assistant", "content": ...} turns) and "reasoning_chain" (a list of short steps). The text is \
checked: a tool name as a goal, a value dump, broken grammar, a pick not tied to its call or a missing value \
rejects the task."""

TASK_USER_TEMPLATE = """\
Tool definitions:
{tool_definitions_json}

Tool Dependency Graph (incoming edges of the tools in the trace, [source, target]):
{dependency_edges_json}

Values the user must state (stage, tool, argument, value):
{stated_values_json}

How the user singles out a choice, tied to its call (stage, tool, argument, statement):
{pick_criteria_json}

Purpose of each call (stage, tool, purpose):
{call_purposes_json}

Facts the final reply must contain (ask for them; call index, tool, output field, label, value):
{answer_facts_json}

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

_OPENERS = ("", "", "", "Hi!", "Hello!", "Hey there.", "Good morning.", "Hi, hoping you can help.", "Morning!",
            "Hi team!")  # fmt: skip
_PERSONAS = ("", "", "", "I'm sorting a few things out for my team today.", "I'm in a bit of a hurry, so thanks for "
             "being quick.", "I'm following up on last week's work.", "This is for a report I'm putting together.",
             "I'm catching up before a meeting.")  # fmt: skip
_CLOSERS = ("", "", "Thanks!", "Thank you.", "Appreciate it.", "If any part doesn't work, tell me which one and why.",
            "If something fails, stop and tell me what went wrong.", "Thanks in advance.")  # fmt: skip
_THEN = ("", "Also, ", "Then ", "After that, ", "Next, ")
_ASKS = ("Sure, what do you need?", "Happy to help. What should I do?", "Of course. What would you like?")
_MORE = ("Okay, noted. Anything else?", "Got it. Is there more?", "Sure. What else?")
_READ_VERBS = frozenset("get list fetch read show view query lookup look retrieve find search check display".split())
_USER_READ = ("look up", "check", "find", "pull up")
_NEW_VERBS = frozenset("create add make register book place new".split())
_PREPOSITIONS = frozenset("by for from with to in on of at into via".split())
_STRUCTURAL = frozenset("status message success ok tool error result arguments updated_at created_at".split())
_MAX_FACTS = 2
_MAX_TASK_FACTS = 4
_MORE_VERBS = frozenset("switch take kill type wait hover initialize init refresh serve navigate launch terminate "
                        "submit toggle post publish sync fetch evaluate extract equip generate setup "
                        "initiate".split())  # fmt: skip
_LONG_TEXT_KEYS = frozenset("description summary content notes note body text comment details bio".split())
_PICK_FIELD = ("the {entity} whose {key} is {value}", "the {entity} with {key} {value}")
_PICK_POSITION = ("the {position} {entity} listed", "the {position} {entity} in the list")

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
    return " ".join(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ").replace("-", " ").lower().split())


def is_requested(call: TraceCall) -> bool:
    """The user asks for this call (purpose 'requested'; '' on traces built before purposes counts as requested)."""
    return call.purpose in ("", "requested")


def _verb_object(tool: str, definitions: Mapping[str, Mapping[str, Any]]) -> tuple[str, str]:
    """(verb, object) of a tool's purpose in plain words: 'cancel_order' -> ('cancel', 'order').

    The verb is the name's first action word (a namespace before it is dropped: 'openproject_create_project' ->
    ('create', 'project')), else the first word of the description (one word, never a sentence: 'Charges a card
    ...' -> 'charge'), else one fitting the tool's kind ('look up' for a read).
    """
    from tdg.quality import ACTION_VERBS

    words = _humanize(tool).split()
    if not words:
        return "finish", "my request"
    description = str(definitions.get(tool, {}).get("description", ""))
    first = (re.findall(r"[A-Za-z]+", description) or [""])[0].lower()
    verbs = ACTION_VERBS | _MORE_VERBS | {first, first[:-1], first[:-2]} - {""}
    if words[0] in verbs and len(words) > 2 and words[1] in ("and", "or"):  # "drag_and_drop" -> "drag and drop"
        return " ".join(words[:3]), " ".join(words[3:])  # "load_and_analyze_data" -> "load and analyze", "data"
    known = ACTION_VERBS | _MORE_VERBS
    at = next((i for i, w in enumerate(words[:-1]) if w in known), None)
    if at is None and len(words) > 1 and words[-1] in known:  # "app_create" -> ("create", "app")
        return words[-1], " ".join(words[:-1])
    if at is None and len(words) > 1:  # "kill_process" described as "Kill a process ...", "ios_evaluate_quality"
        at = next((i for i, w in enumerate(words[:-1]) if w in verbs), None)
    if at is not None:
        if words[at + 1] in _PREPOSITIONS and at + 2 < len(words):  # "wait_for_selector" -> "wait for", "selector"
            return f"{words[at]} {words[at + 1]}", " ".join(words[at + 2 :])
        return words[at], " ".join(words[at + 1 :])
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


def _trace_calls(trace: Mapping[str, Any]) -> list[tuple[int, TraceCall]]:
    return [
        (index, TraceCall.model_validate(call))
        for index, stage in enumerate(trace["stages"], start=1)
        for call in stage["calls"]
    ]


def singular_noun(word: str) -> str:
    """'products' -> 'product', 'categories' -> 'category', 'matches' -> 'match' (enough for task text)."""
    word = _humanize(word)
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if re.search(r"(ch|sh|x|ss|zz|us)es$", word) or (word.endswith("oes") and len(word) > 5):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


def _article(word: str) -> str:
    lowered = word.lower()
    vowel = lowered[:1] in tuple("aeio") or (lowered[:1] == "u" and not lowered.startswith(("uni", "use", "usu", "ur")))
    return "an" if vowel else "a"


def _sentence(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text[:1].upper() + text[1:] if text else text


# ----------------------------------------------------------------------------------------------- answer facts


class AnswerFact(StrictModel):
    """A value the final reply must contain: `field` of the output of call `call` (0-based, in trace order)."""

    call: int
    tool: str
    field: str = Field(description="Output path the value is read from ('task.priority'; 'agents' for a count).")
    label: str = Field(description="How the user asks for it: 'priority', or 'how many' for a list's length.")
    value: str


def _fact_candidates(call: TraceCall, kind: str) -> list[tuple[int, str, str, Any]]:
    """(rank, path, label, value) of the output values a user would ask about; lower rank first.

    Never one of the call's own arguments (whole value, `tdg.textstats.value_key`: 5 is 5.0) nor a value that says
    nothing (`tdg.textstats.informative_value`: a boolean, an empty string, a placeholder).
    """
    from tdg.textstats import informative_value, value_key

    known = {value_key(leaf) for value in call.arguments.values() for leaf in _leaves(value)}
    found: list[tuple[int, str, str, Any]] = []

    def add(path: str, key: str, value: Any) -> None:
        if not informative_value(value) or value_key(value) in known:
            return
        if isinstance(value, str) and not (0 < len(value) <= 60):
            return
        is_id = key == "id" or key.endswith("_id") or key.endswith("Id")
        if key in _STRUCTURAL or (key == "event_id" and kind == "read"):
            return
        if key in _LONG_TEXT_KEYS:
            rank = 2.5
        elif kind == "read":
            rank = 2 if is_id else 1 if isinstance(value, int | float) or key in ("name", "title") else 1.5
        else:
            rank = 0 if is_id else 1.5
        found.append((int(rank * 2), path, _humanize(key), value))

    for key, value in sorted(call.output.items()):
        if isinstance(value, Mapping):
            for sub, leaf in sorted(value.items()):
                add(f"{key}.{sub}", sub, leaf)
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            plural = _humanize(key) if key.endswith("s") else f"{_humanize(key)} entries"
            if value_key(len(value)) not in known:
                found.append((1 if kind == "read" else 4, key, f"how many {plural}", len(value)))
        elif key not in ("count", "total"):
            add(key, key, value)
    return sorted(found, key=lambda f: (f[0], f[1]))


def _leaves(value: Any) -> list[Any]:
    """Scalar leaves of an argument value (list items and object values, at any depth)."""
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _fact_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def answer_facts(trace: GoldenTrace, kinds: Mapping[str, str] | None = None) -> list[AnswerFact]:
    """The facts the user asks to know, read from the gold outputs: up to two values of each requested call whose
    result the user sees (a requested call no later call consumes; a write's new id), at least one per task.

    A fact is something only the tools tell: never a value the text states (a stated argument or a pick criterion,
    compared whole and normalized: "X" is "x", 5 is 5.0), never a boolean, empty or placeholder value. A list read's
    fact is its length. When every value of the shown calls is stated, the fact is another informative output
    value of a requested call (`_fallback_fact`); with none, the list is empty and the text is dropped
    (`no_answer_facts`).
    """
    from tdg.textstats import stated_value_keys, value_key

    calls = [call for stage in trace.stages for call in stage.calls]
    said = stated_value_keys(trace)
    consumed = {src.partition(".")[0] for call in calls for src in call.dependency_args.values()}
    requested = [i for i, c in enumerate(calls) if is_requested(c)]
    shown = [i for i in requested if calls[i].name not in consumed] or requested[-1:] or [len(calls) - 1]
    facts: list[AnswerFact] = []
    seen: set[str] = set()
    for index in shown:
        call = calls[index]
        taken = 0
        for _, path, label, value in _fact_candidates(call, (kinds or {}).get(call.name, "read")):
            key = value_key(value)
            if taken == _MAX_FACTS or key in seen or key in said or len(facts) == _MAX_TASK_FACTS:
                continue
            facts.append(AnswerFact(call=index, tool=call.name, field=path, label=label, value=_fact_text(value)))
            seen.add(key)
            taken += 1
    return facts or _fallback_fact(calls, requested, said, kinds or {})


def _fallback_fact(calls: Sequence[TraceCall], requested: Sequence[int], said: set[str],
                   kinds: Mapping[str, str]) -> list[AnswerFact]:  # fmt: skip
    """One unstated informative output value of a requested call, the last call first: a field of a record (of the
    record the goal is about first; a write's new id counts), else a confirmation message; empty when none has one.
    """
    from tdg.textstats import value_key

    order = list(reversed(requested or range(len(calls))))
    for loose in (False, True):
        for index in order:
            call = calls[index]
            found = _loose_facts(call) if loose else _fact_candidates(call, kinds.get(call.name, "read"))
            goal = {singular_noun(w) for w in _verb_object(call.name, {})[1].split()} | {_entity(call)}
            options = [(not goal & {singular_noun(w) for w in _humanize(path.replace(".", " ")).split()},
                        rank, path, label, value)
                       for rank, path, label, value in found if value_key(value) not in said]  # fmt: skip
            if options:
                _, _, path, label, value = min(options, key=lambda o: o[:3])
                return [AnswerFact(call=index, tool=call.name, field=path, label=label, value=_fact_text(value))]
    return []


def _loose_facts(call: TraceCall) -> list[tuple[int, str, str, Any]]:
    """Scalars a user may still ask for when nothing better is there (the reply's message, an event id)."""
    from tdg.textstats import informative_value

    return [(9, key, "confirmation message" if key == "message" else _humanize(key), value)
            for key, value in sorted(call.output.items())
            if key in ("message", "event_id", "result") and informative_value(value)
            and isinstance(value, str) and 0 < len(value) <= 80]  # fmt: skip


# ----------------------------------------------------------------------------------------------- sentences


def _entity(call: TraceCall) -> str:
    """The record the call is about, from its output ('task' of {"task": {...}}, 'agent' of {"agents": [...]})."""
    for key, value in sorted(call.output.items()):
        if key not in _STRUCTURAL and isinstance(value, Mapping | list) and value:
            return singular_noun(key)
    return ""


def _user_verb_object(call: TraceCall, definitions: Mapping[str, Any], rng: random.Random) -> tuple[str, str, str]:
    """(verb, object, kind) as a user says them: reads are looked up or checked, an object is a noun phrase."""
    from tdg.quality import ACTION_VERBS

    verb, obj = _verb_object(call.name, definitions)
    kind = str(definitions.get(call.name, {}).get("kind", "read"))
    words = obj.split()
    if words and words[0] in _PREPOSITIONS:  # 'search_by_title' -> the title
        obj = _entity(call) or " ".join(w for w in words if w not in _PREPOSITIONS)
    whole = obj == _humanize(call.name)
    if whole and len(words) == 1 and (words[0] in ACTION_VERBS or words[0] in _MORE_VERBS) and _entity(call):
        verb, obj = words[0], _entity(call)  # "authenticate" -> authenticate the <record it returns>
    if verb.split()[0] in _READ_VERBS and kind == "read":
        verb = rng.choice(_USER_READ)
    if not obj:
        obj = _entity(call)
    if obj.startswith("all ") and not obj.startswith("all the "):
        obj = "all the " + obj[4:]
    return verb, obj, kind


def _value_phrases(values: Mapping[str, Any], obj: str, *, naming: bool = True) -> str:
    """'named "Hose" and size 3': each value with what it is (a read's name/title names the record)."""
    parts = []
    for name, value in sorted(values.items()):
        label = _humanize(name)
        if naming and (label in ("name", "title") or label == f"{obj} name"):
            parts.append(f"{'named' if label != 'title' else 'titled'} {format_value(value)}")
        else:
            parts.append(f"{label} {format_value(value)}")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else ""


def _fact_request(facts: Sequence[AnswerFact], obj: str) -> str:
    if not facts:
        return ""
    if counts := [f.label for f in facts if f.label.startswith("how many")]:
        rest = [f.label for f in facts if not f.label.startswith("how many")]
        return f" and tell me {counts[0]} there are" + (f" and the {' and '.join(rest)}" if rest else "")
    labels = list(dict.fromkeys(f.label for f in facts))
    return " and tell me its " + " and ".join(labels)


def _links(index: int, calls: Sequence[TraceCall], definitions: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(object, created) of each earlier requested call whose record this requested call acts on (through a
    dependency argument): the text must say so — an agent told only "create a journey" could put it in any palace.
    A provider's value is tied by its pick sentence instead."""
    from tdg.goalstats import source_call

    names = [c.name for c in calls[:index]]
    links = []
    for source in sorted(calls[index].dependency_args.values()):
        provider = source_call(source, names)
        if provider is None or not is_requested(calls[provider]):
            continue
        obj = _verb_object(calls[provider].name, definitions)[1] or _entity(calls[provider])
        created = str(definitions.get(calls[provider].name, {}).get("kind", "read")) == "create"
        if obj:
            links.append((obj, created))
    return list(dict.fromkeys(links))


def _ask(call: TraceCall, facts: Sequence[AnswerFact], definitions: Mapping[str, Any], rng: random.Random,
         links: Sequence[tuple[str, bool]] = ()) -> str:  # fmt: skip
    """One requested call as the user says it: behaviour, object, the values it needs, the earlier requests it
    builds on (`links`, from `_links`: "cancel the new order", "send a confirmation for the new order") and what to
    report back."""
    verb, obj, kind = _user_verb_object(call, definitions, rng)
    asks_a_read = verb in _USER_READ
    if verb == "new":  # "new_page" -> create a page
        verb = "create"
    values = _value_phrases(stated_arguments(call), obj, naming=kind == "read")
    same = next((created for linked, created in links if linked == obj), None)
    link = "".join(f" for {'the new' if created else 'that'} {linked}" for linked, created in links if linked != obj)
    report = link + _fact_request(facts, obj)
    if same is not None and obj and kind != "create":  # the record an earlier request made or found
        obj = f"{'new' if same else 'same'} {obj}"
    if not obj:
        return f"{verb}{' with ' + values if values else ''}{report}"
    if kind == "read":
        noun = obj if obj.startswith("all ") else f"the {obj}"
        where = f" for {values}" if values and not values.startswith(("named", "titled")) else f" {values}"
        if asks_a_read and facts and report.startswith(" and tell me its") and rng.random() < 0.5:
            labels = report.removeprefix(" and tell me its ")
            if labels == obj:
                return f"what is {noun}{where.rstrip()}?"
            return f"what {'are' if ' and ' in labels else 'is'} the {labels} of {noun}{where.rstrip()}?"
        return f"{verb} {noun}{where.rstrip()}{report}"
    new = kind == "create" or (verb in _NEW_VERBS and kind not in ("update", "delete"))
    if not new:
        noun = f"the {obj}"
    elif obj.startswith("new ") or rng.random() >= 0.5:
        noun = f"{_article(obj)} {obj}"
    else:
        noun = f"a new {obj}"
    return f"{verb} {noun}{' with ' + values if values else ''}{report}"


def _pick_statement(pick: Any, rng: random.Random) -> str:
    """'the order whose date is "3 March"' / 'the first order listed' (empty for an unknown criterion)."""
    kind, _, spec = pick.criterion.partition("=")
    entity = singular_noun(pick.entity)
    if kind == "field" and isinstance(pick.element, Mapping) and spec in pick.element:
        value = format_value(pick.element[spec])
        return rng.choice(_PICK_FIELD).format(entity=entity, key=_humanize(spec), value=value)
    if kind == "position":
        return rng.choice(_PICK_POSITION).format(entity=entity, position=spec)
    return ""


def _pick_sentence(picks: Sequence[Any], definitions: Mapping[str, Any], rng: random.Random) -> str:
    """'To cancel the order, use the order whose date is "3 March".' — the criteria of one call's picks, tied to the
    call they serve."""
    statements = list(dict.fromkeys(s for pick in picks if (s := _pick_statement(pick, rng))))
    if not statements:
        return ""
    verb, obj = _verb_object(picks[0].call.name, definitions)
    purpose = f"{verb} the {obj}" if obj else verb
    statement = ", ".join(statements[:-1]) + (" and " if len(statements) > 1 else "") + statements[-1]
    return rng.choice((f"to {purpose}, use {statement}.", f"for the one to {purpose}, take {statement}.",
                       f"when you {purpose}, go with {statement}."))  # fmt: skip


def _provider_sentence(call: TraceCall, definitions: Mapping[str, Any], rng: random.Random) -> str:
    """Values a provider needs, said as what the user knows about the record (the user does not ask for the call)."""
    values = stated_arguments(call)
    if not values:
        return ""
    _, obj, _ = _user_verb_object(call, definitions, rng)
    return f"the {_one_record(obj) or 'one'} I mean is the one with {_value_phrases(values, obj)}."


_QUANTIFIERS = frozenset("the a an more multiple all several many some other".split())


def _one_record(noun: str) -> str:
    """'network pools' -> 'network pool', 'more hotels' -> 'hotel': the user means one record of the collection."""
    words = [w for w in noun.split() if w.lower() not in _QUANTIFIERS] or noun.split()
    return " ".join(words[:-1] + [singular_noun(words[-1])]) if words else ""


def offline_task(inputs: dict[str, Any]) -> dict[str, Any]:
    """Deterministic template writer (the role's offline twin); reads the same inputs as the prompt.

    Every requested call is one sentence in the user's words — its behaviour and object ("cancel the booking"),
    the values it needs in context ("with booking id "B-7""), and the facts to report back ("and tell me its
    status"); providers are never asked for, only the values the user knows about their record are said; each list
    pick is tied to the call it serves ("to cancel the booking, use the booking whose city is "Lisbon""). An
    optional persona and closing condition, and (by seed) a first user turn in the dialogue history.
    """
    from tdg.textstats import trace_picks

    trace_obj = _as_obj(inputs["golden_trace_json"])
    definitions = {d["name"]: d for d in _as_obj(inputs["tool_definitions_json"])}
    edges = [tuple(e) for e in _as_obj(inputs["dependency_edges_json"])]
    rng = random.Random(canonical_json([inputs["seed"], trace_obj["trace_id"]]))
    calls = _trace_calls(trace_obj)
    flat = [call for _, call in calls]
    facts = [AnswerFact.model_validate(f) for f in _as_obj(inputs.get("answer_facts_json") or [])]
    if not facts and "answer_facts_json" not in inputs:
        facts = answer_facts(_trace_of(trace_obj), {n: str(d.get("kind", "read")) for n, d in definitions.items()})
    by_call: dict[int, list[AnswerFact]] = {}
    for fact in facts:
        by_call.setdefault(fact.call, []).append(fact)
    asks: list[str] = []
    for index, call in enumerate(flat):
        if is_requested(call):
            said = _ask(call, by_call.get(index, []), definitions, rng, _links(index, flat, definitions))
            if said not in asks:
                asks.append(said)
    if not asks:
        asks.append("finish my request")
    extra = [s for call in flat if not is_requested(call) and (s := _provider_sentence(call, definitions, rng))]
    per_call: dict[int, list[Any]] = {}
    for pick in trace_picks(_trace_of(trace_obj)):
        per_call.setdefault(id(pick.call), []).append(pick)
    extra += [s for picks in per_call.values() if (s := _pick_sentence(picks, definitions, rng))]
    goals = [_sentence(("" if a.endswith("?") else "please " if i == 0 and rng.random() < 0.4
                        else rng.choice(_THEN) if i else "") + a)
             + ("" if a.endswith("?") else ".") for i, a in enumerate(asks)]  # fmt: skip
    rest = [_sentence(s) for s in dict.fromkeys(extra)]
    opener, persona, closer = rng.choice(_OPENERS), rng.choice(_PERSONAS), rng.choice(_CLOSERS)
    dialogue: list[dict[str, str]] = []
    mode = rng.random()
    if mode < 0.25:  # the user sets the scene, the assistant asks what to do
        topic = _user_verb_object(flat[-1], definitions, rng)[1] or "my account"
        first = _sentence(" ".join(p for p in (opener, persona, f"I need some help with the {topic}.") if p))
        dialogue = [{"role": "user", "content": first}, {"role": "assistant", "content": rng.choice(_ASKS)}]
        query = " ".join([*goals, *rest, closer])
    elif mode < 0.5 and len(goals) > 1:  # the user starts with the first request, the assistant asks for more
        first = _sentence(" ".join(p for p in (opener, persona, goals[0]) if p))
        dialogue = [{"role": "user", "content": first}, {"role": "assistant", "content": rng.choice(_MORE)}]
        query = " ".join([*goals[1:], *rest, closer])
    else:
        query = " ".join(p for p in (opener, persona, *goals, *rest, closer) if p)
    return {"user_query": _sentence(query), "dialogue_history": dialogue,
            "reasoning_chain": _reasoning(calls, edges, definitions)}  # fmt: skip


def _trace_of(trace_obj: Mapping[str, Any]) -> GoldenTrace:
    """The trace of the role inputs (a test may pass only trace_id and stages)."""
    if isinstance(trace_obj, GoldenTrace):
        return trace_obj
    stages = [{"calls": list(s["calls"]), "db_hash_before": s.get("db_hash_before", ""),
               "db_hash_after": s.get("db_hash_after", "")} for s in trace_obj["stages"]]  # fmt: skip
    return GoldenTrace.model_validate({
        "trace_id": trace_obj["trace_id"], "env_id": trace_obj.get("env_id", ""), "graph_index": 0,
        "stages": stages, "initial_db_hash": trace_obj.get("initial_db_hash", ""),
        "final_db_hash": trace_obj.get("final_db_hash", ""),
    })  # fmt: skip


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
    """The role inputs for one trace: trace, definitions of the tools it uses, edges, stated values, the purpose of
    each call, the pick statements (each tied to its call), the answer facts the user asks for, seed."""
    from tdg.textstats import trace_picks

    used = {call.name for stage in trace.stages for call in stage.calls}
    definitions = [
        {"name": s.name, "description": s.description, "parameters": s.parameters, "kind": str(s.kind)}
        for s in env.schemas
        if s.name in used
    ]
    _defs = {d["name"]: d for d in definitions}
    stated = [
        [index, call.name, arg, value]
        for index, stage in enumerate(trace.stages, start=1)
        for call in stage.calls
        for arg, value in sorted(stated_arguments(call).items())
    ]
    picks = [[index, pick.call.name, pick.arg, sentence]
             for index, stage in enumerate(trace.stages, start=1) for pick in trace_picks(trace)
             if pick.call in stage.calls and (sentence := _pick_sentence([pick], _defs, random.Random(0)))]  # fmt: skip
    purposes = [[index, call.name, "requested" if is_requested(call) else call.purpose]
                for index, stage in enumerate(trace.stages, start=1) for call in stage.calls]  # fmt: skip
    facts = answer_facts(trace, {s.name: str(s.kind) for s in env.schemas})
    return {
        "golden_trace_json": trace.model_dump(mode="json"),
        "tool_definitions_json": definitions,
        "dependency_edges_json": sorted({(src, dst) for src, dst in incoming_edges if dst in used}),
        "stated_values_json": stated,
        "pick_criteria_json": picks,
        "call_purposes_json": purposes,
        "answer_facts_json": [f.model_dump(mode="json") for f in facts],
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
        expected_answer=tuple(f["value"] for f in inputs["answer_facts_json"]),
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


TEXT_REJECTIONS: dict[str, str] = {
    "broken grammar": "broken_grammar",
    "tool name as goal": "tool_name_goal",
    "value dump": "value_dump",
    "no answer facts": "no_answer_facts",
    "fact ": "answer_not_in_outputs",
    "stated answer": "stated_answer",
}
"""Problem prefix (tdg.textstats.text_problems) -> the reason a task text is dropped with."""


def text_rejection(trace: GoldenTrace, text: TaskText) -> tuple[str, str] | None:
    """(reason, detail) when the text does not read as a user's request (tdg.textstats), else None.

    Applied to both writers: the offline templates must meet it, and an LLM reply that breaks it is dropped. Whether
    the text determines every argument (picks tied to their calls included) is the verify stage's solvability check.
    """
    from tdg.textstats import text_problems

    problems = [p for p in text_problems(trace, text) if not p.startswith("unlinked pick")]
    if not problems:
        return None
    reason = next((r for prefix, r in TEXT_REJECTIONS.items() if problems[0].startswith(prefix)), "writer_bad_text")
    return reason, "; ".join(problems)


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
        if problems := text_rejection(trace, text):
            logger.warning("task writer dropped trace %s: %s", trace.trace_id, problems[1])
            dropped.append(QuarantineRecord(item_id=trace.trace_id, stage=STAGE, reason=problems[0],
                                            detail=problems[1][:2000]))  # fmt: skip
            continue
        records.append(make_task_record(trace, text, env, seed=task_seed, writer=writer))
    counts: dict[str, int] = {}
    for q in dropped:
        counts[q.reason] = counts.get(q.reason, 0) + 1
    report = StageReport(stage=STAGE, inputs=len(traces), produced=len(records), dropped=counts)
    return TaskgenOutcome(records=tuple(records), dropped=tuple(dropped), report=report)
