"""`gust eval gust`: run an agent (OpenAI-compatible endpoint) on GUST tasks with a simulated user, k trials each.

One trial: the conversation opens with the simulated user's goal (never the stated values); each generation of the
agent is parsed for Hermes `<tool_call>` blocks (calls the server parsed into `tool_calls` are turned back into
blocks, as in the Toucan evaluator); calls run on the trial's own environment session (`envgen.runtime`, inside the
sandbox) and come back as one `user` message of `<tool_response>` blocks; a generation without a call goes to the
simulated user, whose reply is the next user turn; the trial ends when the user stops, or after `max_turns`
generations. Success = the session's final DB equals the golden final DB (τ²-bench's final-state check; a differing
hash is re-checked against a gold replay modulo creation order, `data.state_canon`),
the agent's replies to the user state every answer fact of the task (`expected_answer`), and the agent made a call
when the gold makes some — an agent that does nothing fails every task (`trial_success`).

Trials are appended to `trials.jsonl` as they finish, keyed by (task_id, trial); a rerun skips them (resumable), and
the `LLMClient` caches answer repeated requests without HTTP. Trial t sends `seed=t` with every request, so the k
trials are distinct samples even at temperature 0 on servers that honour seeds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from data.answers import answer_complete, normalize_facts
from data.io import append_jsonl, read_jsonl, write_jsonl
from data.models import StrictModel, TaskRecord
from data.state_canon import same_final_state
from gusteval.scenario import UserScenario, build_scenario, scenario_from_kwargs
from gusteval.user_sim import UserReply, UserSimulator, make_user_simulator, visible_text
from gustforge.errors import GustError, InputError, LLMError, SandboxError
from gustforge.llm import ChatResult, LLMClient
from trainer.rewards.hierr import key_value_scores, name_f1
from trainer.rewards.parse import Call, normalize_gold, parse_calls_lenient, strip_think

__all__ = [
    "GustEvalConfig",
    "EvalTask",
    "TrialResult",
    "load_eval_tasks",
    "tasks_from_verl_rows",
    "verl_env_root",
    "run_trial",
    "evaluate_tasks",
    "TRIALS_FILE",
    "FAILURES_FILE",
]

logger = logging.getLogger(__name__)

TRIALS_FILE = "trials.jsonl"
FAILURES_FILE = "failures.jsonl"


class GustEvalConfig(StrictModel):
    """Loop limits, decoding and report settings of `gust eval gust`."""

    trials: int = Field(default=4, ge=1, description="k: trials per task (pass^1 … pass^k).")
    max_turns: int = Field(default=30, gt=0, description="Agent generations per trial.")
    max_tokens: int = Field(default=4096, gt=0, description="max_tokens per agent generation.")
    temperature: float = Field(default=0.0, ge=0, description="Agent sampling temperature.")
    user: str = Field(default="offline", description="Simulated user: offline | llm.")
    user_temperature: float = Field(default=0.0, ge=0)
    max_observation_chars: int = Field(default=2048, gt=0, description="Middle truncation of tool observations.")
    sandbox_cpu_seconds: float = 5.0
    sandbox_memory_mb: int = 512
    sandbox_wall_seconds: float = 10.0
    concurrency: int = Field(default=4, ge=1, description="Trials in flight (each holds one sandbox worker).")
    bootstrap_samples: int = Field(default=1000, gt=0)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    seed: int = Field(default=0, description="Seed of the bootstrap.")
    limit: int | None = Field(default=None, ge=1, description="Evaluate only the first N tasks.")


@dataclass(frozen=True)
class EvalTask:
    """One task as the evaluator needs it."""

    task_id: str
    env_id: str
    env_dir: Path
    system_prompt: str
    scenario: UserScenario
    gold: tuple[tuple[Call, ...], ...]
    expected_final_hash: str
    initial_hash: str = ""
    allowed_tools: tuple[str, ...] = field(default=())
    expected_answer: tuple[str, ...] = field(default=())  # facts the agent's replies must state (empty: none)

    @property
    def state_changing(self) -> bool:
        """False when the gold leaves the DB as it was (then an idle agent also matches the final state)."""
        return self.expected_final_hash != self.initial_hash


class TrialResult(StrictModel):
    """One trial's outcome and process metrics."""

    task_id: str
    env_id: str
    trial: int
    model: str = Field(default="", description="The model name the endpoint reported.")
    success: bool
    final_db_hash: str
    expected_final_hash: str
    state_changing: bool
    end_reason: str = Field(description="user_stop | max_turns | empty_reply")
    failure: str = Field(default="", description="Why an unsuccessful trial failed ('' on success).")
    answer_match: bool = Field(default=True, description="The agent's replies state every expected answer fact.")
    name_f1: float
    arg_match: float
    generations: int
    user_turns: int
    tool_calls: int
    tool_errors: int
    prompt_tokens: int
    completion_tokens: int
    user_reasons: tuple[str, ...] = ()
    transcript: tuple[dict[str, str], ...] = ()


