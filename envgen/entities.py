"""What a toolset manipulates: tool kinds, entities (DB collections) and a per-tool execution plan.

The plan is the single source of truth shared by the DB synthesizer, the code generator and the test generator,
so the three always agree on collection names, id fields, foreign keys and which parameters are record fields.

Mock DB layout (documented contract): `{<entity plural>: {<id as str>: {<id_field>: id, <field>: value, ...}}}`
plus `ACTION_LOG` (`{"EVT-001": {"event_id", "tool", "arguments", ...}}`) where action tools record what they did.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from data.models import PlanOverride, StrictModel, ToolKind, ToolSchema
from envgen.behaviours import (
    BALANCES,
    FAMILIES,
    NATURAL_KEYS,
    classify,
    family_of,
    inferred_fields,
    is_flag,
    search_options,
)
from envgen.fidelity import COMPUTED_FAMILIES, READ_ONLY_FAMILIES, STATE_FAMILIES, Promise, promise
from envgen.naming import id_prefix, pluralize, singularize, snake_case
from gustforge.registry import Registry

__all__ = [
    "ACTION_LOG",
    "VERB_KINDS",
    "Template",
    "EntitySpec",
    "ToolPlan",
    "EnvPlan",
    "infer_kind",
    "infer_entity",
    "PLAN_CHOICES",
    "PlanChoice",
    "plan_choice",
    "choice_of",
    "collection_name",
    "plan_environment",
    "record_schema",
    "response_schema",
]

ACTION_LOG = "action_log"
Template = Literal[
    "read_one", "read_many", "create", "update", "delete", "action", "arithmetic", "convert", "text", "transition",
    "transfer", "payment", "message", "schedule",
]  # fmt: skip
OUTBOX = "outbox"
EXCHANGE_RATES = "exchange_rates"

VERB_KINDS: Registry[ToolKind] = Registry("tool verb")
_VERBS = {
    ToolKind.READ: "get list search find fetch query lookup look show view read retrieve check describe count "
    "browse filter inspect display track scan lookup_ see watch",
    ToolKind.CREATE: "create add new book register insert post make submit schedule place reserve upload save "
    "store enroll issue open log record write",
    ToolKind.UPDATE: "update set edit modify change rename move assign patch reschedule mark toggle enable disable "
    "cancel approve reject complete close archive confirm pay renew extend adjust restock activate deactivate "
    "suspend resume pause unassign publish",
    ToolKind.DELETE: "delete remove destroy erase purge drop unregister discard revoke",
}
for _kind, _words in _VERBS.items():
    for _word in dict.fromkeys(_words.split()):
        VERB_KINDS.add(_word, _kind)

_STOP = set(
    "by for all the a an of to from in on with and or at as is are details detail info information data new my "
    "current latest recent specific single multiple bulk batch id ids available existing status statuses list "
    "lists summary summaries result results tool tools api v1 v2 v3 using via into out up".split()
)
_LIMIT = {"limit", "max_results", "num_results", "top_k", "page_size", "per_page", "size", "max_items", "count", "n"}
_QUERY = {"query", "q", "search", "keyword", "keywords", "term", "search_term", "search_query", "query_text", "text"}
_IGNORED = {
    "page", "offset", "cursor", "skip", "sort", "sort_by", "order_by", "sort_order", "order", "verbose", "format",
    "fields", "language", "lang", "locale", "detailed", "include_details", "response_format", "api_key", "token",
}  # fmt: skip
_LISTING = {"list", "search", "find", "browse", "filter", "query", "scan", "explore", "discover"}
_LIMIT_LIKE = re.compile(r"^(max|num|number_of)_(results|items|records|rows|hits|entries)$")
_ID_PARAM = re.compile(r"^(?P<noun>[a-z][a-z0-9_]*?)_id$")
_WRITE_TEMPLATES: dict[ToolKind, Template] = {
    ToolKind.CREATE: "create",
    ToolKind.UPDATE: "update",
    ToolKind.DELETE: "delete",
}
_PARTICIPLES = {"pay": "paid", "cancel": "cancelled", "set": "set", "close": "closed", "mark": "marked"}


class EntitySpec(StrictModel):
    """One mock-DB collection."""

    name: str = Field(description="Collection key in the DB (plural snake_case).")
    singular: str
    id_field: str
    id_type: Literal["string", "integer"] = "string"
    id_prefix: str
    fields: dict[str, dict[str, Any]] = Field(description="field -> JSON schema (the id field excluded).")
    refs: dict[str, str] = Field(default_factory=dict, description="foreign-key field -> referenced collection")
    natural_key: bool = Field(default=False, description="Ids are real values of the id field (city, symbol...).")
    id_schema: dict[str, Any] = Field(default_factory=dict, description="Schema of a natural key (enum, format).")
    key_source: str | None = Field(default=None, description="Collection whose ids a lookup is keyed by.")


class ToolPlan(StrictModel):
    """How one tool is executed against the DB; codegen and testgen both follow it."""

    name: str
    kind: ToolKind
    template: Template
    entity: str | None = None
    id_param: str | None = Field(default=None, description="Parameter holding the target record's id.")
    field_params: tuple[str, ...] = Field(default=(), description="Parameters that are record fields.")
    query_params: tuple[str, ...] = ()
    limit_param: str | None = None
    ref_params: dict[str, str] = Field(default_factory=dict, description="parameter -> collection it must exist in")
    response_key: str | None = Field(default=None, description="Key of the record(s) in the response.")
    status_value: str | None = Field(default=None, description="Value an argument-less update writes to status.")
    options: dict[str, Any] = Field(default_factory=dict, description="Family-specific settings (envgen.behaviours).")
    lookup: bool = Field(default=False, description="read_one keyed by a natural key (reference lookup).")
    natural_key: bool = Field(default=False, description="A write keyed by a natural key (name, url, path).")
    reason: str | None = Field(
        default=None,
        description="Why the planner overruled the name-based draft to keep the description's promise, or why no "
        "family fits a promised action (log-only); recorded in the manifest notes.",
    )

    @property
    def family(self) -> str:
        return "lookup" if self.lookup else family_of(self.template)


class EnvPlan(StrictModel):
    entities: tuple[EntitySpec, ...]
    tools: tuple[ToolPlan, ...]

    def entity(self, name: str | None) -> EntitySpec | None:
        return next((e for e in self.entities if e.name == name), None)

    def tool(self, name: str) -> ToolPlan:
        return next(t for t in self.tools if t.name == name)


# --------------------------------------------------------------------------------------------- inference


def infer_kind(name: str) -> ToolKind:
    """The kind of a snake_case tool name from its verb: the first token, else any token, else ACTION.

    Example:
        >>> infer_kind("get_order"), infer_kind("web_search_exa"), infer_kind("send_email")
        (<ToolKind.READ: 'read'>, <ToolKind.READ: 'read'>, <ToolKind.ACTION: 'action'>)
    """
    tokens = name.split("_")
    for token in tokens[:1] + tokens[1:]:
        if token in VERB_KINDS:
            return VERB_KINDS.get(token)
    return ToolKind.ACTION


def _nouns(name: str) -> list[str]:
    return [t for t in name.split("_") if t and t not in VERB_KINDS and t not in _STOP and not t.isdigit()]


def _id_params(params: dict[str, Any]) -> list[str]:
    return [p for p in params if _ID_PARAM.match(p) or p == "id"]


def infer_entity(name: str, parameters: dict[str, Any], kind: ToolKind) -> str | None:
    """The DB collection a tool works on, from its name's last noun or its id parameter.

    Args:
        name: snake_case tool name.
        parameters: the tool's (normalized) JSON schema.
        kind: the tool's kind.

    Returns:
        A plural collection name, or None for an action tool that names no record.

    Example:
        >>> infer_entity("get_order", {"properties": {"order_id": {}}}, ToolKind.READ)
        'orders'
    """
    props = parameters.get("properties", {})
    nouns = _nouns(name)
    if kind is ToolKind.ACTION:
        ids = [m.group("noun") for p in props if (m := _ID_PARAM.match(p))]
        return pluralize(ids[0]) if ids else None
    if nouns:
        return pluralize(singularize(nouns[-1]))
    ids = [m.group("noun") for p in props if (m := _ID_PARAM.match(p))]
    if ids:
        return pluralize(ids[0])
    return "items" if kind is ToolKind.READ else None


# --------------------------------------------------------------------------------------------- planning


def _id_param_for(singular: str, props: dict[str, Any]) -> str | None:
    if f"{singular}_id" in props:
        return f"{singular}_id"
    if "id" in props:
        return "id"
    ids = [p for p in props if p.endswith(f"{singular}_id")]
    return ids[0] if ids else None


def _participle(verb: str) -> str:
    if verb in _PARTICIPLES:
        return _PARTICIPLES[verb]
    return verb + "d" if verb.endswith("e") else verb + "ed"


def _draft(tool: ToolSchema) -> ToolPlan:
    """A tool's plan before entities are known: the name-based draft, then held to the description's promise."""
    return _honour(tool, _name_draft(tool), promise(tool))


def _honour(tool: ToolSchema, plan: ToolPlan, said: Promise) -> ToolPlan:
    """Keep the promise: an action never becomes a lookup/search/get; a get/list/search never changes state.

    A promised write that fits no writing family is log-only with the reason (never a lookup); a promised read
    built as a writing family (or the log-only fallback) becomes a lookup or a search of its collection.
    """
    family = plan.family
    if said.effect == "write" and family in READ_ONLY_FAMILIES and family not in COMPUTED_FAMILIES:
        return _write_plan(tool, said, family)
    if said.effect == "read" and family in STATE_FAMILIES:
        return _read_plan(tool, said, family)
    if said.effect == "compute" and family in STATE_FAMILIES and family != "log_only":
        return _read_plan(tool, said, family)  # `word_cloud_by_post_ids` computes; "post" is not a message
    return plan


def _write_plan(tool: ToolSchema, said: Promise, was: str) -> ToolPlan:
    props: dict[str, Any] = tool.parameters.get("properties", {})
    verb = said.verb or ""
    kind = VERB_KINDS.get(verb) if verb in VERB_KINDS else ToolKind.ACTION
    if kind is ToolKind.READ:
        kind = ToolKind.ACTION
    entity = infer_entity(tool.name, tool.parameters, ToolKind.UPDATE if kind is ToolKind.ACTION else kind)
    singular = singularize(entity) if entity else None
    id_param = _id_param_for(singular, props) if singular else None
    why = f"{said.reason}; the name-based draft was '{was}'"
    if entity is not None and (id_param is not None or kind is ToolKind.CREATE) and kind is not ToolKind.ACTION:
        draft = _crud_draft(tool, kind, entity, singular, id_param, props)
        chosen = classify(tool, draft)
        if chosen.family not in READ_ONLY_FAMILIES:
            return _settle(chosen, tool).model_copy(update={"reason": why})
    if entity is not None and id_param is None and kind in (ToolKind.UPDATE, ToolKind.DELETE):
        key = _natural_write_key(tool)
        fields = [p for p in props if p != key and not is_flag(p, props[p])]
        if key is not None and (fields or kind is ToolKind.DELETE):  # `remove_documentation(name)`: named record
            draft = _crud_draft(tool, kind, entity, singular, key, props)
            return draft.model_copy(update={"natural_key": True, "reason": f"{why}; keyed by '{key}'"})
    if entity is not None and id_param is None and kind in (ToolKind.ACTION, ToolKind.CREATE):
        fields = [p for p in props if not is_flag(p, props[p])]
        entity = _action_noun(tool.name, verb) or entity
        singular = singularize(entity)
        if fields:  # `start_scan(target)`, `execute_command(command)`: the run is a new record of its noun
            draft = _crud_draft(tool, ToolKind.CREATE, entity, singular, None, props)
            return draft.model_copy(update={"reason": f"{why}; the {verb} is recorded as a new {singular}"})
    if entity is not None and id_param is not None:
        candidate = ToolPlan(name=tool.name, kind=ToolKind.ACTION, template="action", entity=entity,
                             id_param=id_param, field_params=tuple(props))  # fmt: skip
        chosen = classify(tool, candidate)
        if chosen is not candidate and chosen.family not in READ_ONLY_FAMILIES:
            return _settle(chosen, tool).model_copy(update={"reason": why})
    return _log_only(tool).model_copy(
        update={"reason": f"{why}; no writing family fits ({_missing(kind, entity, id_param)}): log-only"}
    )


def _action_noun(name: str, verb: str) -> str | None:
    """The collection an action's run is recorded in: the name's last word that is not the verb (`start_scan`)."""
    tokens = [t for t in name.split("_") if t and t != verb and t not in _STOP and not t.isdigit()]
    return pluralize(singularize(tokens[-1])) if tokens else None


def _natural_write_key(tool: ToolSchema) -> str | None:
    """The required parameter that names the record a write changes (a name, url, path, key...), if any."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = [p for p in tool.parameters.get("required", []) if p in props]
    keys = [p for p in required if props[p].get("type") in ("string", "integer") and not is_flag(p, props[p])]
    singular = singularize(infer_entity(tool.name, tool.parameters, ToolKind.UPDATE) or "")
    named = [p for p in keys if p in (singular, f"{singular}_name") or (NATURAL_KEYS.search(p) and p not in _QUERY)]
    return named[0] if named else None


