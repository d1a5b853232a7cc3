"""Tool code generation: the untrusted `tools.py` of an environment (ToolVerse §3.1, App. B.1).

`generate_tools_source` emits a module following the tools-module contract: one public function per tool,
`def <tool>(db, **kwargs) -> dict`, that validates its arguments and queries or updates the dict DB. Backends
(registry `CODEGENS`, keyed by `EnvGenConfig.backend`):
    offline   a library of behaviour-family implementations (envgen.behaviours) plus one readable function per tool
              naming its behaviour; `_TOOLS` holds each tool's resolved plan;
    openai    an `LLMRole` prompted with the schemas, a DB excerpt and the last test failures; its code is returned
              in a JSON field. Both outputs pass `check_source` (the sandbox allow-list) before they are returned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from data.models import RefactoredToolset, ToolSchema
from envgen import prompts
from envgen.behaviours import UNIT_FACTORS
from envgen.entities import ACTION_LOG, EXCHANGE_RATES, OUTBOX, EnvPlan, ToolPlan, plan_environment
from gustforge.errors import CodegenError, LLMError, SandboxViolation
from gustforge.llm import LLMClient, LLMRole, run_role
from gustforge.registry import Registry
from gustforge.sandbox import check_source

__all__ = ["CODEGENS", "CODEGEN_ROLE", "Codegen", "behaviour_line", "generate_tools_source", "tool_specs"]

Codegen = Callable[[RefactoredToolset, dict[str, Any], LLMClient | None, Sequence[str]], str]
CODEGENS: Registry[Codegen] = Registry("codegen backend")

_DB_EXCERPT_RECORDS = 2

# The template library every offline tools module starts with. Policy-safe: f-strings (no str.format), no
# dunders, no getattr/type; deterministic: ids derive from collection sizes.
_RUNTIME = """
import copy
import json
import math
import re

ACTION_LOG = %(action_log)r
OUTBOX = %(outbox)r
EXCHANGE_RATES = %(rates)r
_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict}
_EMAIL = re.compile(r"^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$")
_DATE = re.compile(r"^\\d{4}-\\d{2}-\\d{2}")


def _error(message):
    return {"status": "error", "message": message}


