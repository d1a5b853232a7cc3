"""In-domain Toucan evaluation (SLCA-GRPO App. C.5 / D.1) against an OpenAI-compatible endpoint.

The model runs the training tool loop: Hermes calls in text (`<tool_call>` blocks; calls the server parsed into
`tool_calls` are turned back into blocks), every parsed call answered by the responder as a `user` message of
`<tool_response>` blocks, until a generation has no call or `max_turns` generations were made. The episode is
scored with the training reward (`trainer.rewards.score.Scorer`: HierR sub-scores and the summary judge).
Completed samples are appended to `samples.jsonl` as they finish; a rerun skips them (resumable), and the
`LLMClient` cache answers repeated requests without HTTP.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from data.io import append_jsonl, read_jsonl, write_jsonl
from data.models import StrictModel
from data.verl_rows import read_verl_rows
from gustforge.errors import LLMError
from gustforge.llm import ChatResult, LLMClient
from toucan.config import EvalConfig
from toucan.export import meta_path
from toucan.hermes import render_responses
from toucan.responder import Responder, ToolContext, truncate_middle
from trainer.rewards.parse import normalize_gold, parse_calls_lenient, strip_think
from trainer.rewards.score import Scorer

__all__ = [
    "EvalSample",
    "Episode",
    "SampleResult",
    "load_eval_samples",
    "run_episode",
    "score_episode",
    "evaluate_samples",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalSample:
    """One test row with what the loop and the scorer need."""

    task_id: str
    prompt: tuple[Mapping[str, str], ...]
    ground_truth: Mapping[str, Any]
    kind: str = ""
    gold_responses: tuple[tuple[str, ...], ...] = ()

    def context(self) -> ToolContext:
        tools = json.loads(self.ground_truth["tool_schemas"])
        schemas = {t["function"]["name"]: t for t in tools}
        gold = normalize_gold(self.ground_truth["gold_tool_calls"])
        return ToolContext(schemas=schemas, gold=gold, gold_responses=self.gold_responses)


class Episode(StrictModel):
    """The generated side of one rollout."""

    generations: tuple[str, ...]
    observations: tuple[str, ...]
    tool_turns: int = Field(description="Generations whose calls were executed.")

    @property
    def solution_str(self) -> str:
        """The response as verl's reward loop decodes it (role words between turns)."""
        parts: list[str] = []
        for i, text in enumerate(self.generations):
            parts.append(text)
            if i < len(self.observations):
                parts.append(f"\nuser\n{self.observations[i]}\nassistant\n")
        return "".join(parts)


class SampleResult(StrictModel):
    """Per-sample metrics (SLCA Table 15 columns)."""

    task_id: str
    kind: str = ""
    name_f1: float
    arg_match: float
    process: float
    parallel: float
    success: float
    summary: float
    tool_turns: int
    no_call: float
    judge: str
    generations: int
    solution: str = Field(description="The scored response text.")


def load_eval_samples(path: Path, *, limit: int | None = None) -> list[EvalSample]:
    """Test rows (`trainer.rows.VerlRow` parquet) joined with their `.meta.jsonl` sidecar when present.

    Args:
        path: Test parquet (e.g. `toucan prepare`'s `test.parquet`).
        limit: Keep only the first rows.

    Returns:
        The samples, in file order.
    """
    meta_file = meta_path(path)
    meta = {m["task_id"]: m for m in read_jsonl(meta_file)} if meta_file.exists() else {}
    samples = []
    for row in read_verl_rows(path)[:limit]:
        task = str(row["extra_info"]["task_id"])
        info = meta.get(task, {})
        samples.append(
            EvalSample(
                task_id=task,
                prompt=tuple(row["prompt"]),
                ground_truth=row["reward_model"]["ground_truth"],
                kind=str(info.get("kind", "")),
                gold_responses=tuple(tuple(step) for step in info.get("gold_responses", [])),
            )
        )
    return samples


def _as_text(result: ChatResult) -> str:
    """Assistant content, with server-parsed `tool_calls` appended as one Hermes block."""
    text = result.content or ""
    if not result.tool_calls:
        return text
    calls = []
    for tc in result.tool_calls:
        fn = tc.get("function", {})
        try:
            arguments = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = fn.get("arguments")
        calls.append({"name": fn.get("name"), "arguments": arguments})
    payload = calls[0] if len(calls) == 1 else calls
    return f"{text}\n<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>".lstrip("\n")


