"""Reward-hacking probes: per task, the gold trajectory must score strictly above policies that game the reward.

Probes (registry `PROBES`; each maps the gold turns to a probe's turns, or None when it does not apply):

* ``idle`` — no call at all, a confident closing reply;
* ``call_everything`` — gold, plus one call of every other allowed tool in the last turn;
* ``repeated`` — gold with every call issued twice in its turn;
* ``wrong_argument`` — gold with one argument value changed (the first call that has one);
* ``reordered`` — gold with its stages in reverse order (tasks with two or more stages).

Each trajectory (gold and probes) is executed on a fresh session of the task's environment, rendered as a decoded
rollout (the agent loop's layout, with the executed calls, the final DB hash and the final reply recorded as the
loop records them) and scored by `trainer.rewards.score.Scorer`. Signals (registry `SIGNALS`) are what each
algorithm's layout puts on the tokens: ``score`` (= grpo's outcome), ``tara`` (mean per-turn reward), ``slca``
(r_tool + r_sum), ``slca_tara`` (mean per-turn reward + r_sum), ``toolpo`` (r_action + r_succ). A probe *ties*
when, on one of the enforced signals (`ENFORCED_SIGNALS`: score and TARA's per-turn reward), it scores at least
as much as gold; the quality stage drops such a task with the reason ``probe_ties_gold:<probe>``.

Pure Python (no torch / verl): the quality stage of the library pipeline calls it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.state_canon import same_final_state
from gustforge.registry import Registry
from trainer.rewards import decode_turn_rewards
from trainer.rewards.parse import Call, normalize_gold
from trainer.rewards.score import FINAL_HASH_KEY, FINAL_REPLY_KEY, TURN_CALLS_KEY, RewardConfig, Scorer
from trainer.rewards.state import StateResult, load_environment

__all__ = [
    "PROBES",
    "SIGNALS",
    "ENFORCED_SIGNALS",
    "DROP_PREFIX",
    "ProbeTask",
    "ProbeResult",
    "probe_task",
    "probe_tasks",
    "probe_task_from_row",
    "probe_tasks_from_records",
    "render_rollout",
    "margin_summary",
    "probe_records",
    "probe_failures",
]

Turns = list[list[Call]]
ProbeFn = Callable[[Turns, Sequence[str]], Turns | None]
DROP_PREFIX = "probe_ties_gold"
ENFORCED_SIGNALS: tuple[str, ...] = ("score", "tara")
IDLE_REPLY = "I have taken care of everything you asked for."


# ------------------------------------------------------------------------------------------------ probes
def _idle(gold: Turns, allowed: Sequence[str]) -> Turns | None:
    return []


def _call_everything(gold: Turns, allowed: Sequence[str]) -> Turns | None:
    used = {c.name for turn in gold for c in turn}
    extra = [Call(name, {}) for name in allowed if name not in used]
    if not gold or not extra:
        return None
    return [*[list(t) for t in gold[:-1]], [*gold[-1], *extra]]


def _repeated(gold: Turns, allowed: Sequence[str]) -> Turns | None:
    return [[c for c in turn for _ in (0, 1)] for turn in gold] if gold else None


def _wrong(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return f"{value}-wrong" if value else "wrong"
    if isinstance(value, list):
        return [*value, "wrong"]
    if isinstance(value, dict):
        return {**value, "wrong": True}
    return "wrong"


def _wrong_argument(gold: Turns, allowed: Sequence[str]) -> Turns | None:
    for t, turn in enumerate(gold):
        for i, call in enumerate(turn):
            if call.arguments:
                key = sorted(call.arguments)[0]
                changed = Call(call.name, {**call.arguments, key: _wrong(call.arguments[key])})
                return [list(x) if j != t else [*turn[:i], changed, *turn[i + 1 :]] for j, x in enumerate(gold)]
    return None


def _reordered(gold: Turns, allowed: Sequence[str]) -> Turns | None:
    return [list(t) for t in reversed(gold)] if len(gold) >= 2 else None


PROBES: Registry[ProbeFn] = Registry("reward probe")
PROBES.add("idle", _idle)
PROBES.add("call_everything", _call_everything)
PROBES.add("repeated", _repeated)
PROBES.add("wrong_argument", _wrong_argument)
PROBES.add("reordered", _reordered)

# ------------------------------------------------------------------------------------------------ signals
SIGNALS: Registry[Callable[[Mapping[str, Any]], float]] = Registry("probe signal")
SIGNALS.add("score", lambda out: float(out["score"]))
SIGNALS.add("tara", lambda out: _mean(decode_turn_rewards(out["turn_rewards"])))
SIGNALS.add("slca", lambda out: float(out["r_tool"]) + float(out["r_sum"]))
SIGNALS.add("slca_tara", lambda out: _mean(decode_turn_rewards(out["turn_rewards"])) + float(out["r_sum"]))
SIGNALS.add("toolpo", lambda out: float(out["r_action"]) + float(out["r_succ"]))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ------------------------------------------------------------------------------------------------ tasks
@dataclass(frozen=True)
class ProbeTask:
    """One task as the probes need it: the verl ground truth (what the reward reads) and where its env lives."""

    task_id: str
    env_dir: Path
    ground_truth: Mapping[str, Any]

    @property
    def gold(self) -> Turns:
        return [list(step) for step in normalize_gold(self.ground_truth.get("gold_tool_calls"))]

    @property
    def allowed(self) -> tuple[str, ...]:
        return tuple(self.ground_truth.get("allowed_tools") or ())

    @property
    def facts(self) -> tuple[str, ...]:
        return tuple(str(f) for f in (self.ground_truth.get("expected_answer") or ()))


@dataclass(frozen=True)
class ProbeResult:
    """Signals of gold and of every applicable probe, and the probes that tie or beat gold on an enforced signal."""

    task_id: str
    gold: dict[str, float]
    probes: dict[str, dict[str, float]] = field(default_factory=dict)

    def margins(self) -> dict[str, dict[str, float]]:
        """probe -> signal -> gold minus probe (> 0: gold strictly above)."""
        return {p: {s: self.gold[s] - v for s, v in sig.items()} for p, sig in self.probes.items()}

    def ties(self, signals: Sequence[str] = ENFORCED_SIGNALS) -> list[str]:
        """Probes scoring at least gold on one of `signals` (the quality stage drops the task)."""
        return [p for p, m in self.margins().items() if any(m[s] <= 1e-9 for s in signals)]


def probe_task_from_row(row: Mapping[str, Any], env_root: Path) -> ProbeTask:
    """A verl row (GUST) as a probe task; relative env dirs resolve against `env_root`."""
    gt = row["reward_model"]["ground_truth"]
    env_dir = Path(str(gt.get("env_dir") or ""))
    task_id = str((row.get("extra_info") or {}).get("task_id"))
    return ProbeTask(task_id, env_dir if env_dir.is_absolute() else Path(env_root) / env_dir, _plain(gt))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) else value


def probe_tasks_from_records(records: Sequence[Any], schemas: Mapping[str, Sequence[Any]],
                             env_dirs: Mapping[str, str | Path]) -> list[ProbeTask]:  # fmt: skip
    """GUST `TaskRecord`s as probe tasks (their verl ground truth via `trainer.convert.gust_row`).

    Args:
        records: Task records.
        schemas: env_id -> the environment's `ToolSchema`s (the catalogue the agent sees).
        env_dirs: env_id -> environment folder; records of other environments are skipped.
    """
    from trainer.convert import gust_row

    tasks = []
    for index, record in enumerate(records):
        if record.env_id not in env_dirs or record.env_id not in schemas:
            continue
        env_dir = Path(env_dirs[record.env_id])
        row = gust_row(record, list(schemas[record.env_id]), env_dir=str(env_dir), index=index)
        tasks.append(ProbeTask(record.task_id, env_dir, row.reward_model.ground_truth.model_dump(mode="json")))
    return tasks


# ------------------------------------------------------------------------------------------------ running
def render_rollout(turns: Turns, outputs: Sequence[Sequence[Any]], reply: str) -> str:
    """A decoded rollout in the agent loop's layout: each turn's `<tool_call>` blocks, then its observations."""
    text = ""
    for turn, outs in zip(turns, outputs, strict=True):
        text += "".join(
            "<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
            + "\n</tool_call>" for c in turn
        )  # fmt: skip
        body = "\n".join(f"<tool_response>\n{json.dumps(o, ensure_ascii=False, default=str)}\n</tool_response>"
                         for o in outs)  # fmt: skip
        text += f"\nuser\n{body}\nassistant\n"
    return text + reply


_VERDICT_KEY = "gust_probe_state_match"  # the probe's own final-state verdict (it executed the calls itself)


class _ProbeScorer(Scorer):
    """The training scorer, but the final-state verdict comes from the probe run: it executed the very calls the
    reward would replay, on the same environment, so replaying them again would only cost time."""

    def _state(self, gt: Any, extra_info: Any, turns: Any, gold: Any) -> StateResult:
        verdict = extra_info.get(_VERDICT_KEY)
        if verdict is None or self.config.state_mode == "off" or not gt.get("expected_final_db_hash"):
            return super()._state(gt, extra_info, turns, gold)
        return StateResult(True, bool(verdict), str(extra_info.get(FINAL_HASH_KEY) or ""))


@dataclass
class _Run:
    """The live session of a task's environment with the initial and gold final DBs (for the state verdict)."""

    session: Any
    initial: dict[str, Any] = field(default_factory=dict)
    gold_db: dict[str, Any] = field(default_factory=dict)


