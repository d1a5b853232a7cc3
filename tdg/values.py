"""Realistic argument values for reconstruction: from the live DB first, then from the schema, then by name.

No ``"sample <param>"`` strings: a value the DB or the schema cannot supply is generated from the parameter's name
and format (a person's name for ``customer_name``, a date for ``check_in``, a word of a stored record for a search
``query``), seeded, so traces stay reproducible.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from envgen.domain import Domain, domain_of
from envgen.fakes import field_tokens, plain_value, schema_examples, typed_value

__all__ = ["realistic_number", "realistic_value", "new_value", "search_term", "field_values", "tool_domain"]

_QUERY_TOKENS = frozenset({"query", "keyword", "keywords", "search", "term", "topic", "q", "prompt", "text", "phrase"})
_NAME_KEYS = ("name", "title", "label", "headline", "subject")


def _tokens(name: str) -> list[str]:
    return field_tokens(name)


def tool_domain(tool: Any) -> Domain:
    """The domain of one tool (its name, description and parameter descriptions): what its free values are about
    when the reconstruction knows only the tool being called."""
    return domain_of("", "", (tool,))


def realistic_value(param: str, schema: Mapping[str, Any], rng: random.Random, domain: Domain | None = None) -> str:
    """A realistic string for `param`: one the schema itself offers (`envgen.fakes.schema_examples`: default,
    examples, the "e.g." list of its description), else a typed value from its format, name and `domain`
    (`envgen.fakes.typed_value`); one of the domain's own words when nothing fits."""
    offered = schema_examples(schema)
    if offered:
        default = schema.get("default")
        return str(default) if isinstance(default, str) and default in offered else rng.choice(offered)
    return typed_value(param, schema, rng, domain=domain) or plain_value(param, rng, domain=domain)


def realistic_number(param: str, schema: Mapping[str, Any], rng: random.Random) -> int | float:
    """A number in a realistic range for its name (price 5-500, quantity 1-20, year 2018-2025, rating 1-5),
    inside the schema's bounds — not the schema minimum plus a few (a salary of 0.65)."""
    from envgen.database import sample_value

    kind = "integer" if schema.get("type") == "integer" else "number"
    bounds = {k: schema[k] for k in ("minimum", "maximum") if isinstance(schema.get(k), int | float)}
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        bounds.setdefault("minimum", schema["exclusiveMinimum"] + (1 if kind == "integer" else 0.01))
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        bounds.setdefault("maximum", schema["exclusiveMaximum"] - (1 if kind == "integer" else 0.01))
    return sample_value(param, {"type": kind, **bounds}, rng)


def field_values(db: Any, field: str) -> Iterator[Any]:
    """Every scalar stored under the key `field` anywhere in the DB."""
    if isinstance(db, Mapping):
        for key, value in db.items():
            if key == field and not isinstance(value, Mapping | list):
                yield value
            else:
                yield from field_values(value, field)
    elif isinstance(db, list):
        for item in db:
            yield from field_values(item, field)


def new_value(
    param: str, schema: Mapping[str, Any], current: Any, db: Any, rng: random.Random, *,
    avoid: Collection[str] = (), default: Callable[[], Any],
) -> Any:  # fmt: skip
    """A value for an update's field `param` that differs from the record's `current` one.

    Candidates: the schema's enum, other records' values of the same field, then generated ones; statuses in
    `avoid` (terminal ones) are skipped. None when nothing different fits.
    """

    def fits(value: Any) -> bool:
        text = value.casefold() if isinstance(value, str) else ""
        return value != current and text not in avoid and not text.startswith(("sample ", "example "))

    if schema.get("enum"):
        options = [v for v in schema["enum"] if fits(v)]
        return rng.choice(options) if options else None
    seen = sorted({repr(v): v for v in field_values(db, param) if fits(v) and type(v) is type(current)}.items())
    if seen and rng.random() < 0.5:
        return rng.choice(seen)[1]
    for _ in range(8):
        value = default()
        if fits(value):
            return value
    return rng.choice(seen)[1] if seen else None


def _shape(value: str) -> re.Pattern[str]:
    """The shape of a typed value: digit runs and letter runs generalized ("2025-03" -> \\d{4}-\\d{2})."""
    parts = re.findall(r"\d+|[A-Za-z]+|.", value)
    return re.compile("".join(rf"\d{{{len(p)}}}" if p.isdigit() else "[A-Za-z]+" if p.isalpha() else re.escape(p)
                              for p in parts))  # fmt: skip


def search_term(param: str, schema: Mapping[str, Any], db: Mapping[str, Any], entity: str | None,
                rng: random.Random) -> Any:  # fmt: skip
    """A filter value that finds something.

    A typed filter (`month`, `date`, `email`; see `envgen.fakes.typed_value`) gets a stored value of the same shape
    (a month is the prefix of a stored date), never a word of unrelated text; any other filter (a free-text
    `query`) gets a word of a stored record's name or title of the tool's entity (else of any text field, else
    of any record). None when nothing fits.
    """
    if schema.get("type") not in (None, "string"):
        return None
    tokens = set(_tokens(param))
    collections = [c for c in sorted(db) if isinstance(db[c], Mapping) and db[c]]
    preferred = [c for c in collections if entity and (c == entity or c.rstrip("s") == entity.rstrip("s"))]
    typed = None if tokens & _QUERY_TOKENS else typed_value(param, schema, random.Random(0))
    if typed is not None:
        shape = _shape(typed)
        # a shape of letters only ("en") fits any word: then only a field of the same name may supply the value
        loose = re.fullmatch(r"[A-Za-z]+", typed) is not None
        stored = sorted({v for c in preferred + collections for r in db[c].values() if isinstance(r, Mapping)
                         for k, v in r.items() if isinstance(v, str)
                         and (not loose or tokens & set(_tokens(k)))})  # fmt: skip
        found = [v for v in stored if shape.fullmatch(v)]
        if not found and any(ch.isdigit() for ch in typed):  # a month is the prefix of a stored date
            found = sorted({m.group(0) for v in stored if (m := shape.match(v))})
        return rng.choice(found) if found else None
    for name in preferred or collections:
        records = [r for r in db[name].values() if isinstance(r, Mapping)]
        for keys in (_NAME_KEYS, None):
            words = _selective_words([_record_words(r, keys) for r in records])
            if words:
                return rng.choice(words)
    return None


def _record_words(record: Mapping[str, Any], keys: tuple[str, ...] | None) -> set[str]:
    return {w for k, v in record.items() if isinstance(v, str) and not k.endswith("id")
            and (keys is None or k in keys or k.endswith("_name"))
            for w in re.findall(r"[A-Za-z][A-Za-z'-]{3,}", v)}  # fmt: skip


def _selective_words(per_record: list[set[str]]) -> list[str]:
    """Words of the records that a search could find them by, the selective ones only: a word in at most half of
    the records ("Garcia" of "Garcia Item"), not one in every record ("Item"), which would filter nothing."""
    counts = Counter(word for words in per_record for word in words)
    limit = max(1, len(per_record) // 2)
    for fits in (lambda n: n <= limit, lambda n: n < len(per_record), lambda n: True):
        words = sorted(w for w, n in counts.items() if fits(n))
        if words:
            return words
    return []
