"""Schema field helpers shared by inference, sanitization and reconstruction.

A response *field path* names a leaf of a tool's response schema: ``order.order_id`` (nested object),
``orders[].id`` (array items). Parameter edges carry evidence of the form
``<src>.response.<path> -> <dst>.<param>``; this module builds, parses, checks and resolves such paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldRef",
    "EdgeEvidence",
    "GENERIC_NAMES",
    "response_fields",
    "param_specs",
    "singular",
    "name_tokens",
    "entity_of",
    "match_score",
    "KEY_TOKENS",
    "is_key_name",
    "name_relation",
    "types_compatible",
    "format_evidence",
    "parse_evidence",
    "path_leaf",
    "parse_closest_field",
    "evidence_is_executable",
    "resolve_path",
    "json_type",
    "record_shapes",
    "enrich_response",
]

# Field or parameter names too generic to signal a data dependency by name alone.
GENERIC_NAMES = frozenset(
    {
        "status", "message", "success", "error", "errors", "result", "results", "count", "total", "limit",
        "offset", "page", "page_size", "per_page", "data", "details", "note", "notes", "description", "query",
        "q", "text", "content", "value", "type", "format", "sort", "order_by", "timestamp", "created_at",
        "updated_at", "enabled", "active", "verbose",
    }
)  # fmt: skip
_ID_SUFFIXES = ("_id", "_ids", "_key", "_code", "_number", "_no", "_uuid", "_slug", "_sku", "_ref")
_STRUCTURAL = frozenset({"status", "message"})


@dataclass(frozen=True)
class FieldRef:
    """One leaf of a response schema."""

    path: str  # "orders[].id"
    leaf: str  # "id"
    parent: str | None  # "orders" (array or object holding the leaf), None at top level
    type: str | None  # JSON type of the leaf, if declared
    description: str = ""  # the leaf's schema description, if any


@dataclass(frozen=True)
class EdgeEvidence:
    """A parsed parameter-edge evidence string."""

    src: str
    path: str
    dst: str
    param: str


def _schema_type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    return kind if isinstance(kind, str) else None


def _walk(schema: Mapping[str, Any], prefix: str, parent: str | None, depth: int) -> Iterator[FieldRef]:
    if depth > 6:
        return
    kind = _schema_type(schema)
    props = schema.get("properties")
    if isinstance(props, Mapping) and (kind in (None, "object")):
        for name in sorted(props):
            sub = props[name]
            if not isinstance(sub, Mapping):
                continue
            path = f"{prefix}.{name}" if prefix else name
            if _schema_type(sub) in ("object", "array") or "properties" in sub:
                yield from _walk(sub, path, name, depth + 1)
            else:
                yield FieldRef(path=path, leaf=name, parent=parent, type=_schema_type(sub),
                               description=str(sub.get("description") or ""))  # fmt: skip
        return
    items = schema.get("items")
    if kind == "array" and isinstance(items, Mapping):
        if _schema_type(items) in ("object", "array") or "properties" in items:
            yield from _walk(items, f"{prefix}[]", parent, depth + 1)
        elif parent is not None:  # list of scalars, e.g. order_ids[] -> leaf "order_id"
            yield FieldRef(path=f"{prefix}[]", leaf=singular(parent), parent=parent, type=_schema_type(items),
                           description=str(items.get("description") or ""))  # fmt: skip


def response_fields(response: Mapping[str, Any]) -> list[FieldRef]:
    """Every scalar leaf of a response schema, except the structural top-level ``status``/``message``.

    Example:
        >>> schema = {"type": "object", "properties": {"status": {"type": "string"},
        ...     "orders": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}}
        >>> [f.path for f in response_fields(schema)]
        ['orders[].id']
    """
    return [f for f in _walk(response, "", None, 0) if not (f.parent is None and f.leaf in _STRUCTURAL)]


def param_specs(parameters: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], bool]]:
    """Parameter name -> (its JSON schema, required?) of a tool's ``parameters`` object schema."""
    props = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    return {name: (dict(sub), name in required) for name, sub in props.items() if isinstance(sub, Mapping)}


