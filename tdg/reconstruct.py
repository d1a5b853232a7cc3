"""Inverse context reconstruction (ToolVerse §3.2.3, App. B.3): ground a DUS skeleton into a golden trace.

The skeleton's tools run stage by stage (in each stage in name order) on one live `EnvSession`, so every state
change is visible to the calls after it. Each argument is either
- a **dependency argument**: copied from the output of an already-executed predecessor along a TDG edge, first
  by the edge's evidence (``src.response.path -> dst.param``), then by name/ID matching on the predecessor's actual
  output (`tdg.fields.match_score`); identifiers that no longer occur anywhere in the live DB are skipped; or
- a **context argument**: drawn with the seeded RNG from the current DB (by the same name/ID vocabulary, e.g.
  ``order_id`` <- ``orders[*].id``), from the schema's ``enum``, a fresh ID for the record a create tool makes, or
  a type-consistent default (respecting minimum/maximum/format) when the DB has nothing that fits.
Optional parameters are filled only from dependencies. A call whose output has status "error" is retried: the DB is
restored (`set_db`) and the arguments re-drawn (any offering predecessor, other DB values) up to `tries` times;
then the skeleton fails with reason ``tool_error:<tool>``. A trace that needed a retry is replayed once on a reset
session and kept only if outputs and hashes match (a failed draw may have advanced the tools' seeded RNG).

Goal-first (issue 20, the default): after the skeleton ran, a dependency argument is kept only when it is real
(`tdg.goalstats.real_dependencies`: produced by an earlier output, not stated as another call's context argument,
no enum or boolean), else it becomes a context argument; calls linked by no real dependency serve no goal and are
pruned; each call records its `purpose` (``requested``, or ``provides:<tool>.<arg>`` for a read whose output a
later call needs); the calls are restaged by real-dependency level, independent calls sharing a stage unless they
touch one record or create two records of one collection, and replayed on a reset session (reason
``goal_replay`` when the pruned trace no longer reproduces its outputs).
"""

from __future__ import annotations

import logging
import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple, Protocol

import networkx as nx

from data.models import (
    GoldenTrace,
    QuarantineRecord,
    Skeleton,
    StageReport,
    ToolKind,
    ToolSchema,
    TraceCall,
    TraceStage,
)
from envgen.domain import Domain
from envgen.entities import EnvPlan, plan_environment
from gustforge.errors import ReconstructionError, SandboxError
from gustforge.hashing import canonical_json, short_hash
from gustforge.schemas import safe_validator
from tdg.fields import (
    EdgeEvidence,
    FieldRef,
    entity_of,
    is_key_name,
    json_type,
    match_score,
    param_specs,
    parse_closest_field,
    parse_evidence,
    path_leaf,
    resolve_path,
    singular,
)
from tdg.goalstats import PROVIDES, REQUESTED, depth_levels, order_sensitive, real_dependencies, source_call
from tdg.infer import tool_entity
from tdg.quality import (
    PLACEHOLDER_PATTERNS,
    QualityConfig,
    calls_conflict,
    id_values,
    is_placeholder,
    list_pick,
    terminal_ids,
)
from tdg.values import new_value, realistic_number, realistic_value, search_term, tool_domain

__all__ = [
    "STAGE",
    "SkeletonFailed",
    "EnvSessionLike",
    "EnvironmentLike",
    "ReconstructionResult",
    "reconstruct_trace",
    "changes_state",
    "reconstruct_all",
    "KeyRule",
    "key_rules",
    "env_key_rules",
    "trace_id_for",
    "is_linked",
    "order_ranges",
    "goal_calls",
]

logger = logging.getLogger(__name__)

STAGE = "reconstruct"
_MISSING = object()
_STRUCTURAL = frozenset({"status", "message"})
_TERMINAL_STATUSES = frozenset(QualityConfig().terminal_statuses)
_PLACEHOLDERS = tuple(re.compile(p, re.IGNORECASE) for p in PLACEHOLDER_PATTERNS)
_CLOSEST_FIELD_MIN_COS = 0.9  # only near-identical names: `id ~ maxbggrating (cos 0.57)` is no data flow
_RESULT_FIELDS = frozenset({"result", "value", "answer", "output"})
_NAME_KEYS = ("name", "title", "label", "full_name", "username", "display_name", "email", "subject", "code")


