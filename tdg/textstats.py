"""Task-text checks and corpus figures: is a task written in a user's words and determined by its text?

Pure functions over a golden trace and its `TaskText` (no environment needed), used three ways: the task writer
rejects a text that fails them (`text_problems`), `check_solvable` (tdg.verify) asks whether every list pick is tied
to the call it serves (`unlinked_picks`), and `gust quality` reports the shares (`text_stats`):

- spaced tool names: a goal written as the tool's name with spaces ("create an openproject create project");
- value dumps: values listed apart from what they are for ("Details: …", "… as the uuid for the coin price");
- broken grammar: a dangling article ("help me with an ?"), a doubled word, a/an before the wrong sound, empty
  quotes, space before punctuation, unbalanced quotes;
- unlinked picks: a "the X whose …" criterion whose sentence does not name the call it is for, in a task with two
  or more picks;
- answer facts: `TaskText.expected_answer` is set and every fact is a value of a gold output;
- stated answers: an answer fact the text already says (a stated argument, a pick criterion, a quoted value or a
  number of the text), which an agent could "answer" by echoing the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from data.models import GoldenTrace, TaskRecord, TaskText, TraceCall
from tdg.quality import _in_text as _in  # one whole-word matcher for every text check

__all__ = [
    "GRAMMAR_RULES",
    "VALUE_DUMP_PATTERNS",
    "shown_text",
    "sentences",
    "name_words",
    "names_any",
    "READ_SYNONYMS",
    "spaced_tool_names",
    "value_dumps",
    "grammar_problems",
    "TracePick",
    "trace_picks",
    "unlinked_picks",
    "answer_problems",
    "value_key",
    "informative_value",
    "stated_value_keys",
    "stated_answers",
    "text_problems",
    "text_stats",
]

READ_SYNONYMS = frozenset("get list fetch read show view query lookup look retrieve find search check pull display "
                          "what".split())  # fmt: skip
"""A read call is named by any of these: 'get_order' may be said as 'look up the order' or 'what is the order'."""
_STOP = frozenset("a an the of to for by with from in on at and or my me is are be it its".split())

VALUE_DUMP_PATTERNS: tuple[str, ...] = (
    r"\b(details|for reference|here is what you need|here's my information|some details first|"
    r"i have some details ready|the details)\s*:",
    r"\"[^\"]*\" as the [\w ]+",  # '"Allergic" as the message'
    r"(?:[^;.?!]+;){2,}[^;.?!]+",  # three or more ';'-separated value clauses
)

_QUOTED = re.compile(r"\"[^\"]*\"")
_VOWEL_SOUND_EXCEPTIONS = ("one", "once", "uni", "use", "usu", "user", "euro", "eu", "ui", "url", "uuid", "utc", "us")


def _rule(pattern: str, flags: int = re.IGNORECASE) -> Callable[[str], list[str]]:
    compiled = re.compile(pattern, flags)
    return lambda text: [m.group(0) for m in compiled.finditer(text)]


def _a_before_vowel(text: str) -> list[str]:
    found = []
    for m in re.finditer(r"\b[Aa] ([aeiouAEIOU]\w*)", text):
        if not m.group(1).lower().startswith(_VOWEL_SOUND_EXCEPTIONS):
            found.append(m.group(0))
    return found


def _an_before_consonant(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"\b[Aa]n ([b-df-gj-np-tv-zB-DF-GJ-NP-TV-Z][a-z]\w*)", text)
            if not m.group(1).lower().startswith(("hour", "honest", "honor", "heir"))]  # fmt: skip


def _unbalanced_quotes(text: str) -> list[str]:
    return ['odd number of "'] if text.count('"') % 2 else []


def _doubled_words(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(r"\b([A-Za-z]+) \1\b", text, re.IGNORECASE)
            if m.group(1).lower() not in ("that", "had")]  # fmt: skip


GRAMMAR_RULES: dict[str, Callable[[str], list[str]]] = {
    "dangling article": _rule(r"\b(a|an|the)\s*(?=[?.!,;:]|$)"),
    "article before article": _rule(r"\b(a|an|the) (a|an|the)\b"),
    "doubled word": _doubled_words,
    "a before a vowel": _a_before_vowel,
    "an before a consonant": _an_before_consonant,
    "empty quotes": _rule(r"\"\s*\"|''"),
    "space before punctuation": _rule(r"\w \s*[,.?!;:](?=\s|$)"),
    "doubled punctuation": _rule(r"(?<!\.)[,;:?!.]\s*[,;:?!](?!\.)|,\s*\."),
    "unbalanced quotes": _unbalanced_quotes,
    "empty sentence": _rule(r"^\s*$"),
}
"""Rule name -> finder of its violations in a text whose quoted values are masked (a value may be anything)."""


# ------------------------------------------------------------------------------------------------ text helpers


def shown_text(text: TaskText) -> str:
    """What the agent sees: the dialogue history, then the query."""
    return " ".join([*(str(t.get("content", "")) for t in text.dialogue_history), text.user_query])


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.casefold()).strip()


def sentences(text: str) -> list[str]:
    """Sentences of `text` (split after . ? ! outside quoted values), normalized."""
    masked = _QUOTED.sub(lambda m: m.group(0).replace(".", "\0").replace("?", "\1").replace("!", "\2"), text)
    parts = re.split(r"(?<=[.?!])\s+", masked)
    return [_norm(p.replace("\0", ".").replace("\1", "?").replace("\2", "!")) for p in parts if p.strip()]


def name_words(name: str) -> list[str]:
    """'openprojectCreate_project' -> ['openproject', 'create', 'project']."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _has_word(word: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}s?(?!\w)", text) is not None


