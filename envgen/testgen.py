"""Unit-test generation: the `tests.py` of an environment (ToolVerse App. B.1), per the tests-module contract.

Tests call the tool code directly (`env.call_tool`: no schema check in front), so a tool that validates nothing
fails them. Per behaviour family (`envgen.behaviours`) they assert what the tool promises, computed here from the
initial DB with the family's documented semantics:
    math / conversion / text   the exact result (add(3, 3) == 6) and the domain errors (division by zero, ...)
    search                     every filter, query, sort, order, limit, offset and page parameter changes the ids
                               returned exactly as specified; a read leaves the DB alone
    get_by_id / lookup         the very record asked for; an unknown key is an error
    crud, status, transfer,    the promised change on the promised record and nothing else (other records and
    payment, messaging,        collections equal); the family's error paths (not allowed from this state,
    scheduling                 insufficient funds, unknown destination, empty message, slot conflict)
    log_only                   the call is logged, nothing else changes
Every tool also gets rejected calls (missing required, wrong type, out-of-range, bad enum, unknown id / foreign key)
that must return `status == "error"` and leave the DB unchanged; chain tests feed a list tool's ids into writes.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from typing import Any

from data.models import RefactoredToolset, ToolSchema
from envgen.database import sample_value
from envgen.entities import ACTION_LOG, EXCHANGE_RATES, EntitySpec, EnvPlan, ToolPlan, plan_environment
from gustforge.schemas import safe_validator

__all__ = ["generate_suite", "generate_tests_source", "valid_arguments", "expected_math", "rejected_call_counts"]

_UNKNOWN_STR = "UNKNOWN-404"
_UNKNOWN_INT = 987654
_WRONG = {"string": 12345, "integer": "not-a-number", "number": "not-a-number", "boolean": "yes",
          "array": "not-a-list", "object": "not-an-object"}  # fmt: skip

_HELPERS = """

def _ok(env, tool, out):
    env.check(out.get("status") == "success", f"{tool}: expected success, got {str(out)[:300]}")
    errors = env.validate(out, env.schemas[tool]["response"])
    env.check(not errors, f"{tool}: response violates its schema: {errors[:3]}")
    return out.get("status") == "success"


def _rejected(env, tool, out, before, why):
    env.check(out.get("status") == "error", f"{tool}: {why}: expected an error, got {str(out)[:300]}")
    env.check(env.db() == before, f"{tool}: {why}: a rejected call changed the DB")


def _without(db, name):
    return {key: value for key, value in db.items() if key != name}


def _only_changed(env, tool, before, after, collection, keys):
    env.check(_without(after, collection) == _without(before, collection), f"{tool}: changed other collections")
    rows, rows_before = after.get(collection, {}), before.get(collection, {})
    untouched = [k for k in rows_before if k not in keys]
    env.check(all(rows.get(k) == rows_before[k] for k in untouched), f"{tool}: changed records it was not asked to")


def _close(got, want):
    if isinstance(want, bool) or isinstance(got, bool):
        return got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(got - want) <= 1e-6 * max(1.0, abs(want))
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))
    return got == want


def _ids(out, key, field):
    rows = out.get(key)
    return [str(r.get(field)) for r in rows if isinstance(r, dict)] if isinstance(rows, list) else None
