"""Answer facts: the values a task's final reply must state (`TaskText.expected_answer`).

One matcher for every checker (the verl reward, `gust eval gust`, the teacher score in `tdg.verify`): a fact is
found when its normalised text (case-folded, whitespace collapsed, surrounding quotes dropped) occurs in the
normalised reply; a number also matches its integer / decimal spellings ("3" ~ "3.0"). An empty fact list means
"no answer check" (never a free pass: the callers decide what an unchecked answer is worth).
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


def _spellings(fact: str) -> tuple[str, ...]:
    try:
        number = float(fact)
    except ValueError:
        return (fact,)
    if number.is_integer():
        return (fact, str(int(number)), f"{number:.1f}")
    return (fact, repr(number))


def fact_found(fact: str, reply: str) -> bool:
    """One normalised fact occurs in the reply (numbers: any plain spelling, not inside a longer number)."""
    text = normalize_text(reply)
    for spelling in _spellings(normalize_text(fact).strip("\"'")):
        if not spelling:
            continue
        if spelling.replace(".", "", 1).lstrip("-").isdigit():
            if re.search(rf"(?<![\d.]){re.escape(spelling)}(?![\d]|\.\d)", text):
                return True
        elif spelling in text:
            return True
    return False


def answer_coverage(facts: Sequence[str], reply: str) -> float:
    """Share of the facts the reply states (1.0 when there are no facts)."""
    if not facts:
        return 1.0
    return sum(fact_found(f, reply) for f in facts) / len(facts)


def answer_complete(facts: Sequence[str], reply: str) -> bool:
    """Every fact is in the reply (True when there are no facts)."""
    return all(fact_found(f, reply) for f in facts)