class SkeletonFailed(ReconstructionError):
    """A skeleton cannot be grounded; `reason` is a short code such as ``tool_error:cancel_order``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class EnvSessionLike(Protocol):
    """What reconstruction needs from `envgen.runtime.EnvSession`."""

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]: ...

    def db(self) -> dict[str, Any]: ...

    def db_hash(self) -> str: ...

    def reset(self) -> None: ...

    def set_db(self, db: dict[str, Any]) -> None: ...


class EnvironmentLike(Protocol):
    """What reconstruction needs from `envgen.runtime.Environment`."""

    @property
    def env_id(self) -> str: ...

    @property
    def schemas(self) -> Sequence[ToolSchema]: ...

    def session(self) -> AbstractContextManager[EnvSessionLike]: ...


class ReconstructionResult(NamedTuple):
    traces: list[GoldenTrace]
    quarantine: list[QuarantineRecord]
    report: StageReport


# --------------------------------------------------------------------------- value sources
def _leaves(value: Any, path: str = "", parent: str | None = None) -> Iterator[tuple[FieldRef, Any]]:
    """Scalar leaves of a JSON value; a dict whose values are all dicts is a keyed collection (keys are ``id``s)."""
    if isinstance(value, Mapping):
        keyed = bool(value) and parent is not None and all(isinstance(v, Mapping) for v in value.values())
        for key in sorted(value):
            sub_path = f"{path}.{key}" if path else str(key)
            sub = value[key]
            if keyed:
                yield FieldRef(sub_path, "id", parent, json_type(key)), key
                yield from _leaves(sub, sub_path, parent)
            elif isinstance(sub, Mapping | list):
                yield from _leaves(sub, sub_path, str(key))
            else:
                yield FieldRef(sub_path, str(key), parent, json_type(sub)), sub
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, Mapping | list):
                yield from _leaves(item, f"{path}[{i}]", parent)
            elif parent is not None:
                yield FieldRef(f"{path}[{i}]", singular(parent), parent, json_type(item)), item


def _valid(schema: Mapping[str, Any], value: Any) -> bool:
    return bool(safe_validator(dict(schema)).is_valid(value))


class KeyRule(NamedTuple):
    """A parameter that names a record of `collection` by its key: an existing one, or (a create's id) a new one."""

    collection: str
    exists: bool = True


KeyRules = Mapping[str, Mapping[str, KeyRule]]  # tool -> parameter -> rule


def key_rules(plan: EnvPlan) -> dict[str, dict[str, KeyRule]]:
    """Which parameters of each tool name a record, and in which collection (from the env's execution plan)."""
    rules: dict[str, dict[str, KeyRule]] = {}
    for tool in plan.tools:
        found: dict[str, KeyRule] = {}
        if tool.id_param and tool.entity:
            found[tool.id_param] = KeyRule(tool.entity, tool.kind is not ToolKind.CREATE)
        for param, collection in tool.ref_params.items():
            found.setdefault(param, KeyRule(collection))
        target = tool.options.get("to") if tool.template in ("transfer", "payment") else None
        if isinstance(target, str) and tool.entity:
            found.setdefault(target, KeyRule(tool.entity))
        if found:
            rules[tool.name] = found
    return rules


def env_key_rules(env: EnvironmentLike) -> dict[str, dict[str, KeyRule]]:
    """`key_rules` of the plan the env's code was generated from (its schemas, log-only tools and the behaviours
    the LLM planner chose)."""
    manifest = getattr(env, "manifest", None)
    log_only = tuple(getattr(manifest, "log_only_tools", ()) or ())
    overrides = getattr(manifest, "plan_overrides", None) or {}
    return key_rules(plan_environment(list(env.schemas), log_only, overrides))


def _stored_keys(db: Mapping[str, Any], collection: str) -> list[str]:
    records = db.get(collection)
    return sorted(str(k) for k in records) if isinstance(records, Mapping) else []


def _key_value(key: str, schema: Mapping[str, Any]) -> Any:
    """`key` typed as the parameter (or its items) expects; `_MISSING` when it does not fit."""
    for value in (key, int(key) if key.lstrip("-").isdigit() else _MISSING):
        if value is not _MISSING and _valid(schema, value):
            return value
    return _MISSING


def _fold(value: Any) -> str:
    return str(value).strip().lower()


def _scalar_values(db: Any) -> set[str]:
    return {repr(v) for _, v in _leaves(db)}


def _pick(rng: random.Random, options: list[tuple[str, Any]]) -> tuple[str, Any]:
    unique = sorted({(path, repr(value)): (path, value) for path, value in options}.items())
    return rng.choice([pv for _, pv in unique])


def _closest_field(evidence: str) -> list[EdgeEvidence]:
    """A semantic edge's closest field pair, when it is similar enough or the source field is a computed result
    (`mean.result` -> `floor.number`: a calculation feeding the next one)."""
    closest = parse_closest_field(evidence)
    if closest is None:
        return []
    ev, cos = closest
    return [ev] if cos >= _CLOSEST_FIELD_MIN_COS or ev.path in _RESULT_FIELDS else []


def _same_kind(param: str, ref: FieldRef, entity: str | None) -> bool:
    """A descriptive value (a name, a title) passes on by its name only within records of the tool's own kind: a
    department's name is not the name of the employee `create_employee` makes. Keys pass on across kinds."""
    if is_key_name(param) or _id_param(param) or ref.parent is None or entity is None:
        return True
    return singular(ref.parent) == singular(entity)


def _dependency_options(
    tool: ToolSchema, param: str, schema: Mapping[str, Any], dag: nx.DiGraph, pred: str, output: Any,
    live: set[str], stored: set[str] = frozenset(),  # type: ignore[assignment]
    allowed: set[str] | None = None,
) -> list[tuple[str, Any]]:  # fmt: skip
    """Values predecessor `pred`'s output offers for `param`: by edge evidence (a parameter edge's mappings, or the
    closest field pair a semantic edge names), else by name/ID matching.

    `stored` holds the values a read tool's own collection keeps under `param`; offers among them come first, so
    a read fed by a dependency finds something. `allowed` (folded keys of stored records) restricts a key
    parameter to records that exist; a list-typed key takes a single offered key as a one-element list.
    """
    evidence = str(dag.edges[pred, tool.name].get("evidence") or "")
    by_evidence = [
        (path, value)
        for ev in parse_evidence(evidence) or _closest_field(evidence)
        if ev.param == param and ev.src == pred
        for path, value in resolve_path(output, ev.path)
    ]
    entity = tool_entity(tool)
    scored = [(match_score(param, ref, dst_entity=entity), ref.path, v) for ref, v in _leaves(output)
              if not (ref.parent is None and ref.leaf in _STRUCTURAL) and _same_kind(param, ref, entity)]  # fmt: skip
    best = max((sc for sc, _, _ in scored), default=0.0)
    by_name = [(path, v) for sc, path, v in scored if sc == best and best > 0]
    if allowed is not None:
        listed = schema.get("type") == "array"
        by_evidence, by_name = (
            [(p, [v] if listed and not isinstance(v, list) else v) for p, v in opts
             if all(_fold(x) in allowed for x in (v if isinstance(v, list) else [v]))]
            for opts in (by_evidence, by_name)
        )  # fmt: skip
    for options in (by_evidence, by_name):
        fitting = [
            (p, v)
            for p, v in options
            if _valid(schema, v) and (allowed is not None or not _id_param(param) or repr(v) in live)
        ]
        if fitting:
            return [(p, v) for p, v in fitting if repr(v) in stored] or fitting
    return []


def _from_dependencies(
    tool: ToolSchema, param: str, schema: Mapping[str, Any], dag: nx.DiGraph, outputs: Mapping[str, Any],
    order: Sequence[str], live: set[str], rng: random.Random, *, explore: bool,
    stored: set[str] = frozenset(),  # type: ignore[assignment]
    allowed: set[str] | None = None,
) -> tuple[str, Any, str | None] | None:  # fmt: skip
    """(source 'tool.path', value, pick criterion) for `param` from an executed predecessor along a TDG edge.

    The most recently executed predecessor that offers a value wins (one offering a value the read tool's
    collection stores, when there is one); when `explore` (a retry after a tool error) any offering predecessor
    may be chosen.
    """
    offers = []
    for pred in (t for t in reversed(order) if dag.has_edge(t, tool.name)):
        options = _dependency_options(tool, param, schema, dag, pred, outputs[pred], live, stored, allowed)
        if options:
            offers.append((pred, options))
    if not offers:
        return None
    finding = [o for o in offers if any(repr(v) in stored for _, v in o[1])]
    pred, options = rng.choice(offers) if explore else (finding or offers)[0]
    path, value, criterion = _determined_pick(outputs[pred], options, rng)
    return f"{pred}.{path}", value, criterion


def _distinguishing_key(element: Any, siblings: Sequence[Any]) -> str | None:
    """A non-id field whose value singles `element` out among `siblings` (name-like fields first)."""
    if not isinstance(element, Mapping):
        return None
    keys = [
        k
        for k, v in element.items()
        if isinstance(v, str | int | float)
        and not isinstance(v, bool)
        and not _id_param(str(k))
        and str(k) not in _STRUCTURAL
        and len(str(v)) <= 60
        and str(v).strip()
    ]
    keys.sort(key=lambda k: (next((i for i, n in enumerate(_NAME_KEYS) if n in str(k).lower()), len(_NAME_KEYS)),
                             not isinstance(element[k], str), str(k)))  # fmt: skip
    for key in keys:
        if sum(isinstance(s, Mapping) and s.get(key) == element[key] for s in siblings) == 1:
            return str(key)
    return None


def _determined_pick(output: Any, options: list[tuple[str, Any]], rng: random.Random) -> tuple[str, Any, str | None]:
    """Choose among a predecessor's offered values so the task can single the choice out.

    A value not taken from a list (or from a list of one) is determined; else an element with a unique
    name-like attribute (criterion ``field=<key>``, the task states the attribute); else the first or last element
    (``position=first|last``, the task states the rule).
    """
    unique = [pv for _, pv in sorted({(p, repr(v)): (p, v) for p, v in options}.items())]
    from_one_list = all((picked := list_pick(output, p)) is None or len(picked[1]) <= 1 for p, _ in unique)
    if len({repr(v) for _, v in unique}) == 1 and from_one_list:
        return unique[0][0], unique[0][1], None  # one value, not one element out of a longer list
    direct = [(p, v) for p, v in unique if (picked := list_pick(output, p)) is None or len(picked[1]) <= 1]
    if direct:
        path, value = rng.choice(direct)
        return path, value, None
    keyed = []
    for path, value in unique:
        element, siblings, _ = list_pick(output, path)  # type: ignore[misc]
        key = _distinguishing_key(element, siblings)
        if key is not None:
            keyed.append((path, value, f"field={key}"))
    if keyed:
        return rng.choice(keyed)
    for path, value in unique:
        _, siblings, index = list_pick(output, path)  # type: ignore[misc]
        if index == 0:
            return path, value, "position=first"
    path, value = _pick(rng, unique)
    return path, value, None


def _id_param(param: str) -> bool:
    return param == "id" or entity_of(param) is not None


def _fresh_id(existing: list[Any], rng: random.Random) -> Any:
    """An ID not in `existing`, shaped like the existing ones (int -> max+1, 'ord_003' -> 'ord_<n>')."""
    ints = [v for v in existing if isinstance(v, int) and not isinstance(v, bool)]
    if ints:
        return max(ints) + 1
    strings = sorted(str(v) for v in existing)
    prefix = strings[0].rstrip("0123456789") if strings else "new_"
    taken = set(strings)
    n = len(strings) + 1
    while f"{prefix}{n:03d}" in taken:
        n += 1 + rng.randrange(3)
    return f"{prefix}{n:03d}"


def _default(param: str, schema: Mapping[str, Any], rng: random.Random, domain: Domain | None = None) -> Any:
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
    if kind in ("integer", "number"):
        return realistic_number(param, {**schema, "type": kind}, rng)  # a salary is not 2.49, a pid not 49.16
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        item = _default(param, schema.get("items") or {"type": "string"}, rng, domain)
        return [item] * max(1, int(schema.get("minItems", 1)))
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if not props:  # a free-form document (insert_many's documents) is not {}
            from envgen.database import sample_value

            return sample_value(param, {**schema, "type": "object"}, rng, domain=domain)
        return {k: _default(k, props.get(k) or {}, rng, domain) for k in schema.get("required") or () if k in props}
    return realistic_value(param, schema, rng, domain)


def _from_context(
    tool: ToolSchema, param: str, schema: Mapping[str, Any], db: Mapping[str, Any], rng: random.Random
) -> Any:
    """A value for `param` drawn from the live DB (or the schema); `_MISSING` if nothing valid fits."""
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    entity = tool_entity(tool)
    leaves = list(_leaves(db))
    if tool.kind is ToolKind.CREATE and (param == "id" or entity_of(param) == entity) and entity is not None:
        existing = [v for ref, v in leaves if match_score(param, ref, dst_entity=entity) > 0]
        return _fresh_id(existing, rng)
    fresh = tool.kind is ToolKind.CREATE and not (is_key_name(param) or _id_param(param))
    scored = [(match_score(param, ref, dst_entity=entity), ref.path, v) for ref, v in leaves
              if not fresh and _same_kind(param, ref, entity)]  # a new record's name is not an existing one's
    best = max((s for s, _, _ in scored), default=0.0)
    options = [
        (p, v)
        for s, p, v in scored
        if best > 0 and s == best and _valid(schema, v) and not is_placeholder(v, _PLACEHOLDERS)
    ]  # a DB filler like "Sample comment 3" is not reused
    if options:
        return _pick(rng, options)[1]
    if tool.kind is ToolKind.READ and not _id_param(param):
        term = search_term(param, schema, db, entity, rng)
        if term is not None and _valid(schema, term):
            return term
    value = _default(param, schema, rng, tool_domain(tool))
    return value if _valid(schema, value) else _MISSING


def _instantiate(
    tool: ToolSchema, dag: nx.DiGraph, outputs: Mapping[str, Any], order: Sequence[str],
    db: Mapping[str, Any], rng: random.Random, *, explore: bool = False, prefer_anchor: bool = False,
    keys: Mapping[str, KeyRule] | None = None, terminal: set[str] = frozenset(),  # type: ignore[assignment]
    initial: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, str], tuple[str, ...], dict[str, str]]:  # fmt: skip
    """Arguments of one call: (args, dependency sources, context arguments, pick criteria).

    Identifier arguments come first (dependencies, else the DB); an update's other fields then get a new valid
    value that differs from the record's current one (at least one field changes), never a copy of it.
    A parameter `keys` marks as naming a stored record takes a key that exists in the live DB (from a
    dependency when one offers such a key, else drawn from the collection; a write never names a record in
    `terminal`); a create's own key is never one that exists.
    """
    keys = keys or {}
    args: dict[str, Any] = {}
    dependency: dict[str, str] = {}
    context: list[str] = []
    criteria: dict[str, str] = {}
    live = _scalar_values(db)
    specs = sorted(param_specs(tool.parameters).items(),
                   key=lambda kv: (not (_id_param(kv[0]) or kv[0] in keys), kv[0]))  # fmt: skip
    changing = tool.kind is ToolKind.UPDATE
    fields = [p for p, _ in specs if changing and not _id_param(p) and p not in keys]
    optional_fields = [p for p, (_, required) in specs if p in fields and not required]
    chosen = set(rng.sample(optional_fields, k=min(len(optional_fields), 1 + int(rng.random() < 0.3))))
    anchor = _anchor_record(tool, db, rng) if tool.kind is ToolKind.READ else None
    for param, (schema, required) in specs:
        if param in fields:
            if not required and param not in chosen:
                continue
            record = _target_record(db, args, tool)
            value = new_value(
                param,
                schema,
                record.get(param, _MISSING) if record else _MISSING,
                db,
                rng,
                avoid=_TERMINAL_STATUSES,
                default=lambda p=param, sc=schema: _default(p, sc, rng, tool_domain(tool)),
            )
            if value is None or not _valid(schema, value):
                raise SkeletonFailed(f"unfillable_arg:{tool.name}", f"no new valid value for {param}")
            args[param] = value
            context.append(param)
            continue
        rule = keys.get(param)
        if rule is not None and not isinstance(db.get(rule.collection), Mapping):
            rule = None  # the DB keeps no such collection: the plan does not describe this env's data
        if rule is not None and rule.exists:
            drawn = _existing_key(tool, param, schema, required, rule, dag, outputs, order, db, live, rng,
                                  explore=explore, terminal=terminal, initial=initial)  # fmt: skip
            if drawn is not None:
                source, args[param], criterion = drawn
                if source is None:
                    context.append(param)
                else:
                    dependency[param] = source
                    if criterion:
                        criteria[param] = criterion
            continue
        if rule is not None:  # a create's own key: a record that does not exist yet
            if required:
                args[param] = _new_key(tool, param, schema, db, rule, rng)
                context.append(param)
            continue
        if prefer_anchor and anchor is not None and _valid(schema, anchor.get(param, _MISSING)):
            args[param] = anchor[param]  # a read that came back empty: search by a stored record instead
            context.append(param)
            continue
        stored = _stored_values(db, tool.entity, param) if tool.kind is ToolKind.READ else set()
        found = _from_dependencies(tool, param, schema, dag, outputs, order, live, rng, explore=explore,
                                   stored=stored)  # fmt: skip
        if found is not None:
            dependency[param], args[param], criterion = found
            if criterion:
                criteria[param] = criterion
            continue
        if not required:
            continue
        if anchor is not None and _valid(schema, anchor.get(param, _MISSING)):
            args[param] = anchor[param]  # a read's filters all taken from one stored record: it finds something
            context.append(param)
            continue
        value = _from_context(tool, param, schema, db, rng)
        if value is _MISSING:
            raise SkeletonFailed(f"unfillable_arg:{tool.name}", f"no valid value for {param}")
        args[param] = value
        context.append(param)
    validator = safe_validator(tool.parameters)
    ordered = order_ranges(args, frozenset(context))
    args = ordered if validator.is_valid(ordered) else args
    errors = [e.message for e in validator.iter_errors(args)]
    if errors:
        raise SkeletonFailed(f"invalid_args:{tool.name}", "; ".join(errors[:3]))
    return args, dependency, tuple(context), criteria


