"""JSON-schema validation that never leaves the process: no `$ref` is ever retrieved over http or from a file.

jsonschema's default registry retrieves any `$ref` it does not know (http, https, `file://`): a schema harvested
from a public MCP server, or written by a model, could make the caller fetch from the network or read a host
file. `safe_validator` builds validators on an empty `referencing.Registry` (which refuses every retrieval), and
`nonlocal_refs` lists the references a schema would need from outside itself so callers can refuse the schema.

Standard library plus jsonschema/referencing only, no project imports: the sandbox worker loads this file by path.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

__all__ = [
    "REF_KEYWORDS",
    "safe_validator",
    "nonlocal_refs",
    "errors_of",
    "validation_errors",
    "is_valid",
]

# Keywords whose value is a URI reference to another schema (draft 2019-09 / 2020-12 names included).
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
_MAX_WALK_DEPTH = 100


@functools.cache
def _empty_registry() -> Any:
    from referencing import Registry

    # A Registry without `retrieve` raises NoSuchResource for any URI it does not hold: nothing is fetched.
    return Registry()


def safe_validator(
    schema: Any, cls: Any = None, *, default: Any = None, check: bool = False, format_checker: Any = None
) -> Any:
    """A jsonschema validator for `schema` whose `$ref` resolution never retrieves anything.

    A drop-in for `Draft202012Validator(schema)` (pass `cls=`) and `validator_for(schema)(schema)` (the default:
    the draft follows `$schema`, falling back to `default`, itself Draft 2020-12 unless given). An unknown or
    non-local `$ref` fails at validation time with `referencing.exceptions.Unresolvable`, never with a fetch.

    Args:
        schema: The schema (a dict, or a bool for the trivial schemas).
        cls: Force this validator class instead of following `$schema`.
        default: The class used when `$schema` is absent or unknown.
        check: Run `check_schema` first (raises `jsonschema.SchemaError`).
        format_checker: Passed through to the validator.

    Example:
        >>> sorted(e.message for e in safe_validator({"type": "integer"}).iter_errors("x"))
        ["'x' is not of type 'integer'"]
    """
    import jsonschema

    if cls is None:
        fallback = jsonschema.Draft202012Validator if default is None else default
        cls = jsonschema.validators.validator_for(schema, default=fallback) if isinstance(schema, dict) else fallback
    if check:
        cls.check_schema(schema)
    return cls(schema, registry=_empty_registry(), format_checker=format_checker)


def _walk(node: Any, depth: int = 0) -> Iterator[tuple[str, Any]]:
    if depth > _MAX_WALK_DEPTH:
        yield "$ref", f"<schema nested deeper than {_MAX_WALK_DEPTH} levels>"
        return
    if isinstance(node, dict):
        for key, value in node.items():
            if key in REF_KEYWORDS:
                yield key, value
            yield from _walk(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item, depth + 1)


def nonlocal_refs(schema: Any) -> list[str]:
    """Every reference in `schema` that points outside the schema itself (anything but a `#...` fragment).

    A schema nested deeper than 100 levels is reported too (it cannot be checked, so it is not trusted).

    Example:
        >>> nonlocal_refs({"properties": {"a": {"$ref": "#/$defs/A"}, "b": {"$ref": "file:///etc/passwd"}}})
        ['$ref: file:///etc/passwd']
    """
    found = []
    for key, value in _walk(schema):
        if not isinstance(value, str) or not value.startswith("#"):
            found.append(f"{key}: {str(value)[:200]}")
    return found


def errors_of(validator: Any, instance: Any) -> list[str]:
    """Messages of every error `validator` finds in `instance`, "<path>: <message>" when nested, sorted by path.

    A reference the schema cannot resolve (nothing is ever retrieved) is reported as one message, not raised.
    """
    from referencing.exceptions import Unresolvable

    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    except Unresolvable as exc:
        return [f"unresolvable reference (remote and file references are never retrieved): {str(exc)[:200]}"]
    return [_error_message(error) for error in errors]


def is_valid(instance: Any, schema: Any) -> bool:
    """True when `instance` is valid against `schema` (an unresolvable reference counts as invalid)."""
    return not validation_errors(instance, schema)


def validation_errors(instance: Any, schema: Any) -> list[str]:
    """jsonschema error messages for `instance` (empty = valid); an invalid schema is reported as one message.

    Example:
        >>> validation_errors({"n": "x"}, {"type": "object", "properties": {"n": {"type": "integer"}}})
        ["n: 'x' is not of type 'integer'"]
    """
    import jsonschema

    key = json.dumps(schema, sort_keys=True, default=str)
    try:
        return errors_of(_cached_validator(key), instance)
    except Exception as exc:  # noqa: BLE001 - only an invalid schema gets here; say so if that is the reason
        try:
            safe_validator(schema, check=True)
        except jsonschema.SchemaError as invalid:
            return [f"invalid schema: {str(invalid.message)[:500]}"]
        raise exc from None


@functools.lru_cache(maxsize=512)
def _cached_validator(schema_json: str) -> Any:
    """Building a validator is cheap; checking the schema against its metaschema costs ~10 ms, so that happens
    only when validating fails (a valid schema never needs it; every schema the pipeline produces was checked)."""
    return safe_validator(json.loads(schema_json))


def _error_message(error: Any) -> str:
    path = "/".join(str(part) for part in error.absolute_path)
    message = str(error.message)[:500]
    return f"{path}: {message}" if path else message