# ------------------------------------------------------------------------------------------------ loading
def _tasks_from_records(records: Sequence[TaskRecord], envs_dir: Path) -> list[EvalTask]:
    from trainer.convert import hermes_system_prompt, load_env_schemas

    tasks, schemas = [], {}
    for record in records:
        env_dir = Path(envs_dir) / record.env_id
        if record.env_id not in schemas:
            if not (env_dir / "schemas.json").is_file():
                raise InputError(f"environment of task {record.task_id} not found: {env_dir} (pass --envs)")
            schemas[record.env_id] = load_env_schemas(env_dir)
        tools = [s.openai_tool() for s in schemas[record.env_id]]
        gold = [[Call(c.name, dict(c.arguments)) for c in stage.calls] for stage in record.trace.stages]
        tasks.append(EvalTask(
            task_id=record.task_id, env_id=record.env_id, env_dir=env_dir, system_prompt=hermes_system_prompt(tools),
            scenario=build_scenario(record, schemas[record.env_id]), gold=tuple(tuple(s) for s in gold if s),
            expected_final_hash=record.trace.final_db_hash, initial_hash=record.trace.initial_db_hash,
            allowed_tools=tuple(s.name for s in schemas[record.env_id]),
            expected_answer=normalize_facts(list(record.text.expected_answer)),
        ))  # fmt: skip
    return tasks


def tasks_from_verl_rows(rows: Sequence[Mapping[str, Any]], env_root: Path) -> list[EvalTask]:
    tasks = []
    for row in rows:
        gt = row["reward_model"]["ground_truth"]
        extra = row.get("extra_info") or {}
        if not gt.get("env_dir") or not gt.get("expected_final_db_hash"):
            raise InputError(f"row {extra.get('task_id')!r} is not a GUST row (no env_dir / final DB hash)")
        env_dir = Path(gt["env_dir"])
        system = next(m["content"] for m in row["prompt"] if m["role"] == "system")
        tasks.append(EvalTask(
            task_id=str(extra.get("task_id")), env_id=str(gt["env_id"]),
            env_dir=env_dir if env_dir.is_absolute() else Path(env_root) / env_dir, system_prompt=system,
            scenario=scenario_from_kwargs(extra.get("interaction_kwargs")),
            gold=tuple(tuple(step) for step in normalize_gold(gt["gold_tool_calls"])),
            expected_final_hash=str(gt["expected_final_db_hash"]), initial_hash=str(gt.get("initial_db_hash") or ""),
            allowed_tools=tuple(gt.get("allowed_tools") or ()),
            expected_answer=normalize_facts(gt.get("expected_answer")),
        ))  # fmt: skip
    return tasks


ENV_ROOT_KEY = b"gust.env_root"  # parquet metadata: the root of relative env dirs, relative to the parquet's folder