def _execute(session: Any, turns: Turns) -> tuple[list[list[Any]], str]:
    session.reset()
    outputs = [[session.call(c.name, dict(c.arguments)) for c in turn] for turn in turns]
    return outputs, session.db_hash()


def _signals(scorer: Scorer, task: ProbeTask, run: _Run, turns: Turns, reply: str) -> dict[str, float]:
    outputs, final_hash = _execute(run.session, turns)
    expected = str(task.ground_truth.get("expected_final_db_hash") or "")
    same = final_hash == expected or (bool(run.gold_db) and same_final_state(run.session.db(), run.gold_db,
                                                                              run.initial))  # fmt: skip
    info = {
        TURN_CALLS_KEY: json.dumps([[{"name": c.name, "arguments": c.arguments} for c in t] for t in turns]),
        FINAL_HASH_KEY: final_hash,
        FINAL_REPLY_KEY: reply,
        _VERDICT_KEY: same,
    }
    out = scorer.score(render_rollout(turns, outputs, reply), task.ground_truth, info)
    return {name: SIGNALS.get(name)(out) for name in SIGNALS}


def gold_reply(task: ProbeTask) -> str:
    """The closing reply of gold (and of every probe but idle): it states the answer facts."""
    facts = "; ".join(task.facts)
    return "I completed every step of your request." + (f" What I found: {facts}." if facts else "")