def names_any(words: set[str] | Sequence[str], sentence: str) -> bool:
    """Some word (or its singular/plural) occurs in the sentence; a read verb stands for every read verb."""
    wanted = set(words)
    if wanted & READ_SYNONYMS:
        wanted |= READ_SYNONYMS
    return any(_has_word(w, sentence) or _has_word(_stem(w), sentence) for w in wanted)


def _calls(trace: GoldenTrace) -> list[TraceCall]:
    return [call for stage in trace.stages for call in stage.calls]


# ------------------------------------------------------------------------------------------------ detectors


def spaced_tool_names(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Tools of the trace whose multi-word name, holding a verb, is written out as a phrase ("singstat get
    metadata", "create an openproject create project"); a verbless name read as a noun ("the user profile") is not.
    """
    from tdg.quality import ACTION_VERBS
    from tdg.taskgen import _MORE_VERBS

    shown = _norm(_QUOTED.sub(" qvalue ", shown_text(text)))
    found = []
    for name in dict.fromkeys(call.name for call in _calls(trace)):
        words = name_words(name)
        verbs = [w for w in words if w in ACTION_VERBS or w in _MORE_VERBS]
        if len(words) < 2 or not verbs or all(w in verbs or w in ("and", "or") for w in words):
            continue  # a noun ("user profile") or a plain verb phrase ("drag and drop") is how a user says it
        phrase = r"(?<!\w)" + r"[\s_-]+".join(map(re.escape, words)) + r"(?!\w)(?!\s+(qvalue|-?\d))"
        if re.search(phrase, shown):  # a phrase right before a value labels the value ("refresh token "0e3e…"")
            found.append(name)
    return found


def value_dumps(text: TaskText) -> list[str]:
    """Passages that list values apart from their purpose ("Details: a; b; c", '"x" as the uuid')."""
    shown = shown_text(text)
    return [m.group(0)[:80] for p in VALUE_DUMP_PATTERNS for m in re.finditer(p, shown, re.IGNORECASE)]


def grammar_problems(text: str) -> list[str]:
    """'rule: excerpt' for every grammar rule the text breaks; quoted values are masked first."""
    masked = _QUOTED.sub('"X"', text)
    return [f"{rule}: {hit.strip()!r}" for rule, find in GRAMMAR_RULES.items() for hit in find(masked)]


# ------------------------------------------------------------------------------------------------ picks


class TracePick:
    """One list pick of a trace: `call.arg` copied from element `index` of a list of >= 2 differing elements."""

    __slots__ = ("call", "arg", "element", "siblings", "index", "criterion", "entity")

    def __init__(self, call: TraceCall, arg: str, element: Any, siblings: list[Any], index: int, criterion: str,
                 entity: str) -> None:  # fmt: skip
        self.call, self.arg, self.element, self.siblings = call, arg, element, siblings
        self.index, self.criterion, self.entity = index, criterion, entity

    def criterion_value(self) -> Any:
        """The value the text must say to single the element out (a field's value, or 'first'/'last')."""
        kind, _, spec = self.criterion.partition("=")
        if kind == "position":
            return spec
        if isinstance(self.element, Mapping):
            return self.element.get(spec)
        return self.element

    def tie_words(self) -> set[str]:
        """Words of the consuming call's name that say what the pick is for (not the picked entity or its key)."""
        _, _, spec = self.criterion.partition("=")
        own = {_stem(w) for w in [*name_words(self.entity), *name_words(spec)]}
        return {w for w in name_words(self.call.name) if w not in _STOP and _stem(w) not in own and len(w) > 1}


def _scalar_leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _scalar_leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _scalar_leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield value


def discovered_values(trace: GoldenTrace) -> list[str]:
    """Normalized values the agent must discover: every dependency argument's value (list items and object leaves
    included) that no context argument states. The task text must not say them, or the dependency is not real."""
    from tdg.quality import _norm

    calls = _calls(trace)
    stated = {_norm(str(v)) for c in calls for a in c.context_args for v in _scalar_leaves(c.arguments.get(a))}
    found = {_norm(str(v)) for c in calls for a in c.dependency_args for v in _scalar_leaves(c.arguments.get(a))}
    return sorted(v for v in found - stated if v)


def _reveals(value: Any, hidden: Sequence[str]) -> bool:
    """Stating `value` says one of the `hidden` values (whole-word, normalized)."""
    from tdg.quality import _in_text, _norm

    if value is None or isinstance(value, bool):
        return False
    said = _norm(str(value))
    return any(_in_text(h, said) for h in hidden)


def _unrevealing_criterion(element: Any, siblings: Sequence[Any], criterion: str, hidden: Sequence[str],
                           call: str = "") -> str:  # fmt: skip
    """`criterion` when the value it states is no discovered value; else another field of the element whose value
    singles it out among `siblings` and reveals nothing (a short non-id field first, and last one whose name shares
    a word with the `call` it serves, which may leave no word of the call to tie the pick to it); else
    `criterion` unchanged (the task must stay solvable)."""
    from tdg.quality import _id_like

    kind, _, spec = criterion.partition("=")
    if kind != "field" or not isinstance(element, Mapping) or not _reveals(element.get(spec), hidden):
        return criterion
    options = []
    for position, (key, value) in enumerate(element.items()):
        if key == spec or isinstance(value, Mapping | list | tuple) or value is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and not (0 < len(value.strip()) <= 40):
            continue
        if sum(isinstance(s, Mapping) and s.get(key) == value for s in siblings) != 1 or _reveals(value, hidden):
            continue
        shared = bool({_stem(w) for w in name_words(str(key))} & {_stem(w) for w in name_words(call)})
        options.append((shared, _id_like(str(key)), position, str(key)))
    return f"field={min(options)[3]}" if options else criterion


def trace_picks(trace: GoldenTrace) -> Iterator[TracePick]:
    """Every list pick that is a real choice (the siblings give different values), in call order.

    A pick's criterion is the trace's (`TraceCall.pick_criteria`) unless its value is one the agent must discover
    (`discovered_values`: "use the coin whose name is Bitcoin" when the name is what a later call consumes); then it
    is another field of the element that singles it out and says no such value (issue 67)."""
    from tdg.quality import list_pick, walk_path

    hidden = discovered_values(trace)
    outputs: dict[str, Any] = {}
    for call in _calls(trace):
        for arg, source in sorted(call.dependency_args.items()):
            tool, _, path = source.partition(".")
            picked = list_pick(outputs.get(tool), path) if tool in outputs else None
            if picked is None:
                continue
            element, siblings, index = picked
            steps = list(re.finditer(r"\[\d+\]", path))
            suffix = path[steps[-1].end() :].lstrip(".")
            values = {json.dumps(walk_path(s, suffix) if suffix else s, sort_keys=True, default=str) for s in siblings}
            if len(values) <= 1:
                continue
            entity = re.split(r"[.\]]", path[: steps[-1].start()])[-1] or arg
            criterion = _unrevealing_criterion(element, siblings, call.pick_criteria.get(arg, ""), hidden, call.name)
            yield TracePick(call, arg, element, list(siblings), index, criterion, entity)
        outputs[call.name] = call.output


def unlinked_picks(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Picks whose criterion is stated in no sentence that also names what the pick is for.

    A task with a single pick cannot confuse its criterion with another's and is tied by construction; with two or
    more, the sentence stating each criterion value must name its call (a word of the call's purpose that is not
    the picked entity: "to *cancel* the order, use the order placed on 3 March").
    """
    picks = list(trace_picks(trace))
    if len(picks) < 2:
        return []
    said = sentences(shown_text(text))
    found = []
    for pick in picks:
        value, words = pick.criterion_value(), pick.tie_words()
        holding = [s for s in said if _in(value, s)]
        if not any(names_any(words, s) for s in holding):
            found.append(f"{pick.call.name}.{pick.arg} by {pick.criterion or 'nothing'}")
    return found


# ------------------------------------------------------------------------------------------------ answers


def _output_scalars(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _output_scalars(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _output_scalars(item)
    elif value is not None and not isinstance(value, bool):
        yield value


def answer_problems(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Why the answer facts cannot be checked: none, or a fact that no gold output holds."""
    if not text.expected_answer:
        return ["no answer facts"]
    held = {_norm(str(v)) for call in _calls(trace) for v in _output_scalars(call.output)}
    held |= {_norm(str(int(v))) for call in _calls(trace) for v in _output_scalars(call.output)
             if isinstance(v, float) and v.is_integer()}  # fmt: skip
    return [f"fact {fact!r} is in no gold output" for fact in text.expected_answer if _norm(fact) not in held]


_NUMBER_TOKEN = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?!\w|-|\.\d)")


def value_key(value: Any) -> str:
    """How two values are compared whole: case-folded, whitespace collapsed, surrounding quotes dropped, a decimal
    without its trailing zeros (5, 5.0 and "5.0" are all "5").

    Example:
        >>> value_key(5.0), value_key(" The  Rake "), value_key('"u1"')
        ('5', 'the rake', 'u1')
    """
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = _norm(text).strip("\"'")
    if re.fullmatch(r"-?\d+\.\d+", text):
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def informative_value(value: Any) -> bool:
    """A value worth asking for: a non-empty scalar, no boolean, no placeholder ('n/a', 'example', '<id>')."""
    from tdg.quality import PLACEHOLDER_PATTERNS

    if value is None or isinstance(value, bool | Mapping | list | tuple):
        return False
    key = value_key(value)
    if key in ("", "true", "false", "[]", "{}"):
        return False
    return not any(re.search(p, key, re.IGNORECASE) for p in PLACEHOLDER_PATTERNS)


def stated_value_keys(trace: GoldenTrace) -> set[str]:
    """`value_key`s of the values a task text states by construction: every leaf of every argument the user gives
    (context arguments and any other argument no earlier output supplies) and every pick criterion."""
    said = {value_key(leaf) for call in _calls(trace) for arg, value in call.arguments.items()
            if arg in call.context_args or arg not in call.dependency_args
            for leaf in _scalar_leaves(value)}  # fmt: skip
    return said | {value_key(pick.criterion_value()) for pick in trace_picks(trace)}


def stated_answers(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Answer facts the user already knows: a fact equal (whole value, `value_key`) to a value the trace states, a
    quoted value or a number of the text, or a longer value ('ORD-7', 'Blue Line') found whole-word in the text.

    A one-word fact counts only when stated as a value: a status like "open" or a type like "Bug" is also a plain
    word of a request ("open the bug report").
    """
    shown = shown_text(text)
    said = stated_value_keys(trace) | {value_key(q) for q in _QUOTED.findall(shown)}
    said |= {value_key(n) for n in _NUMBER_TOKEN.findall(_QUOTED.sub(" ", shown))}
    plain = _norm(shown)
    return [fact for fact in text.expected_answer if value_key(fact) in said
            or (not re.fullmatch(r"[^\W\d_]+|-?\d+(?:\.\d+)?", fact.strip()) and _in(fact, plain))]  # fmt: skip


def text_problems(trace: GoldenTrace, text: TaskText) -> list[str]:
    """Everything that keeps a task text from reading as a user's request (empty when it is fine)."""
    problems = [f"broken grammar: {p}" for t in (*(str(x.get("content", "")) for x in text.dialogue_history),
                                                  text.user_query) for p in grammar_problems(t)]  # fmt: skip
    problems += [f"tool name as goal: {name}" for name in spaced_tool_names(trace, text)]
    problems += [f"value dump: {d}" for d in value_dumps(text)]
    problems += [f"unlinked pick: {p}" for p in unlinked_picks(trace, text)]
    problems += answer_problems(trace, text)
    problems += [f"stated answer: fact {fact!r} is already in the task text" for fact in stated_answers(trace, text)]
    return problems


def _share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def text_stats(records: Sequence[TaskRecord]) -> dict[str, float]:
    """Corpus shares of the text checks (of tasks), for `gust quality`."""
    n = len(records)
    counts = {"spaced_tool_name_goal": 0, "value_dump": 0, "broken_grammar": 0, "unlinked_pick": 0, "answer": 0,
              "stated_answer": 0}  # fmt: skip
    for r in records:
        counts["spaced_tool_name_goal"] += bool(spaced_tool_names(r.trace, r.text))
        counts["value_dump"] += bool(value_dumps(r.text))
        counts["broken_grammar"] += any(grammar_problems(t) for t in (r.text.user_query, *(
            str(x.get("content", "")) for x in r.text.dialogue_history)))  # fmt: skip
        counts["unlinked_pick"] += bool(unlinked_picks(r.trace, r.text))
        counts["answer"] += not answer_problems(r.trace, r.text)
        counts["stated_answer"] += bool(stated_answers(r.trace, r.text))
    return {
        "spaced_tool_name_goal_task_share": _share(counts["spaced_tool_name_goal"], n),
        "value_dump_task_share": _share(counts["value_dump"], n),
        "broken_grammar_task_share": _share(counts["broken_grammar"], n),
        "unlinked_pick_task_share": _share(counts["unlinked_pick"], n),
        "answer_check_coverage": _share(counts["answer"], n),
        "stated_answer_task_share": _share(counts["stated_answer"], n),
    }
