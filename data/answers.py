"""Answer facts: the values a task's final reply must state (`TaskText.expected_answer`).

One matcher for every checker (the verl reward, `gust eval gust`, the teacher score in `tdg.verify`): a fact is
found when its normalised text (case-folded, whitespace collapsed, surrounding quotes dropped) occurs in the
normalised reply; a number matches any number of the same value in the reply ("3" ~ "3.0", not "1234"). An empty
fact list means "no answer check" (never a free pass: the callers decide what an unchecked answer is worth).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["normalize_text", "normalize_facts", "fact_found", "answer_coverage", "answer_complete"]

_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Case-folded text with runs of whitespace collapsed to one space."""
    return _SPACE.sub(" ", str(text)).strip().casefold()


def normalize_facts(value: Any) -> tuple[str, ...]:
    """The row's facts as non-empty strings (a JSON list, a numpy array, a tuple, None or "" all accepted)."""
    if value is None:
        return ()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, str):
        value = [value] if value.strip() else []
    if not isinstance(value, (list, tuple)):
        return ()
    facts = (normalize_text(v).strip("\"'") for v in value if v is not None)
    return tuple(f for f in facts if f)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\d])")


def _as_number(text: str) -> float | None:
    try:
        return float(text) if re.fullmatch(r"-?\d+(?:\.\d+)?", text) else None
    except ValueError:
        return None


def fact_found(fact: str, reply: str) -> bool:
    """One normalised fact occurs in the reply (a number: any number in the reply with the same value)."""
    fact = normalize_text(fact).strip("\"'")
    text = normalize_text(reply)
    if not fact:
        return True
    number = _as_number(fact)
    if number is None:
        return fact in text
    return any(abs(float(m.group()) - number) < 1e-9 for m in _NUMBER.finditer(text))


def answer_coverage(facts: Sequence[str], reply: str) -> float:
    """Share of the facts the reply states (1.0 when there are no facts)."""
    if not facts:
        return 1.0
    return sum(fact_found(f, reply) for f in facts) / len(facts)


def answer_complete(facts: Sequence[str], reply: str) -> bool:
    """Every fact is in the reply (True when there are no facts)."""
    return all(fact_found(f, reply) for f in facts)