def _type_ok(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _value_problem(name, value, prop):
    if not _type_ok(value, prop["type"]):
        return f"argument '{name}' must be of type {prop['type']}"
    if "enum" in prop and value not in prop["enum"]:
        return f"argument '{name}' must be one of {prop['enum']}"
    if "minimum" in prop and value < prop["minimum"]:
        return f"argument '{name}' must be >= {prop['minimum']}"
    if "maximum" in prop and value > prop["maximum"]:
        return f"argument '{name}' must be <= {prop['maximum']}"
    if prop.get("format") == "email" and not _EMAIL.match(value):
        return f"argument '{name}' must be an e-mail address"
    if prop.get("format") in ("date", "date-time") and not _DATE.match(value):
        return f"argument '{name}' must be a date (YYYY-MM-DD)"
    if prop["type"] == "array" and "items" in prop:
        if not all(_type_ok(item, prop["items"]) for item in value):
            return f"items of argument '{name}' must be of type {prop['items']}"
    return None


def _check_args(spec, kwargs):
    for name in spec["required"]:
        if kwargs.get(name) is None:
            return f"missing required argument '{name}'"
    for name, value in kwargs.items():
        prop = spec["params"].get(name)
        if prop is None:
            return f"unknown argument '{name}'"
        if value is not None:
            problem = _value_problem(name, value, prop)
            if problem is not None:
                return problem
    return None


def _key(value):
    return str(value)


def _find(collection, value, by_name=False):
    record = collection.get(_key(value))
    if record is None and isinstance(value, str):
        wanted = value.strip().lower()
        record = next((r for k, r in collection.items() if k.lower() == wanted), None)
        if record is None and by_name:
            record = next((r for r in collection.values() if isinstance(r, dict) and any(
                isinstance(r.get(f), str) and r[f].strip().lower() == wanted for f in ("name", "title"))), None)
    return record


def _not_found(spec, value):
    return {"status": "error", "message": f"{spec['singular']} '{value}' not found",
            "error": {"code": "not_found", "collection": spec["collection"], "key": value}}


def _check_refs(db, spec, kwargs):
    for param, collection in spec["refs"].items():
        value = kwargs.get(param)
        if value is not None and _find(db.get(collection, {}), value) is None:
            return _error(f"no record '{value}' in {collection} (argument '{param}')")
    return None


def _target(db, spec, kwargs):
    value = kwargs.get(spec["id_param"])
    if value is None:
        return None, _error(f"missing required argument '{spec['id_param']}'")
    record = _find(db.get(spec["collection"], {}), value, spec.get("by_name"))
    if record is None:
        return None, _not_found(spec, value)
    return record, None


def _success(message, **fields):
    return {"status": "success", "message": message, **fields}


def _matches(stored, wanted):
    if isinstance(stored, str) and isinstance(wanted, str):
        return wanted.lower() in stored.lower()
    if isinstance(stored, list) and not isinstance(wanted, list):
        return wanted in stored
    return stored == wanted


def _text_match(record, text):
    needle = str(text).lower()
    return any(needle in str(value).lower() for value in record.values() if isinstance(value, (str, int, float)))


def _sort_key(field):
    def key(record):
        value = record.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (0, value, "")
        return (1 if value is not None else 2, 0, str(value))
    return key


def _descending(value):
    if isinstance(value, bool):
        return value
    return str(value).lower().startswith("desc")


# ------------------------------------------------------------------ get_by_id / lookup


def _read_one(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    value = kwargs.get(spec["id_param"])
    if spec["options"].get("batch"):
        found = []
        for item in value or []:
            record = _find(db.get(spec["collection"], {}), item, spec.get("by_name"))
            if record is None:
                return _not_found(spec, item)
            found.append(copy.deepcopy(record))
        if not found:
            return _error(f"argument '{spec['id_param']}' names no {spec['singular']}")
        rows = {spec["response_key"]: found, "count": len(found)}
        return _success(f"{len(found)} {spec['collection']} found", **rows)
    record, error = _target(db, spec, kwargs)
    if error is not None:
        return error
    return _success(f"{spec['singular']} '{value}' found", **{spec["response_key"]: copy.deepcopy(record)})


# ------------------------------------------------------------------ search / filter / sort / paginate


def _read_many(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    found = []
    for record in db.get(spec["collection"], {}).values():
        if not all(kwargs.get(p) is None or _matches(record.get(f), kwargs[p]) for p, f in spec["filters"].items()):
            continue
        if not all(kwargs.get(q) is None or _text_match(record, kwargs[q]) for q in spec["queries"]):
            continue
        found.append(copy.deepcopy(record))
    options = spec["options"]
    sort = kwargs.get(options.get("sort", ""))
    if sort is not None:
        if found and not any(sort in record for record in found):
            return _error(f"cannot sort by '{sort}': {spec['collection']} have no such field")
        found.sort(key=_sort_key(sort))
    order = kwargs.get(options.get("order", ""))
    if order is not None and _descending(order):
        found.reverse()
    total = len(found)
    limit = kwargs.get(spec["limit"]) if spec["limit"] else None
    offset = kwargs.get(options.get("offset", ""))
    page = kwargs.get(options.get("page", ""))
    if page is not None:
        first = int(page) - options.get("page_base", 1)
        if first < 0:
            return _error(f"argument '{options['page']}' must be >= {options.get('page_base', 1)}")
        size = int(limit) if limit else 10
        found = found[first * size : (first + 1) * size]
    elif offset is not None:
        if offset < 0:
            return _error(f"argument '{options['offset']}' must be >= 0")
        found = found[int(offset):]
    if limit is not None:
        if limit < 0:
            return _error(f"argument '{spec['limit']}' must be >= 0")
        found = found[: int(limit)]
    return _success(f"{len(found)} {spec['collection']} found",
                    **{spec["response_key"]: found, "count": len(found), "total": total})


# ------------------------------------------------------------------ create / update / delete


def _format_id(spec, number):
    if spec["id_type"] == "integer":
        return number
    return spec["prefix"] + "-" + str(number).zfill(3)


def _new_id(collection, spec):
    number = len(collection) + 1
    while _key(_format_id(spec, number)) in collection:
        number += 1
    return _format_id(spec, number)


def _insert(db, spec, kwargs, extra):
    collection = db.setdefault(spec["collection"], {})
    new_id = kwargs.get(spec["id_param"]) if spec["id_param"] else None
    if new_id is None:
        new_id = _new_id(collection, spec)
    elif _key(new_id) in collection:
        return None, _error(f"{spec['singular']} '{new_id}' already exists")
    record = {spec["id_field"]: new_id}
    for name in spec["fields"]:
        if kwargs.get(name) is not None:
            record[name] = copy.deepcopy(kwargs[name])
    if spec.get("initial_status"):
        record["status"] = spec["initial_status"]
    for name in spec.get("generated", []):
        if name not in record:
            value = _assigned(collection, name, new_id)
            if value is not None:
                record[name] = value
    record.update(extra)
    collection[_key(new_id)] = record
    return record, None


def _assigned(collection, field, seed):
    # A value the server assigns to a new record (a pid, a ref, a hash): shaped like the stored ones (digits stay
    # digits, hex stays hex), derived from the new id; an integer is one more than the largest stored one.
    samples = [r.get(field) for r in collection.values() if isinstance(r, dict) and r.get(field) is not None]
    numbers = [v for v in samples if isinstance(v, int) and not isinstance(v, bool)]
    if numbers:
        return max(numbers) + 1
    texts = [v for v in samples if isinstance(v, str) and any(ch.isdigit() for ch in v)]
    if not texts:
        return None
    sample = texts[-1]
    code = 7
    for ch in f"{seed}:{field}":
        code = (code * 131 + ord(ch)) % 2147483647
    head = "0x" if sample.startswith("0x") else ""
    hexish = re.fullmatch(r"[0-9a-f]+", sample[len(head):]) is not None
    out = [head]
    for ch in sample[len(head):]:
        code = (code * 1103515245 + 12345) % 2147483648
        pick = code >> 8
        if hexish:
            out.append("0123456789abcdef"[pick % 16])
        elif ch.isdigit():
            out.append(str(pick % 10))
        elif "a" <= ch <= "z":
            out.append(chr(97 + pick % 26))
        elif "A" <= ch <= "Z":
            out.append(chr(65 + pick % 26))
        else:
            out.append(ch)
    value = "".join(out)
    return None if value in samples else value


def _create(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    record, error = _insert(db, spec, kwargs, {})
    if error is not None:
        return error
    new_id = record[spec["id_field"]]
    return _success(f"{spec['singular']} '{new_id}' created",
                    **{spec["response_key"]: copy.deepcopy(record), spec["id_field"]: new_id})


def _update(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is None:
        error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    changes = {name: copy.deepcopy(kwargs[name]) for name in spec["fields"] if kwargs.get(name) is not None}
    if spec["status_value"]:
        changes["status"] = spec["status_value"]
    if not changes:
        return _error("no fields to update were given")
    record.update(changes)
    return _success(f"{spec['singular']} '{kwargs[spec['id_param']]}' updated",
                    **{spec["response_key"]: copy.deepcopy(record)})


def _delete(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is not None:
        return error
    db[spec["collection"]].pop(_key(record[spec["id_field"]]))
    return _success(f"{spec['singular']} '{kwargs[spec['id_param']]}' deleted",
                    **{spec["id_field"]: record[spec["id_field"]]})


# ------------------------------------------------------------------ status transitions, transfers, payments


def _transition(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is not None:
        return error
    target, allowed = spec["options"]["to"], spec["options"]["from"]
    current = record.get("status")
    if current == target:
        return _error(f"{spec['singular']} '{kwargs[spec['id_param']]}' is already {target}")
    if current not in allowed:
        return _error(f"cannot make a {current} {spec['singular']} {target} (allowed from: {', '.join(allowed)})")
    record["status"] = target
    for name in spec["fields"]:
        if kwargs.get(name) is not None:
            record[name] = copy.deepcopy(kwargs[name])
    return _success(f"{spec['singular']} '{kwargs[spec['id_param']]}' is now {target}",
                    **{spec["response_key"]: copy.deepcopy(record), "previous_status": current})


def _transfer(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is None:
        error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    options = spec["options"]
    destination, field = kwargs[options["to"]], options["field"]
    source = kwargs.get(options["from"]) if options["from"] else None
    if source is not None and _key(record.get(field)) != _key(source):
        return _error(f"{spec['singular']} '{kwargs[spec['id_param']]}' is not at '{source}'")
    if _key(record.get(field)) == _key(destination):
        return _error(f"{spec['singular']} '{kwargs[spec['id_param']]}' is already at '{destination}'")
    previous = record.get(field)
    record[field] = copy.deepcopy(destination)
    return _success(f"{spec['singular']} '{kwargs[spec['id_param']]}' moved to '{destination}'",
                    **{spec["response_key"]: copy.deepcopy(record), "previous": previous})


def _amount(value):
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return value


def _payment(db, spec, kwargs):
    if spec["id_param"]:
        record, error = _target(db, spec, kwargs)
        if error is not None:
            return error
    else:  # no payer argument: the env's own account (the collection's first record) pays
        record = next(iter(db.get(spec["collection"], {}).values()), None)
        if record is None:
            return _error(f"no {spec['singular']} to pay from")
    options = spec["options"]
    amount, field = _amount(kwargs[options["amount"]]), options["balance"]
    if amount is None or math.isnan(amount) or math.isinf(amount):
        return _error(f"argument '{options['amount']}' must be a number")
    if amount <= 0:
        return _error(f"argument '{options['amount']}' must be positive")
    balance = record.get(field, 0)
    if options["mode"] == "between":
        other = _find(db[spec["collection"]], kwargs[options["to"]])
        if other is None:
            return _error(f"{spec['singular']} '{kwargs[options['to']]}' not found")
        if other is record:
            return _error("source and destination are the same")
        if balance < amount:
            return _error(f"insufficient funds: balance {balance} < {amount}")
        record[field] = round(balance - amount, 2)
        other[field] = round(other.get(field, 0) + amount, 2)
        return _success(f"moved {amount}", source=copy.deepcopy(record), destination=copy.deepcopy(other))
    if options["direction"] < 0 and balance < amount:
        return _error(f"insufficient funds: balance {balance} < {amount}")
    record[field] = round(balance + options["direction"] * amount, 2)
    fields = {spec["singular"]: copy.deepcopy(record), field: record[field]}
    return _success(f"{field} is now {record[field]}", **fields)


# ------------------------------------------------------------------ messaging, scheduling


def _message(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    recipient = spec["options"]["recipient"]
    value = kwargs.get(recipient) if recipient else None
    if value is not None and "email" in recipient and isinstance(value, str) and not _EMAIL.match(value):
        return _error(f"argument '{recipient}' is not a valid e-mail address")
    body = spec["options"]["body"]
    if body is not None and not str(kwargs.get(body) or "").strip():
        return _error(f"argument '{body}' must not be empty")
    extra = {"status": "sent", "subject": spec["options"]["subject"]}
    about = spec["options"]["about"]
    if about is not None and kwargs.get(about) is not None:
        extra["subject"] = f"{spec['options']['subject']} for {kwargs[about]}"
    record, error = _insert(db, spec, kwargs, extra)
    if error is not None:
        return error
    return _success(f"message '{record['message_id']}' sent", message_id=record["message_id"],
                    message_record=copy.deepcopy(record))


def _schedule(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    slot = [p for p in spec["options"]["slot"] if kwargs.get(p) is not None]
    resources = [p for p in spec["refs"] if kwargs.get(p) is not None]
    for record in db.get(spec["collection"], {}).values():
        if slot and all(_key(record.get(p)) == _key(kwargs[p]) for p in slot + resources):
            if record.get("status") != "cancelled":
                return _error(f"conflict: {spec['singular']} '{record[spec['id_field']]}' already holds this slot")
    return _create(db, spec, kwargs)


# ------------------------------------------------------------------ math, conversions, text


def _gcd_lcm(op, a, b):
    if not (isinstance(a, int) and isinstance(b, int)) and not (float(a).is_integer() and float(b).is_integer()):
        return None, f"{op} needs integers"
    a, b = int(a), int(b)
    if op == "gcd":
        return math.gcd(a, b), None
    return (abs(a * b) // math.gcd(a, b) if a and b else 0), None


def _binary(op, a, b):
    if op == "add":
        return a + b, None
    if op == "subtract":
        return a - b, None
    if op == "multiply":
        return a * b, None
    if op in ("divide", "modulo", "percentage") and b == 0:
        return None, "division by zero"
    if op == "divide":
        return a / b, None
    if op == "modulo":
        return a % b, None
    if op == "percentage":
        return a / b * 100, None
    if op == "power":
        if abs(b) > 1000 or (a == 0 and b < 0):
            return None, "power out of range"
        return a ** b, None
    if op in ("gcd", "lcm"):
        return _gcd_lcm(op, a, b)
    if op == "hypot":
        return math.hypot(a, b), None
    if op == "log":
        if a <= 0 or b <= 0 or b == 1:
            return None, "logarithm needs a positive number and a positive base other than 1"
        return math.log(a, b), None
    return None, f"unsupported operation {op}"


def _unary(op, x):
    if op in ("sqrt",) and x < 0:
        return None, "square root of a negative number"
    if op in ("ln", "log10", "log2") and x <= 0:
        return None, "logarithm of a non-positive number"
    if op in ("asin", "acos") and not -1 <= x <= 1:
        return None, f"{op} needs a value between -1 and 1"
    if op == "reciprocal" and x == 0:
        return None, "division by zero"
    if op in ("factorial", "fibonacci", "is_prime"):
        if not float(x).is_integer() or x < 0 or x > 1000:
            return None, f"{op} needs a whole number between 0 and 1000"
        x = int(x)
    table = {
        "sqrt": math.sqrt, "cbrt": lambda v: math.copysign(abs(v) ** (1 / 3), v), "abs": abs, "sin": math.sin,
        "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan, "ln": math.log,
        "log10": math.log10, "log2": math.log2, "exp": lambda v: math.exp(min(v, 700)), "floor": math.floor,
        "ceil": math.ceil, "round": round, "square": lambda v: v * v, "cube": lambda v: v * v * v,
        "negate": lambda v: -v, "reciprocal": lambda v: 1 / v, "radians": math.radians, "degrees": math.degrees,
        "factorial": math.factorial, "is_prime": _is_prime, "fibonacci": _fibonacci,
    }
    return table[op](x), None


def _is_prime(n):
    return n >= 2 and all(n % k for k in range(2, int(math.isqrt(n)) + 1))


def _fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def _listed(op, values):
    if not values:
        return None, "the list of numbers is empty"
    if op in ("stdev", "variance") and len(values) < 2:
        return None, f"{op} needs at least two numbers"
    mean = sum(values) / len(values)
    ordered = sorted(values)
    middle = len(ordered) // 2
    if op == "sum":
        return sum(values), None
    if op == "mean":
        return mean, None
    if op == "median":
        return (ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2), None
    if op == "mode":
        return max(values, key=lambda v: (values.count(v), -values.index(v))), None
    if op == "min":
        return min(values), None
    if op == "max":
        return max(values), None
    if op == "range":
        return max(values) - min(values), None
    if op == "count":
        return len(values), None
    if op == "product":
        return math.prod(values), None
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return (variance if op == "variance" else math.sqrt(variance)), None


def _quadratic(a, b, c):
    if a == 0:
        return None, "not a quadratic equation: a must not be 0"
    disc = b * b - 4 * a * c
    if disc < 0:
        real, imag = -b / (2 * a), math.sqrt(-disc) / (2 * a)
        return [f"{real:.6g}+{abs(imag):.6g}i", f"{real:.6g}-{abs(imag):.6g}i"], None
    root = math.sqrt(disc)
    return sorted({(-b - root) / (2 * a), (-b + root) / (2 * a)}), None


def _clean(value):
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return None
        value = round(value, 10)
        return int(value) if value.is_integer() and abs(value) < 1e15 else value
    return value


def _arithmetic(db, spec, kwargs):
    options = spec["options"]
    values = [kwargs[p] for p in options["args"]]
    if options["arity"] == "list":
        result, problem = _listed(options["op"], values[0])
    elif options["arity"] == "binary":
        result, problem = _binary(options["op"], values[0], values[1])
    elif options["arity"] == "ternary":
        result, problem = _quadratic(*values)
    else:
        result, problem = _unary(options["op"], values[0])
    if problem is not None:
        return _error(problem)
    result = [_clean(v) for v in result] if isinstance(result, list) else _clean(result)
    if result is None:
        return _error("result out of range")
    return _success(f"{options['op']} = {result}", result=result)


_UNITS = json.loads(%(units)r)
_TEMPERATURE = {"c": "celsius", "f": "fahrenheit", "k": "kelvin", "celsius": "celsius", "fahrenheit": "fahrenheit",
                "kelvin": "kelvin"}


def _to_celsius(value, unit):
    return {"celsius": value, "fahrenheit": (value - 32) * 5 / 9, "kelvin": value - 273.15}[unit]


def _from_celsius(value, unit):
    return {"celsius": value, "fahrenheit": value * 9 / 5 + 32, "kelvin": value + 273.15}[unit]


def _convert(db, spec, kwargs):
    options = spec["options"]
    value, source, target = kwargs[options["value"]], str(kwargs[options["from"]]), str(kwargs[options["to"]])
    if options["kind"] == "currency":
        if value < 0:
            return _error("amount must not be negative")
        rates = db.get(EXCHANGE_RATES, {})
        low, high = rates.get(source.upper()), rates.get(target.upper())
        if low is None or high is None:
            return _error(f"unknown currency '{source if low is None else target}'")
        result = round(value * low["rate_to_usd"] / high["rate_to_usd"], 4)
        return _success(f"{value} {source.upper()} = {result} {target.upper()}", result=result,
                        rate=round(low["rate_to_usd"] / high["rate_to_usd"], 6))
    if options["kind"] == "temperature" or source.lower() in _TEMPERATURE:
        low, high = _TEMPERATURE.get(source.lower()), _TEMPERATURE.get(target.lower())
        if low is None or high is None:
            return _error(f"unknown temperature unit '{source if low is None else target}'")
        return _success(f"{value} {low} in {high}", result=_clean(_from_celsius(_to_celsius(value, low), high)))
    low, high = _UNITS.get(source.lower()), _UNITS.get(target.lower())
    if low is None or high is None:
        return _error(f"unknown unit '{source if low is None else target}'")
    if low[0] != high[0]:
        return _error(f"cannot convert {low[0]} to {high[0]}")
    return _success(f"{value} {source} in {target}", result=_clean(value * low[1] / high[1]))


def _text(db, spec, kwargs):
    op, text = spec["options"]["op"], kwargs[spec["options"]["text"]]
    if op != "echo" and not text.strip():
        return _error(f"argument '{spec['options']['text']}' must not be empty")
    words = text.split()
    table = {
        "upper": lambda: text.upper(), "lower": lambda: text.lower(), "reverse": lambda: text[::-1],
        "word_count": lambda: len(words), "char_count": lambda: len(text), "title": lambda: text.title(),
        "slug": lambda: re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-"), "strip": lambda: text.strip(),
        "palindrome": lambda: re.sub(r"[^a-z0-9]", "", text.lower()) == re.sub(r"[^a-z0-9]", "", text.lower())[::-1],
        "vowels": lambda: sum(ch in "aeiouAEIOU" for ch in text), "echo": lambda: text,
    }
    return _success(f"{op} done", result=table[op]())


# ------------------------------------------------------------------ log-only fallback


def _action(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    log = db.setdefault(ACTION_LOG, {})
    number = len(log) + 1
    while "EVT-" + str(number).zfill(3) in log:
        number += 1
    event_id = "EVT-" + str(number).zfill(3)
    log[event_id] = {"event_id": event_id, "tool": spec["name"], "arguments": copy.deepcopy(kwargs)}
    result = {"tool": spec["name"], "arguments": copy.deepcopy(kwargs)}
    for param, collection in spec["refs"].items():
        if kwargs.get(param) is not None:
            result[param[:-3] if param.endswith("_id") else param] = copy.deepcopy(_find(db[collection], kwargs[param]))
    return _success(f"{spec['name']} completed", event_id=event_id, result=result)


_TEMPLATES = {"read_one": _read_one, "read_many": _read_many, "create": _create, "update": _update,
              "delete": _delete, "action": _action, "arithmetic": _arithmetic, "convert": _convert, "text": _text,
              "transition": _transition, "transfer": _transfer, "payment": _payment, "message": _message,
              "schedule": _schedule}


def _run(db, name, kwargs):
    spec = _TOOLS[name]
    problem = _check_args(spec, kwargs)
    if problem is not None:
        return _error(problem)
    return _TEMPLATES[spec["template"]](db, spec, kwargs)
"""


def _param_spec(schema: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": schema.get("type", "string")}
    if schema.get("enum"):
        spec["enum"] = schema["enum"]
    for key in ("minimum", "maximum", "format"):
        if key in schema:
            spec[key] = schema[key]
    items = schema.get("items")
    if (
        spec["type"] == "array"
        and isinstance(items, dict)
        and items.get("type") in ("string", "integer", "number", "boolean", "object")
    ):
        spec["items"] = items["type"]
    return spec


def tool_specs(refactored: RefactoredToolset, plan: EnvPlan) -> dict[str, dict[str, Any]]:
    """The data each generated tool runs on: argument specs plus its `ToolPlan` resolved against the entities."""
    specs = {}
    for tool, tool_plan in zip(refactored.tools, plan.tools, strict=True):
        entity = plan.entity(tool_plan.entity)
        filters = {p: p for p in tool_plan.field_params}
        if tool_plan.id_param and entity is not None and tool_plan.template == "read_many":
            filters[tool_plan.id_param] = entity.id_field
        specs[tool.name] = {
            "name": tool.name,
            "template": tool_plan.template,
            "required": list(tool.parameters.get("required", [])),
            "params": {k: _param_spec(v) for k, v in tool.parameters.get("properties", {}).items()},
            "collection": tool_plan.entity,
            "singular": entity.singular if entity else None,
            "id_param": tool_plan.id_param,
            "id_field": entity.id_field if entity else None,
            "id_type": entity.id_type if entity else None,
            "prefix": entity.id_prefix if entity else None,
            "fields": list(tool_plan.field_params),
            "filters": filters,
            "queries": list(tool_plan.query_params),
            "limit": tool_plan.limit_param,
            "refs": dict(tool_plan.ref_params),
            "response_key": tool_plan.response_key,
            "status_value": tool_plan.status_value,
            "options": dict(tool_plan.options),
            "family": tool_plan.family,
            "initial_status": _initial_status(entity, tool_plan),
            "generated": _server_assigned(entity, tool_plan),
            "by_name": _by_name(tool, tool_plan),
        }
    return specs


_ASSIGNED_TOKENS = frozenset(
    "id pid ref token key hash code number uuid sid handle address serial txid tx no num".split()
)


def _server_assigned(entity: Any, plan: ToolPlan) -> list[str]:
    """Fields of a new record that the server assigns rather than the caller (a process id, a ref, a hash): the
    key-like fields of the collection that no parameter of the create sets (the id, references and status have
    their own rules). A later call needs them, and nobody could have stated them."""
    if entity is None or plan.template not in ("create", "schedule"):
        return []
    taken = {*plan.field_params, *plan.ref_params, entity.id_field, "status", *entity.refs}
    return [
        name for name, schema in entity.fields.items()
        if name not in taken and schema.get("type") in ("string", "integer")
        and re.split(r"[^a-z0-9]+|(?<=[a-z])(?=[A-Z])", name)[-1].lower() in _ASSIGNED_TOKENS
    ]  # fmt: skip


def _by_name(tool: ToolSchema, plan: ToolPlan) -> bool:
    """Does the id parameter's description say a name is accepted in place of the id ("project ID or name")?"""
    if not plan.id_param or plan.template == "read_many":
        return False
    schema = tool.parameters.get("properties", {}).get(plan.id_param, {})
    text = f"{schema.get('description', '')} {tool.description}".lower()
    return bool(_BY_NAME.search(text))


_BY_NAME = re.compile(
    r"\b(id|identifier) or (its |the )?(name|title)\b|\b(name|title) or (its |the )?(id|identifier)\b"
    r"|\bby (its |their )?(name|title)\b"
)


def behaviour_line(plan: ToolPlan) -> str:
    """One readable line saying what a generated tool does (a comment in tools.py)."""
    opts, where = plan.options, plan.entity or "-"
    lines = {
        "math": f"math: {opts.get('op')}({', '.join(opts.get('args', []))})",
        "conversion": f"conversion ({opts.get('kind')}): {opts.get('value')} "
        f"from {opts.get('from')} to {opts.get('to')}",
        "text": f"text: {opts.get('op')} of {opts.get('text')}",
        "search": f"search {where}: filters {list(plan.field_params)}, query {list(plan.query_params)}, "
        f"limit {plan.limit_param}, {opts or 'no sort/paging'}",
        "get_by_id": f"get one of {where} by {plan.id_param}",
        "lookup": f"look up {where} by {plan.id_param}",
        "crud": f"{plan.template} a record of {where}",
        "status_transition": f"status of {where}: {opts.get('from')} -> {opts.get('to')}",
        "transfer": f"move a record of {where}: {opts.get('field')} <- {opts.get('to')}",
        "payment": f"payment on {where}.{opts.get('balance')} ({opts.get('mode')})",
        "messaging": f"append to {where} (recipient {opts.get('recipient')})",
        "scheduling": f"book {where}; conflict on {opts.get('slot')}",
        "log_only": "log-only: validate, log the call and echo it (no behaviour family fits)",
    }
    return lines.get(plan.family, plan.family)


def _initial_status(entity: Any, plan: ToolPlan) -> str | None:
    """A created record starts in the first state of its collection's status enum (transitions need one)."""
    if entity is None or plan.template not in ("create", "schedule") or "status" in plan.field_params:
        return None
    enum = (entity.fields.get("status") or {}).get("enum") or []
    return str(enum[0]) if enum else None


def _validation_lines(tool: ToolSchema, plan: ToolPlan) -> list[str]:
    """One comment line per parameter: what the tool checks before it acts."""
    required = set(tool.parameters.get("required", []))
    lines = []
    for name, schema in tool.parameters.get("properties", {}).items():
        checks = [str(schema.get("type", "string")), "required" if name in required else "optional"]
        checks += [f"one of {schema['enum']}"[:80]] if schema.get("enum") else []
        checks += [f"{k} {schema[k]}" for k in ("minimum", "maximum", "format") if k in schema]
        if name in plan.ref_params:
            checks.append(f"must exist in {plan.ref_params[name]}")
        elif name == plan.id_param and plan.template not in ("create", "schedule", "read_many"):
            checks.append(f"must exist in {plan.entity}")
        lines.append(f"    #   {name}: {', '.join(checks)}")
    return lines


def _function(tool: ToolSchema, plan: ToolPlan) -> str:
    summary = tool.description.splitlines()[0][:200] if tool.description else tool.name
    comment = behaviour_line(plan)
    checks = _validation_lines(tool, plan)
    validates = ["    # validates (structured error, DB untouched, when a check fails):", *checks] if checks else []
    lines = [f"def {tool.name}(db, **kwargs):", f"    {summary!r}", f"    # behaviour: {comment}", *validates,
             f"    return _run(db, {tool.name!r}, kwargs)"]  # fmt: skip
    return "\n\n" + "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines) + "\n"


@CODEGENS.register("offline")
def _offline(
    refactored: RefactoredToolset, db: dict[str, Any], client: LLMClient | None, failures: Sequence[str]
) -> str:
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    header = f'"""Tools of {refactored.name!r} (toolset {refactored.toolset_id}); generated by envgen.codegen."""\n'
    # One JSON string constant instead of a dict literal: a fraction of the AST the sandbox checks on every load.
    specs = json.dumps(tool_specs(refactored, plan), ensure_ascii=False, sort_keys=False)
    body = "".join(_function(tool, tool_plan) for tool, tool_plan in zip(refactored.tools, plan.tools, strict=True))
    runtime = (
        _RUNTIME.replace("%(action_log)r", repr(ACTION_LOG))
        .replace("%(outbox)r", repr(OUTBOX))
        .replace("%(rates)r", repr(EXCHANGE_RATES))
        .replace("%(units)r", repr(json.dumps({k: list(v) for k, v in UNIT_FACTORS.items()})))
    )
    return header + runtime + f"\n\n_TOOLS = json.loads({specs!r})\n" + body


_CODEGEN_OUTPUT = {
    "type": "object",
    "required": ["code"],
    "properties": {"code": {"type": "string", "minLength": 1}},
}


def _offline_reply(inputs: dict[str, Any]) -> dict[str, Any]:
    refactored = RefactoredToolset.model_validate_json(inputs["refactored"])
    return {"code": _offline(refactored, json.loads(inputs["db"]), None, ())}


CODEGEN_ROLE = LLMRole(
    name="codegen",
    system_prompt=prompts.CODEGEN_SYSTEM,
    user_template=prompts.CODEGEN_USER,
    output_schema=_CODEGEN_OUTPUT,
    offline=_offline_reply,
)


def _db_excerpt(db: dict[str, Any]) -> dict[str, Any]:
    return {name: dict(list(rows.items())[:_DB_EXCERPT_RECORDS]) for name, rows in db.items() if isinstance(rows, dict)}


@CODEGENS.register("openai")
def _llm(refactored: RefactoredToolset, db: dict[str, Any], client: LLMClient | None, failures: Sequence[str]) -> str:
    if client is None:
        raise CodegenError("llm_codegen_failed: the openai backend needs an LLM client")
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    schemas = [{**t.openai_tool()["function"], "response": t.response, "behaviour": behaviour_line(p)}
               for t, p in zip(refactored.tools, plan.tools, strict=True)]  # fmt: skip
    inputs = {
        "schemas": json.dumps(schemas, ensure_ascii=False),
        "db_excerpt": json.dumps(_db_excerpt(db), ensure_ascii=False),
        "failures": "\n".join(failures) or "(none)",
        "refactored": refactored.model_dump_json(),
        "db": json.dumps(db),
    }
    try:
        return str(run_role(CODEGEN_ROLE, inputs, client)["code"])
    except LLMError as exc:
        raise CodegenError(f"llm_codegen_failed: {exc}") from exc


def generate_tools_source(
    refactored: RefactoredToolset,
    db: dict[str, Any],
    *,
    backend: str = "offline",
    client: LLMClient | None = None,
    failures: Sequence[str] = (),
) -> str:
    """Generate the tools module of an environment.

    Args:
        refactored: the refactored toolset.
        db: its initial mock DB (the LLM sees an excerpt; templates only need the plan).
        backend: "offline" (templates) or "openai" (LLM, needs `client`).
        client: the LLM client for the openai backend.
        failures: failure messages of the previous attempt, for the LLM repair prompt.

    Returns:
        Python source that passes `check_source` (checked here for LLM code; the offline template library is
        covered by a unit test, and every source is checked again by the sandbox on load).

    Raises:
        CodegenError: `sandbox_violation: ...` when the code breaks the allow-list, or an LLM failure.
    """
    source = CODEGENS.get(backend)(refactored, db, client, failures)
    if backend == "offline":
        return source  # fixed templates + JSON data + repr'd docstrings; the sandbox still checks it on load
    try:
        check_source(source)
    except SandboxViolation as exc:
        raise CodegenError(f"sandbox_violation: {exc}") from exc
    return source
