"""Summary score R_sum: a 5-level judge rating of the final reply given the question and the tool results.

Protocol (SLCA-GRPO App. A.4 / reference `reward_fn.py` §6.8): the judge sees only the current user question,
the tool *responses* (never the calls) and the final reply; it answers
`<response><response_quality><reasoning>…</reasoning><rating>LABEL</rating></response_quality></response>` with
LABEL in {very poor, poor, acceptable, good, excellent}; R_sum = (k - 1) / 4. Any unparsable answer or failed call
gives 0.0 (flagged). Short-circuits before any judge: no tool response → 0.0; final reply under 10 chars → 0.0.

Backends (registry `JUDGES`): `heuristic` — the offline deterministic default, a grounding/length proxy (NOT an
LLM judgement; use it for CPU tests and smoke runs); `llm` — the protocol above over an OpenAI-compatible endpoint
through `gustforge.llm.LLMClient`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gustforge.errors import LLMError
from gustforge.registry import Registry

__all__ = [
    "RATING_LABELS",
    "JUDGE_PROMPT",
    "JudgeInput",
    "JudgeResult",
    "Judge",
    "JUDGES",
    "HeuristicJudge",
    "LLMJudge",
    "parse_rating",
    "rating_to_score",
    "render_judge_prompt",
    "make_judge_input",
    "short_circuit",
]

logger = logging.getLogger(__name__)

RATING_LABELS: tuple[str, ...] = ("very poor", "poor", "acceptable", "good", "excellent")
MIN_FINAL_CHARS = 10
_RATING_RE = re.compile(
    r"<response_quality>.*?<rating>(.*?)</rating>.*?</response_quality>", re.DOTALL | re.IGNORECASE
)
_TOKEN_RE = re.compile(r"[a-z0-9][a-z0-9_.\-]*[a-z0-9]|[0-9]", re.IGNORECASE)
_STOPWORDS = frozenset(
    "the and for with that this from are was were has have not you your but all any can will status message "
    "success true false null none error".split()
)

JUDGE_PROMPT = """You are grading the final reply of a tool-using assistant. Judge how well the reply answers the \
user's question using the tool results it received.

Rating scale (pick exactly one label):
- very poor: ignores or contradicts the tool results, or does not answer the question
- poor: answers only a small part, or misreads important results
- acceptable: answers the main question but misses details or is unclear in places
- good: correct and mostly complete use of the results, clearly written
- excellent: fully correct, complete and clearly organised use of every relevant result

## User Question
```
{question}
```

## Tool Results
```
{tool_responses}
```

## Model's Final Response
```
{final_response}
```

Check three things: (1) result interpretation — are the tool results read correctly; (2) completeness — is every \
part of the question answered with the available information; (3) expression — is the reply clear and well organised.

Answer in exactly this format:
<response><response_quality><reasoning>one short paragraph</reasoning>\
<rating>LABEL</rating></response_quality></response>
"""


@dataclass(frozen=True, slots=True)
class JudgeInput:
    question: str
    tool_responses: tuple[str, ...]
    final_response: str


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """R_sum and how it was obtained. `backend` is "none" when a short-circuit decided."""

    score: float
    rating: str
    backend: str
    failed: bool = False
    parse_failed: bool = False
    no_tool_response: bool = False


class Judge(Protocol):
    name: str

    def rate(self, inp: JudgeInput) -> JudgeResult: ...

    async def arate(self, inp: JudgeInput) -> JudgeResult: ...


def rating_to_score(label: str) -> float:
    """Map a rating label to (k - 1) / 4 with k = 1..5."""
    return RATING_LABELS.index(label) / 4.0


def parse_rating(text: str | None) -> str | None:
    """The rating label of a judge reply, or None if there is no accepted label in the required tags."""
    if not text:
        return None
    match = _RATING_RE.search(text)
    if not match:
        return None
    label = match.group(1).strip().lower()
    return label if label in RATING_LABELS else None


def render_judge_prompt(inp: JudgeInput) -> str:
    """The single user message sent to an LLM judge."""
    rendered = "\n".join(f"[Tool Response {i + 1}]\n{text}\n" for i, text in enumerate(inp.tool_responses))
    return JUDGE_PROMPT.format(
        question=inp.question, tool_responses=rendered.strip(), final_response=inp.final_response
    )


def make_judge_input(question: str, responses: list[str], final: str) -> JudgeInput:
    return JudgeInput(question=question, tool_responses=tuple(responses), final_response=final)


def short_circuit(inp: JudgeInput) -> JudgeResult | None:
    """The protocol's decisions that need no judge: no tool response, or a final reply under 10 characters."""
    if not inp.tool_responses:
        return JudgeResult(0.0, "no_tool_response", "none", no_tool_response=True)
    if len(inp.final_response.strip()) < MIN_FINAL_CHARS:
        return JudgeResult(0.0, "very poor", "none")
    return None