def _missing(kind: ToolKind, entity: str | None, id_param: str | None) -> str:
    if entity is None:
        return "names no record collection"
    if id_param is None and kind is not ToolKind.CREATE:
        return f"no id parameter names the {singularize(entity)} to change"
    return f"'{kind.value}' is not a record change"


def _read_plan(tool: ToolSchema, said: Promise, was: str) -> ToolPlan:
    props: dict[str, Any] = tool.parameters.get("properties", {})
    entity = infer_entity(tool.name, tool.parameters, ToolKind.READ) or "items"
    singular = singularize(entity)
    base = ToolPlan(name=tool.name, kind=ToolKind.ACTION, template="action", field_params=tuple(props))
    why = f"{said.reason}; the name-based draft was '{was}'"
    id_param = _id_param_for(singular, props)
    plan = None if id_param else _lookup(tool, base, entity)  # a record's own id: get it by id, no lookup table
    plan = plan or _crud_draft(tool, ToolKind.READ, entity, singular, id_param, props)
    return plan.model_copy(update={"reason": why})


def _name_draft(tool: ToolSchema) -> ToolPlan:
    """The draft from the name and plan: CRUD draft, then its behaviour family, then lookup/log-only."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    kind = infer_kind(tool.name)  # from the name, never from an earlier plan: planning is idempotent
    entity = infer_entity(tool.name, tool.parameters, kind)
    singular = singularize(entity) if entity else None
    id_param = _id_param_for(singular, props) if singular else None
    if kind is ToolKind.ACTION and entity is None:
        entity = _noun_entity(tool.name)
    if entity is None or (kind in (ToolKind.UPDATE, ToolKind.DELETE, ToolKind.ACTION) and id_param is None):
        base = ToolPlan(name=tool.name, kind=ToolKind.ACTION, template="action", entity=None,
                        field_params=tuple(props))  # fmt: skip
        candidate = base.model_copy(update={"entity": entity, "id_param": id_param})
    elif kind is ToolKind.ACTION:
        base = ToolPlan(name=tool.name, kind=ToolKind.ACTION, template="action", entity=None,
                        field_params=tuple(props))  # fmt: skip
        candidate = base.model_copy(update={"entity": entity, "id_param": id_param})
    else:
        base = candidate = _crud_draft(tool, kind, entity, singular, id_param, props)
    chosen = classify(tool, candidate)
    if chosen is not candidate:
        return _settle(chosen, tool)
    if base.template == "action" or (base.template == "read_many" and not base.id_param):
        lookup = _lookup(tool, base, entity)
        if lookup is not None:
            return lookup
    if (
        base.template == "action"
        and entity is not None
        and kind in (ToolKind.ACTION, ToolKind.READ)
        and not (tool.parameters.get("required"))
    ):
        return _crud_draft(tool, ToolKind.READ, entity, singularize(entity), None, props)  # a state read
    return base


def _crud_draft(tool: ToolSchema, kind: ToolKind, entity: str, singular: str | None, id_param: str | None,
                props: dict[str, Any]) -> ToolPlan:  # fmt: skip
    rest = [p for p in props if p != id_param and not is_flag(p, props[p])]
    if kind is ToolKind.READ:
        template: Template = "read_one" if id_param else "read_many"
        query = tuple(p for p in rest if p in _QUERY)
        limit = next((p for p in rest if p in _LIMIT or _LIMIT_LIKE.match(p)), None)
        options = search_options(tool, [p for p in rest if p != limit]) if template == "read_many" else {}
        controls = set(options.values()) | {limit}
        fields = tuple(p for p in rest if p not in _QUERY and p not in _IGNORED and p not in controls)
        key = singular if template == "read_one" else entity
        return ToolPlan(name=tool.name, kind=kind, template=template, entity=entity, id_param=id_param,
                        field_params=fields, query_params=query, limit_param=limit, response_key=key,
                        options=options)  # fmt: skip
    status = None
    if kind is ToolKind.UPDATE and not rest:
        status = _participle(next((t for t in tool.name.split("_") if t in VERB_KINDS), "update"))
    return ToolPlan(name=tool.name, kind=kind, template=_WRITE_TEMPLATES[kind], entity=entity, id_param=id_param,
                    field_params=tuple(rest), response_key=singular, status_value=status)  # fmt: skip


def _settle(plan: ToolPlan, tool: ToolSchema) -> ToolPlan:
    """Fill what a family left open: response key and the record fields its parameters carry."""
    props = tool.parameters.get("properties", {})
    singular = singularize(plan.entity) if plan.entity else None
    update: dict[str, Any] = {}
    if plan.template in ("schedule", "transition", "transfer") and plan.response_key is None:
        update["response_key"] = singular
    if plan.template == "schedule":
        update["field_params"] = tuple(p for p in props if p != plan.id_param and not is_flag(p, props[p]))
    return plan.model_copy(update=update) if update else plan


def _noun_entity(name: str) -> str | None:
    nouns = _nouns(name)
    return pluralize(singularize(nouns[-1])) if nouns else None


def _lookup(tool: ToolSchema, base: ToolPlan, entity: str | None) -> ToolPlan | None:
    """A reference lookup: a read (or an otherwise log-only tool) keyed by one natural-key parameter."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = [
        p for p in tool.parameters.get("required", []) if _key_like(props.get(p, {})) and not is_flag(p, props[p])
    ]
    if entity is None or not required:
        return None
    key = required[0]
    others = [p for p in tool.parameters.get("required", []) if p != key]
    if base.template == "read_many" and (others or not NATURAL_KEYS.search(key) or key in _QUERY
                                         or tool.name.split("_")[0] in _LISTING):  # fmt: skip
        return None
    if key in _QUERY:  # a free-text key searches the collection instead of naming one record
        return _crud_draft(tool, ToolKind.READ, entity, singularize(entity), None, props)
    if base.template == "action" and len(others) > 1:
        return None
    batch = props[key].get("type") == "array"
    match = _ID_PARAM.match(key)
    if match and pluralize(match.group("noun")) == entity:  # keyed by another collection's id: its own collection
        named = _noun_entity(tool.name)
        entity = named if named and named != entity else f"{singularize(entity)}_details"
    return ToolPlan(name=tool.name, kind=ToolKind.READ, template="read_one", entity=entity, id_param=key,
                    response_key=entity if batch else singularize(entity), lookup=True,
                    options={"batch": True} if batch else {})  # fmt: skip