async def run_episode(sample: EvalSample, client: LLMClient, responder: Responder, cfg: EvalConfig) -> Episode:
    """Drive the model through the tool loop for one sample.

    Args:
        sample: The test sample.
        client: Chat client of the evaluated model.
        responder: Source of tool observations.
        cfg: Loop limits and decoding.

    Returns:
        The episode.

    Raises:
        LLMError: The endpoint failed for good.
    """
    messages: list[dict[str, str]] = [dict(m) for m in sample.prompt]
    generations: list[str] = []
    observations: list[str] = []
    ctx = sample.context()
    for turn in range(cfg.max_turns):
        result = await client.achat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        text = _as_text(result)
        generations.append(text)
        messages.append({"role": "assistant", "content": text})
        calls = parse_calls_lenient(strip_think(text))
        if not calls or turn == cfg.max_turns - 1:
            break
        responses = [await responder.respond(call, ctx) for call in calls]
        observation = render_responses([truncate_middle(r, cfg.max_tool_response_chars) for r in responses])
        observations.append(observation)
        messages.append({"role": "user", "content": observation})
    executed = len(observations)
    return Episode(generations=tuple(generations), observations=tuple(observations), tool_turns=executed)


def score_episode(sample: EvalSample, episode: Episode, scorer: Scorer, cfg: EvalConfig) -> SampleResult:
    """Metrics of one episode from the training reward's components.

    Args:
        sample: The test sample.
        episode: Its rollout.
        scorer: The reward scorer (judge included).
        cfg: Evaluation config (success threshold).

    Returns:
        Name F1 = S_name, ArgMatch = (S_key + S_val) / 2, Process = R_tool, Parallel = S_par,
        Success = 1[Process >= threshold], Summary = max(R_sum, 0) (the omission penalty is not a rating),
        no-call = 1 when the response has no `<tool_call>` tag.
    """
    text = episode.solution_str
    parts = scorer.score(text, dict(sample.ground_truth), {})
    return SampleResult(
        task_id=sample.task_id,
        kind=sample.kind,
        name_f1=parts["s_name"],
        arg_match=(parts["s_key"] + parts["s_val"]) / 2,
        process=parts["r_tool"],
        parallel=parts["s_par"],
        success=float(parts["r_tool"] >= cfg.success_threshold),
        summary=max(float(parts["r_sum"]), 0.0),
        tool_turns=episode.tool_turns,
        no_call=float("<tool_call>" not in strip_think(text)),
        judge=str(parts["judge"]),
        generations=len(episode.generations),
        solution=text,
    )


async def _one(
    sample: EvalSample, client: LLMClient, responder: Responder, scorer: Scorer, cfg: EvalConfig
) -> SampleResult | str:
    """The sample's result, or the error that stopped it (endpoint failures after the client's retries)."""
    try:
        episode = await run_episode(sample, client, responder, cfg)
    except LLMError as exc:
        logger.warning("sample %s failed: %s", sample.task_id, exc)
        return f"{type(exc).__name__}: {exc}"
    return await asyncio.to_thread(score_episode, sample, episode, scorer, cfg)


async def evaluate_samples(
    samples: Sequence[EvalSample],
    client: LLMClient,
    *,
    responder: Responder,
    scorer: Scorer,
    cfg: EvalConfig,
    results_path: Path,
) -> tuple[list[SampleResult], int]:
    """Evaluate every sample not already in `results_path`, appending each result as it completes.

    At most `client.settings.max_concurrency` episodes run at once (the client bounds requests the same way).

    Args:
        samples: Test samples.
        client: Chat client of the evaluated model.
        responder: Tool-observation source.
        scorer: Reward scorer.
        cfg: Evaluation config.
        results_path: JSONL of completed `SampleResult`s (read first, appended to).

    Returns:
        All results for `samples` (earlier and new, in sample order) and the number of failed samples.
    """
    done = {r["task_id"]: SampleResult.model_validate(r) for r in _read_done(results_path)}
    todo = [s for s in samples if s.task_id not in done]
    gate = asyncio.Semaphore(client.settings.max_concurrency)

    async def run(sample: EvalSample) -> tuple[str, SampleResult | str]:
        async with gate:
            return sample.task_id, await _one(sample, client, responder, scorer, cfg)

    failures: list[dict[str, str]] = []
    for next_done in asyncio.as_completed([run(s) for s in todo]):
        task_id, result = await next_done
        if isinstance(result, str):
            failures.append({"task_id": task_id, "error": result})
            continue
        append_jsonl(results_path, result)
        done[result.task_id] = result
    # this run's failures by sample id (a rerun retries them: they are not in results_path)
    write_jsonl(Path(results_path).with_name("failures.jsonl"), sorted(failures, key=lambda f: f["task_id"]))
    return [done[s.task_id] for s in samples if s.task_id in done], len(failures)


def _read_done(path: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(path)) if Path(path).exists() else []