def singular(word: str) -> str:
    """Crude English singular, enough to relate ``orders`` to ``order`` and ``categories`` to ``category``."""
    word = word.lower()
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def name_tokens(name: str) -> list[str]:
    """snake/camel/kebab name -> lower-case tokens."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [t for t in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if t]


def entity_of(param: str) -> str | None:
    """The entity an ID-like parameter refers to: ``order_id`` -> ``order``; None if not ID-like."""
    low = param.lower()
    for suffix in _ID_SUFFIXES:
        if low.endswith(suffix) and len(low) > len(suffix):
            return singular(low[: -len(suffix)].rstrip("_"))
    if low.endswith("id") and len(low) > 2 and low[-3] != "_" and param[-2:] == "Id":
        return singular(low[:-2])
    return None


def _id_like(name: str) -> bool:
    low = name.lower()
    return low == "id" or low.endswith(_ID_SUFFIXES) or name.endswith("Id")


def match_score(param: str, field: FieldRef, *, dst_entity: str | None = None) -> float:
    """How strongly response leaf `field` looks like the value for parameter `param` (0 = no match).

    Rules: exact name (ID-like 1.0, or 0.85 when the leaf sits in a record of another entity, i.e. a foreign
    key; other non-generic names 0.7); ``<entity>_id`` parameter vs ``id`` leaf under a
    parent named after the entity (0.9); bare ``id`` parameter of a tool on `dst_entity` vs an ``id`` or
    ``<entity>_id`` leaf of that entity (0.8).
    """
    p, leaf = param.lower(), field.leaf.lower()
    parent = singular(field.parent) if field.parent else None
    if p == leaf:
        if p == "id":
            return 0.8 if dst_entity and parent == singular(dst_entity) else 0.0
        if p in GENERIC_NAMES:
            return 0.0
        if not _id_like(p):
            return 0.7
        ent = entity_of(param)
        return 0.85 if parent is not None and ent is not None and parent != ent else 1.0  # foreign key: weaker
    ent = entity_of(param)
    if ent is not None and leaf == "id" and parent == ent:
        return 0.9
    if p == "id" and dst_entity and entity_of(field.leaf) == singular(dst_entity):
        return 0.8
    return 0.0


# Last name tokens that make a field a key: a value that identifies a record rather than describing it.
KEY_TOKENS = frozenset(
    {"id", "ids", "key", "code", "sku", "uuid", "slug", "ref", "iata", "icao", "symbol", "ticker", "username",
     "handle", "isbn", "token", "hash", "url", "uri", "link", "path", "number", "no"}
)  # fmt: skip
# Leading tokens that only say which role a key plays in the call (origin_sky_id is a sky_id).
_QUALIFIERS = frozenset(
    {"origin", "destination", "source", "src", "target", "dst", "from", "to", "pick", "up", "drop", "off", "start",
     "end", "departure", "arrival", "return", "parent", "child", "new", "old", "primary", "secondary", "home",
     "away", "first", "second", "my", "your", "input", "output", "base", "quote", "main", "current", "selected"}
)  # fmt: skip


def _tokens(name: str) -> list[str]:
    return [singular(t) for t in name_tokens(name)]


def is_key_name(name: str, entities: frozenset[str] = frozenset()) -> bool:
    """Whether a field/parameter name denotes a record key: ID-like, a foreign key, or entity-typed.

    ID-like: the last token is in `KEY_TOKENS` (``order_id``, ``skyId``, ``product_sku``); entity-typed: the whole
    (singular) name is an entity of the toolset (``customer`` when a tool works on customers).

    Example:
        >>> is_key_name("originSkyId"), is_key_name("quantity"), is_key_name("customer", frozenset({"customer"}))
        (True, False, True)
    """
    tokens = _tokens(name)
    if not tokens:
        return False
    return tokens[-1] in KEY_TOKENS or "_".join(tokens) in entities


def name_relation(param: str, field: FieldRef, *, dst_entity: str | None = None) -> float:
    """How surely response leaf `field` is, by name, the value of parameter `param` (0 = unrelated names).

    1.0 same tokens (``artistId`` / ``artist_id``); 0.95 the parent plus the leaf (``location.id`` for
    ``location_id``); 0.9 the parameter is the leaf behind role qualifiers (``originSkyId`` <- ``skyId``,
    ``pick_up_latitude`` <- ``coordinates.latitude``); 0.8 a bare ``id`` parameter of a tool on `dst_entity` and
    that entity's key; 0.6 the parameter ends with a multi-token leaf behind other words.

    Example:
        >>> name_relation("destinationSkyId", FieldRef("skyId", "skyId", None, "string"))
        0.9
    """
    p, leaf = _tokens(param), _tokens(field.leaf)
    parent = _tokens(field.parent) if field.parent else []
    if not p or not leaf:
        return 0.0
    if p == leaf:
        if p == ["id"]:
            return 0.8 if dst_entity and parent and "_".join(parent) == singular(dst_entity) else 0.0
        return 1.0
    if parent and p == parent + leaf:
        return 0.95
    if p == ["id"] and dst_entity and entity_of(field.leaf) == singular(dst_entity):
        return 0.8
    if len(p) > len(leaf) and p[-len(leaf) :] == leaf and leaf != ["id"]:
        head = p[: -len(leaf)]
        if all(t in _QUALIFIERS for t in head):
            return 0.9
        return 0.6 if len(leaf) >= 2 else 0.0
    return 0.0


def types_compatible(param_schema: Mapping[str, Any], field_type: str | None) -> bool:
    """False only when both types are declared and cannot hold the same value."""
    p_type = _schema_type(param_schema)
    if p_type is None or field_type is None or p_type == field_type:
        return True
    return {p_type, field_type} == {"integer", "number"}


def format_evidence(src: str, path: str, dst: str, param: str) -> str:
    return f"{src}.response.{path} -> {dst}.{param}"


_EVIDENCE = re.compile(r"^\s*(?P<src>[^\s.]+)\.response\.(?P<path>\S+)\s*->\s*(?P<dst>[^\s.]+)\.(?P<param>\S+)\s*$")


def path_leaf(path: str) -> str:
    """The last key of a field path or dependency source: 'orders[0].item_id' -> 'item_id'."""
    return re.split(r"[.\[\]]+", path.rstrip("]"))[-1]


def parse_evidence(text: str) -> list[EdgeEvidence]:
    """Parse ``"a.response.x.y -> b.p; a.response.z -> b.q"``; parts that do not parse are skipped."""
    out = []
    for part in text.split(";"):
        match = _EVIDENCE.match(part)
        if match:
            out.append(EdgeEvidence(match["src"], match["path"], match["dst"], match["param"]))
    return out


_CLOSEST = re.compile(r"closest fields (?P<src>[^\s.]+)\.response\.(?P<path>\S+) ~ (?P<dst>[^\s.]+)\.(?P<param>\S+) "
                      r"\(cos (?P<cos>-?[0-9.]+)\)")


def parse_closest_field(text: str) -> tuple[EdgeEvidence, float] | None:
    """The field pair a semantic edge's evidence names as closest (``closest fields a.response.x ~ b.p (cos 0.8)``)
    and its cosine: the value a semantic dependency most plausibly passes on."""
    match = _CLOSEST.search(text)
    if match is None:
        return None
    return EdgeEvidence(match["src"], match["path"], match["dst"], match["param"]), float(match["cos"])


def evidence_is_executable(text: str, src: str, dst: str, src_response: Mapping[str, Any],
                           dst_parameters: Mapping[str, Any]) -> tuple[bool, str]:  # fmt: skip
    """Whether every field an edge's evidence names exists in the two tools' schemas.

    Returns:
        (ok, detail): detail names the first missing field, or says the evidence does not parse.
    """
    parsed = parse_evidence(text)
    if not parsed:
        return False, f"unparseable evidence {text!r}"
    paths = {f.path for f in response_fields(src_response)}
    params = set(param_specs(dst_parameters))
    for ev in parsed:
        if ev.src != src or ev.dst != dst:
            return False, f"evidence names {ev.src}->{ev.dst}, edge is {src}->{dst}"
        if ev.path not in paths:
            return False, f"{src}.response has no field {ev.path}"
        if ev.param not in params:
            return False, f"{dst} has no parameter {ev.param}"
    return True, ""


def resolve_path(value: Any, path: str) -> list[tuple[str, Any]]:
    """All (concrete path, value) pairs that `path` (with ``[]`` wildcards) selects in `value`.

    Example:
        >>> resolve_path({"orders": [{"id": "a"}, {"id": "b"}]}, "orders[].id")
        [('orders[0].id', 'a'), ('orders[1].id', 'b')]
    """
    found: list[tuple[str, Any]] = [("", value)]
    for segment in path.split("."):
        name, wildcards = segment.replace("[]", ""), segment.count("[]")
        step: list[tuple[str, Any]] = []
        for prefix, current in found:
            if isinstance(current, Mapping) and name in current:
                step.append((f"{prefix}.{name}" if prefix else name, current[name]))
        for _ in range(wildcards):
            step = [(f"{p}[{i}]", item) for p, cur in step if isinstance(cur, list) for i, item in enumerate(cur)]
        found = step
    return found


def json_type(value: Any) -> str:
    """The JSON schema type name of a Python value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "object"