_RANGE_ENDS = (("start", "end"), ("from", "to"), ("min", "max"), ("begin", "end"), ("since", "until"),
               ("check_in", "check_out"), ("earliest", "latest"), ("low", "high"))  # fmt: skip


def _range_partner(name: str) -> str | None:
    """The upper end named like `name`'s lower end (`start_date` -> `end_date`, `minPrice` -> `maxPrice`)."""
    for low, high in _RANGE_ENDS:
        for pattern in (rf"^{low}(?=[_A-Z]|$)", rf"(?<=_){low}$", rf"(?<=[a-z]){low.capitalize()}$"):
            if re.search(pattern, name):
                return re.sub(pattern, high if pattern.startswith("^") or "_" in pattern else high.capitalize(), name)
    return None


def _comparable(a: Any, b: Any) -> bool:
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    dates = all(isinstance(v, str) and re.match(r"^\d{4}-\d{2}-\d{2}", v) for v in (a, b))
    return numbers or dates


def order_ranges(args: dict[str, Any], free: frozenset[str] | None = None) -> dict[str, Any]:
    """Swap the two ends of a range drawn in the wrong order (`start_date` after `end_date`, `min_price` above
    `max_price`), in nested objects too. Only values in `free` (top-level names drawn from context, None: all) are
    touched: a value taken from an earlier call stays as it came."""
    out = {k: order_ranges(v) if isinstance(v, dict) else v for k, v in args.items()}
    for low in list(out):
        high = _range_partner(low)
        if high is None or high not in out or (free is not None and not {low, high} <= free):
            continue
        if _comparable(out[low], out[high]) and out[low] > out[high]:
            out[low], out[high] = out[high], out[low]
    return out