def _key_like(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "array":
        return (schema.get("items") or {}).get("type") == "string"
    return schema.get("type") in ("string", "integer")


def _simple(schema: dict[str, Any]) -> dict[str, Any]:
    keep = ("type", "enum", "format", "items", "minimum", "maximum", "properties", "description", "default", "examples")
    return {k: v for k, v in schema.items() if k in keep}


def _entities(drafts: Sequence[ToolPlan], tools: Sequence[ToolSchema]) -> dict[str, EntitySpec]:
    by_name = {t.name: t for t in tools}
    entities: dict[str, EntitySpec] = {}
    for plan in drafts:
        if plan.entity is None or plan.entity in entities:
            continue
        mine = [other for other in drafts if other.entity == plan.entity]
        entities[plan.entity] = _entity(plan.entity, mine, by_name)
    return _link(entities)


def _entity(name: str, plans: list[ToolPlan], by_name: dict[str, ToolSchema]) -> EntitySpec:
    singular = singularize(name)
    if name == EXCHANGE_RATES:
        return EntitySpec(name=name, singular="exchange_rate", id_field="currency", id_prefix="CUR", natural_key=True,
                          fields={"name": {"type": "string"},
                                  "rate_to_usd": {"type": "number", "minimum": 0}})  # fmt: skip
    if name == BALANCES:
        return EntitySpec(name=name, singular="balance", id_field="address", id_prefix="ADR", natural_key=True,
                          fields={"owner": {"type": "string"}, "balance": {"type": "number", "minimum": 0}},
                          id_schema={"type": "string", "pattern": "^0x[0-9a-f]{40}$"})  # fmt: skip
    lookup = next((p for p in plans if p.lookup or p.natural_key), None)
    id_type: Literal["string", "integer"] = "string"
    id_field = f"{singular}_id" if name != OUTBOX else "message_id"
    fields: dict[str, dict[str, Any]] = {}
    if lookup is not None:
        key_schema = by_name[lookup.name].parameters["properties"][lookup.id_param]
        id_field = singularize(lookup.id_param) if lookup.options.get("batch") else (lookup.id_param or id_field)
        id_type = "integer" if key_schema.get("type") == "integer" else "string"
    for other in plans:
        props = by_name[other.name].parameters.get("properties", {})
        if other.id_param and lookup is None and props.get(other.id_param, {}).get("type") in ("integer", "number"):
            id_type = "integer"
        for field in other.field_params:
            fields.setdefault(field, _simple(props[field]))
        fields.update(_family_fields(other, props, fields))
    descriptions = [by_name[p.name].description for p in plans]
    for field, schema in inferred_fields(singular, descriptions).items():
        fields.setdefault(field, schema)
    _add_status_values(fields, [d.status_value for d in plans if d.status_value and d.template != "transition"])
    if not any(s.get("type") == "string" for f, s in fields.items() if f != id_field):
        fields["name"] = {"type": "string"}
    if len([f for f in fields if f != id_field]) < 2:
        fields.setdefault("description", {"type": "string"})
    if len([f for f in fields if f != id_field]) < 3:  # every record says when it last changed
        fields.setdefault("updated_at", {"type": "string", "format": "date-time"})
    fields.pop(id_field, None)
    id_schema: dict[str, Any] = {}
    if lookup is not None:
        key_schema = by_name[lookup.name].parameters["properties"][lookup.id_param]
        id_schema = _simple(key_schema.get("items", {}) if lookup.options.get("batch") else key_schema)
    match = _ID_PARAM.match(id_field) if lookup is not None else None
    source = pluralize(match.group("noun")) if match else None
    return EntitySpec(name=name, singular=singular, id_field=id_field, id_type=id_type, id_prefix=id_prefix(singular),
                      fields=fields, natural_key=lookup is not None, id_schema=id_schema,
                      key_source=source if source != name else None)  # fmt: skip


def _family_fields(plan: ToolPlan, props: dict[str, Any], fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Fields a behaviour needs on its collection (status with all states, balance, the transfer field...)."""
    opts = plan.options
    if plan.template == "transition":
        status = dict(fields.get("status") or {"type": "string"})
        status["enum"] = list(dict.fromkeys([*status.get("enum", []), *opts["from"], opts["to"]]))
        return {"status": {"type": "string", "enum": status["enum"]}}
    if plan.template == "payment" and opts["balance"] != "balance":
        return {opts["balance"]: {"type": "number", "minimum": 0}}
    if plan.template == "payment":
        return {opts["balance"]: {"type": "number", "minimum": 0}, "owner": {"type": "string"}}
    if plan.template == "transfer":
        dest = props.get(opts["to"], {"type": "string"})
        return {opts["field"]: _simple(dest)}
    if plan.template == "message":
        return {"status": {"type": "string"}, "subject": {"type": "string"}}
    return {}


def _add_status_values(fields: dict[str, dict[str, Any]], values: list[str]) -> None:
    """Argument-less updates (`cancel_order`) write `status`; make sure the record schema admits it."""
    if not values:
        return
    status = dict(fields.get("status") or {"type": "string"})
    if status.get("type") != "string":
        status = {"type": "string"}
    if "enum" in status:
        status["enum"] = list(dict.fromkeys([*status["enum"], *values]))
    fields["status"] = status


def _link(entities: dict[str, EntitySpec]) -> dict[str, EntitySpec]:
    """Mark `<x>_id` fields as foreign keys when a collection for x exists; numeric keys make x's ids integers."""
    refs: dict[str, dict[str, str]] = {}
    integer_targets = set()
    for name, spec in entities.items():
        refs[name] = {}
        for field, schema in spec.fields.items():
            match = _ID_PARAM.match(field)
            target = pluralize(match.group("noun")) if match else None
            if target and target in entities and target != name:
                refs[name][field] = target
                if schema.get("type") in ("integer", "number"):
                    integer_targets.add(target)
    return {
        name: spec.model_copy(
            update={"refs": refs[name], "id_type": "integer" if name in integer_targets else spec.id_type}
        )
        for name, spec in entities.items()
    }


def _with_refs(plan: ToolPlan, props: Iterable[str], entities: dict[str, EntitySpec]) -> ToolPlan:
    refs = {}
    for param in props:
        if param == plan.id_param:
            continue
        match = _ID_PARAM.match(param)
        target = pluralize(match.group("noun")) if match else None
        if target and target in entities and target != plan.entity:
            refs[param] = target
    return plan.model_copy(update={"ref_params": refs})


def _separate_lookups(drafts: list[ToolPlan]) -> list[ToolPlan]:
    """A lookup keyed by a natural key shares its collection with list tools; it gets its own collection when
    other tools address the same name by a synthetic id, or other lookups use another key."""
    keys: dict[str, set[str | None]] = {}
    synthetic: set[str] = set()
    for plan in drafts:
        if plan.entity is None:
            continue
        if plan.lookup or plan.natural_key:
            keys.setdefault(plan.entity, set()).add(plan.id_param)
        elif plan.id_param or plan.template not in ("read_many",):
            synthetic.add(plan.entity)
    out = []
    for plan in drafts:
        if (
            (plan.lookup or plan.natural_key)
            and plan.entity is not None
            and (plan.entity in synthetic or len(keys[plan.entity]) > 1)
        ):
            plan = plan.model_copy(update={"entity": f"{plan.entity}_by_{plan.id_param}"})
        out.append(plan)
    return out


_RESERVED_KEYS = {"status", "message", "count", "total", "result", "event_id", "message_id", "previous"}


def _safe_key(plan: ToolPlan) -> ToolPlan:
    """A response key never shadows the envelope (`read_messages` answers `message_record`, not `message`)."""
    if plan.response_key in _RESERVED_KEYS:
        return plan.model_copy(update={"response_key": f"{plan.response_key}_record"})
    return plan


def _log_only(tool: ToolSchema) -> ToolPlan:
    props = tool.parameters.get("properties", {})
    return ToolPlan(name=tool.name, kind=ToolKind.ACTION, template="action", field_params=tuple(props))


# --------------------------------------------------------------------------------------------- chosen plans
# The behaviours a planner (the LLM planning role, `envgen.planning`) may choose for a tool, each built from the
# tool's own parameters on the collection it names; a choice the parameters cannot carry builds to None.

Chooser = Callable[[ToolSchema, str | None], ToolPlan | None]


@dataclass(frozen=True)
class PlanChoice:
    """One behaviour a planner may choose: its one-line meaning (shown to the model), the behaviour family it
    builds (`ToolPlan.family`) and its plan builder."""

    meaning: str
    family: str
    build: Chooser


PLAN_CHOICES: Registry[PlanChoice] = Registry("planned behaviour")


def _props_of(tool: ToolSchema) -> dict[str, Any]:
    return dict(tool.parameters.get("properties", {}))


def _read_one(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
    id_param = _id_param_for(singularize(entity), _props_of(tool)) if entity else None
    if entity is None or id_param is None:
        return None
    return _crud_draft(tool, ToolKind.READ, entity, singularize(entity), id_param, _props_of(tool))


def _read_many(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
    if entity is None:
        return None
    return _crud_draft(tool, ToolKind.READ, entity, singularize(entity), None, _props_of(tool))


def _chosen_lookup(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
    return _lookup(tool, _log_only(tool), entity)


def _write(kind: ToolKind) -> Chooser:
    """A create/update/delete on `entity`, keyed by its id parameter (or, for a change, a natural key)."""

    def build(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
        if entity is None:
            return None
        props = _props_of(tool)
        id_param = _id_param_for(singularize(entity), props)
        if id_param is None and kind is not ToolKind.CREATE:
            key = _natural_write_key(tool)
            if key is None:
                return None
            draft = _crud_draft(tool, kind, entity, singularize(entity), key, props)
            return draft.model_copy(update={"natural_key": True})
        return _crud_draft(tool, kind, entity, singularize(entity), id_param, props)

    return build


def _matched(matcher: str, kind: ToolKind | None) -> Chooser:
    """A behaviour family's matcher (`envgen.behaviours.FAMILIES`) applied to a draft on `entity`: its options
    come from the tool's parameters, so a family the parameters cannot carry builds to None."""

    def build(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
        if kind is None:
            draft = _log_only(tool).model_copy(update={"entity": entity})
        elif entity is None:
            return None
        else:
            draft = _write(kind)(tool, entity)
            draft = draft or _crud_draft(tool, kind, entity, singularize(entity), None, _props_of(tool))
        update = FAMILIES.get(matcher)(tool, draft)
        return None if update is None else _settle(draft.model_copy(update=update), tool)

    return build


def _chosen_log_only(tool: ToolSchema, entity: str | None) -> ToolPlan | None:
    return _log_only(tool)


for _name, _family, _meaning, _build in (
    ("read_one", "get_by_id", "return the one record of the collection named by an id parameter; changes nothing",
     _read_one),
    ("read_many", "search", "search/list records of the collection (filters, query, sort, limit); changes nothing",
     _read_many),
    ("lookup", "lookup", "return reference data keyed by a natural key (city, symbol, path, name); changes nothing",
     _chosen_lookup),
    ("create", "crud", "add a new record to the collection from the parameters", _write(ToolKind.CREATE)),
    ("update", "crud", "change fields of one existing record (named by its id or a natural key)",
     _write(ToolKind.UPDATE)),
    ("delete", "crud", "remove one existing record (named by its id or a natural key)", _write(ToolKind.DELETE)),
    ("status_transition", "status_transition",
     "move one record's status from allowed states to a target (cancel, approve, close)",
     _matched("transition", ToolKind.UPDATE)),
    ("transfer", "transfer", "move one record to another owner/location that must exist",
     _matched("transfer", ToolKind.UPDATE)),
    ("payment", "payment",
     "change a balance by an amount (deposit, withdraw, charge, pay, move money between accounts)",
     _matched("payment", ToolKind.UPDATE)),
    ("messaging", "messaging", "send a message/notification: appended to the outbox collection",
     _matched("message", None)),
    ("scheduling", "scheduling", "book a time slot of a resource; a second booking of the same slot conflicts",
     _matched("schedule", ToolKind.CREATE)),
    ("math", "math", "a pure arithmetic function of numeric arguments (no collection)", _matched("arithmetic", None)),
    ("conversion", "conversion", "convert a value between units or currencies (no collection, except exchange rates)",
     _matched("convert", None)),
    ("text", "text", "a pure transformation or count of a text argument (no collection)", _matched("text", None)),
    ("log_only", "log_only", "no record changes or reads fit: validate the call, log it and echo it",
     _chosen_log_only),
):  # fmt: skip
    PLAN_CHOICES.add(_name, PlanChoice(meaning=_meaning, family=_family, build=_build))


_CHOICE_OF_TEMPLATE = {
    "transition": "status_transition", "message": "messaging", "schedule": "scheduling", "arithmetic": "math",
    "convert": "conversion", "action": "log_only",
}  # fmt: skip


def choice_of(plan: ToolPlan) -> str:
    """The `PLAN_CHOICES` name a plan was built as (`lookup`, `read_many`, `status_transition`, ...).

    Example:
        >>> choice_of(ToolPlan(name="t", kind=ToolKind.ACTION, template="action"))
        'log_only'
    """
    return "lookup" if plan.lookup else _CHOICE_OF_TEMPLATE.get(plan.template, plan.template)


def collection_name(entity: str | None) -> str | None:
    """A planner's collection name as the planner's own collections are named (plural snake_case).

    Example:
        >>> collection_name("User Profile"), collection_name(" ")
        ('user_profiles', None)
    """
    if not entity or not entity.strip():
        return None
    return pluralize(singularize(snake_case(entity.strip(), fallback="items")))


def plan_choice(tool: ToolSchema, behaviour: str, entity: str | None) -> ToolPlan | None:
    """The plan of `tool` built as the chosen `behaviour` on the chosen collection.

    Args:
        tool: a refactored tool.
        behaviour: a name of `PLAN_CHOICES` (e.g. "update", "read_many", "status_transition").
        entity: the collection it acts on (normalized to plural snake_case); None for computations.

    Returns:
        The tool's plan (before collections are linked), or None when its parameters cannot carry the behaviour
        (no id parameter for a `read_one`, no amount for a `payment`...).

    Raises:
        RegistryError: `behaviour` is not a registered choice.
    """
    return PLAN_CHOICES.get(behaviour).build(tool, collection_name(entity))


def _planned(tool: ToolSchema, override: PlanOverride | None) -> ToolPlan:
    """The planner's chosen plan when it builds, else the name-based draft held to the description's promise."""
    chosen = plan_choice(tool, override.behaviour, override.entity) if override is not None else None
    if chosen is None or override is None:
        return _draft(tool)
    return chosen.model_copy(update={"reason": override.reason})


def plan_environment(
    tools: Sequence[ToolSchema], log_only: Iterable[str] = (), overrides: Mapping[str, PlanOverride] | None = None
) -> EnvPlan:
    """Derive collections and per-tool execution plans from refactored tool schemas.

    Args:
        tools: refactored tools (names unique); kinds and entities are re-inferred from names and parameters.
        log_only: tools forced to the log-only fallback (`RefactoredToolset.log_only`, set by the repair loop).
        overrides: tool -> behaviour a planner chose over the name-based draft (`RefactoredToolset.plan_overrides`,
            set by `envgen.planning`); the log-only fallback still wins over them.

    Returns:
        An `EnvPlan`; deterministic for the same tools, log-only set and overrides.
    """
    forced = set(log_only)
    chosen = overrides or {}
    drafts = _separate_lookups(
        [_log_only(tool) if tool.name in forced else _planned(tool, chosen.get(tool.name)) for tool in tools]
    )
    drafts = [_safe_key(plan) for plan in drafts]
    entities = _entities(drafts, tools)
    plans = [
        _with_refs(plan, tool.parameters.get("properties", {}), entities)
        for plan, tool in zip(drafts, tools, strict=True)
    ]
    return EnvPlan(entities=tuple(entities.values()), tools=tuple(plans))


# --------------------------------------------------------------------------------------------- response schemas


def record_schema(entity: EntitySpec) -> dict[str, Any]:
    """JSON schema of one record of `entity`."""
    id_schema = {"type": "integer"} if entity.id_type == "integer" else {"type": "string"}
    props = {entity.id_field: id_schema, **{k: _simple(v) for k, v in entity.fields.items()}}
    return {"type": "object", "properties": props, "required": [entity.id_field]}


def response_schema(plan: ToolPlan, entity: EntitySpec | None) -> dict[str, Any]:
    """The response schema of a tool: `status` (success|error), `message` and its family's output keys."""
    props: dict[str, Any] = {
        "status": {"type": "string", "enum": ["success", "error"]},
        "message": {"type": "string"},
    }
    record = record_schema(entity) if entity else {"type": "object"}
    key = plan.response_key
    if plan.template == "read_many" and key:
        props[key] = {"type": "array", "items": record}
        props["count"] = {"type": "integer", "minimum": 0}
        props["total"] = {"type": "integer", "minimum": 0}
    elif plan.template == "read_one" and plan.options.get("batch") and key:
        props[key] = {"type": "array", "items": record}
        props["count"] = {"type": "integer", "minimum": 0}
    elif plan.template in ("read_one", "create", "update", "transition", "transfer", "schedule") and key:
        props[key] = record
    if plan.template in ("create", "delete", "schedule") and entity is not None:
        props[entity.id_field] = record["properties"][entity.id_field]
    if plan.template == "message":
        props["message_id"] = {"type": "string"}
        props["message_record"] = record
    if plan.template in ("arithmetic", "convert", "text"):
        props["result"] = {}
    if plan.template == "payment" and entity is not None:
        props[entity.singular] = record
    if plan.template == "action":
        props["event_id"] = {"type": "string"}
        props["result"] = {"type": "object"}
    return {"type": "object", "properties": props, "required": ["status", "message"]}
