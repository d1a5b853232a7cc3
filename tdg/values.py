"""Realistic argument values for reconstruction: from the live DB first, then from the schema, then by name.

No ``"sample <param>"`` strings: a value the DB or the schema cannot supply is generated from the parameter's name
and format (a person's name for ``customer_name``, a date for ``check_in``, a word of a stored record for a search
``query``), seeded, so traces stay reproducible.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

__all__ = ["realistic_value", "new_value", "search_term", "field_values"]

_FIRST = ("Amara", "Bruno", "Chen", "Dana", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kofi", "Lena",
          "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara")  # fmt: skip
_LAST = ("Okafor", "Schmidt", "Tanaka", "Rossi", "Novak", "Haddad", "Silva", "Kowalski", "Nguyen", "Larsen",
         "Moreau", "Patel", "Garcia", "Ivanova", "Brennan")  # fmt: skip
_CITIES = ("Lisbon", "Toronto", "Osaka", "Nairobi", "Denver", "Krakow", "Melbourne", "Bogota", "Oslo", "Austin")
_COUNTRIES = ("Portugal", "Canada", "Japan", "Kenya", "Germany", "Brazil", "Norway", "India", "Mexico", "Spain")
_STREETS = ("Maple Avenue", "Harbor Road", "Elm Street", "Cedar Lane", "Station Road", "Hillcrest Drive")
_TOPICS = ("solar panels", "trail running", "sourdough baking", "jazz history", "climate policy", "budget travel",
           "machine learning", "home gardening", "electric cars", "chess openings")  # fmt: skip
_WORDS = ("alpine", "harbor", "meadow", "summit", "orchard", "canyon", "lagoon", "prairie", "cobalt", "amber")
_NOTES = (
    "Please handle this before Friday.",
    "Customer asked for a quick follow-up.",
    "Leave the package at the front desk.",
    "Prefers contact by email.",
    "Needed for the quarterly review.",
)
_EXAMPLE = re.compile(r"\be\.g\.,?\s*[\"'`]?([^\"'`,;)]+?)[\"'`]?(?:[,;)]|\.\s|\.?$)", re.IGNORECASE)


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [t for t in re.split(r"[\W_]+", spaced.lower()) if t]


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(_FIRST), rng.choice(_LAST)


def _by_name(param: str, rng: random.Random) -> str | None:  # noqa: C901 - a flat table of cases
    tokens = set(_tokens(param))
    first, last = _person(rng)
    if "email" in tokens or "mail" in tokens:
        return f"{first.lower()}.{last.lower()}@example.com"
    if tokens & {"phone", "mobile", "tel", "telephone"}:
        return f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if tokens & {"url", "link", "website", "uri", "homepage"}:
        return f"https://www.{rng.choice(_WORDS)}-{rng.choice(_WORDS)}.com"
    if tokens & {"city", "town", "location", "destination", "origin", "place"}:
        return rng.choice(_CITIES)
    if "country" in tokens:
        return rng.choice(_COUNTRIES)
    if tokens & {"address", "street"}:
        return f"{rng.randint(10, 980)} {rng.choice(_STREETS)}"
    if tokens & {"zip", "postal", "postcode"}:
        return f"{rng.randint(10000, 99999)}"
    if tokens & {"date", "day", "birthday", "dob", "deadline", "due", "checkin", "checkout"} or (
        tokens & {"check", "start", "end"} and tokens & {"in", "out", "date"}
    ):
        return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if tokens & {"time", "hour"}:
        return f"{rng.randint(8, 18):02d}:{rng.choice(('00', '15', '30', '45'))}"
    if tokens & {"month"}:
        return f"2025-{rng.randint(1, 12):02d}"
    if tokens & {"year"}:
        return str(rng.randint(2019, 2025))
    if tokens & {"currency"}:
        return rng.choice(("USD", "EUR", "GBP", "JPY"))
    if tokens & {"language", "lang", "locale"}:
        return rng.choice(("en", "de", "fr", "es", "ja"))
    if tokens & {"username", "user", "handle", "login"}:
        return f"{first.lower()}{rng.randint(10, 99)}"
    if tokens & {"firstname"} or tokens >= {"first", "name"}:
        return first
    if tokens & {"lastname", "surname"} or tokens >= {"last", "name"}:
        return last
    if tokens & {"name", "author", "owner", "assignee", "recipient", "contact", "customer", "guest", "person"}:
        return f"{first} {last}"
    if tokens & {"query", "keyword", "keywords", "search", "term", "topic", "subject", "q", "prompt"}:
        return rng.choice(_TOPICS)
    if tokens & {"title", "headline", "label"}:
        return f"{rng.choice(_WORDS).title()} {rng.choice(('Report', 'Plan', 'Review', 'Notes', 'Proposal'))}"
    if tokens & {"note", "notes", "comment", "message", "description", "body", "content", "text", "reason",
                 "details", "summary", "feedback"}:  # fmt: skip
        return rng.choice(_NOTES)
    if tokens & {"color", "colour"}:
        return rng.choice(("red", "blue", "green", "black", "white"))
    if tokens & {"symbol", "ticker"}:
        return rng.choice(("AAPL", "MSFT", "NVDA", "TSLA", "AMZN"))
    if tokens & {"category", "type", "kind", "genre", "tag", "tags"}:
        return rng.choice(_WORDS)
    return None


def realistic_value(param: str, schema: Mapping[str, Any], rng: random.Random) -> str:
    """A realistic string for `param`: the schema's default/examples, an "e.g. X" of its description, its format,
    else a value generated from its name; a plain two-word phrase when nothing fits."""
    for key in ("default", "example"):
        if isinstance(schema.get(key), str) and schema[key].strip():
            return str(schema[key])
    examples = schema.get("examples")
    if isinstance(examples, list) and examples and isinstance(examples[0], str):
        return str(rng.choice(examples))
    match = _EXAMPLE.search(str(schema.get("description", "")))
    if match and 0 < len(match.group(1).strip()) <= 60:
        return match.group(1).strip()
    formats = {"date": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
               "date-time": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(8, 18):02d}:00:00Z",
               "time": f"{rng.randint(8, 18):02d}:00:00", "uri": f"https://www.{rng.choice(_WORDS)}.com",
               "email": "{}.{}@example.com".format(*(p.lower() for p in _person(rng)))}  # fmt: skip
    if str(schema.get("format")) in formats:
        return formats[str(schema["format"])]
    first, second = rng.sample(_WORDS, 2)
    return _by_name(param, rng) or f"{first} {second}"


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


def search_term(param: str, schema: Mapping[str, Any], db: Mapping[str, Any], entity: str | None,
                rng: random.Random) -> Any:  # fmt: skip
    """A search value that finds something: a word of a stored record of the tool's entity (else of any record)."""
    if schema.get("type") not in (None, "string"):
        return None
    collections = [c for c in sorted(db) if isinstance(db[c], Mapping) and db[c]]
    preferred = [c for c in collections if entity and (c == entity or c.rstrip("s") == entity.rstrip("s"))]
    for name in preferred or collections:
        records = [r for r in db[name].values() if isinstance(r, Mapping)]
        words = sorted({w for r in records for k, v in r.items() if isinstance(v, str) and not k.endswith("id")
                        for w in re.findall(r"[A-Za-z][A-Za-z'-]{3,}", v)})  # fmt: skip
        if words:
            return rng.choice(words)
    return None