def _new_key(
    tool: ToolSchema, param: str, schema: Mapping[str, Any], db: Mapping[str, Any], rule: KeyRule, rng: random.Random
) -> Any:
    """A key for the record a create makes: drawn like any context value, replaced by a fresh ID if it exists."""
    stored = _stored_keys(db, rule.collection)
    value = _from_context(tool, param, schema, db, rng)
    if value is _MISSING or _fold(value) in {_fold(k) for k in stored}:
        value = _fresh_id(stored, rng)
    if not _valid(schema, value):
        raise SkeletonFailed(f"unfillable_arg:{tool.name}", f"no new key for {param}")
    return value


def _existing_key(
    tool: ToolSchema, param: str, schema: Mapping[str, Any], required: bool, rule: KeyRule, dag: nx.DiGraph,
    outputs: Mapping[str, Any], order: Sequence[str], db: Mapping[str, Any], live: set[str], rng: random.Random,
    *, explore: bool, terminal: set[str], initial: Mapping[str, Any] | None = None,
) -> tuple[str | None, Any, str | None] | None:  # fmt: skip
    """(dependency source or None, value, pick criterion) for a parameter naming a stored record of
    `rule.collection`; None when an optional one has no dependency. A list-typed key gets existing keys; a key
    not taken from a dependency is one the `initial` DB already holds (a user can state it)."""
    stored = _stored_keys(db, rule.collection)
    if tool.kind is not ToolKind.READ:  # a write never acts on a record an earlier call ended
        stored = [k for k in stored if not {repr(k), repr(_key_value(k, {"type": "integer"}))} & terminal]
    allowed = {_fold(k) for k in stored}
    found = None
    if not (explore and rng.random() < 0.5):  # a retry after a tool error may name another stored record
        found = _from_dependencies(tool, param, schema, dag, outputs, order, live, rng, explore=explore,
                                   stored=set(), allowed=allowed)  # fmt: skip
    if found is not None:
        return found
    if not required:
        return None
    if initial is not None:
        known = {_fold(k) for k in _stored_keys(initial, rule.collection)}
        stored = [k for k in stored if _fold(k) in known]
    listed = schema.get("type") == "array"
    item_schema = (schema.get("items") or {}) if listed else schema
    fitting = [v for k in stored if (v := _key_value(k, item_schema)) is not _MISSING
               and not is_placeholder(v, _PLACEHOLDERS)]  # fmt: skip
    if not fitting:
        raise SkeletonFailed(f"unfillable_arg:{tool.name}", f"no stored {rule.collection} key fits {param}")
    if not listed:
        return None, rng.choice(fitting), None
    count = max(1, int(schema.get("minItems", 1)) + int(rng.random() < 0.3))
    value = rng.sample(fitting, k=min(len(fitting), count))
    if not _valid(schema, value):
        raise SkeletonFailed(f"unfillable_arg:{tool.name}", f"no list of stored {rule.collection} keys fits {param}")
    return None, value, None