def probe_task(task: ProbeTask, session: Any, scorer: Scorer | None = None) -> ProbeResult:
    """Score gold and every applicable probe of one task on `session` (a live session of its environment).

    Args:
        task: The task.
        session: An `envgen.runtime` session of the task's environment (reset before each trajectory).
        scorer: The scorer (default: the training defaults — heuristic judge, state check from the rollout).
    """
    scorer = scorer or _ProbeScorer(RewardConfig(state_mode="rollout"))
    gold = task.gold
    session.reset()
    run = _Run(session, initial=session.db())
    result = ProbeResult(task.task_id, _signals(scorer, task, run, gold, gold_reply(task)))
    run.gold_db = session.db()
    for name in PROBES:
        turns = PROBES.get(name)(gold, task.allowed)
        if turns is None:
            continue
        reply = IDLE_REPLY if name == "idle" else gold_reply(task)
        result.probes[name] = _signals(scorer, task, run, turns, reply)
    return result


def probe_tasks(tasks: Sequence[ProbeTask], config: RewardConfig | None = None) -> dict[str, ProbeResult]:
    """Probe every task, one live session per environment; a task whose environment cannot start is skipped.

    Args:
        tasks: The tasks.
        config: Reward options (default: the training defaults with the state check from the rollout).
    """
    from gustforge.errors import GustError

    scorer = _ProbeScorer(config or RewardConfig(state_mode="rollout"))
    results: dict[str, ProbeResult] = {}
    by_env: dict[Path, list[ProbeTask]] = {}
    for task in tasks:
        by_env.setdefault(task.env_dir, []).append(task)
    try:
        for env_dir, env_tasks in sorted(by_env.items()):
            try:
                env = load_environment(env_dir)
                with env.session() as session:
                    for task in env_tasks:
                        results[task.task_id] = probe_task(task, session, scorer)
            except GustError:
                continue
    finally:
        scorer.close()
    return results


def margin_summary(results: Mapping[str, ProbeResult]) -> dict[str, dict[str, dict[str, float]]]:
    """probe -> signal -> {tasks, min, mean, below (share of tasks where gold is strictly above)}."""
    table: dict[str, dict[str, list[float]]] = {}
    for result in results.values():
        for probe, margins in result.margins().items():
            for signal, margin in margins.items():
                table.setdefault(probe, {}).setdefault(signal, []).append(margin)
    return {
        probe: {
            signal: {"tasks": float(len(m)), "min": round(min(m), 4), "mean": round(sum(m) / len(m), 4),
                     "below": round(sum(x > 1e-9 for x in m) / len(m), 4)}
            for signal, m in sorted(signals.items())
        }
        for probe, signals in sorted(table.items())
    }  # fmt: skip


def probe_records(records: Sequence[Any], schemas: Mapping[str, Mapping[str, Any]],
                  env_dirs: Mapping[str, str | Path]) -> dict[str, ProbeResult]:  # fmt: skip
    """Probe GUST records (the quality stage's entry point).

    Args:
        records: `TaskRecord`s.
        schemas: env_id -> tool name -> `ToolSchema` (as `tdg.quality.load_env_schemas` reads them).
        env_dirs: env_id -> environment folder.
    """
    catalogue = {env: list(tools.values()) for env, tools in schemas.items()}
    return probe_tasks(probe_tasks_from_records(records, catalogue, env_dirs))


def probe_failures(results: Mapping[str, ProbeResult]) -> dict[str, tuple[str, str]]:
    """task_id -> (``probe_ties_gold:<probe>``, the margins as JSON) for every task where a probe ties gold."""
    out = {}
    for task_id, result in results.items():
        ties = result.ties()
        if ties:
            detail = json.dumps({"gold": result.gold, "margins": result.margins()}, sort_keys=True)[:2000]
            out[task_id] = (f"{DROP_PREFIX}:{ties[0]}", detail)
    return out
