"""Strict JSON extraction from model output, with one bounded repair pass.

Order: strip Markdown fences → take the first balanced `{...}` that parses → otherwise repair that candidate
(trailing commas, single-quoted strings, Python literals `True`/`False`/`None`) and parse again.
Anything still invalid raises `LLMOutputError`; nothing is guessed beyond these rules.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from gustforge.errors import LLMOutputError

__all__ = ["repair_json", "extract_json_candidates", "reasoning_spans", "repair_text", "strip_reasoning"]

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_MAX_CANDIDATES = 16
_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """Remove reasoning drafts (`<think>...</think>`, Qwen3/DeepSeek-R1 style) before the answer is parsed.

    A closing tag without its opening one (chat templates that open the block in the prompt) drops everything
    before it; an unclosed opening tag (the reply was cut inside its reasoning) drops everything after it.

    Example:
        >>> strip_reasoning('<think>maybe {"edge": false}</think>{"edge": true}')
        '{"edge": true}'
    """
    text = _THINK.sub("", text)
    closing = list(_THINK_CLOSE.finditer(text))
    if closing:
        text = text[closing[-1].end() :]
    opening = _THINK_OPEN.search(text)
    if opening:
        text = text[: opening.start()]
    return text.strip()


def repair_json(text: str) -> dict[str, Any]:
    """Parse the first JSON object in a model answer.

    Args:
        text: Raw assistant content (may hold prose, ```json fences, minor syntax slips).

    Returns:
        The parsed object.

    Raises:
        LLMOutputError: No balanced object, or none that parses even after repair.

    Example:
        >>> repair_json("Sure!\\n```json\\n{'ok': True, 'items': [1, 2,],}\\n```")
        {'ok': True, 'items': [1, 2]}
    """
    last_error = "no balanced {...} object found"
    answer = strip_reasoning(text)
    for whole in (text.strip(), answer):  # one clean object, the common case: no character scan
        clean = _parse_object(whole, strict=False) if whole.startswith("{") else None
        if clean is not None:
            return clean
    # Objects of the raw text outside every reasoning span first: a reasoning tag inside a JSON string is data,
    # and stripping it would cut the object. A draft object inside <think> is never taken as the answer.
    spans = reasoning_spans(text)
    raw = (c for start, c in _all_candidates(text) if not any(lo <= start and start + len(c) <= hi for lo, hi in spans))
    # then the stripped answer's objects: reasoning prose (an apostrophe) can derail the raw scan
    stripped = (c for _, c in _all_candidates(answer))
    for candidate in itertools.chain(raw, stripped):
        value, last_error = _parse_candidate(candidate, last_error)
        if value is not None:
            return value
    raise LLMOutputError(f"model output is not a JSON object ({last_error}): {answer[:200]!r}")


def _parse_object(text: str, *, strict: bool) -> dict[str, Any] | None:
    try:
        value = json.loads(text, strict=strict)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _parse_candidate(candidate: str, last_error: str) -> tuple[dict[str, Any] | None, str]:
    """The candidate as parsed, else after one repair pass; the reason it failed otherwise."""
    for attempt, strict in ((candidate, True), (repair_text(candidate), False)):
        try:  # strict=False admits raw newlines/tabs inside strings, a common model slip
            value = json.loads(attempt, strict=strict)
        except json.JSONDecodeError as exc:
            last_error = f"{exc.msg} at char {exc.pos}"
            continue
        if isinstance(value, dict):
            return value, last_error
    return None, last_error


def reasoning_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each reasoning draft in `text`, by the same rules as `strip_reasoning`.

    Example:
        >>> reasoning_spans('<think>x</think>{"a": 1}')
        [(0, 16)]
    """
    spans = [match.span() for match in _THINK.finditer(text)]

    def outside(pos: int) -> bool:
        return not any(lo <= pos < hi for lo, hi in spans)

    closings = [m for m in _THINK_CLOSE.finditer(text) if outside(m.start())]
    if closings:
        spans.append((0, closings[-1].end()))
    after = closings[-1].end() if closings else 0
    openings = [m for m in _THINK_OPEN.finditer(text, after) if outside(m.start())]
    if openings:
        spans.append((openings[0].start(), len(text)))
    return spans


def _all_candidates(text: str) -> Iterator[tuple[int, str]]:
    """(start, candidate) in each ``` fence first, then in the whole text (a fence may sit inside a string)."""
    for block in _FENCE.finditer(text):
        for start, candidate in _positioned_candidates(block.group(1)):
            yield block.start(1) + start, candidate
    yield from _positioned_candidates(text)


def extract_json_candidates(text: str) -> Iterator[str]:
    """Yield balanced `{...}` spans in order (at most 16); a span that fails is skipped as a whole.

    Braces inside single- or double-quoted strings do not count.

    Example:
        >>> list(extract_json_candidates('a {b} c {"d": "}"}'))
        ['{b}', '{"d": "}"}']
    """
    for _, candidate in _positioned_candidates(text):
        yield candidate


def _positioned_candidates(text: str) -> Iterator[tuple[int, str]]:
    start = text.find("{")
    produced = 0
    while start != -1 and produced < _MAX_CANDIDATES:
        end = _balanced_end(text, start)
        if end is None:
            return
        yield start, text[start : end + 1]
        produced += 1
        start = text.find("{", end + 1)


def _balanced_end(text: str, start: int) -> int | None:
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = _string_end(text, i)
            if i is None:
                return None
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _string_end(text: str, start: int) -> int | None:
    """Index of the quote closing the string opened at `start` (backslash escapes honoured)."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i
        i += 1
    return None


def repair_text(candidate: str) -> str:
    """Rewrite near-JSON into JSON: single → double quotes, Python literals, trailing commas.

    Double-quoted strings are copied verbatim, so valid JSON comes out unchanged in meaning.

    Example:
        >>> repair_text("{'a': None, 'b': [True,],}")
        '{"a": null, "b": [true]}'
    """
    out: list[str] = []
    i = 0
    while i < len(candidate):
        ch = candidate[i]
        if ch in "\"'":
            end = _string_end(candidate, i)
            if end is None:
                out.append(candidate[i:])
                break
            body = candidate[i : end + 1]
            out.append(body if ch == '"' else _single_to_double(body))
            i = end + 1
        elif ch.isalpha() or ch == "_":
            j = i
            while j < len(candidate) and (candidate[j].isalnum() or candidate[j] == "_"):
                j += 1
            word = candidate[i:j]
            out.append(_PY_LITERALS.get(word, word))
            i = j
        elif ch in "}]":
            _drop_trailing_comma(out)
            out.append(ch)
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _single_to_double(quoted: str) -> str:
    """'it\\'s "x"' → "it's \\"x\\"": unescape single, escape bare double quotes."""
    inner = quoted[1:-1]
    chars: list[str] = []
    i = 0
    while i < len(inner):
        if inner[i] == "\\" and i + 1 < len(inner):
            pair = inner[i : i + 2]
            chars.append("'" if pair == "\\'" else pair)
            i += 2
            continue
        chars.append('\\"' if inner[i] == '"' else inner[i])
        i += 1
    return '"' + "".join(chars) + '"'


def _drop_trailing_comma(out: list[str]) -> None:
    k = len(out) - 1
    while k >= 0 and out[k].isspace():
        k -= 1
    if k >= 0 and out[k] == ",":
        del out[k]