def _stored_values(db: Mapping[str, Any], collection: str | None, field: str) -> set[str]:
    """repr() of every value the records of `collection` keep under `field`."""
    records = db.get(collection) if collection else None
    rows = records.values() if isinstance(records, Mapping) else records if isinstance(records, list) else []
    return {repr(r[field]) for r in rows if isinstance(r, Mapping) and field in r}


def _anchor_record(tool: ToolSchema, db: Mapping[str, Any], rng: random.Random) -> Mapping[str, Any] | None:
    """A random stored record of the collection a read tool searches (None when it has none)."""
    records = db.get(tool.entity) if tool.entity else None
    rows = list(records.values()) if isinstance(records, Mapping) else records if isinstance(records, list) else []
    rows = [r for r in rows if isinstance(r, Mapping)]
    return rng.choice(rows) if rows else None


def _target_record(db: Mapping[str, Any], args: Mapping[str, Any], tool: ToolSchema) -> Mapping[str, Any] | None:
    """The DB record an update's identifier arguments name (its own entity's collection first)."""
    entity = tool_entity(tool)
    collections = sorted(db, key=lambda c: singular(str(c)) != entity)
    for value in args.values():
        for name in collections:
            records = db.get(name)
            if isinstance(records, Mapping) and isinstance(records.get(str(value)), Mapping):
                return records[str(value)]
    return None


# --------------------------------------------------------------------------- traces
def trace_id_for(env_id: str, graph_index: int, stages: Sequence[TraceStage], initial_db_hash: str) -> str:
    """Content hash of what a trace does (16 hex chars)."""
    payload = {"env_id": env_id, "graph_index": graph_index, "initial_db_hash": initial_db_hash,
               "stages": [s.model_dump(mode="json") for s in stages]}  # fmt: skip
    return short_hash(payload, 16)


def _empty_result(output: Mapping[str, Any]) -> bool:
    lists = [v for k, v in output.items() if k not in _STRUCTURAL and isinstance(v, list)]
    return output.get("count") == 0 or (bool(lists) and all(not v for v in lists))


def _run_call(
    session: EnvSessionLike, tool: ToolSchema, dag: nx.DiGraph, outputs: Mapping[str, Any],
    order: Sequence[str], rng: random.Random, tries: int, terminal: set[str],
    keys: Mapping[str, KeyRule] | None = None, initial: Mapping[str, Any] | None = None,
) -> tuple[TraceCall, bool]:  # fmt: skip
    """Instantiate and run one call; on a tool error (or an empty search result) restore the DB and re-draw the
    arguments (`tries` in all). A read that stays empty after every draw is kept as it is.

    Returns:
        The call and whether it needed a retry.

    Raises:
        SkeletonFailed: every draw failed, or the call would write to a record an earlier call made terminal.
    """
    db = session.db()
    before = session.db_hash()
    tried: set[str] = set()
    message = ""
    fallback: tuple[TraceCall, bool] | None = None
    for draw in range(4 * tries):  # duplicate draws do not count as tries
        args, dependency, context, criteria = _instantiate(tool, dag, outputs, order, db, rng, explore=draw > 0,
                                                           prefer_anchor=message == "empty result", keys=keys,
                                                           terminal=terminal, initial=initial)  # fmt: skip
        key = canonical_json(args)
        if key in tried:
            continue
        if len(tried) == tries:
            break
        tried.add(key)
        if tool.kind is not ToolKind.READ and id_values(args) & terminal:
            message = "after_terminal_state"
            continue
        output = session.call(tool.name, args)
        if isinstance(output, dict) and output.get("status") != "error":
            call = TraceCall(name=tool.name, arguments=args, output=output, dependency_args=dependency,
                             context_args=context, pick_criteria=criteria,
                             db_changed=session.db_hash() != before)  # fmt: skip
            if tool.kind is ToolKind.UPDATE and not call.db_changed:
                message = "the update changed nothing"
            elif not (tool.kind is ToolKind.READ and _empty_result(output)):
                return call, draw > 0
            else:
                fallback = fallback or (call, draw > 0)
                message = "empty result"
        else:
            message = f"args={args!r}: " + (
                str(output.get("message", "")) if isinstance(output, dict) else repr(output)
            )
        session.set_db(db)
    if fallback is not None:
        call, _ = fallback
        output = session.call(tool.name, call.arguments)  # re-run the kept draw on the restored DB
        return call.model_copy(update={"output": output}), True
    if message == "after_terminal_state":
        raise SkeletonFailed("after_terminal_state", f"{tool.name} would act on a record an earlier call ended")
    if message == "the update changed nothing":
        raise SkeletonFailed(f"noop_write:{tool.name}", f"{len(tried)} argument draws changed nothing")
    raise SkeletonFailed(f"tool_error:{tool.name}", f"{len(tried)} argument draws failed; last {message}")


def _run_stages(
    session: EnvSessionLike, schemas: Mapping[str, ToolSchema], dag: nx.DiGraph, skeleton: Skeleton,
    rng: random.Random, tries: int, keys: KeyRules | None = None,
) -> tuple[list[TraceStage], bool]:  # fmt: skip
    """Run the skeleton's stages; a call that would share a parallel stage with a write on the same record
    (or be a write next to another call on it) opens a new stage, so parallel stages never conflict. Values flow
    only from the skeleton's earlier stages: a call's dependency never comes from a call of its own stage."""
    outputs: dict[str, Any] = {}
    order: list[str] = []
    stages: list[TraceStage] = []
    retried = False
    terminal: set[str] = set()
    initial = session.db()
    for stage in skeleton.stages:
        before = session.db_hash()
        calls: list[TraceCall] = []
        ran: list[tuple[str, Any]] = []
        for name in stage:
            start = session.db_hash() if calls else before
            call, again = _run_call(session, schemas[name], dag, outputs, order, rng, tries, terminal,
                                    (keys or {}).get(name), initial)  # fmt: skip
            if any(calls_conflict(call, other, schemas) for other in calls):
                stages.append(TraceStage(calls=tuple(calls), db_hash_before=before, db_hash_after=start))
                before, calls = start, []
            retried |= again
            calls.append(call)
            terminal |= terminal_ids(call, schemas[name].kind, _TERMINAL_STATUSES)
            ran.append((name, call.output))
        for name, output in ran:
            outputs[name] = output
            order.append(name)
        stages.append(TraceStage(calls=tuple(calls), db_hash_before=before, db_hash_after=session.db_hash()))
    return stages, retried