def verl_env_root(path: Path, default: Path | None = None) -> Path:
    """The base of relative `env_dir`s of a verl parquet: its recorded `gust.env_root`, else `default` (cwd)."""
    import pyarrow.parquet as pq

    recorded = (pq.read_schema(Path(path)).metadata or {}).get(ENV_ROOT_KEY)
    if recorded:
        return (Path(path).parent / recorded.decode()).resolve()
    return Path(default) if default is not None else Path.cwd()


def load_eval_tasks(data: Path, *, envs_dir: Path | None = None, limit: int | None = None) -> list[EvalTask]:
    """Tasks from a GUST export (folder or shard parquet) or a verl RL parquet written by `gust build`.

    Args:
        data: `OUT/gust` (folder), one of its shards, or `OUT/verl/*.parquet` (rows with `interaction_kwargs`).
        envs_dir: Folder of the environments for GUST data (default: the export's own `envs/` inside the GUST
            folder, else `envs/` beside it, as in a run folder); the base of
            relative `env_dir`s for verl rows (default: the parquet's recorded `gust.env_root`, else the cwd).
        limit: Keep only the first tasks.

    Raises:
        InputError: Unreadable input, a missing environment, or verl rows without a user scenario.
    """
    import pyarrow.parquet as pq

    data = Path(data)
    if not data.exists():
        raise InputError(f"evaluation data not found: {data}")
    if data.is_dir() or "golden_trace" in pq.read_schema(data).names:
        from data.gust import read_gust, row_to_record

        if data.is_dir():
            records, root = read_gust(data), data
        else:
            records, root = [row_to_record(r) for r in pq.read_table(data).to_pylist()], data.parent.parent
        own = root / "envs"  # an export (`gust export`) carries its environments inside; a run folder beside
        envs = Path(envs_dir) if envs_dir is not None else own if own.is_dir() else root.parent / "envs"
        return _tasks_from_records(records[:limit], envs)
    from data.verl_rows import read_verl_rows

    rows = [r for r in read_verl_rows(data) if r.get("data_source") == "gust"]
    if not rows:
        raise InputError(f"{data} holds no GUST rows")
    return tasks_from_verl_rows(rows[:limit], Path(envs_dir) if envs_dir is not None else verl_env_root(data))


# ------------------------------------------------------------------------------------------------ one trial
def _as_text(result: ChatResult) -> str:
    """Assistant content, with server-parsed `tool_calls` appended as Hermes blocks."""
    text = result.content or ""
    for tc in result.tool_calls:
        fn = tc.get("function", {})
        try:
            arguments = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            arguments = fn.get("arguments")
        block = json.dumps({"name": fn.get("name"), "arguments": arguments}, ensure_ascii=False)
        text += f"\n<tool_call>\n{block}\n</tool_call>"
    return text.lstrip("\n")


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


@dataclass
class _Counters:
    generations: int = 0
    user_turns: int = 0
    tool_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: list[Call] = field(default_factory=list)
    user_reasons: list[str] = field(default_factory=list)
    model: str = ""


def _usage(result: ChatResult, counters: _Counters) -> None:
    usage = result.raw.get("usage") or {}
    counters.prompt_tokens += int(usage.get("prompt_tokens") or 0)
    counters.completion_tokens += int(usage.get("completion_tokens") or 0)
    counters.model = counters.model or str(result.raw.get("model") or "")


async def _execute(session: Any, call: Call) -> tuple[str, bool]:
    try:
        output = await asyncio.to_thread(session.call, call.name, call.arguments)
    except SandboxError as exc:
        output = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    is_error = isinstance(output, dict) and output.get("status") == "error"
    return json.dumps(output, ensure_ascii=False), is_error


