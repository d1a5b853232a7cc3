"""Dependency evidence between two tools: the rules of the deterministic TDG inferer (issue 23).

An edge A -> B is only drawn for a piece of *evidence* that says B needs A; name similarity alone is never enough.
Each rule (`RULES`, a registry) looks at one ordered pair and returns zero or more `Evidence` items:

Parameter evidence (a produced field of A that can fill a parameter p of B; types and value formats compatible,
see `fills`):
- ``key_exact``: a key field (ID-like, foreign key, entity-typed; `tdg.fields.is_key_name`) of A whose name is
  p's name (``order_id``), or p's entity plus ``id`` (``order.id`` for ``order_id``);
- ``key_role``: the same key behind role qualifiers (``skyId`` -> ``originSkyId``) or a bare ``id`` of B's entity;
- ``same_name``: a non-key, non-generic field named exactly like p (``departure_time``) that A *produces*: A does
  not take p itself (a tool echoing its own argument is not its source), A is not a mutation echoing a record
  back to a read of the same entity nor a delete (a removed record is no source), B is not an update setting p on
  a record of A's entity (``update_order.quantity``), and p is not the bare ``name`` / ``title`` of a record B
  creates;
- ``mentioned_source``: p's description names A (`"search_key can be retrieved from searchCarRentals"`); the
  field is the name-related one, else the closest by words;
- ``computed_value``: A computes values (its response is at most three top-level scalars besides
  ``status``/``message``, none of them a key) and p is a generic value slot of a compatible type (``number``,
  ``text``, ``message``, ``data``, ...; a text slot also takes a number):
  ``calculate_discount.discount_amount -> calculate_squared.number``.

Semantic (ordering) evidence, no value passed:
- ``described_order``: B's description names A together with an ordering cue (``first``, ``before``, ``after``,
  ``from``, ``returned by``, ``obtained``, ...); the evidence quotes it;
- ``creates_record``: A creates a record of entity E and B takes E's key (``cancel_order.order_id`` after
  ``create_order``) while A's response does not expose the key (otherwise it is a ``key_exact`` parameter edge);
- ``declared_output``: A (a read or a create) says in its name or description that it returns a key B takes
  (``find_user_id_by_email`` -> ``get_user_details.user_id``; "lists the name and product id") while its response
  schema declares no such field and A does not take the key itself.

Key rules skip an update or delete handing back the key it was given: the caller had it before (an ``action``
is not skipped: verbless reads such as ``vehicle_details`` get that kind).

Rules have no confidence of their own: `RuleCalibration` holds each rule's measured precision on the development
ground truth (`tdg.devset`, written by ``bench/tdg.py --devset --fit``) and the precision a rule needs to be used.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from data.graphs import EdgeType
from data.models import StrictModel, ToolKind, ToolSchema
from gustforge.errors import ConfigError
from gustforge.registry import Registry
from tdg.embedding import LexicalEmbedder
from tdg.fields import (
    GENERIC_NAMES,
    FieldRef,
    entity_of,
    is_key_name,
    name_relation,
    name_tokens,
    param_specs,
    response_fields,
    singular,
    types_compatible,
)
from tdg.scoring import KIND_RANK, VERBS, tool_entity

__all__ = [
    "Evidence",
    "Rule",
    "RULES",
    "PARAMETER_RULES",
    "SEMANTIC_RULES",
    "RuleCalibration",
    "rules_path",
    "load_rules",
    "value_format",
    "fills",
    "pair_evidence",
    "toolset_evidence",
]

# Last parameter-name tokens (digits stripped) of a slot that accepts any value of its type.
_SINK_WORDS = frozenset(
    "text message data content number num value input body string amount total price expression numbers".split()
)
# Ordering cues around a tool's name: "call X first", "after X", "returned by X", "obtained from X", "output of X".
# A bare "from" is not one ("the balance sheet from SEC filings" names a data source, not a call).
_ORDER_CUES = re.compile(
    r"\b(first|before|after|prior to|beforehand|previously|returned by|obtained (from|via|by|using|with)|"
    r"retrieved (from|via|by|using|with)|provided by|output of|result of|results of|requires?|must (call|use))\b",
    re.IGNORECASE,
)
_WRITES = frozenset({ToolKind.UPDATE, ToolKind.DELETE})
_MIN_CLOSEST = 0.35  # lexical cosine a mentioned source's closest field needs to be named as the value
_MAX_COMPUTED = 3  # a tool returning at most this many top-level scalars computes values (it returns no records)
_TEXT_SINKS = frozenset("text message data content body string input".split())  # take a number as text too


@dataclass(frozen=True)
class Evidence:
    """One reason why B depends on A. Parameter evidence names the field and the parameter."""

    rule: str
    src: str
    dst: str
    type: EdgeType
    param: str | None = None
    path: str | None = None
    note: str = ""

    def text(self) -> str:
        """Evidence text: ``a.response.x -> b.p`` for parameter evidence (checkable by `tdg.sanitize`), else the
        rule and its note."""
        if self.type is EdgeType.PARAMETER:
            return f"{self.src}.response.{self.path} -> {self.dst}.{self.param}"
        return f"semantic[{self.rule}]: {self.note}"


# --------------------------------------------------------------------------- formats and compatibility
_FORMAT_WORDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("email", frozenset({"email", "mail"})),
    ("url", frozenset({"url", "uri", "link", "href", "website"})),
    ("phone", frozenset({"phone", "mobile", "tel", "telephone"})),
    ("datetime", frozenset({"date", "day", "time", "timestamp", "datetime", "at", "deadline", "birthdate"})),
    ("coordinate", frozenset({"lat", "latitude", "lng", "lon", "longitude", "coordinate"})),
    ("currency", frozenset({"currency"})),
)
_SCHEMA_FORMATS = {"email": "email", "uri": "url", "url": "url", "date": "datetime", "date-time": "datetime",
                   "time": "datetime"}  # fmt: skip


def value_format(name: str, schema: Mapping[str, Any] | None = None) -> str | None:
    """The value format a name (or a schema's ``format``) announces: email, url, phone, datetime, coordinate,
    currency; None when it says nothing. The last name token decides (``start_date`` is a date, ``date_format``
    is not)."""
    declared = str((schema or {}).get("format") or "").lower()
    if declared in _SCHEMA_FORMATS:
        return _SCHEMA_FORMATS[declared]
    tokens = [singular(t) for t in name_tokens(name)]
    if not tokens:
        return None
    last = tokens[-1]
    for fmt, words in _FORMAT_WORDS:
        if last in words:
            return fmt
    return None


def _enum(schema: Mapping[str, Any]) -> set[str] | None:
    values = schema.get("enum")
    return {str(v) for v in values} if isinstance(values, list) and values else None


def fills(param: str, schema: Mapping[str, Any], field: FieldRef) -> bool:
    """Whether response field `field` can hold a value for parameter `param`: JSON types compatible, value formats
    (email, url, date, ...) equal where both announce one, and a parameter with an ``enum`` never gets a free
    identifier."""
    if not types_compatible(schema, field.type) or field.type == "boolean" != schema.get("type"):
        return False
    p_fmt, f_fmt = value_format(param, schema), value_format(field.leaf)
    if p_fmt and f_fmt and p_fmt != f_fmt:
        return False
    return not (_enum(schema) and is_key_name(field.leaf) and not is_key_name(param))


# --------------------------------------------------------------------------- tool views
@dataclass(frozen=True)
class _View:
    tool: ToolSchema
    entity: str | None
    params: dict[str, tuple[dict[str, Any], bool]]
    fields: tuple[FieldRef, ...]
    name_tokens: tuple[str, ...]


def _tokens(text: str) -> list[str]:
    return [singular(t) for t in name_tokens(text)]


def _view(tool: ToolSchema) -> _View:
    raw = tool.raw_name.rsplit("/", 1)[-1] if tool.raw_name else tool.name
    tokens = _tokens(raw) if len(_tokens(raw)) >= len(_tokens(tool.name)) else _tokens(tool.name)
    return _View(tool, tool_entity(tool), param_specs(tool.parameters), tuple(response_fields(tool.response)),
                 tuple(tokens))  # fmt: skip


def _names(view: _View) -> list[list[str]]:
    """Token sequences that name the tool in text: its name, its raw name, and the raw name without a
    server prefix (``weather_server_get_forecast`` -> ``get_forecast``) when that still has two tokens."""
    seqs = [_tokens(view.tool.name), list(view.name_tokens)]
    for seq in list(seqs):
        for cut in range(1, len(seq) - 1):
            tail = seq[cut:]
            if len(tail) >= 2 and tail[0] in VERBS:
                seqs.append(tail)
    return [s for s in seqs if len(s) >= 2]


def _mentions(text: str, view: _View) -> bool:
    """Whether `text` names the tool (two or more of its name tokens, in order, contiguous)."""
    words = " " + " ".join(_tokens(text)) + " "
    return any(f" {' '.join(seq)} " in words for seq in _names(view))


# --------------------------------------------------------------------------- rules
Rule = Callable[[_View, _View, frozenset[str]], list[Evidence]]
RULES: Registry[Rule] = Registry("tdg evidence rule")
PARAMETER_RULES = ("key_exact", "key_role", "same_name", "mentioned_source", "computed_value")
SEMANTIC_RULES = ("described_order", "creates_record", "declared_output")


def _targets(b: _View) -> list[tuple[str, dict[str, Any]]]:
    """B's parameters that can depend on another tool (not the ID of a record B itself creates)."""
    out = []
    for param, (schema, _) in sorted(b.params.items()):
        if b.tool.kind is ToolKind.CREATE and b.entity and entity_of(param) == b.entity:
            continue
        out.append((param, schema))
    return out


def _best_named(a: _View, b: _View, param: str, schema: Mapping[str, Any]) -> tuple[float, FieldRef | None]:
    scored = [(name_relation(param, f, dst_entity=b.entity), f) for f in a.fields if fills(param, schema, f)]
    scored = [(s, f) for s, f in scored if s > 0 and f.leaf.lower() not in GENERIC_NAMES]
    return min(scored, key=lambda sf: (-sf[0], sf[1].path), default=(0.0, None))


def _param_evidence(rule: str, a: _View, b: _View, param: str, f: FieldRef, note: str = "") -> Evidence:
    return Evidence(rule, a.tool.name, b.tool.name, EdgeType.PARAMETER, param, f.path, note)


def _echo(a: _View, b: _View) -> bool:
    """A mutation handing a record back to an earlier verb of the same entity (cancel_order -> get_order)."""
    same = a.entity is not None and a.entity == b.entity
    return same and a.tool.kind is not ToolKind.READ and KIND_RANK[a.tool.kind] > KIND_RANK[b.tool.kind]


def _key_rule(a: _View, b: _View, entities: frozenset[str], *, low: float, high: float, rule: str) -> list[Evidence]:
    if _echo(a, b):
        return []
    out = []
    for param, schema in _targets(b):
        if param.lower() in GENERIC_NAMES or (a.tool.kind in _WRITES and param in a.params):
            continue  # an update / delete hands back the key it was given: the caller had it before
        score, f = _best_named(a, b, param, schema)
        if f is not None and low <= score <= high and (is_key_name(param, entities) or is_key_name(f.leaf, entities)):
            out.append(_param_evidence(rule, a, b, param, f))
    return out


@RULES.register("key_exact")
def key_exact(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A key field of A with p's own name (or p's entity + ``id``)."""
    return _key_rule(a, b, entities, low=0.95, high=1.0, rule="key_exact")


@RULES.register("key_role")
def key_role(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A key field of A behind role qualifiers of p, or the bare ``id`` of B's entity."""
    return _key_rule(a, b, entities, low=0.8, high=0.9, rule="key_role")


@RULES.register("same_name")
def same_name(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A non-key field that A produces (does not take as an argument) named exactly like p; not an attribute that an
    update B sets on a record of A's own entity (``get_order.quantity`` does not feed ``update_order.quantity``)."""
    writes_same = b.tool.kind is ToolKind.UPDATE and a.entity is not None and a.entity == b.entity
    if _echo(a, b) or writes_same or a.tool.kind is ToolKind.DELETE:
        return []
    out = []
    for param, schema in _targets(b):
        if param.lower() in GENERIC_NAMES or is_key_name(param, entities) or param in a.params:
            continue
        if b.tool.kind is ToolKind.CREATE and len(_tokens(param)) == 1:
            continue  # a create's bare `name` / `title` describes the new record
        score, f = _best_named(a, b, param, schema)
        if f is not None and score >= 0.9 and not is_key_name(f.leaf, entities) and f.leaf not in a.params:
            out.append(_param_evidence("same_name", a, b, param, f))
    return out


def _closest(a: _View, param: str, schema: Mapping[str, Any]) -> FieldRef | None:
    candidates = [f for f in a.fields if fills(param, schema, f)]
    if not candidates:
        return None
    vecs = _lexical().embed([" ".join(name_tokens(param))] + [" ".join(name_tokens(f.path)) for f in candidates])
    sims = vecs[1:] @ vecs[0]
    best = int(np.argmax(sims))
    return candidates[best] if sims[best] >= _MIN_CLOSEST else None


@functools.cache
def _lexical() -> LexicalEmbedder:
    return LexicalEmbedder()


@RULES.register("mentioned_source")
def mentioned_source(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """p's description names A; the value is A's name-related field, else its closest field by words."""
    out = []
    for param, schema in _targets(b):
        description = str(schema.get("description") or "")
        if not description or not _mentions(description, a):
            continue
        score, f = _best_named(a, b, param, schema)
        f = f if f is not None else _closest(a, param, schema)
        quote = description.strip().replace("\n", " ")[:120]
        if f is not None:
            out.append(_param_evidence("mentioned_source", a, b, param, f, note=quote))
    return out


def _is_sink(param: str) -> bool:
    tokens = [re.sub(r"\d+$", "", t) for t in _tokens(param)]
    return bool(tokens) and tokens[-1] in _SINK_WORDS


def _computed(a: _View) -> list[FieldRef]:
    """A's computed values: its non-key fields of declared types when it returns at most `_MAX_COMPUTED`
    top-level scalars (a calculator, a converter, a translation), else none (A returns records). A key (an id, a
    code, a path) names a record; it is not content for a generic slot (``channel_id`` is no message text)."""
    fields = list(a.fields)
    if not 0 < len(fields) <= _MAX_COMPUTED or any("[]" in f.path or "." in f.path for f in fields):
        return []
    return [f for f in fields if f.type not in (None, "boolean") and not _names_a_record(f)]


def _names_a_record(f: FieldRef) -> bool:
    """A key field, except a number named ``*_number`` (``squared_number`` is a quantity, ``order_number`` text)."""
    numeric = f.type in ("number", "integer") and _tokens(f.leaf)[-1:] in (["number"], ["no"])
    return is_key_name(f.leaf) and not numeric


def _takes(param: str, schema: Mapping[str, Any], f: FieldRef) -> bool:
    """A generic slot takes a value of its type; a text slot also takes a number (rendered as text)."""
    if fills(param, schema, f):
        return True
    numeric = f.type in ("number", "integer")
    return schema.get("type") == "string" and numeric and re.sub(r"\d+$", "", _tokens(param)[-1]) in _TEXT_SINKS


@RULES.register("computed_value")
def computed_value(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A computes a value of a declared type; p is a generic value slot that accepts it."""
    out = []
    for param, schema in _targets(b):
        if not _is_sink(param) or schema.get("type") is None:
            continue
        taken = [f for f in _computed(a) if _takes(param, schema, f)]
        if taken:
            out.append(_param_evidence("computed_value", a, b, param, taken[0]))
    return out


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?;])\s+|\n+", text) if s.strip()]


@RULES.register("described_order")
def described_order(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """B's description names A beside an ordering cue ("call X first", "the id returned by X")."""
    for sentence in _sentences(b.tool.description):
        if _ORDER_CUES.search(sentence) and _mentions(sentence, a):
            return [Evidence("described_order", a.tool.name, b.tool.name, EdgeType.SEMANTIC,
                             note=f"{b.tool.name} description: {sentence[:160]!r}")]  # fmt: skip
    return []


@RULES.register("creates_record")
def creates_record(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A creates a record of entity E; B takes E's key, which A's response does not expose."""
    if a.tool.kind is not ToolKind.CREATE or a.entity is None or b.tool.kind is ToolKind.CREATE:
        return []
    for param, schema in _targets(b):
        refers = entity_of(param) == a.entity or (param.lower() == "id" and b.entity == a.entity)
        if refers and _best_named(a, b, param, schema)[1] is None:
            note = f"{a.tool.name} creates the {a.entity} record that {b.tool.name}.{param} identifies"
            return [Evidence("creates_record", a.tool.name, b.tool.name, EdgeType.SEMANTIC, param=param, note=note)]
    return []


@RULES.register("declared_output")
def declared_output(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """A's name or description says it returns a key B takes (``find_user_id_by_email`` -> ``user_id``), A does
    not take that key, and A's response declares no field for it (else a key rule draws a parameter edge)."""
    if a.tool.kind not in (ToolKind.READ, ToolKind.CREATE):
        return []
    own = " " + " ".join(_tokens(a.tool.name)) + " " + " ".join(_tokens(a.tool.description)) + " "
    for param, schema in _targets(b):
        words = _tokens(param)
        if len(words) < 2 or not is_key_name(param, entities) or param in a.params:
            continue
        if f" {' '.join(words)} " in own and _best_named(a, b, param, schema)[1] is None:
            note = f"{a.tool.name} says it returns {' '.join(words)}, which {b.tool.name}.{param} takes"
            return [Evidence("declared_output", a.tool.name, b.tool.name, EdgeType.SEMANTIC, param=param, note=note)]
    return []


def pair_evidence(a: _View, b: _View, entities: frozenset[str]) -> list[Evidence]:
    """Every rule's evidence for B depending on A."""
    return [ev for name in (*PARAMETER_RULES, *SEMANTIC_RULES) for ev in RULES.get(name)(a, b, entities)]


def toolset_evidence(tools: Sequence[ToolSchema]) -> list[Evidence]:
    """Evidence for every ordered pair of distinct tools of one toolset, in a stable order."""
    views = [_view(t) for t in tools]
    entities = frozenset(e for v in views if (e := v.entity))
    return [ev for a, b in itertools.permutations(views, 2) for ev in pair_evidence(a, b, entities)]


# --------------------------------------------------------------------------- calibration
class RuleCalibration(StrictModel):
    """Each rule's precision on the development ground truth and the precision a rule needs to draw edges."""

    precision: dict[str, float] = Field(description="Rule -> (true + 1) / (fired + 2) on the pairs it fired on.")
    fired: dict[str, int] = Field(default_factory=dict, description="Rule -> ordered pairs it fired on.")
    min_precision: float = Field(description="A rule draws edges only when its precision reaches this.")
    fitted_on: str = ""

    def confidence(self, rule: str) -> float:
        return self.precision.get(rule, 0.5)

    def admitted(self, rule: str) -> bool:
        return self.confidence(rule) >= self.min_precision


def rules_path() -> Path:
    return Path(__file__).resolve().parent / "calibration" / "rules.json"


@functools.cache
def load_rules() -> RuleCalibration:
    """The shipped rule calibration (``tdg/calibration/rules.json``, written by ``bench/tdg.py --devset --fit``).

    Raises:
        ConfigError: The file is missing.
    """
    path = rules_path()
    if not path.is_file():
        raise ConfigError(f"no TDG rule calibration at {path}")
    return RuleCalibration.model_validate_json(path.read_text(encoding="utf-8"))