def _replays(session: EnvSessionLike, stages: Sequence[TraceStage]) -> bool:
    """Whether the recorded calls reproduce the recorded outputs and hashes on a reset session."""
    session.reset()
    for stage in stages:
        if session.db_hash() != stage.db_hash_before:
            return False
        if any(session.call(call.name, call.arguments) != call.output for call in stage.calls):
            return False
        if session.db_hash() != stage.db_hash_after:
            return False
    return True


# --------------------------------------------------------------------------- goal-first
def _keep_real(calls: list[TraceCall], schemas: Mapping[str, ToolSchema] | None) -> list[TraceCall]:
    """Keep only real dependency arguments (`tdg.goalstats.real_dependencies`): one whose value the trace states
    (a context argument) or whose provider is gone becomes a context argument (the task states it), its pick
    criterion dropped; repeated until stable (a moved value is stated too)."""
    while True:
        real = {(d.consumer, d.arg) for d in real_dependencies(calls, schemas=schemas)}
        moved = [[a for a in c.dependency_args if (i, a) not in real] for i, c in enumerate(calls)]
        if not any(moved):
            return calls
        calls = [
            c.model_copy(update={
                "dependency_args": {a: src for a, src in c.dependency_args.items() if a not in gone},
                "context_args": tuple(c.context_args) + tuple(sorted(gone)),
                "pick_criteria": {a: r for a, r in c.pick_criteria.items() if a not in gone},
            }) if gone else c
            for c, gone in zip(calls, moved, strict=True)
        ]  # fmt: skip


def _earliest_source(calls: Sequence[TraceCall], index: int, arg: str, source: str) -> str:
    """The earliest call before `index` whose output holds the same value under the same key as `source` names,
    not picked out of a list of several ('create_task.task.task_id' rather than a later
    'list_tasks.tasks[0].task_id'); `source` when there is none: a read that repeats what an earlier call
    returned serves no goal."""
    value = calls[index].arguments.get(arg)
    key = path_leaf(source)
    for call in calls[:index]:
        for ref, leaf in _leaves(call.output):
            picked = list_pick(call.output, ref.path)
            if ref.leaf == key and leaf == value and (picked is None or len(picked[1]) <= 1):
                return f"{call.name}.{ref.path}"
    return source


def _echoed(calls: Sequence[TraceCall], index: int, arg: str, source: str) -> tuple[str, str | None] | None:
    """(source, pick criterion) of the value when the call `source` names received it as a dependency argument
    itself (its output echoes its input: `get_ticket(ticket_id)` returning the ticket id it was given)."""
    provider = source_call(source, [c.name for c in calls[:index]])
    if provider is None:
        return None
    value, giver = calls[index].arguments.get(arg), calls[provider]
    for name, origin in sorted(giver.dependency_args.items()):
        if giver.arguments.get(name) == value:
            return origin, giver.pick_criteria.get(name)
    return None


def _resource(calls: Sequence[TraceCall]) -> list[TraceCall]:
    """Every dependency argument re-pointed past calls that only echo it (`_echoed`, keeping the pick criterion
    that singled it out) and then to its earliest source (`_earliest_source`)."""
    out: list[TraceCall] = []
    for index, call in enumerate(calls):
        sources, criteria = dict(call.dependency_args), dict(call.pick_criteria)
        for arg, source in call.dependency_args.items():
            echoed = _echoed(out + [call], index, arg, source)
            if echoed is not None:
                sources[arg] = echoed[0]
                criteria.pop(arg, None)
                if echoed[1]:
                    criteria[arg] = echoed[1]
                continue
            earliest = _earliest_source(out + [call], index, arg, source)
            if earliest != source:
                sources[arg] = earliest
                criteria.pop(arg, None)
        changed = sources != call.dependency_args or criteria != call.pick_criteria
        out.append(call.model_copy(update={"dependency_args": sources, "pick_criteria": criteria}) if changed
                   else call)  # fmt: skip
    return out


def goal_calls(
    calls: Sequence[TraceCall], last: int | None = None,
    schemas: Mapping[str, ToolSchema] | None = None, *, keep_writes: bool = False,
    goals: set[str] | None = None,
) -> list[TraceCall]:  # fmt: skip
    """The goal-first calls of an executed trace (in execution order), each with its `purpose`.

    Each dependency argument is first re-pointed past calls that only echo it and to the earliest call that
    returned it (`_resource`: a read repeating a value is then no provider). Calls linked by a real dependency
    are kept (a trace without any keeps the calls of its last stage, `last` being the number of them, default 1:
    the goals the skeleton ends in; a trace with one also keeps every call of a `goals` tool: an independent
    requested call next to the chain, "tell me X and also Y"); every other call serves no goal and is pruned. A
    read whose output a later call needs is ``provides:<tool>.<arg>`` (its first consumer); every other call, and
    every call that changes the DB (the user must ask for a state change), is ``requested``. `keep_writes` keeps
    every call that changed the DB too (a requested state change of its own). `goals` (the skeleton's goal tools;
    None: every tool)
    limits which reads may end a chain: a read drawn as a provider that provides nothing (any more) is pruned.
    """
    flat = _resource(calls)
    while goals is not None:
        deps = real_dependencies(flat, schemas=schemas)
        idle = [i for i, c in enumerate(flat) if not c.db_changed and c.name not in goals
                and not any(d.provider == i for d in deps)]  # fmt: skip
        if not idle or len(idle) == len(flat):
            break
        flat = _resource([c for i, c in enumerate(flat) if i not in idle])
    deps = real_dependencies(flat, schemas=schemas)
    keep = {d.provider for d in deps} | {d.consumer for d in deps}
    if not deps:
        keep = set(range(max(0, len(flat) - (last or 1)), len(flat)))
    elif goals is not None:  # the skeleton's goals next to a chain are requested too ("tell me X and also Y")
        keep |= {i for i, c in enumerate(flat) if c.name in goals}
    if keep_writes:
        keep |= {i for i, c in enumerate(flat) if c.db_changed}
    kept = _keep_real([flat[i] for i in sorted(keep)], schemas)
    deps = real_dependencies(kept, schemas=schemas)
    out = []
    for index, call in enumerate(kept):
        consumers = [d for d in deps if d.provider == index]
        purpose = (f"{PROVIDES}{kept[consumers[0].consumer].name}.{consumers[0].arg}"
                   if consumers and not call.db_changed else REQUESTED)  # fmt: skip
        out.append(call.model_copy(update={"purpose": purpose}))
    return out