def trial_success(task: EvalTask, state_ok: bool, calls: Sequence[Call], replies: Sequence[str]) -> bool:
    """A trial succeeds when the final DB equals the gold one (`state_ok`), the agent's replies state every answer
    fact, and (when the gold makes calls) the agent made some: an agent that does nothing fails every task."""
    acted = bool(calls) or not any(task.gold)
    return acted and state_ok and answer_complete(task.expected_answer, "\n".join(replies))


def same_state_as_gold(task: EvalTask, agent_db: Mapping[str, Any], limits: Any = None) -> bool:
    """Replay the gold on a fresh session and compare final DBs modulo creation order (`data.state_canon`)."""
    from envgen.runtime import Environment

    with Environment.load(task.env_dir).session(limits) as session:
        initial = session.db()
        for call in (c for step in task.gold for c in step):
            session.call(call.name, dict(call.arguments))
        return same_final_state(agent_db, session.db(), initial)


def _failure(task: EvalTask, success: bool, counters: _Counters, end_reason: str, state_ok: bool = False) -> str:
    """Why an unsuccessful trial failed (first that applies)."""
    if success:
        return ""
    if not counters.calls:
        return "no_tool_call"
    if state_ok:
        return "missing_answer"
    gold = [c for step in task.gold for c in step]
    made = [c.name for c in counters.calls]
    if any(made.count(name) < [g.name for g in gold].count(name) for name in {g.name for g in gold}):
        return "max_turns" if end_reason == "max_turns" else "missing_calls"
    if min(key_value_scores(counters.calls, gold)) < 1.0:
        return "wrong_arguments"
    return "wrong_final_state"