def _value_schema(values: list[Any]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    if not present:
        return {}
    if all(isinstance(v, Mapping) for v in present):
        keys = sorted({k for v in present for k in v})
        return {"type": "object", "properties": {k: _value_schema([v.get(k) for v in present]) for k in keys}}
    if all(isinstance(v, list) for v in present):
        return {"type": "array", "items": _value_schema([item for v in present for item in v])}
    return {"type": json_type(present[0])}


def record_shapes(db: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Record schema per DB collection, keyed by singular collection name (``orders`` -> ``order``).

    A collection is a top-level list of objects or a dict of objects keyed by ID.

    Example:
        >>> record_shapes({"orders": {"o1": {"order_id": "o1", "qty": 2}}})["order"]["properties"]["qty"]
        {'type': 'integer'}
    """
    shapes = {}
    for name, value in db.items():
        records = list(value.values()) if isinstance(value, Mapping) else value
        if isinstance(records, list) and records and all(isinstance(r, Mapping) for r in records):
            shapes[singular(name)] = _value_schema(records)
    return shapes


def enrich_response(response: Mapping[str, Any], shapes: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Fill opaque record objects of a response schema (``"order": {"type": "object"}``) from DB record shapes.

    Only top-level properties named after a collection (singular or plural) whose schema declares no properties
    are completed; everything else is kept as is.
    """
    props = response.get("properties")
    if not isinstance(props, Mapping) or not shapes:
        return dict(response)
    new_props = dict(props)
    for name, sub in props.items():
        shape = shapes.get(singular(name))
        if shape is None or not isinstance(sub, Mapping):
            continue
        if _schema_type(sub) == "object" and not sub.get("properties"):
            new_props[name] = {**sub, **shape}
        elif _schema_type(sub) == "array":
            items = sub.get("items")
            opaque = not isinstance(items, Mapping) or (
                _schema_type(items) in (None, "object") and not items.get("properties")
            )
            if opaque:
                new_props[name] = {**sub, "items": {**(items or {}), **shape}}
    return {**response, "properties": new_props}