def _clashes(call: TraceCall, stage: Sequence[TraceCall], schemas: Mapping[str, ToolSchema]) -> bool:
    """`call` may not share a stage with `stage`: a write on a record another call touches, or two records created
    in one collection (the final DB would depend on the order of calls inside the turn)."""
    return any(calls_conflict(call, other, schemas) or order_sensitive([call, other], schemas) for other in stage)


def _goal_stages(
    calls: Sequence[TraceCall], schemas: Mapping[str, ToolSchema], keep_order: bool
) -> list[list[TraceCall]]:
    """Calls grouped into stages by real-dependency level (independent calls share a stage); a call that would
    clash with one of its stage opens the next. `keep_order`: stages never reorder the calls (a stage starts
    wherever the level would go down)."""
    levels = depth_levels(len(calls), real_dependencies(calls, schemas=schemas))
    if keep_order:
        for i in range(1, len(levels)):
            levels[i] = max(levels[i], levels[i - 1])
    order = sorted(range(len(calls)), key=lambda i: (levels[i], i))
    stages: list[list[TraceCall]] = []
    last_level = None
    for i in order:
        if last_level != levels[i] or _clashes(calls[i], stages[-1], schemas):
            stages.append([])
        stages[-1].append(calls[i])
        last_level = levels[i]
    return stages


def _replay_stages(session: EnvSessionLike, stages: Sequence[Sequence[TraceCall]]) -> list[TraceStage] | None:
    """Run `stages` on a reset session; the recorded stages (fresh hashes and `db_changed`) when every output is the
    recorded one, else None."""
    session.reset()
    out = []
    for stage in stages:
        before = session.db_hash()
        calls = []
        for call in stage:
            start = session.db_hash()
            if session.call(call.name, call.arguments) != call.output:
                return None
            calls.append(call.model_copy(update={"db_changed": session.db_hash() != start}))
        out.append(TraceStage(calls=tuple(calls), db_hash_before=before, db_hash_after=session.db_hash()))
    return out


def _goal_first(session: EnvSessionLike, schemas: Mapping[str, ToolSchema], stages: Sequence[TraceStage],
                goals: set[str] | None = None) -> list[TraceStage]:  # fmt: skip
    """Prune the calls that serve no goal, record each call's purpose and restage by real-dependency level; the
    result is replayed on a reset session (stages in level order, else in execution order; when a pruned write
    made a difference, with every write kept).

    Raises:
        SkeletonFailed: ``goal_replay`` when the pruned trace no longer reproduces its outputs.
    """
    flat, last = [c for stage in stages for c in stage.calls], len(stages[-1].calls) if stages else None
    for keep_writes, keep_order in ((False, False), (False, True), (True, False), (True, True)):
        calls = goal_calls(flat, last, schemas, keep_writes=keep_writes, goals=goals)
        replayed = _replay_stages(session, _goal_stages(calls, schemas, keep_order))
        if replayed is not None:
            return replayed
    raise SkeletonFailed("goal_replay", "the pruned trace does not reproduce its outputs")


def _check_skeleton(skeleton: Skeleton, schemas: Mapping[str, ToolSchema], dag: nx.DiGraph) -> None:
    tools = [t for stage in skeleton.stages for t in stage]
    if not tools:
        raise SkeletonFailed("empty_skeleton")
    unknown = sorted(set(tools) - set(schemas))
    if unknown:
        raise SkeletonFailed(f"unknown_tool:{unknown[0]}", f"not in the environment: {unknown}")
    repeated = [t for t, n in Counter(tools).items() if n > 1]
    if repeated:
        raise SkeletonFailed("repeated_tool", f"{sorted(repeated)}")
    missing = sorted(set(tools) - set(dag.nodes))
    if missing:
        raise SkeletonFailed(f"unknown_tool:{missing[0]}", "not in the graph")


def reconstruct_trace(
    env: EnvironmentLike,
    dag: nx.DiGraph,
    skeleton: Skeleton,
    *,
    seed: int = 0,
    tries: int = 6,
    session: EnvSessionLike | None = None,
    keys: KeyRules | None = None,
    goal_first: bool = True,
) -> GoldenTrace:
    """Ground `skeleton` into an executable golden trace on a live copy of `env`'s DB.

    Args:
        env: The environment (`envgen.runtime.Environment`).
        dag: The sanitized TDG the skeleton was sampled from (edges give the dependency arguments).
        skeleton: The DUS skeleton.
        seed: Seeds every context-value choice.
        tries: Argument draws per call; after a tool error the DB is restored and the arguments re-drawn.
        session: An open session to reuse (it is reset first); a new one is opened and closed when None.
        keys: Which parameters name stored records (`key_rules`); derived from the env's plan when None.
        goal_first: Prune the calls that serve no goal, record each call's `purpose`, keep only real dependency
            arguments and restage by real-dependency level (`goal_calls`); False keeps the skeleton's calls and
            stages as they ran.

    Returns:
        The golden trace; ``trace_id`` is a content hash, ``edges_used`` are the DAG edges among its tools.

    Raises:
        SkeletonFailed: (a `ReconstructionError`) with ``reason`` ``tool_error:<tool>``,
            ``unfillable_arg:<tool>``, ``invalid_args:<tool>``, ``unknown_tool:<tool>``, ``repeated_tool`` or
            ``empty_skeleton``, ``nondeterministic_replay``, ``goal_replay``.
        SandboxError: The sandbox itself failed (timeout, memory, crash).
    """
    schemas = {s.name: s for s in env.schemas}
    _check_skeleton(skeleton, schemas, dag)
    rng = random.Random(seed)
    keys = env_key_rules(env) if keys is None else keys
    context: AbstractContextManager[EnvSessionLike] = nullcontext(session) if session is not None else env.session()
    with context as live:
        live.reset()
        initial = live.db_hash()
        stages, retried = _run_stages(live, schemas, dag, skeleton, rng, tries, keys)
        # A failed draw may have consumed the tools' seeded RNG; make sure a clean replay gives the same trace.
        if retried and not _replays(live, stages):
            raise SkeletonFailed("nondeterministic_replay", "the trace differs when replayed on a fresh session")
        if goal_first:
            tools = {t for stage in skeleton.stages for t in stage}
            goals = {t for t in tools if not set(dag.successors(t)) & tools}  # nothing of the skeleton needs them
            stages = _goal_first(live, schemas, stages, goals)
    tools = {call.name for stage in stages for call in stage.calls}
    edges = tuple(sorted((u, v) for u, v in dag.edges if u in tools and v in tools))
    return GoldenTrace(
        trace_id=trace_id_for(env.env_id, skeleton.graph_index, stages, initial),
        env_id=env.env_id,
        graph_index=skeleton.graph_index,
        stages=tuple(stages),
        edges_used=edges,
        initial_db_hash=initial,
        final_db_hash=stages[-1].db_hash_after,
        graph_source=str(dag.graph.get("inferer", "")),
    )