_JSON_KEY_RE = re.compile(r'"[^"\n]{0,64}"\s*:')


def _salient(text: str) -> set[str]:
    text = _JSON_KEY_RE.sub(" ", text)  # field names are structure, not content
    return {t for t in (m.lower() for m in _TOKEN_RE.findall(text)) if len(t) >= 3 or t.isdigit()} - _STOPWORDS


@dataclass(frozen=True, slots=True)
class HeuristicJudge:
    """Offline deterministic proxy: grounding (share of salient tool-result values echoed) and reply length.

    rating k = 1 + round(4 · (0.7·grounding + 0.3·length)), grounding = |T∩F| / min(|T|, cap),
    length = min(words / full_words, 1). Not a quality judgement; it rewards replies that use the results.
    """

    name: str = "heuristic"
    grounding_cap: int = 12
    full_words: int = 30

    def rate(self, inp: JudgeInput) -> JudgeResult:
        tool_tokens = set().union(*(_salient(t) for t in inp.tool_responses))
        final_tokens = _salient(inp.final_response)
        grounding = (
            min(len(tool_tokens & final_tokens) / min(len(tool_tokens), self.grounding_cap), 1.0)
            if tool_tokens
            else 0.0
        )
        length = min(len(inp.final_response.split()) / self.full_words, 1.0)
        k = 1 + round(4 * (0.7 * grounding + 0.3 * length))
        label = RATING_LABELS[k - 1]
        return JudgeResult(rating_to_score(label), label, self.name)

    async def arate(self, inp: JudgeInput) -> JudgeResult:
        return self.rate(inp)


class LLMJudge:
    """The judge protocol over an OpenAI-compatible endpoint (`gustforge.llm.LLMClient`)."""

    name = "llm"

    def __init__(self, client: Any, *, max_tokens: int = 8192, max_concurrency: int = 0) -> None:
        self.client = client
        self.max_tokens = max_tokens
        self.max_concurrency = max_concurrency  # in-flight judge requests per event loop (0 = unbounded)
        self._gates: dict[int, asyncio.Semaphore] = {}

    def _gate(self) -> asyncio.Semaphore | None:
        if self.max_concurrency <= 0:
            return None
        loop = id(asyncio.get_running_loop())  # a semaphore belongs to one event loop
        if loop not in self._gates:
            self._gates[loop] = asyncio.Semaphore(self.max_concurrency)
        return self._gates[loop]

    def _messages(self, inp: JudgeInput) -> list[dict[str, str]]:
        return [{"role": "user", "content": render_judge_prompt(inp)}]

    def _result(self, content: str | None) -> JudgeResult:
        if content is None:
            return JudgeResult(0.0, "judge_failed", self.name, failed=True)
        label = parse_rating(content)
        if label is None:
            return JudgeResult(0.0, "parse_failed", self.name, parse_failed=True)
        return JudgeResult(rating_to_score(label), label, self.name)

    def rate(self, inp: JudgeInput) -> JudgeResult:
        try:
            reply = self.client.chat(self._messages(inp), temperature=0.0, max_tokens=self.max_tokens)
        except LLMError as exc:
            logger.warning("judge call failed: %s", exc)
            return self._result(None)
        return self._result(reply.content)

    async def arate(self, inp: JudgeInput) -> JudgeResult:
        gate = self._gate()
        try:
            if gate is None:
                reply = await self.client.achat(self._messages(inp), temperature=0.0, max_tokens=self.max_tokens)
            else:
                async with gate:
                    reply = await self.client.achat(self._messages(inp), temperature=0.0, max_tokens=self.max_tokens)
        except LLMError as exc:
            logger.warning("judge call failed: %s", exc)
            return self._result(None)
        return self._result(reply.content)


def _make_llm_judge(options: dict[str, Any]) -> Judge:
    from gustforge.llm import LLMClient, LLMSettings

    settings = LLMSettings(
        backend="openai",
        base_url=options.get("base_url"),
        model=options.get("model"),
        api_key_env=options.get("api_key_env", "OPENAI_API_KEY"),
        timeout_s=float(options.get("timeout_s", 60.0)),
        max_retries=int(options.get("max_retries", 3)),
        temperature=0.0,
    )
    return LLMJudge(LLMClient(settings), max_tokens=int(options.get("max_tokens", 8192)),
                    max_concurrency=int(options.get("max_concurrency", 0)))


JUDGES: Registry[Callable[[dict[str, Any]], Judge]] = Registry("judge")
JUDGES.add("heuristic", lambda options: HeuristicJudge())
JUDGES.add("llm", _make_llm_judge)
