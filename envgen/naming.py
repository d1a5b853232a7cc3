"""Name normalization shared by the envgen stages: snake_case slugs, singular/plural, id prefixes."""

from __future__ import annotations

import keyword
import re
import unicodedata

__all__ = ["snake_case", "unique_name", "singularize", "pluralize", "id_prefix", "slug"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_MAX_NAME = 64


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def snake_case(text: str, *, fallback: str = "x") -> str:
    """A lowercase snake_case Python identifier for `text` (transliterated to ASCII).

    Args:
        text: any name (camelCase, kebab-case, with spaces or non-ASCII letters).
        fallback: prefix used when nothing ASCII is left, or the result starts with a digit.

    Returns:
        A non-empty identifier of at most 64 characters that is not a Python keyword.

    Example:
        >>> snake_case("getOrderByID"), snake_case("Café-Search v2"), snake_case("2fa")
        ('get_order_by_id', 'cafe_search_v2', 'x_2fa')
    """
    words = _NON_WORD.sub("_", _CAMEL.sub("_", _ascii(text)).lower()).strip("_")
    if not words:
        words = fallback
    elif words[0].isdigit():
        words = f"{fallback}_{words}"
    words = words[:_MAX_NAME].rstrip("_")
    return f"{words}_" if keyword.iskeyword(words) or words in {"db", "kwargs"} else words


def slug(text: str) -> str:
    """A lowercase kebab-case slug (for env ids)."""
    return snake_case(text, fallback="env").replace("_", "-")[:40].strip("-") or "env"


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, ... — the first one not in `taken` (which is not modified)."""
    if name not in taken:
        return name
    index = 2
    while f"{name}_{index}" in taken:
        index += 1
    return f"{name}_{index}"


_IRREGULAR = {"person": "people", "child": "children", "man": "men", "woman": "women", "data": "data"}
_IRREGULAR_SINGULAR = {v: k for k, v in _IRREGULAR.items()}


def singularize(word: str) -> str:
    """Best-effort English singular of a snake_case noun ('categories' -> 'category').

    Example:
        >>> [singularize(w) for w in ("orders", "categories", "addresses", "status", "news")]
        ['order', 'category', 'address', 'status', 'news']
    """
    if word in _IRREGULAR_SINGULAR:
        return _IRREGULAR_SINGULAR[word]
    if word.endswith(("ss", "us", "is", "news", "series")) or len(word) <= 3:
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


def pluralize(word: str) -> str:
    """Best-effort English plural of a snake_case singular noun ('category' -> 'categories').

    Example:
        >>> [pluralize(w) for w in ("order", "category", "address", "day", "status")]
        ['orders', 'categories', 'addresses', 'days', 'statuses']
    """
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(("news", "series", "data", "info", "weather")):
        return word
    if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    return word + "s"


def id_prefix(singular: str) -> str:
    """Upper-case prefix of generated ids: 'order' -> 'ORD', 'flight_booking' -> 'FLB'."""
    parts = [p for p in singular.split("_") if p]
    if len(parts) >= 2:
        text = "".join(p[0] for p in parts)[:3]
        text = text + parts[-1][1 : 1 + 3 - len(text)]
    else:
        text = (parts[0] if parts else "rec")[:3]
    return text.upper().ljust(3, "X")