"""


# --------------------------------------------------------------------------------------------- semantics mirrors


def _matches(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, str) and isinstance(wanted, str):
        return wanted.lower() in stored.lower()
    if isinstance(stored, list) and not isinstance(wanted, list):
        return wanted in stored
    return bool(stored == wanted)


def _text_match(record: dict[str, Any], text: Any) -> bool:
    needle = str(text).lower()
    return any(needle in str(v).lower() for v in record.values() if isinstance(v, (str, int, float)))


def _sort_key(field: str) -> Any:
    def key(record: dict[str, Any]) -> tuple[int, float, str]:
        value = record.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (0, value, "")
        return (1 if value is not None else 2, 0, str(value))

    return key


_MATH_VALUES: dict[str, tuple[Any, ...]] = {
    "add": (3, 3), "subtract": (7, 3), "multiply": (7, 3), "divide": (7, 2), "power": (2, 5), "modulo": (7, 3),
    "gcd": (12, 18), "lcm": (4, 6), "log": (8, 2), "hypot": (3, 4), "percentage": (25, 200), "sqrt": (16,),
    "cbrt": (27,), "abs": (-5,), "sin": (0.5,), "cos": (0.5,), "tan": (0.5,), "asin": (0.5,), "acos": (0.5,),
    "atan": (1,), "ln": (10,), "log10": (1000,), "log2": (8,), "exp": (1,), "factorial": (5,), "floor": (3.7,),
    "ceil": (3.2,), "round": (3.6,), "square": (4,), "cube": (3,), "negate": (5,), "reciprocal": (4,),
    "is_prime": (7,), "radians": (180,), "degrees": (3.141592653589793,), "fibonacci": (10,),
    "quadratic": (1, -3, 2),
}  # fmt: skip
_MATH_ERRORS: dict[str, tuple[Any, ...]] = {
    "divide": (1, 0), "modulo": (1, 0), "percentage": (1, 0), "log": (-1, 2), "sqrt": (-4,), "ln": (0,),
    "log10": (0,), "log2": (-2,), "asin": (2,), "acos": (2,), "reciprocal": (0,), "factorial": (-1,),
    "fibonacci": (-1,), "quadratic": (0, 1, 1), "power": (0, -1),
}  # fmt: skip
_LIST = [4, 1, 7, 1, 2]


def expected_math(op: str, values: list[Any], arity: str) -> Any:
    """What the math family promises for `op` on `values` (the tests' oracle)."""
    if arity == "list":
        data = values[0]
        mean = sum(data) / len(data)
        ordered, middle = sorted(data), len(data) // 2
        variance = sum((v - mean) ** 2 for v in data) / (len(data) - 1) if len(data) > 1 else 0
        table = {"sum": sum(data), "mean": mean, "min": min(data), "max": max(data), "count": len(data),
                 "median": ordered[middle] if len(data) % 2 else (ordered[middle - 1] + ordered[middle]) / 2,
                 "mode": max(data, key=lambda v: (data.count(v), -data.index(v))), "product": math.prod(data),
                 "range": max(data) - min(data), "variance": variance, "stdev": math.sqrt(variance)}  # fmt: skip
        return table[op]
    if arity == "ternary":
        a, b, c = values
        root = math.sqrt(b * b - 4 * a * c)
        return sorted({(-b - root) / (2 * a), (-b + root) / (2 * a)})
    if arity == "binary":
        a, b = values
        table2 = {"add": a + b, "subtract": a - b, "multiply": a * b, "divide": a / b, "power": a**b,
                  "modulo": a % b, "gcd": math.gcd(int(a), int(b)),
                  "lcm": abs(int(a) * int(b)) // math.gcd(int(a), int(b)),
                  "log": math.log(a, b), "hypot": math.hypot(a, b), "percentage": a / b * 100}  # fmt: skip
        return table2[op]
    x = values[0]
    table1: dict[str, Any] = {
        "sqrt": math.sqrt,
        "cbrt": lambda v: math.copysign(abs(v) ** (1 / 3), v),
        "abs": abs,
        "sin": math.sin,
        "cos": math.cos,
        "tan": math.tan,
        "asin": math.asin,
        "acos": math.acos,
        "atan": math.atan,
        "ln": math.log,
        "log10": math.log10,
        "log2": math.log2,
        "exp": math.exp,
        "factorial": lambda v: math.factorial(int(v)),
        "floor": math.floor,
        "ceil": math.ceil,
        "round": round,
        "square": lambda v: v * v,
        "cube": lambda v: v**3,
        "negate": lambda v: -v,
        "reciprocal": lambda v: 1 / v,
        "radians": math.radians,
        "degrees": math.degrees,
        "is_prime": lambda v: v >= 2 and all(v % k for k in range(2, int(v**0.5) + 1)),
        "fibonacci": _fib,
    }
    return table1[op](x)


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(int(n)):
        a, b = b, a + b
    return a


# --------------------------------------------------------------------------------------------- argument values


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    """An id as the parameter's type wants it (ids are str keys; integer-typed parameters take ints)."""
    if schema.get("type") in ("integer", "number") and str(value).lstrip("-").isdigit():
        return int(value)
    if schema.get("type") == "string":
        return str(value)
    return value


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    return safe_validator(schema).is_valid(value)


class _Ctx:
    """What one tool's tests are generated from."""

    def __init__(self, tool: ToolSchema, plan: ToolPlan, entity: EntitySpec | None, db: dict[str, Any], seed: int):
        self.tool, self.plan, self.entity, self.db = tool, plan, entity, db
        self.rng = random.Random(seed)
        self.props: dict[str, Any] = tool.parameters.get("properties", {})
        self.required: list[str] = list(tool.parameters.get("required", []))

    @property
    def name(self) -> str:
        return self.tool.name

    def rows(self, collection: str | None = None) -> dict[str, dict[str, Any]]:
        name = collection or (self.entity.name if self.entity else None)
        return dict(self.db.get(name, {})) if name else {}

    def value(self, param: str, index: int = 7, avoid: Any = None) -> Any:
        """A schema-valid value for `param` (ref params get an existing id)."""
        schema = self.props[param]
        if param in self.plan.ref_params:
            ids = [k for k in self.db.get(self.plan.ref_params[param], {}) if str(k) != str(avoid)]
            if ids:
                return _coerce(ids[0], schema)
        for attempt in range(6):
            value = sample_value(
                param, schema, self.rng, index + attempt, self.entity.singular if self.entity else None
            )
            if value != avoid and _valid(value, schema):
                return value
        value = sample_value(param, schema, self.rng, index)
        other = _differing(value) if value == avoid and avoid is not None else value
        return other if _valid(other, schema) else value

    def required_args(self, record: dict[str, Any] | None = None) -> dict[str, Any]:
        args = {}
        for param in self.required:
            if record is not None and param in record and _valid(record[param], self.props[param]):
                args[param] = record[param]
            else:
                args[param] = self.value(param)
        return args


def _differing(value: Any) -> Any:
    """A nearby value unequal to `value`: an update must change what it writes, or its test proves nothing."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"{value} (updated)"
    if isinstance(value, dict):
        return {**value, "updated": True}
    if isinstance(value, list):
        return [*value, *value[:1]] if value else value
    return value


def valid_arguments(
    tool: ToolSchema, plan: ToolPlan, entity: EntitySpec | None, db: dict[str, Any], *, seed: int
) -> dict[str, Any]:
    """Arguments a correct implementation of `tool` accepts on `db` (ids and keys drawn from the DB)."""
    ctx = _Ctx(tool, plan, entity, db, seed)
    cases = list(_FAMILY_CASES.get(plan.template, _log_only_cases)(ctx))
    return dict(cases[0].args) if cases else ctx.required_args()


# --------------------------------------------------------------------------------------------- test cases


class _Case:
    """One positive call and the lines that check its outcome (`out`, `before`, `after` are bound)."""

    def __init__(self, label: str, args: dict[str, Any], checks: list[str], *, reads: bool = False):
        self.label, self.args, self.checks, self.reads = label, args, checks, reads


def _check(condition: str, message: str) -> str:
    return f"env.check({condition}, {message!r})"


def _math_cases(ctx: _Ctx) -> Iterator[_Case]:
    opts = ctx.plan.options
    op, params, arity = opts["op"], opts["args"], opts["arity"]
    values: list[Any] = [list(_LIST)] if arity == "list" else list(_MATH_VALUES.get(op, (3, 3, 3)))[: len(params)]
    values = [_fit(v, ctx.props[p]) for v, p in zip(values, params, strict=False)]
    args = {**ctx.required_args(), **dict(zip(params, values, strict=False))}
    try:
        want = expected_math(op, values, arity)
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return
    yield _Case("computes", args, [_check(f"_close(out.get('result'), {want!r})",
                                          f"{ctx.name}{tuple(values)} must return {want!r}")], reads=True)  # fmt: skip


def _fit(value: Any, schema: dict[str, Any]) -> Any:
    if schema.get("type") == "integer" and isinstance(value, float):
        value = round(value)
    if schema.get("type") == "array":
        return value
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return value


def _math_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    opts = ctx.plan.options
    if opts["arity"] == "list":
        yield "empty list", {**ctx.required_args(), opts["args"][0]: []}
        if opts["op"] in ("stdev", "variance"):
            yield "one number", {**ctx.required_args(), opts["args"][0]: [1]}
    elif opts["op"] in _MATH_ERRORS:
        bad = dict(zip(opts["args"], _MATH_ERRORS[opts["op"]], strict=False))
        yield f"domain error {tuple(bad.values())}", {**ctx.required_args(), **bad}


_UNIT_PAIRS = (("km", "m", 2), ("kg", "lb", 3), ("mi", "km", 2), ("h", "min", 2), ("gb", "mb", 1))
_TEMPS = {"c": "celsius", "f": "fahrenheit", "k": "kelvin"}


def _conversion_cases(ctx: _Ctx) -> Iterator[_Case]:
    from envgen.behaviours import UNIT_FACTORS

    opts = ctx.plan.options
    src_schema, dst_schema = ctx.props[opts["from"]], ctx.props[opts["to"]]
    value = 100 if ctx.props[opts["value"]].get("type") != "integer" else 100
    if opts["kind"] == "currency":
        rates = ctx.rows(EXCHANGE_RATES)
        codes = [c for c in ("USD", "EUR", "GBP", "JPY") if c in rates]
        src, dst = _pick_pair(codes, src_schema, dst_schema)
        if src is None:
            return
        want = round(value * rates[src.upper()]["rate_to_usd"] / rates[dst.upper()]["rate_to_usd"], 4)
    elif opts["kind"] == "temperature":
        src, dst = _pick_pair(["celsius", "fahrenheit", "C", "F", "c", "f"], src_schema, dst_schema)
        if src is None:
            return
        celsius = value if _TEMPS.get(src.lower(), src.lower()) == "celsius" else (value - 32) * 5 / 9
        want = celsius if _TEMPS.get(dst.lower(), dst.lower()) == "celsius" else celsius * 9 / 5 + 32
    else:
        src = dst = None
        for low, high, _ in _UNIT_PAIRS:
            if _valid(low, src_schema) and _valid(high, dst_schema):
                src, dst = low, high
                break
        if src is None:
            return
        want = value * UNIT_FACTORS[src][1] / UNIT_FACTORS[dst][1]
    args = {**ctx.required_args(), opts["value"]: value, opts["from"]: src, opts["to"]: dst}
    yield _Case("converts", args, [_check(f"_close(out.get('result'), {want!r})",
                                          f"{ctx.name}: {value} {src} -> {dst} must be {want!r}")],
                 reads=True)  # fmt: skip


def _pick_pair(options: list[str], src_schema: dict[str, Any], dst_schema: dict[str, Any]) -> tuple[Any, Any]:
    for src in options:
        for dst in options:
            if src.lower() != dst.lower() and _valid(src, src_schema) and _valid(dst, dst_schema):
                if _TEMPS.get(src.lower(), src.lower()) != _TEMPS.get(dst.lower(), dst.lower()):
                    return src, dst
    return None, None


def _conversion_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    cases = list(_conversion_cases(ctx))
    if cases:
        yield "unknown unit", {**cases[0].args, ctx.plan.options["to"]: "parsec-xyz"}


_TEXT = "Never odd or even"


def _text_cases(ctx: _Ctx) -> Iterator[_Case]:
    op, param = ctx.plan.options["op"], ctx.plan.options["text"]
    text = _TEXT
    words = text.split()
    want = {"upper": text.upper(), "lower": text.lower(), "reverse": text[::-1], "word_count": len(words),
            "char_count": len(text), "title": text.title(), "slug": "never-odd-or-even", "strip": text.strip(),
            "palindrome": True, "vowels": sum(ch in "aeiouAEIOU" for ch in text), "echo": text}[op]  # fmt: skip
    args = {**ctx.required_args(), param: text}
    yield _Case("transforms", args, [_check(f"_close(out.get('result'), {want!r})",
                                            f"{ctx.name}({text!r}) must return {want!r}")], reads=True)  # fmt: skip


def _text_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    if ctx.plan.options["op"] != "echo":
        yield "empty text", {**ctx.required_args(), ctx.plan.options["text"]: "  "}


def _search_expected(ctx: _Ctx, args: dict[str, Any]) -> list[str]:
    plan, opts = ctx.plan, ctx.plan.options
    filters = {p: p for p in plan.field_params}
    if plan.id_param and ctx.entity is not None:
        filters[plan.id_param] = ctx.entity.id_field
    found = [
        r for r in ctx.rows().values()
        if all(args.get(p) is None or _matches(r.get(f), args[p]) for p, f in filters.items())
        and all(args.get(q) is None or _text_match(r, args[q]) for q in plan.query_params)
    ]  # fmt: skip
    if args.get(opts.get("sort", "")) is not None:
        found.sort(key=_sort_key(args[opts["sort"]]))
    order = args.get(opts.get("order", ""))
    if order is not None and (order if isinstance(order, bool) else str(order).lower().startswith("desc")):
        found.reverse()
    limit = args.get(plan.limit_param or "")
    if args.get(opts.get("page", "")) is not None:
        size = int(limit) if limit else 10
        first = int(args[opts["page"]]) - opts.get("page_base", 1)
        found = found[first * size : (first + 1) * size]
    elif args.get(opts.get("offset", "")) is not None:
        found = found[int(args[opts["offset"]]) :]
    if limit is not None:
        found = found[: int(limit)]
    id_field = ctx.entity.id_field if ctx.entity else ""
    return [str(r.get(id_field)) for r in found]


def _search_case(ctx: _Ctx, label: str, args: dict[str, Any], why: str) -> _Case:
    key, id_field = ctx.plan.response_key, ctx.entity.id_field if ctx.entity else ""
    want = _search_expected(ctx, args)
    return _Case(label, args, [_check(f"_ids(out, {key!r}, {id_field!r}) == {want!r}",
                                      f"{ctx.name} {why}: expected ids {want}")], reads=True)  # fmt: skip


def _search_cases(ctx: _Ctx) -> Iterator[_Case]:
    if ctx.entity is None:
        return
    rows = list(ctx.rows().values())
    drawn = ctx.required_args(rows[0] if rows else None)
    narrowing = [p for p in drawn if p in ctx.plan.field_params or p in ctx.plan.query_params
                 or p in ctx.plan.ref_params or p == ctx.plan.id_param]  # fmt: skip
    base = {p: v for p, v in drawn.items() if p not in narrowing}
    for param in narrowing:  # one at a time, each keeping as many records as the others allow
        broad = _broad_value(ctx, param, base)
        base[param] = broad if broad is not None else drawn[param]
    base = {p: base[p] for p in drawn}
    yield _search_case(ctx, "base", base, f"with {base}")
    everything = _search_expected(ctx, base)
    filters = [p for p in (*ctx.plan.field_params, ctx.plan.id_param) if p and p not in base]
    for param in filters:
        field = ctx.entity.id_field if param == ctx.plan.id_param else param
        value = _distinguishing(ctx, param, field, base, everything)
        if value is not None:
            yield _search_case(ctx, f"filter_{param}", {**base, param: value}, f"filtered by {param}={value!r}")
    for param in (q for q in ctx.plan.query_params if q not in base):
        value = _distinguishing_query(ctx, param, base, everything)
        if value is not None:
            yield _search_case(ctx, f"query_{param}", {**base, param: value}, f"searched for {value!r}")
    yield from _ordering_cases(ctx, base, everything)


def _broad_value(ctx: _Ctx, param: str, base: dict[str, Any]) -> Any:
    """A value of a required filter/query that keeps as many records as possible (so paging has rows to page)."""
    schema = ctx.props[param]
    candidates: list[Any] = []
    field = ctx.entity.id_field if ctx.entity is not None and param == ctx.plan.id_param else param
    for record in ctx.rows().values():
        values = [record.get(field)] if param not in ctx.plan.query_params else list(record.values())
        for value in values:
            if isinstance(value, str):
                candidates += [value, *re.findall(r"[A-Za-z]{4,}", value)]
            elif value is not None:
                candidates.append(value)
    best, best_count = None, 0
    for value in dict.fromkeys(_coerce(c, schema) for c in candidates if not isinstance(c, (dict, list))):
        if not _valid(value, schema):
            continue
        count = len(_search_expected(ctx, {**base, param: value}))
        if count > best_count:
            best, best_count = value, count
    return best


def _distinguishing(ctx: _Ctx, param: str, field: str, base: dict[str, Any], everything: list[str]) -> Any:
    """A filter value selecting a strict, non-empty subset of what the call returns without it (else: none)."""
    schema = ctx.props[param]
    candidates = [_coerce(r.get(field), schema) for r in ctx.rows().values() if r.get(field) is not None]
    if schema.get("enum"):
        candidates += list(schema["enum"])
    fallback = None
    for value in candidates:
        if not _valid(value, schema):
            continue
        got = _search_expected(ctx, {**base, param: value})
        if got and len(got) < len(everything):
            return value
        fallback = fallback if fallback is not None or got else value
    if fallback is None and len(everything) > 0:
        unknown = _UNKNOWN_INT if schema.get("type") in ("integer", "number") else "zz-no-such-value"
        if _valid(unknown, schema) and not _search_expected(ctx, {**base, param: unknown}):
            return unknown
    return fallback


def _distinguishing_query(ctx: _Ctx, param: str, base: dict[str, Any], everything: list[str]) -> Any:
    words = []
    for record in ctx.rows().values():
        for field, value in record.items():
            if isinstance(value, str) and field != (ctx.entity.id_field if ctx.entity else ""):
                words += [w for w in re.findall(r"[A-Za-z]{4,}", value)]
    for word in dict.fromkeys(words):
        got = _search_expected(ctx, {**base, param: word})
        if got and len(got) < len(everything) and _valid(word, ctx.props[param]):
            return word
    return "zz-no-such-text" if everything and _valid("zz-no-such-text", ctx.props[param]) else None


def _ordering_cases(ctx: _Ctx, base: dict[str, Any], everything: list[str]) -> Iterator[_Case]:
    opts, limit = ctx.plan.options, ctx.plan.limit_param
    if len(everything) < 2:
        return
    if limit and limit not in base and _valid(1, ctx.props[limit]):
        yield _search_case(ctx, f"limit_{limit}", {**base, limit: 1}, f"with {limit}=1")
    sort = opts.get("sort")
    if sort and sort not in base:
        value = _sort_value(ctx, sort, base)
        if value is not None:
            yield _search_case(ctx, f"sort_{sort}", {**base, sort: value}, f"sorted by {value}")
    order = opts.get("order")
    if order and order not in base:
        schema = ctx.props[order]
        desc = (
            True
            if schema.get("type") == "boolean"
            else next((v for v in [*schema.get("enum", []), "desc"] if str(v).lower().startswith("desc")), None)
        )
        if desc is not None and _valid(desc, schema):
            args = {**base, order: desc}
            if sort and sort not in base and _sort_value(ctx, sort, base) is not None:
                args[sort] = _sort_value(ctx, sort, base)
            yield _search_case(ctx, f"order_{order}", args, f"in order {desc!r}")
    offset = opts.get("offset")
    if offset and offset not in base and _valid(1, ctx.props[offset]):
        yield _search_case(ctx, f"offset_{offset}", {**base, offset: 1}, f"with {offset}=1")
    page = opts.get("page")
    if page and page not in base:
        args = {**base, page: 1 + opts.get("page_base", 1)}
        if limit and _valid(1, ctx.props[limit]):
            args[limit] = 1
        if _valid(args[page], ctx.props[page]):
            yield _search_case(ctx, f"page_{page}", args, f"the second page of {args}")


def _sort_value(ctx: _Ctx, sort: str, base: dict[str, Any]) -> Any:
    schema = ctx.props[sort]
    rows = list(ctx.rows().values())
    fields = [f for f in (rows[0] if rows else {}) if f != (ctx.entity.id_field if ctx.entity else "")]
    options = list(schema.get("enum") or fields)
    unsorted = _search_expected(ctx, base)
    for value in options:
        if value in fields and _valid(value, schema) and _search_expected(ctx, {**base, sort: value}) != unsorted:
            return value
    return None


def _get_cases(ctx: _Ctx) -> Iterator[_Case]:
    rows = ctx.rows()
    if ctx.entity is None or not rows or ctx.plan.id_param is None:
        return
    key, id_param = ctx.plan.response_key, ctx.plan.id_param
    schema = ctx.props[id_param]
    picks = list(rows)[:1] + list(rows)[-1:] if len(rows) > 1 else list(rows)
    if ctx.plan.options.get("batch"):
        ids = [_coerce(k, schema.get("items", {"type": "string"})) for k in picks]
        want = [rows[k] for k in picks]
        args = {**ctx.required_args(), id_param: ids}
        yield _Case("returns_records", args, [_check(f"out.get({key!r}) == {want!r}",
                                                     f"{ctx.name}: not the records {ids}")], reads=True)  # fmt: skip
        return
    for index, pick in enumerate(picks):
        args = {**ctx.required_args(rows[pick]), id_param: _coerce(pick, schema)}
        for ref in ctx.plan.ref_params:
            if ref in rows[pick]:
                args[ref] = _coerce(rows[pick][ref], ctx.props[ref])
        yield _Case(f"returns_record_{index}", args, [_check(f"out.get({key!r}) == {rows[pick]!r}",
                                                             f"{ctx.name}: not the record {pick}")],
                    reads=True)  # fmt: skip


def _write_target(ctx: _Ctx, prefer: Any = None) -> tuple[str, dict[str, Any]] | None:
    rows = ctx.rows()
    for key, record in rows.items():
        if prefer is None or prefer(record):
            return key, record
    return None


def _field_args(ctx: _Ctx, record: dict[str, Any] | None) -> dict[str, Any]:
    args = {}
    for param in ctx.plan.field_params:
        current = record.get(param) if record else None
        args[param] = ctx.value(param, avoid=current)
    for param in ctx.plan.ref_params:
        if param not in args and param in ctx.props:
            args[param] = ctx.value(param, avoid=record.get(param) if record else None)
    return args


def _create_cases(ctx: _Ctx) -> Iterator[_Case]:
    if ctx.entity is None:
        return
    coll, id_field = ctx.entity.name, ctx.entity.id_field
    args = {**ctx.required_args(), **_field_args(ctx, None)}
    if ctx.plan.id_param:
        args[ctx.plan.id_param] = _coerce(_UNKNOWN_INT if ctx.props[ctx.plan.id_param].get("type") in
                                          ("integer", "number") else "NEW-900",
                                          ctx.props[ctx.plan.id_param])  # fmt: skip
    args = {k: v for k, v in args.items() if k in ctx.props}
    checks = [
        f"new_key = str(out.get({id_field!r}))",
        _check(
            f"len(after.get({coll!r}, {{}})) == len(before.get({coll!r}, {{}})) + 1", f"{ctx.name}: no record added"
        ),
        _check(f"new_key in after.get({coll!r}, {{}})", f"{ctx.name}: the new id is not in the DB"),
        f"_only_changed(env, {ctx.name!r}, before, after, {coll!r}, [new_key])",
    ]
    for field in (f for f in ctx.plan.field_params if f in args):
        checks.append(_check(f"after.get({coll!r}, {{}}).get(new_key, {{}}).get({field!r}) == {args[field]!r}",
                             f"{ctx.name}: {field} not stored"))  # fmt: skip
    yield _Case("creates", args, checks)


def _create_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    cases = list(_FAMILY_CASES[ctx.plan.template](ctx))
    if not cases:
        return
    args = cases[0].args
    if ctx.plan.id_param and ctx.rows():
        existing = next(iter(ctx.rows()))
        yield "duplicate id", {**args, ctx.plan.id_param: _coerce(existing, ctx.props[ctx.plan.id_param])}
    if ctx.plan.template == "message" and ctx.plan.options.get("body"):
        yield "empty message", {**args, ctx.plan.options["body"]: ""}
        recipient = ctx.plan.options.get("recipient")
        if recipient and "email" in recipient and ctx.props[recipient].get("type") == "string":
            yield "invalid e-mail", {**args, recipient: "not-an-address"}


def _update_cases(ctx: _Ctx) -> Iterator[_Case]:
    target = _write_target(ctx)
    if target is None or ctx.plan.id_param is None or ctx.entity is None:
        return
    key, record = target
    coll = ctx.entity.name
    args = {**ctx.required_args(record), ctx.plan.id_param: _coerce(key, ctx.props[ctx.plan.id_param])}
    args.update(_field_args(ctx, record))
    args = {k: v for k, v in args.items() if k in ctx.props}
    checks = [
        f"row = after.get({coll!r}, {{}}).get({key!r}, {{}})",
        f"_only_changed(env, {ctx.name!r}, before, after, {coll!r}, [{key!r}])",
    ]
    for field in (f for f in ctx.plan.field_params if f in args):
        checks.append(_check(f"row.get({field!r}) == {args[field]!r}", f"{ctx.name}: {field} not updated"))
    if ctx.plan.status_value:
        checks.append(_check(f"row.get('status') == {ctx.plan.status_value!r}", f"{ctx.name}: status not set"))
    yield _Case("updates", args, checks)


def _delete_cases(ctx: _Ctx) -> Iterator[_Case]:
    rows = ctx.rows()
    if not rows or ctx.plan.id_param is None or ctx.entity is None:
        return
    key = list(rows)[-1]
    coll = ctx.entity.name
    args = {**ctx.required_args(rows[key]), ctx.plan.id_param: _coerce(key, ctx.props[ctx.plan.id_param])}
    checks = [
        _check(f"{key!r} not in after.get({coll!r}, {{}})", f"{ctx.name}: the record is still there"),
        _check(f"len(after.get({coll!r}, {{}})) == len(before.get({coll!r}, {{}})) - 1",
               f"{ctx.name}: wrong number of records removed"),
        _check(f"_without(after, {coll!r}) == _without(before, {coll!r})", f"{ctx.name}: changed other collections"),
    ]  # fmt: skip
    yield _Case("deletes", args, checks)


def _transition_cases(ctx: _Ctx) -> Iterator[_Case]:
    opts = ctx.plan.options
    target = _write_target(ctx, lambda r: r.get("status") in opts["from"])
    if target is None or ctx.entity is None or ctx.plan.id_param is None:
        return
    key, record = target
    coll = ctx.entity.name
    args = {**ctx.required_args(record), ctx.plan.id_param: _coerce(key, ctx.props[ctx.plan.id_param])}
    args = {k: v for k, v in args.items() if k in ctx.props}
    checks = [
        f"row = after.get({coll!r}, {{}}).get({key!r}, {{}})",
        _check(f"row.get('status') == {opts['to']!r}",
               f"{ctx.name}: status {record.get('status')} -> {opts['to']} not made"),
        _check(f"all(row.get(k) == v for k, v in before[{coll!r}][{key!r}].items() if k != 'status' and k not in "
               f"{list(args)!r})", f"{ctx.name}: changed fields other than status"),
        f"_only_changed(env, {ctx.name!r}, before, after, {coll!r}, [{key!r}])",
        f"again = env.call_tool({ctx.name!r}, {args!r})",
        _check("again.get('status') == 'error'", f"{ctx.name}: a second {opts['to']} of the same record must fail"),
    ]  # fmt: skip
    yield _Case("transitions", args, checks)


def _transfer_cases(ctx: _Ctx) -> Iterator[_Case]:
    opts = ctx.plan.options
    target = _write_target(ctx)
    if target is None or ctx.entity is None or ctx.plan.id_param is None:
        return
    key, record = target
    coll, field = ctx.entity.name, opts["field"]
    dest = ctx.value(opts["to"], avoid=record.get(field))
    if str(dest) == str(record.get(field)):
        return
    args = {
        **ctx.required_args(record),
        ctx.plan.id_param: _coerce(key, ctx.props[ctx.plan.id_param]),
        opts["to"]: dest,
    }
    if opts.get("from") and record.get(field) is not None:
        args[opts["from"]] = _coerce(record[field], ctx.props[opts["from"]])
    checks = [
        f"row = after.get({coll!r}, {{}}).get({key!r}, {{}})",
        _check(f"str(row.get({field!r})) == {str(dest)!r}", f"{ctx.name}: {key} was not moved to {dest}"),
        f"_only_changed(env, {ctx.name!r}, before, after, {coll!r}, [{key!r}])",
    ]
    yield _Case("moves", args, checks)


def _transfer_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    cases = list(_transfer_cases(ctx))
    if not cases:
        return
    args = cases[0].args
    dest = ctx.plan.options["to"]
    if dest in ctx.plan.ref_params:
        unknown = _UNKNOWN_INT if ctx.props[dest].get("type") in ("integer", "number") else _UNKNOWN_STR
        yield "unknown destination", {**args, dest: unknown}
    target = ctx.rows()[str(args[ctx.plan.id_param])]
    current = target.get(ctx.plan.options["field"])
    if current is not None and _valid(_coerce(current, ctx.props[dest]), ctx.props[dest]):
        yield "already there", {**args, dest: _coerce(current, ctx.props[dest])}


def _payment_cases(ctx: _Ctx) -> Iterator[_Case]:
    opts = ctx.plan.options
    rows = ctx.rows()
    if ctx.entity is None or len(rows) < (2 if opts["mode"] == "between" else 1):
        return
    coll, field = ctx.entity.name, opts["balance"]
    keys = list(rows)
    kind = ctx.props[opts["amount"]].get("type")
    amount: Any = {"integer": 10, "string": "12.5"}.get(kind or "", 12.5)
    delta_of = float(amount)
    args = {**ctx.required_args(rows[keys[0]]), opts["amount"]: amount}
    if ctx.plan.id_param:
        args[ctx.plan.id_param] = _coerce(keys[0], ctx.props[ctx.plan.id_param])
    if opts["mode"] == "between":
        args[opts["to"]] = _coerce(keys[1], ctx.props[opts["to"]])
        changes = {keys[0]: -delta_of, keys[1]: delta_of}
    else:
        changes = {keys[0]: opts["direction"] * delta_of}
    checks = [f"_only_changed(env, {ctx.name!r}, before, after, {coll!r}, {list(changes)!r})"]
    for key, delta in changes.items():
        want = round(rows[key].get(field, 0) + delta, 2)
        checks.append(_check(f"_close(after[{coll!r}][{key!r}].get({field!r}), {want!r})",
                             f"{ctx.name}: {field} of {key} must change by {delta}"))  # fmt: skip
    yield _Case("moves_money", args, checks)


def _payment_errors(ctx: _Ctx) -> Iterator[tuple[str, dict[str, Any]]]:
    cases = list(_payment_cases(ctx))
    if not cases:
        return
    args, opts = cases[0].args, ctx.plan.options
    schema = ctx.props[opts["amount"]]
    text = schema.get("type") == "string"
    if _valid("-5" if text else -5, schema):
        yield "negative amount", {**args, opts["amount"]: "-5" if text else -5}
    if text:
        yield "not a number", {**args, opts["amount"]: "ten"}
    if opts["mode"] == "between" or opts.get("direction", 1) < 0:
        huge = str(10**9) if text else 10**9
        if _valid(huge, schema):
            yield "insufficient funds", {**args, opts["amount"]: huge}


def _schedule_cases(ctx: _Ctx) -> Iterator[_Case]:
    for case in _create_cases(ctx):
        case.checks.append(f"again = env.call_tool({ctx.name!r}, {_without_id(ctx, case.args)!r})")
        case.checks.append(_check("again.get('status') == 'error'", f"{ctx.name}: double booking must conflict"))
        yield case


def _without_id(ctx: _Ctx, args: dict[str, Any]) -> dict[str, Any]:
    if ctx.plan.id_param and ctx.plan.id_param not in ctx.required:
        return {k: v for k, v in args.items() if k != ctx.plan.id_param}
    return args


def _log_only_cases(ctx: _Ctx) -> Iterator[_Case]:
    args = ctx.required_args()
    for param in ctx.plan.ref_params:
        if param in ctx.props:
            args[param] = ctx.value(param)
    log = repr(ACTION_LOG)
    yield _Case("logs", args, [
        _check(f"len(after.get({log}, {{}})) == len(before.get({log}, {{}})) + 1",
               f"{ctx.name}: the call was not logged"),
        _check(f"_without(after, {log}) == _without(before, {log})", f"{ctx.name}: changed other collections"),
    ])  # fmt: skip


_FAMILY_CASES = {
    "arithmetic": _math_cases, "convert": _conversion_cases, "text": _text_cases, "read_many": _search_cases,
    "read_one": _get_cases, "create": _create_cases, "message": _create_cases, "update": _update_cases,
    "delete": _delete_cases, "transition": _transition_cases, "transfer": _transfer_cases,
    "payment": _payment_cases, "schedule": _schedule_cases, "action": _log_only_cases,
}  # fmt: skip
_FAMILY_ERRORS = {
    "arithmetic": _math_errors, "convert": _conversion_errors, "text": _text_errors, "create": _create_errors,
    "message": _create_errors, "schedule": _create_errors, "transfer": _transfer_errors, "payment": _payment_errors,
}  # fmt: skip


# --------------------------------------------------------------------------------------------- rejected calls


def _generic_errors(ctx: _Ctx, args: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Calls every correct tool rejects: missing required, wrong type, out of range, bad enum, unknown ids."""
    props = ctx.props
    required = [p for p in ctx.required if p in args]
    if required:
        yield f"missing {required[0]}", {k: v for k, v in args.items() if k != required[0]}
    wrong = (required or list(args) or list(props) or [None])[0]
    if wrong is not None:
        yield f"wrong type of {wrong}", {**args, wrong: _WRONG.get(props[wrong].get("type", "string"), 12345)}
    for param, schema in props.items():
        if schema.get("type") in ("integer", "number") and "minimum" in schema:
            yield f"{param} below its minimum", {**args, param: schema["minimum"] - 1}
            break
    for param, schema in props.items():
        if schema.get("enum") and schema.get("type") == "string":
            yield f"{param} outside its enum", {**args, param: "zz-not-allowed"}
            break
    unknown = ctx.plan.id_param if ctx.plan.template in ("read_one", "update", "delete", "transition", "transfer",
                                                         "payment") else None  # fmt: skip
    unknowns = [unknown] if unknown else []
    unknowns += [p for p in ctx.plan.ref_params if p in props]
    for param in dict.fromkeys(unknowns):
        if param not in props:
            continue
        schema = props[param]
        if schema.get("type") == "array":
            yield f"unknown {param}", {**args, param: [_UNKNOWN_STR]}
        else:
            numeric = schema.get("type") in ("integer", "number")
            yield f"unknown {param}", {**args, param: _UNKNOWN_INT if numeric else _UNKNOWN_STR}


# --------------------------------------------------------------------------------------------- assembly


def _test(name: str, body: list[str]) -> str:
    return f"\n\ndef {name}(env):\n" + "\n".join(f"    {line}" for line in body) + "\n"


def _positive_test(ctx: _Ctx, case: _Case) -> str:
    body = ["before = env.db()", f"out = env.call_tool({ctx.name!r}, {case.args!r})", "after = env.db()",
            f"if _ok(env, {ctx.name!r}, out):"]  # fmt: skip
    body += [f"    {line}" for line in case.checks]
    if case.reads:
        body.append(_check("after == before", f"{ctx.name}: a read changed the DB"))
    return _test(f"test_{ctx.name}_{case.label}", body)


def _tests_for(ctx: _Ctx) -> tuple[list[str], dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    cases = list(_FAMILY_CASES.get(ctx.plan.template, _log_only_cases)(ctx))
    parts = [_positive_test(ctx, case) for case in cases]
    args = dict(cases[0].args) if cases else ctx.required_args()
    calls = _rejected_calls(ctx, args)
    if calls:
        body = ["before = env.db()"]
        body += [f"_rejected(env, {ctx.name!r}, env.call_tool({ctx.name!r}, {bad!r}), before, {why!r})"
                 for why, bad in calls]  # fmt: skip
        parts.append(_test(f"test_{ctx.name}_rejects_bad_input", body))
    return parts, args, calls


def _rejected_calls(ctx: _Ctx, args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    calls, seen = [], set()
    for why, bad in [*_generic_errors(ctx, args), *_FAMILY_ERRORS.get(ctx.plan.template, lambda c: iter(()))(ctx)]:
        if repr(bad) not in seen:
            seen.add(repr(bad))
            calls.append((why, bad))
    return calls


def rejected_call_counts(refactored: RefactoredToolset, db: dict[str, Any], *, seed: int = 0) -> dict[str, int]:
    """How the suite's rejected calls split: `schema_invalid` ones the harness in front of a tool would also
    reject, and `tool_only` ones only the tool's own logic can (unknown ids, domain errors, state rules)."""
    return generate_suite(refactored, db, seed=seed)[1]


def _count_rejected(counts: dict[str, int], tool: ToolSchema, calls: list[tuple[str, dict[str, Any]]]) -> None:
    for _, bad in calls:
        counts["tool_only" if _valid(bad, tool.parameters) else "schema_invalid"] += 1


def _chain_tests(refactored: RefactoredToolset, plan: EnvPlan, args_of: dict[str, dict[str, Any]]) -> Iterator[str]:
    """A list tool's output feeds each update/delete tool of the same collection (ToolVerse: query -> update)."""
    tools = {t.name: t for t in refactored.tools}
    lists = {
        p.entity: p for p in plan.tools if p.template == "read_many" and not tools[p.name].parameters.get("required")
    }
    for write in plan.tools:
        source = lists.get(write.entity)
        entity = plan.entity(write.entity)
        if write.template not in ("update", "delete") or source is None or entity is None or not write.id_param:
            continue
        id_schema = tools[write.name].parameters["properties"][write.id_param]
        cast = "int" if id_schema.get("type") in ("integer", "number") else "str"
        args = {k: v for k, v in args_of[write.name].items() if k != write.id_param}
        yield _test(f"test_{write.name}_chain_from_{source.name}", [
            f"listed = env.call({source.name!r}, {{}})",
            f"ids = [r.get({entity.id_field!r}) for r in listed.get({source.response_key!r}) or []]",
            f"env.check(bool(ids), {source.name + ' returned no ids to chain'!r})",
            "if ids:",
            f"    out = env.call({write.name!r}, {{**{args!r}, {write.id_param!r}: {cast}(ids[0])}})",
            f"    _ok(env, {write.name!r}, out)",
        ])  # fmt: skip


def generate_suite(refactored: RefactoredToolset, db: dict[str, Any], *, seed: int = 0) -> tuple[str, dict[str, int]]:
    """`generate_tests_source` and `rejected_call_counts` of the same suite, generated once."""
    counts = {"schema_invalid": 0, "tool_only": 0}
    return _generate(refactored, db, seed=seed, only=None, counts=counts), counts


def generate_tests_source(
    refactored: RefactoredToolset, db: dict[str, Any], *, seed: int = 0, only: str | None = None
) -> str:
    """Generate the tests module of an environment.

    Args:
        refactored: the refactored toolset.
        db: its initial DB (arguments and expected results are computed from it; each test runs on a fresh copy).
        seed: seed for synthesized argument values.
        only: generate only the tests of this tool (mutation runs).

    Returns:
        Python source defining `test_<tool>_<case>(env)` functions (the sandbox maps tests to tools by prefix).
    """
    return _generate(refactored, db, seed=seed, only=only, counts=None)


def _generate(
    refactored: RefactoredToolset, db: dict[str, Any], *, seed: int, only: str | None, counts: dict[str, int] | None
) -> str:
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    parts = [
        f'"""Unit tests of {refactored.name!r} (toolset {refactored.toolset_id}); generated by envgen.testgen."""\n',
        _HELPERS,
    ]
    args_of: dict[str, dict[str, Any]] = {}
    for index, (tool, tool_plan) in enumerate(zip(refactored.tools, plan.tools, strict=True)):
        ctx = _Ctx(tool, tool_plan, plan.entity(tool_plan.entity), db, seed * 1000 + index)
        tests, args_of[tool.name], calls = _tests_for(ctx)
        if counts is not None:
            _count_rejected(counts, tool, calls)
        if only is None or only == tool.name:
            parts.extend(tests)
    parts.extend(t for t in _chain_tests(refactored, plan, args_of) if only is None or f"def test_{only}_" in t)
    return "".join(parts)