async def run_trial(task: EvalTask, trial: int, client: LLMClient, user: UserSimulator,
                    cfg: GustEvalConfig) -> TrialResult:  # fmt: skip
    """Run one trial of one task.

    Raises:
        LLMError: The agent's (or the LLM user's) endpoint failed for good.
        GustError: The environment could not be started (sandbox / environment fault).
    """
    from envgen.runtime import Environment
    from gustforge.sandbox import SandboxLimits

    limits = SandboxLimits(cpu_seconds=cfg.sandbox_cpu_seconds, memory_mb=cfg.sandbox_memory_mb,
                           wall_seconds=cfg.sandbox_wall_seconds)  # fmt: skip
    session = await asyncio.to_thread(lambda: Environment.load(task.env_dir).session(limits))
    try:
        counters = _Counters()
        opening = await user.opening()
        messages = [{"role": "system", "content": task.system_prompt}, {"role": "user", "content": opening}]
        dialogue = [{"role": "user", "content": opening}]
        end_reason = "max_turns"
        while counters.generations < cfg.max_turns:
            result = await client.achat(messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=trial)
            counters.generations += 1
            _usage(result, counters)
            text = _as_text(result)
            messages.append({"role": "assistant", "content": text})
            calls = parse_calls_lenient(strip_think(text))
            if calls:
                blocks = []
                for call in calls:
                    counters.calls.append(call)
                    observation, is_error = await _execute(session, call)
                    counters.tool_errors += is_error
                    blocks.append(f"<tool_response>\n{_truncate(observation, cfg.max_observation_chars)}\n"
                                  "</tool_response>")  # fmt: skip
                messages.append({"role": "user", "content": "\n".join(blocks)})
                continue
            dialogue.append({"role": "assistant", "content": visible_text(text)})
            reply: UserReply = await user.reply(dialogue)
            counters.user_reasons.append(reply.reason)
            if reply.stop:
                end_reason = "user_stop"
                break
            counters.user_turns += 1
            dialogue.append({"role": "user", "content": reply.content})
            messages.append({"role": "user", "content": reply.content})
        final_hash = await asyncio.to_thread(session.db_hash)
        agent_db = await asyncio.to_thread(session.db) if final_hash != task.expected_final_hash else None
    finally:
        await asyncio.to_thread(session.close)
    gold = [c for step in task.gold for c in step]
    key, value = key_value_scores(counters.calls, gold) if gold else (1.0, 1.0)
    replies = [m["content"] for m in dialogue if m["role"] == "assistant"]
    state_ok = agent_db is None or await asyncio.to_thread(same_state_as_gold, task, agent_db, limits)
    success = trial_success(task, state_ok, counters.calls, replies)
    return TrialResult(
        task_id=task.task_id, env_id=task.env_id, trial=trial, model=counters.model, success=success,
        final_db_hash=final_hash,
        expected_final_hash=task.expected_final_hash, state_changing=task.state_changing, end_reason=end_reason,
        failure=_failure(task, success, counters, end_reason, state_ok),
        answer_match=answer_complete(task.expected_answer, "\n".join(replies)),
        name_f1=name_f1([c.name for c in counters.calls], [c.name for c in gold]), arg_match=(key + value) / 2,
        generations=counters.generations, user_turns=counters.user_turns, tool_calls=len(counters.calls),
        tool_errors=counters.tool_errors, prompt_tokens=counters.prompt_tokens,
        completion_tokens=counters.completion_tokens, user_reasons=tuple(counters.user_reasons),
        transcript=tuple({"role": m["role"], "content": m["content"]} for m in messages[1:]),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ all trials
def _done(path: Path) -> dict[tuple[str, int], TrialResult]:
    if not Path(path).exists():
        return {}
    return {(r["task_id"], r["trial"]): TrialResult.model_validate(r) for r in read_jsonl(path)}


async def evaluate_tasks(
    tasks: Sequence[EvalTask],
    client: LLMClient,
    cfg: GustEvalConfig,
    out_dir: Path,
    *,
    user_client: LLMClient | None = None,
) -> tuple[list[TrialResult], list[dict[str, Any]]]:
    """Run every (task, trial) not already in `out_dir/trials.jsonl`, at most `cfg.concurrency` at once.

    Args:
        tasks: The tasks.
        client: The agent's endpoint.
        cfg: Evaluation settings (`cfg.trials` trials per task, seeds 0..k-1).
        out_dir: Output folder (`trials.jsonl` appended per finished trial; `failures.jsonl` rewritten with this
            run's lost trials, which a rerun retries).
        user_client: The LLM user's endpoint (`cfg.user == "llm"`).

    Returns:
        All trial results for `tasks` (earlier and new, sorted) and this run's lost trials (task, trial, error).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trials_path = out_dir / TRIALS_FILE
    done = _done(trials_path)
    todo = [(t, k) for t in tasks for k in range(cfg.trials) if (t.task_id, k) not in done]
    gate = asyncio.Semaphore(cfg.concurrency)

    async def one(task: EvalTask, trial: int) -> tuple[EvalTask, int, TrialResult | str]:
        async with gate:
            options = {"client": user_client, "seed": trial, "temperature": cfg.user_temperature}
            user = make_user_simulator(cfg.user, task.scenario, **options)
            try:
                return task, trial, await run_trial(task, trial, client, user, cfg)
            except (LLMError, GustError) as exc:
                logger.warning("trial %s/%d lost: %s", task.task_id, trial, exc)
                return task, trial, f"{type(exc).__name__}: {exc}"

    lost: list[dict[str, Any]] = []
    for next_done in asyncio.as_completed([one(t, k) for t, k in todo]):
        task, trial, result = await next_done
        if isinstance(result, str):
            lost.append({"task_id": task.task_id, "trial": trial, "error": result})
            continue
        append_jsonl(trials_path, result)
        done[(task.task_id, trial)] = result
    write_jsonl(out_dir / FAILURES_FILE, sorted(lost, key=lambda f: (f["task_id"], f["trial"])))
    wanted = {t.task_id for t in tasks}
    results = sorted((r for (tid, k), r in done.items() if tid in wanted and k < cfg.trials),
                     key=lambda r: (r.task_id, r.trial))  # fmt: skip
    return results, lost
