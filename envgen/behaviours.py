"""Behaviour families: what a tool *does*, chosen per tool from its name, schema and description.

`classify(tool, draft)` runs the ordered registry `FAMILIES`; the first matcher that fits rewrites the tool's
`ToolPlan` (template + options). What nothing fits keeps its CRUD draft, and a tool that names no record falls
through to the log-only `action` template (counted per env; `mostly_echo` quarantines toolsets made mostly of them).

Families (template -> family label):
    arithmetic  math        binary/unary/list math with domain checks (divide by zero, sqrt of a negative...)
    convert     conversion  units, temperatures, currencies (rates in the `exchange_rates` reference collection)
    text        text        case, reverse, counts, slugs, palindromes, echo
    read_many   search      filter / free-text query / sort / order / limit / offset / page over a collection
    read_one    get_by_id   one record by id; `lookup` when the key is a natural key (city, symbol, path...)
    create/update/delete    crud with validation of types, ranges, enums and referenced ids
    transition  status      status A -> B, allowed only from listed states
    transfer    transfer    move a record to another owner/location (the destination must exist)
    payment     payment     balances: deposit/withdraw/charge/refund, or move an amount between two accounts
    message     messaging   append a message to the `outbox` collection (recipient checked)
    schedule    scheduling  book a slot; a second booking of the same resource and slot is a conflict
    action      log_only    validate, log the call, echo (the fallback)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from data.models import ToolKind, ToolSchema
from gustforge.registry import Registry

__all__ = [
    "BALANCES",
    "FAMILIES",
    "FAMILY_OF_TEMPLATE",
    "Matcher",
    "classify",
    "family_of",
    "MATH_BINARY",
    "MATH_UNARY",
    "MATH_LIST",
    "TEXT_OPS",
    "UNIT_FACTORS",
    "TEMPERATURES",
    "CURRENCIES",
    "TRANSITIONS",
    "inferred_fields",
    "is_flag",
    "NATURAL_KEYS",
]

BALANCES = "balances"  # holder address -> balance; a payment without a source pays from the first holder (own wallet)
FAMILY_OF_TEMPLATE = {
    "arithmetic": "math",
    "convert": "conversion",
    "text": "text",
    "read_many": "search",
    "read_one": "get_by_id",
    "create": "crud",
    "update": "crud",
    "delete": "crud",
    "transition": "status_transition",
    "transfer": "transfer",
    "payment": "payment",
    "message": "messaging",
    "schedule": "scheduling",
    "action": "log_only",
}

# Operation tables: the generated runtime implements exactly these names (see envgen.codegen).
MATH_BINARY = {
    "add": "add plus sum addition", "subtract": "subtract sub minus difference subtraction",
    "multiply": "multiply mul times product multiplication", "divide": "divide div division quotient",
    "power": "power pow exponent exponentiation", "modulo": "mod modulo remainder", "gcd": "gcd", "lcm": "lcm",
    "log": "log logarithm", "hypot": "hypot hypotenuse", "percentage": "percentage percent",
}  # fmt: skip
MATH_UNARY = {
    "sqrt": "sqrt square_root root", "cbrt": "cbrt cube_root", "abs": "abs absolute", "sin": "sin sine",
    "cos": "cos cosine", "tan": "tan tangent", "asin": "asin arcsin", "acos": "acos arccos", "atan": "atan arctan",
    "ln": "ln log natural_log", "log10": "log10", "log2": "log2", "exp": "exp exponential",
    "factorial": "factorial", "floor": "floor", "ceil": "ceil ceiling", "round": "round rounding",
    "square": "square", "cube": "cube", "negate": "negate negative", "reciprocal": "reciprocal inverse",
    "is_prime": "is_prime prime", "radians": "degrees_to_radians to_radians radians",
    "degrees": "radians_to_degrees to_degrees degrees", "fibonacci": "fibonacci fib",
}  # fmt: skip
MATH_LIST = {
    "sum": "sum total", "mean": "mean average avg", "median": "median", "mode": "mode", "min": "min minimum",
    "max": "max maximum", "stdev": "std stdev standard_deviation", "variance": "variance var", "product": "product",
    "range": "range", "count": "count",
}  # fmt: skip
TEXT_OPS = {
    "upper": "uppercase upper to_upper", "lower": "lowercase lower to_lower", "reverse": "reverse",
    "word_count": "word_count count_words words", "char_count": "char_count count_characters length characters",
    "slug": "slug slugify", "title": "title_case capitalize titlecase", "strip": "strip trim",
    "palindrome": "palindrome is_palindrome", "vowels": "vowels count_vowels", "echo": "echo repeat",
}  # fmt: skip
UNIT_FACTORS = {  # unit -> (dimension, factor to the dimension's base unit)
    "m": ("length", 1.0), "meter": ("length", 1.0), "meters": ("length", 1.0), "km": ("length", 1000.0),
    "kilometers": ("length", 1000.0), "cm": ("length", 0.01), "mm": ("length", 0.001), "mi": ("length", 1609.344),
    "mile": ("length", 1609.344), "miles": ("length", 1609.344), "ft": ("length", 0.3048), "feet": ("length", 0.3048),
    "in": ("length", 0.0254), "inch": ("length", 0.0254), "inches": ("length", 0.0254), "yd": ("length", 0.9144),
    "kg": ("mass", 1.0), "g": ("mass", 0.001), "lb": ("mass", 0.45359237), "lbs": ("mass", 0.45359237),
    "oz": ("mass", 0.028349523125), "l": ("volume", 1.0), "liter": ("volume", 1.0), "ml": ("volume", 0.001),
    "gal": ("volume", 3.785411784), "gallon": ("volume", 3.785411784), "s": ("time", 1.0), "sec": ("time", 1.0),
    "seconds": ("time", 1.0), "min": ("time", 60.0), "minutes": ("time", 60.0), "h": ("time", 3600.0),
    "hours": ("time", 3600.0), "days": ("time", 86400.0), "b": ("data", 1.0), "kb": ("data", 1024.0),
    "mb": ("data", 1048576.0), "gb": ("data", 1073741824.0),
}  # fmt: skip
TEMPERATURES = ("celsius", "fahrenheit", "kelvin", "c", "f", "k")
CURRENCIES = {"USD": 1.0, "EUR": 1.08, "GBP": 1.27, "JPY": 0.0067, "CHF": 1.12, "CAD": 0.73, "AUD": 0.66,
              "BRL": 0.18, "INR": 0.012, "CNY": 0.14}  # fmt: skip
# verb -> (target state, states it may be reached from)
TRANSITIONS = {
    "cancel": ("cancelled", ("pending", "confirmed", "active", "open", "scheduled")),
    "approve": ("approved", ("pending", "submitted")), "reject": ("rejected", ("pending", "submitted")),
    "confirm": ("confirmed", ("pending",)), "complete": ("completed", ("active", "in_progress", "open", "pending")),
    "finish": ("completed", ("active", "in_progress", "open")), "close": ("closed", ("open", "active", "pending")),
    "resolve": ("resolved", ("open", "pending", "in_progress")), "reopen": ("open", ("closed", "resolved")),
    "archive": ("archived", ("active", "open", "closed")), "publish": ("published", ("draft",)),
    "activate": ("active", ("inactive", "suspended")), "deactivate": ("inactive", ("active",)),
    "enable": ("enabled", ("disabled",)), "disable": ("disabled", ("enabled",)),
    "suspend": ("suspended", ("active",)), "resume": ("active", ("paused", "suspended")),
    "pause": ("paused", ("active",)), "start": ("in_progress", ("pending", "open", "scheduled")),
    "stop": ("stopped", ("running", "active")), "ship": ("shipped", ("confirmed", "pending")),
    "deliver": ("delivered", ("shipped",)), "check_in": ("checked_in", ("confirmed",)),
    "checkout": ("checked_out", ("checked_in",)), "escalate": ("escalated", ("open", "pending")),
    "return": ("returned", ("borrowed", "checked_out", "delivered")), "submit": ("submitted", ("draft",)),
    "lock": ("locked", ("unlocked",)), "unlock": ("unlocked", ("locked",)),
}  # fmt: skip

_FLAG = re.compile(r"^(include|show|with|return|use|is|enable|full|detailed|verbose|raw|dry|force|auto)(_|$)")
_CONTROL = {"format", "response_format", "output_format", "fields", "language", "lang", "locale", "api_key", "token",
            "timeout", "headers", "verbose", "detailed", "pretty", "encoding", "session_id"}  # fmt: skip
_SORT = {"sort", "sort_by", "order_by", "sortby", "orderby", "sort_field"}
_ORDER = {"order", "sort_order", "direction", "sort_direction", "ascending", "descending"}
_OFFSET = {"offset", "skip", "start", "start_index", "from_"}
_PAGE = {"page", "page_number", "page_num"}
_PAGE_SIZE = {"page_size", "per_page", "limit", "max_results", "num_results", "top_k", "count", "size", "n",
              "max_items", "results_per_page"}  # fmt: skip
_QUERY = {"query", "q", "search", "keyword", "keywords", "term", "search_term", "search_query", "query_text", "text"}
_AMOUNT = re.compile(r"(^|_)(amount|value|sum|price|total|quantity_to_pay)$|amount")
_RECIPIENT = re.compile(r"(^|_)(to|recipient|recipients|email|phone|user_id|to_email|address|channel|chat_id)$")
_BODY = re.compile(r"(^|_)(message|body|text|content|subject|note|comment)$")
_DEST = re.compile(r"^(to|target|destination|dest|new)(_|$)|_to$")
_SOURCE = re.compile(r"^(from|source|src|old)(_|$)|_from$")
_SLOT = re.compile(r"(^|_)(date|time|datetime|start|start_time|slot|when|day)$")
# Natural keys of reference lookups: a parameter of this name identifies what is looked up.
NATURAL_KEYS = re.compile(
    r"(^|_)(city|location|place|country|region|symbol|ticker|code|word|term|name|title|slug|url|path|file|"
    r"file_path|domain|ip|address|package|package_name|repo|repository|isbn|doi|zip|zipcode|postcode|station|"
    r"currency|coin|token|language|topic|keyword|query|username|handle|channel|model|tag|category|"
    r"chapter|book|verse|date|year|number|key|host|image|hash|txid|tx_hash|identifier|ref|reference|index)$"
)

Matcher = Callable[[ToolSchema, Any], Any]
FAMILIES: Registry[Matcher] = Registry("behaviour family")


def family_of(template: str) -> str:
    return FAMILY_OF_TEMPLATE.get(template, "log_only")


def is_flag(param: str, schema: dict[str, Any]) -> bool:
    """Request flags and output controls (`include_platform`, `format`): shape the call, are never record fields."""
    if param in _CONTROL:
        return True
    return schema.get("type") == "boolean" and (bool(_FLAG.match(param)) or param.startswith(("only", "no_")))


def _tokens(name: str) -> list[str]:
    return [t for t in name.split("_") if t]


def _props(tool: ToolSchema) -> dict[str, dict[str, Any]]:
    return dict(tool.parameters.get("properties", {}))


def _required(tool: ToolSchema) -> list[str]:
    return list(tool.parameters.get("required", []))


def _op(name: str, table: dict[str, str]) -> str | None:
    """The table operation named by the tool (whole name first, then its tokens)."""
    words = {op: set(spec.split()) for op, spec in table.items()}
    stem = name.removesuffix("_tool")
    for op, names in words.items():
        if stem in names:
            return op
    for token in _tokens(stem):
        for op, names in words.items():
            if token in names:
                return op
    return None


# --------------------------------------------------------------------------------------------- matchers
# Each matcher returns plan updates (a dict for `ToolPlan.model_copy(update=...)`) or None.


@FAMILIES.register("arithmetic")
def _arithmetic(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    props = _props(tool)
    numbers = [p for p, s in props.items() if s.get("type") in ("integer", "number")]
    lists = [p for p, s in props.items() if s.get("type") == "array"
             and (s.get("items") or {}).get("type") in ("integer", "number")]  # fmt: skip
    others = [p for p in _required(tool) if p not in numbers and p not in lists]
    if others or draft.template in ("read_one", "update", "delete"):
        return None
    if lists:
        op = _op(tool.name, MATH_LIST)
        if op is not None:
            return _math_plan(op, [lists[0]], "list")
    if len(numbers) >= 2 and len(props) <= 3:
        op = _op(tool.name, MATH_BINARY)
        if op is not None and not (op == "log" and len(numbers) < 2):
            return _math_plan(op, numbers[:2], "binary")
    if len(numbers) == 3 and "quadratic" in tool.name:
        return _math_plan("quadratic", numbers[:3], "ternary")
    if numbers and len(props) <= 2:
        op = _op(tool.name, MATH_UNARY)
        if op is not None:
            return _math_plan(op, numbers[:1], "unary")
    return None


def _math_plan(op: str, args: list[str], arity: str) -> dict[str, Any]:
    return {"template": "arithmetic", "kind": ToolKind.READ, "entity": None, "id_param": None,
            "options": {"op": op, "args": args, "arity": arity}, "response_key": "result"}  # fmt: skip


@FAMILIES.register("convert")
def _convert(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    tokens = set(_tokens(tool.name))
    if not tokens & {"convert", "conversion", "converter", "exchange", "to"}:
        return None
    props = _props(tool)
    value = next((p for p, s in props.items() if s.get("type") in ("integer", "number")), None)
    source = next((p for p in props if _SOURCE.search(p) or p in ("from_unit", "unit_from", "base")), None)
    target = next((p for p in props if _DEST.search(p) or p in ("to_unit", "unit_to", "target")), None)
    if value is None or source is None or target is None or source == target:
        return None
    kind = "currency" if "currency" in tool.name or "currency" in source or "exchange" in tokens else "unit"
    if kind == "unit" and ("temperature" in tool.name or "celsius" in tool.name or "fahrenheit" in tool.name):
        kind = "temperature"
    entity = "exchange_rates" if kind == "currency" else None
    return {"template": "convert", "kind": ToolKind.READ, "entity": entity, "id_param": None,
            "options": {"kind": kind, "value": value, "from": source, "to": target},
            "response_key": "result"}  # fmt: skip


@FAMILIES.register("text")
def _text(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    props = _props(tool)
    strings = [p for p, s in props.items() if s.get("type") == "string"]
    if not strings or len(_required(tool)) > 1 or draft.template in ("read_one", "update", "delete"):
        return None
    op = _op(tool.name, TEXT_OPS)
    if op is None or (op == "echo" and len(props) > 2):
        return None
    text = next((p for p in strings if _BODY.search(p) or p in ("input", "string", "s", "value", "word")), strings[0])
    return {"template": "text", "kind": ToolKind.READ, "entity": None, "id_param": None,
            "options": {"op": op, "text": text}, "response_key": "result"}  # fmt: skip


def _amount_param(props: dict[str, Any]) -> str | None:
    """A numeric amount parameter (numeric strings count: token amounts are often decimal strings)."""
    return next((p for p, s in props.items() if s.get("type") in ("integer", "number", "string")
                 and _AMOUNT.search(p) and not s.get("enum")), None)  # fmt: skip


_HOLDERS = {"accounts", "wallets", "cards", "customers", "users", "members", "balances", "players", "clients"}
_HOLDER_SOURCE = {"from", "from_", "sender", "source", "from_address", "source_address", "payer"}
_HOLDER_TARGET = {"to", "recipient", "receiver", "to_address", "destination", "payee", "target_address"}


@FAMILIES.register("payment")
def _payment(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    tokens = set(_tokens(tool.name))
    props = _props(tool)
    amount = _amount_param(props)
    if amount is None:
        return None
    ids = [p for p in props if p.endswith("_id") or p in ("account", "wallet", "card", "from_account", "to_account")]
    sources = [p for p in ids if _SOURCE.search(p)]
    targets = [p for p in ids if _DEST.search(p)]
    if tokens & {"transfer", "send", "move", "pay"} and sources and targets:
        entity = _collection_of(sources[0], "accounts")
        return {"template": "payment", "kind": ToolKind.UPDATE, "entity": entity, "id_param": sources[0],
                "options": {"mode": "between", "amount": amount, "to": targets[0], "balance": "balance"},
                "response_key": None}  # fmt: skip
    holder_targets = [p for p in props if p in _HOLDER_TARGET and props[p].get("type") == "string"]
    if tokens & {"transfer", "send", "pay"} and holder_targets and not targets:
        source = next((p for p in props if p in _HOLDER_SOURCE and props[p].get("type") == "string"), None)
        return {"template": "payment", "kind": ToolKind.UPDATE, "entity": BALANCES, "id_param": source,
                "options": {"mode": "between", "amount": amount, "to": holder_targets[0], "balance": "balance"},
                "response_key": None}  # fmt: skip
    direction = None
    if tokens & {"deposit", "credit", "refund", "top", "topup", "fund", "add"}:
        direction = 1
    elif tokens & {"withdraw", "charge", "debit", "pay", "spend", "deduct", "purchase", "buy"}:
        direction = -1
    if direction is None or not ids:
        return None
    target = ids[0]
    entity = _collection_of(target, "accounts")
    if entity.split("_")[-1] not in _HOLDERS:  # charging a reservation or paying an invoice accrues, never overdraws
        field = "amount_paid" if tokens & {"pay", "purchase", "buy"} else "amount_charged"
        if direction > 0:
            field = "amount_refunded" if "refund" in tokens else "amount_credited"
        return {"template": "payment", "kind": ToolKind.UPDATE, "entity": entity, "id_param": target,
                "options": {"mode": "single", "amount": amount, "direction": 1, "balance": field},
                "response_key": None}  # fmt: skip
    return {"template": "payment", "kind": ToolKind.UPDATE, "entity": entity, "id_param": target,
            "options": {"mode": "single", "amount": amount, "direction": direction, "balance": "balance"},
            "response_key": None}  # fmt: skip


def _collection_of(param: str, fallback: str) -> str:
    from envgen.naming import pluralize

    noun = re.sub(r"^(from|to|source|target|destination|dest)_", "", param).removesuffix("_id")
    return pluralize(noun) if noun and noun not in ("id", "from", "to") else fallback


@FAMILIES.register("transfer")
def _transfer(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    tokens = set(_tokens(tool.name))
    if not tokens & {"transfer", "move", "relocate", "reassign", "assign", "migrate"}:
        return None
    if draft.entity is None or draft.id_param is None:
        return None
    props = _props(tool)
    rest = [p for p in props if p != draft.id_param and not is_flag(p, props[p])]
    dest = next((p for p in rest if _DEST.search(p)), None) or next(
        (p for p in rest if p.endswith("_id") or p in ("location", "owner", "assignee", "folder", "team")), None
    )
    if dest is None:
        return None
    source = next((p for p in rest if _SOURCE.search(p) and p != dest), None)
    field = re.sub(r"^(to|target|destination|dest|new)_", "", dest) or dest
    return {"template": "transfer", "kind": ToolKind.UPDATE,
            "options": {"to": dest, "from": source, "field": field}, "field_params": ()}  # fmt: skip


@FAMILIES.register("transition")
def _transition(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    if draft.entity is None or draft.id_param is None:
        return None
    tokens = _tokens(tool.name)
    verb = next((t for t in tokens if t in TRANSITIONS), None)
    if verb is None and "check" in tokens and ("in" in tokens or "out" in tokens):
        verb = "check_in" if "in" in tokens else "checkout"
    if verb is None:
        return None
    props = _props(tool)
    rest = [p for p in props if p != draft.id_param and not is_flag(p, props[p])]
    target, allowed = TRANSITIONS[verb]
    return {"template": "transition", "kind": ToolKind.UPDATE, "field_params": tuple(rest),
            "options": {"to": target, "from": list(allowed)}, "status_value": target}  # fmt: skip


@FAMILIES.register("message")
def _message(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    tokens = set(_tokens(tool.name))
    if not tokens & {"send", "notify", "email", "sms", "reply", "broadcast", "post", "tweet", "dm", "notification",
                     "remind", "reminder"}:  # fmt: skip
        return None
    props = _props(tool)
    body = [p for p, s in props.items() if _BODY.search(p) and s.get("type") == "string"]
    recipient = next((p for p in props if _RECIPIENT.search(p) and p not in body), None)
    about = next((p for p in props if p.endswith("_id") and p != recipient and not is_flag(p, props[p])), None)
    if not body and about is None:
        return None  # nothing to say and nobody it is about
    fields = tuple(p for p in props if not is_flag(p, props[p]))
    subject = tool.name.replace("send_", "").replace("_", " ")
    return {"template": "message", "kind": ToolKind.CREATE, "entity": "outbox", "id_param": None,
            "field_params": fields, "options": {"recipient": recipient, "body": body[0] if body else None,
                                                "subject": subject, "about": about},
            "response_key": "message_record"}  # fmt: skip


@FAMILIES.register("schedule")
def _schedule(tool: ToolSchema, draft: Any) -> dict[str, Any] | None:
    tokens = set(_tokens(tool.name))
    if not tokens & {"schedule", "book", "reserve", "appointment", "meeting", "booking", "reservation"}:
        return None
    if draft.template != "create" or draft.entity is None:
        return None
    props = _props(tool)
    slot = [p for p in props if _SLOT.search(p) and props[p].get("type") == "string"]
    if not slot:
        return None
    return {"template": "schedule", "kind": ToolKind.CREATE, "options": {"slot": slot}}


_MATCH_ORDER = ("arithmetic", "convert", "text", "payment", "transfer", "transition", "message", "schedule")


def classify(tool: ToolSchema, draft: Any) -> Any:
    """The tool's plan with its behaviour family applied (the first matcher that fits), else the draft."""
    for name in _MATCH_ORDER:
        update = FAMILIES.get(name)(tool, draft)
        if update is not None:
            return draft.model_copy(update=update)
    return draft