def _skeleton_seed(seed: int, skeleton: Skeleton, variant: int = 0) -> int:
    parts: list[Any] = [seed, skeleton.model_dump(mode="json")] + ([variant] if variant else [])
    return int(short_hash(parts, 8), 16)


def changes_state(trace: GoldenTrace) -> bool:
    """Whether a call of the trace wrote to the environment's database."""
    return any(call.db_changed for stage in trace.stages for call in stage.calls)


def is_linked(trace: GoldenTrace) -> bool:
    """Whether a value one call returned is an argument of a later call (the trace is more than independent calls)."""
    return len(trace.stages) > 1 and any(call.dependency_args for stage in trace.stages for call in stage.calls)


def _limit_unlinked(traces: Sequence[GoldenTrace], limit: int) -> tuple[list[GoldenTrace], list[GoldenTrace]]:
    """(kept, dropped): every linked trace, plus at most `limit` unlinked ones, greedily: those that change state first
    (the final-state check then says something; an environment with write tools and no linked flow would otherwise
    often keep a lookup), then by tools not yet covered."""
    def tools(trace: GoldenTrace) -> set[str]:
        return {call.name for stage in trace.stages for call in stage.calls}

    covered = set().union(*(tools(t) for t in traces if is_linked(t)))
    pending = [t for t in traces if not is_linked(t)]
    chosen: set[str] = set()
    while pending and len(chosen) < limit:
        best = max(pending, key=lambda t: (changes_state(t), len(tools(t) - covered)))  # first of equals: sampled first
        chosen.add(best.trace_id)
        covered |= tools(best)
        pending.remove(best)
    keep = [is_linked(t) or t.trace_id in chosen for t in traces]
    return [t for t, k in zip(traces, keep, strict=True) if k], [t for t, k in zip(traces, keep, strict=True) if not k]


def reconstruct_all(
    env: EnvironmentLike,
    dags: Sequence[nx.DiGraph],
    skeletons: Sequence[Skeleton],
    *,
    seed: int = 0,
    tries: int = 6,
    max_unlinked: int | None = None,
    goal_first: bool = True,
    state_variants: int = 1,
    variant_budget: int = 10,
) -> ReconstructionResult:
    """Reconstruct every skeleton of one environment on one reused session; failures are quarantined.

    Args:
        env: The environment.
        dags: Its sanitized TDGs, indexed by ``skeleton.graph_index``.
        skeletons: From `tdg.dus.sample_skeletons_for_coverage`.
        seed: Base seed; each skeleton's seed derives from it and the skeleton's content.
        tries: Argument draws per call (see `reconstruct_trace`).
        goal_first: See `reconstruct_trace`; unlinked traces then only top an environment up to `max_unlinked`
            traces (an environment with that many linked traces keeps none).
        max_unlinked: Most traces kept in which no value flows from one call into another (`is_linked`); None
            keeps all. Those that add the most tools not covered by the linked ones are kept, the rest are dropped
            as ``single_stage``: an environment whose tools share no data yields a few such tasks, not ten.
        state_variants: Most traces per skeleton whose (linked) trace changes state: the flow is reconstructed
            again with other seeds, i.e. against other records and values, round-robin over the flows. Write flows
            are scarce (many servers have none); this keeps an environment's task budget from filling with
            lookups while a write flow it has is learned on one record only. 1: no variants.
        variant_budget: Variants stop once the environment has this many state-changing linked traces (about the
            verify stage's per-environment cap: more would only be dropped as ``env_cap``; `TDGConfig.variant_budget`).

    Returns:
        `ReconstructionResult(traces, quarantine, report)`: produced + dropped == inputs (the skeletons plus every
        variant attempted); duplicate traces are dropped with reason ``duplicate_trace``.
    """
    traces: list[GoldenTrace] = []
    quarantine: list[QuarantineRecord] = []
    seen: set[str] = set()
    keys = env_key_rules(env)
    attempts = 0

    def attempt(item_id: str, skeleton: Skeleton, variant: int, session: EnvSessionLike) -> GoldenTrace | None:
        nonlocal attempts
        attempts += 1
        try:
            if not 0 <= skeleton.graph_index < len(dags):
                raise SkeletonFailed("unknown_graph", f"graph_index {skeleton.graph_index}")
            trace = reconstruct_trace(
                env, dags[skeleton.graph_index], skeleton, seed=_skeleton_seed(seed, skeleton, variant), tries=tries,
                session=session, keys=keys, goal_first=goal_first,
            )
        except SkeletonFailed as exc:
            quarantine.append(QuarantineRecord(item_id=item_id, stage=STAGE, reason=exc.reason, detail=exc.detail))
            return None
        except SandboxError as exc:
            reason = f"sandbox_error:{type(exc).__name__}"
            quarantine.append(QuarantineRecord(item_id=item_id, stage=STAGE, reason=reason, detail=str(exc)))
            return None
        if trace.trace_id in seen:
            quarantine.append(QuarantineRecord(item_id=item_id, stage=STAGE, reason="duplicate_trace",
                                               detail=trace.trace_id))  # fmt: skip
            return None
        seen.add(trace.trace_id)
        traces.append(trace)
        return trace

    with env.session() as session:
        writes: list[tuple[int, Skeleton]] = []
        for i, skeleton in enumerate(skeletons):
            trace = attempt(f"{env.env_id}/skeleton-{i}", skeleton, 0, session)
            if trace is not None and is_linked(trace) and changes_state(trace):
                writes.append((i, skeleton))
        state_traces = len(writes)
        for variant in range(1, state_variants):  # round-robin: every write flow gets a second record first
            for i, skeleton in writes:
                if state_traces >= variant_budget:
                    break
                trace = attempt(f"{env.env_id}/skeleton-{i}/variant-{variant}", skeleton, variant, session)
                state_traces += trace is not None and is_linked(trace) and changes_state(trace)
    if max_unlinked is not None:
        limit = max(0, max_unlinked - sum(map(is_linked, traces))) if goal_first else max_unlinked
        traces, unlinked = _limit_unlinked(traces, limit)
        quarantine += [QuarantineRecord(item_id=f"{env.env_id}/{t.trace_id}", stage=STAGE, reason="single_stage",
                                        detail=f"no value flows between its calls; {max_unlinked} such traces kept "
                                        "per environment") for t in unlinked]  # fmt: skip
    dropped = Counter(q.reason.split(":")[0] for q in quarantine)
    report = StageReport(stage=STAGE, inputs=attempts, produced=len(traces),
                         dropped=dict(sorted(dropped.items())))  # fmt: skip
    return ReconstructionResult(traces=traces, quarantine=quarantine, report=report)