def search_options(tool: ToolSchema, params: list[str]) -> dict[str, Any]:
    """Sort / order / offset / page parameters of a list tool (limit is `ToolPlan.limit_param`)."""
    props = _props(tool)
    options: dict[str, Any] = {}
    for param in params:
        schema = props.get(param, {})
        if param in _SORT and "sort" not in options:
            options["sort"] = param
        elif param in _ORDER and schema.get("type") in ("string", "boolean") and "order" not in options:
            options["order"] = param
        elif param in _OFFSET and schema.get("type") in ("integer", "number") and "offset" not in options:
            options["offset"] = param
        elif param in _PAGE and schema.get("type") in ("integer", "number") and "page" not in options:
            options["page"] = param
            options["page_base"] = 0 if schema.get("default") == 0 or schema.get("minimum") == 0 else 1
    return options


# --------------------------------------------------------------------------------------------- record shapes

# Entity noun -> fields a record of it has, whatever the tools' parameters say.
_FIELD_LEXICON: dict[str, dict[str, Any]] = {
    "name": {"type": "string"}, "title": {"type": "string"}, "description": {"type": "string"},
    "price": {"type": "number", "minimum": 0}, "stock": {"type": "integer", "minimum": 0},
    "quantity": {"type": "integer", "minimum": 0}, "email": {"type": "string", "format": "email"},
    "phone": {"type": "string"}, "address": {"type": "string"}, "rating": {"type": "number"},
    "status": {"type": "string"}, "category": {"type": "string"}, "author": {"type": "string"},
    "url": {"type": "string", "format": "uri"}, "created_at": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"}, "city": {"type": "string"}, "country": {"type": "string"},
    "temperature": {"type": "number"}, "humidity": {"type": "integer", "minimum": 0, "maximum": 100},
    "wind_speed": {"type": "number", "minimum": 0}, "condition": {"type": "string"}, "version": {"type": "string"},
    "size": {"type": "integer", "minimum": 0}, "duration": {"type": "integer", "minimum": 0},
    "balance": {"type": "number"}, "currency": {"type": "string"}, "year": {"type": "integer"},
    "language": {"type": "string"}, "summary": {"type": "string"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "population": {"type": "integer", "minimum": 0}, "latitude": {"type": "number"}, "longitude": {"type": "number"},
    "score": {"type": "number"}, "count": {"type": "integer", "minimum": 0}, "total": {"type": "number"},
    "location": {"type": "string"}, "owner": {"type": "string"}, "license": {"type": "string"},
    "downloads": {"type": "integer", "minimum": 0}, "stars": {"type": "integer", "minimum": 0},
    "magnitude": {"type": "number"}, "depth_km": {"type": "number"}, "market_cap": {"type": "number"},
    "volume": {"type": "number"}, "change_24h": {"type": "number"}, "symbol": {"type": "string"},
    "capacity": {"type": "integer", "minimum": 0}, "content": {"type": "string"}, "type": {"type": "string"},
    "updated_at": {"type": "string", "format": "date-time"}, "published_at": {"type": "string", "format": "date"},
    "department": {"type": "string"}, "salary": {"type": "number"}, "role": {"type": "string"},
    "isbn": {"type": "string"}, "genre": {"type": "string"}, "duration_minutes": {"type": "integer"},
    "forecast": {"type": "string"}, "severity": {"type": "string"}, "priority": {"type": "string"},
    "due_date": {"type": "string", "format": "date"}, "start_date": {"type": "string", "format": "date"},
    "end_date": {"type": "string", "format": "date"}, "total_amount": {"type": "number"},
}  # fmt: skip
_DESCRIPTION_HINTS = {  # description words -> record fields they promise
    "price": "price", "prices": "price", "cost": "price", "stock": "stock", "inventory": "stock",
    "email": "email", "e-mail": "email", "phone": "phone", "address": "address", "rating": "rating",
    "ratings": "rating", "reviews": "rating", "category": "category", "categories": "category",
    "author": "author", "authors": "author", "url": "url", "urls": "url", "link": "url", "links": "url",
    "date": "date", "dates": "date", "temperature": "temperature", "humidity": "humidity", "wind": "wind_speed",
    "conditions": "condition", "version": "version", "versions": "version", "size": "size",
    "duration": "duration", "balance": "balance", "currency": "currency", "year": "year", "language": "language",
    "summary": "summary", "tags": "tags", "population": "population", "coordinates": "latitude",
    "latitude": "latitude", "longitude": "longitude", "score": "score", "location": "location",
    "owner": "owner", "license": "license", "downloads": "downloads", "stars": "stars", "magnitude": "magnitude",
    "depth": "depth_km", "market": "market_cap", "volume": "volume", "capacity": "capacity",
    "content": "content", "description": "description", "descriptions": "description", "status": "status",
    "title": "title", "titles": "title", "genre": "genre", "forecast": "forecast", "severity": "severity",
    "priority": "priority", "deadline": "due_date", "salary": "salary", "department": "department",
    "isbn": "isbn", "symbol": "symbol", "quantity": "quantity", "total": "total",
}  # fmt: skip
_NOUN_DEFAULTS = {  # singular noun (or its last word) -> fields every record of it has
    "product": ("name", "price", "stock", "category"), "item": ("name", "quantity", "category", "price"),
    "customer": ("name", "email", "phone"), "user": ("name", "email", "role"), "order": ("status", "total", "date"),
    "employee": ("name", "email", "department", "role"), "book": ("title", "author", "year", "genre"),
    "article": ("title", "author", "published_at", "summary"), "paper": ("title", "author", "year", "summary"),
    "movie": ("title", "year", "genre", "rating"), "weather": ("temperature", "humidity", "condition"),
    "forecast": ("temperature", "condition", "date"), "station": ("name", "city", "latitude", "longitude"),
    "earthquake": ("magnitude", "location", "depth_km", "date"), "coin": ("name", "symbol", "price", "market_cap"),
    "token": ("name", "symbol", "price"), "stock": ("symbol", "price", "volume", "change_24h"),
    "package": ("name", "version", "description", "downloads"), "repository": ("name", "owner", "stars", "language"),
    "repo": ("name", "owner", "stars", "language"), "warehouse": ("name", "city", "capacity"),
    "account": ("owner", "balance", "currency"), "wallet": ("owner", "balance", "currency"),
    "task": ("title", "status", "priority", "due_date"), "ticket": ("title", "status", "priority"),
    "project": ("name", "status", "owner"), "event": ("title", "date", "location"),
    "appointment": ("date", "status"), "booking": ("date", "status"), "reservation": ("date", "status"),
    "patient": ("name", "email", "phone"), "doctor": ("name", "department"),
    "hotel": ("name", "city", "rating", "price"),
    "room": ("type", "price", "capacity"), "flight": ("origin", "destination", "date", "price"),
    "city": ("name", "country", "population"), "country": ("name", "population", "currency"),
    "model": ("name", "type", "description"), "file": ("name", "size", "updated_at"), "document": ("title", "content"),
    "note": ("title", "content", "created_at"), "message": ("content", "created_at"),
    "channel": ("name", "description"),
    "issue": ("title", "status", "author"), "app": ("title", "rating", "category", "downloads"),
    "video": ("title", "duration", "author"), "recipe": ("title", "category", "duration_minutes"),
    "chapter": ("name", "summary"), "verse": ("content", "chapter"), "edition": ("name", "language", "author"),
    "language": ("name", "code"), "rate": ("currency", "rate_to_usd"), "alert": ("severity", "title", "date"),
    "invoice": ("total_amount", "status", "due_date"), "payment": ("total_amount", "status", "date"),
    "course": ("title", "duration", "category"), "student": ("name", "email"), "result": ("title", "summary", "url"),
}  # fmt: skip
PERSON_NOUNS = frozenset(
    "user customer employee patient guest student member author person contact driver owner "
    "client doctor teacher player agent staff passenger tenant buyer seller candidate".split()
)


def inferred_fields(singular: str, descriptions: list[str]) -> dict[str, dict[str, Any]]:
    """Record fields a collection needs beyond its tools' parameters: entity defaults + description promises."""
    head = singular.split("_")[-1]
    names = list(_NOUN_DEFAULTS.get(singular) or _NOUN_DEFAULTS.get(head) or ())
    words = re.findall(r"[a-z][a-z\-]+", " ".join(descriptions).lower())
    names += [_DESCRIPTION_HINTS[w] for w in words if w in _DESCRIPTION_HINTS]
    fields: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(names):
        if name in _FIELD_LEXICON:
            fields[name] = dict(_FIELD_LEXICON[name])
        elif name == "rate_to_usd":
            fields[name] = {"type": "number", "minimum": 0}
        elif name in ("origin", "destination", "code", "chapter"):
            fields[name] = {"type": "string"}
        if len(fields) >= 6:
            break
    return fields
