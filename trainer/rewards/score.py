"""One trajectory → the reward-components dict of the contract in `trainer.rewards` (HierR + judge + omission
guard + TARA per-turn + ToolPO paper rewards + state equivalence).

`Scorer.score` is total: any input (bad ground truth, numpy columns, garbage recorded calls with string / list /
number / null arguments, a missing environment, a judge outage, an internal bug) gives the full key set; what went
wrong is an `error_type` value, never an exception, because verl evicts the whole prompt group when the reward
function raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.answers import answer_coverage, normalize_facts
from gustforge.errors import GustError
from trainer.rewards import COMPONENT_KEYS, NO_CALL_PENALTY
from trainer.rewards.hierr import HierRScores, HierRWeights, hierr_score, loose_eq
from trainer.rewards.judge import JUDGES, Judge, JudgeInput, JudgeResult, make_judge_input, short_circuit
from trainer.rewards.parse import (
    BlockParse,
    Call,
    extract_tool_calls,
    final_response,
    first_step_calls,
    normalize_gold,
    parse_calls_lenient,
    split_agent_turns,
    strip_think,
    tool_responses,
)
from trainer.rewards.state import StateResult, load_environment, state_equivalence
from trainer.rewards.tara import DEFAULT_TURN_RULE, TURN_RULES, tara_turn_rewards

__all__ = [
    "RewardConfig",
    "Scorer",
    "SessionPool",
    "TURN_CALLS_KEY",
    "FINAL_HASH_KEY",
    "PARSED_CALLS_KEY",
    "LOOP_CLASS_KEY",
    "agent_turn_calls",
    "toolpo_rewards",
]

logger = logging.getLogger(__name__)

# extra_info keys written by `trainer.agent_loop.GustToolAgentLoop` (via the agent loop's extra_fields).
TURN_CALLS_KEY = "gust_turn_calls"
FINAL_HASH_KEY = "gust_final_db_hash"
PARSED_CALLS_KEY = "gust_parsed_calls"
LOOP_CLASS_KEY = "gust_agent_loop_class"
FINAL_REPLY_KEY = "gust_final_reply"  # the agent loop's record: text of the last SCORED generation (judge input)
_STATE_MODES = ("replay", "rollout", "off")
_PAR_UNITS = ("step", "block")


@dataclass(frozen=True)
class RewardConfig:
    """Reward knobs (all reachable from verl's `custom_reward_function.reward_kwargs`).

    Attributes:
        judge: Judge backend name in `JUDGES` ("heuristic" offline default, or "llm").
        judge_options: Backend options (llm: base_url, model, api_key_env, timeout_s, max_retries, max_tokens).
        weights: HierR sub-score weights.
        w_process: Weight of R_tool in `score`.
        w_summary: Weight of R_sum in `score`.
        no_call_penalty: R_sum override (and score) of the omission guard.
        state_mode: "rollout" (default: the final DB hash the agent loop reported from the trajectory's own env; a
            hash that is absent or differs from gold's is re-checked by replay), "replay" (replay the parsed calls on
            pooled sandbox sessions of the environment, reset between trajectories) or "off" (no state check: the
            goal term has no state part). A replayed state that differs from gold's by hash is compared with the
            replayed gold modulo creation order (`data.state_canon`).
        env_root: Base folder for relative `env_dir` values (the root `trainer.convert` records in the parquet).
        par_unit: S_par counts the first "step" (turn; the paper) or the first "block" (the reference code).
        turn_rule: TARA's per-turn rule, a `TURN_RULES` name: "exact" (default; an extra or repeated call in the
            turn costs the turn) or "subset" (the paper's: extra calls allowed).
        w_goal: Weight of R_goal in `score` (turn-level GUST rows only; see `goal_reward`).
    """

    judge: str = "heuristic"
    judge_options: Mapping[str, Any] = field(default_factory=dict)
    weights: HierRWeights = HierRWeights()
    w_process: float = 1.0
    w_summary: float = 1.0
    no_call_penalty: float = NO_CALL_PENALTY
    state_mode: str = "rollout"
    env_root: str = "."
    par_unit: str = "step"
    turn_rule: str = DEFAULT_TURN_RULE
    w_goal: float = 1.0

    def __post_init__(self) -> None:
        if self.state_mode not in _STATE_MODES:
            raise ValueError(f"state_mode must be one of {_STATE_MODES}, got {self.state_mode!r}")
        if self.par_unit not in _PAR_UNITS:
            raise ValueError(f"par_unit must be one of {_PAR_UNITS}, got {self.par_unit!r}")
        if self.turn_rule not in TURN_RULES:
            raise ValueError(f"turn_rule must be one of {TURN_RULES.names()}, got {self.turn_rule!r}")


def goal_reward(turn_rewards: Sequence[float], state: StateResult, facts: Sequence[str], reply: str) -> float:
    """R_goal of a turn-level (GUST) row: the mean of the goal checks that apply — the exact per-turn calls (TARA's
    turn-reward mean: an extra, repeated, missing or reordered call costs), the final state (when checked) and the
    answer facts in the final reply (when the row has some). 0.0 when no check applies."""
    parts = [sum(turn_rewards) / len(turn_rewards)] if turn_rewards else []
    if state.checked:
        parts.append(1.0 if state.match else 0.0)
    if facts:
        parts.append(answer_coverage(facts, reply))
    return sum(parts) / len(parts) if parts else 0.0


def _plain(value: Any) -> Any:
    """numpy arrays / scalars (pandas-loaded parquet columns) to Python values."""
    return value.tolist() if hasattr(value, "tolist") and not isinstance(value, (str, bytes)) else value


def _decode_json(value: Any, default: Any) -> Any:
    value = _plain(value)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return default
    return value


def _recorded_arguments(value: Any) -> dict[str, Any] | None:
    """Arguments as the rollout recorded them: an object, or a JSON string holding one; anything else is invalid."""
    value = _plain(value)
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _recorded_turns(recorded: Any) -> list[list[Call]] | None:
    turns = _decode_json(recorded, None)
    if not isinstance(turns, list):
        return None
    out: list[list[Call]] = []
    for turn in turns:
        calls: list[Call] = []
        for item in _plain(turn) if isinstance(_plain(turn), list) else []:
            item = _plain(item)
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
                continue
            arguments = _recorded_arguments(item.get("arguments"))
            if arguments is not None:
                calls.append(Call(item["name"], arguments))
        out.append(calls)
    return out


def judged_reply(text: str, extra_info: Mapping[str, Any]) -> str:
    """The reply the summary judge rates: the agent's last SCORED generation when the loop recorded it
    (``gust_final_reply``; in simulated-user mode the decoded response also holds the user's messages, which the judge
    must not see), else `final_response` of the whole think-stripped response (reference §6.8)."""
    recorded = extra_info.get(FINAL_REPLY_KEY)
    return final_response(strip_think(recorded)) if isinstance(recorded, str) else final_response(text)


def agent_turn_calls(solution_str: str, extra_info: Mapping[str, Any] | None) -> list[list[Call]]:
    """The agent's calls per generation turn: the agent loop's record when present and readable, else parsed
    from the text. Recorded calls whose arguments are not an object (string, list, number) are dropped: the
    reward counts them as invalid, like the block parser does."""
    recorded = (extra_info or {}).get(TURN_CALLS_KEY) if isinstance(extra_info, Mapping) else None
    turns = _recorded_turns(recorded) if recorded is not None else None
    if turns is not None:
        return turns
    return [parse_calls_lenient(strip_think(turn)) for turn in split_agent_turns(solution_str)]


def _strict_match(gold: Call, pred: Call) -> bool:
    """ToolPO's C(a): same name, every gold key present, every gold value loosely equal."""
    return gold.name == pred.name and all(
        key in pred.arguments and loose_eq(pred.arguments[key], value) for key, value in gold.arguments.items()
    )


def _max_matching(gold: Sequence[Call], pred: Sequence[Call]) -> int:
    """Size of a maximum one-to-one matching of gold calls to strictly matching predicted calls."""
    owner = [-1] * len(pred)

    def augment(g: int, seen: list[bool]) -> bool:
        for p, call in enumerate(pred):
            if seen[p] or not _strict_match(gold[g], call):
                continue
            seen[p] = True
            if owner[p] < 0 or augment(owner[p], seen):
                owner[p] = g
                return True
        return False

    return sum(augment(g, [False] * len(pred)) for g in range(len(gold)))


def toolpo_rewards(
    parsed: BlockParse, gold: Sequence[Sequence[Call]], first_step: Sequence[Call]
) -> tuple[float, float]:
    """ToolPO's paper rewards (SLCA-GRPO App. C.4): (R_succ by the reference rule of Eq. 28, R_action).

    R_action = Σ C(a) / |gold_flat| with a one-to-one strict matching (1.0 when there is no gold and no call).
    R_succ = 1 iff every tag pair is a valid block (N_valid = N_open = N_close), the predicted and gold name
    multisets are equal, the first step has as many calls as the first gold step, and every gold call has a strict
    match (its keys present, values loosely equal).
    """
    flat = [call for step in gold for call in step]
    calls = list(parsed.calls)
    matched = _max_matching(flat, calls) if flat else 0
    r_action = matched / len(flat) if flat else (0.0 if calls else 1.0)
    well_formed = parsed.valid_n == parsed.open_n == parsed.close_n
    same_names = sorted(c.name for c in calls) == sorted(c.name for c in flat)
    same_init = len(first_step) == (len(gold[0]) if gold else 0)
    r_succ = float(well_formed and same_names and same_init and matched == len(flat))
    return r_succ, float(r_action)


@dataclass(frozen=True, slots=True)
class _Prep:
    gt: Mapping[str, Any]
    extra_info: Mapping[str, Any]
    parsed: BlockParse
    first_step: tuple[Call, ...]
    gold: list[list[Call]]
    turns: list[list[Call]]
    omission: bool
    judge_input: JudgeInput
    executed: list[list[Call]] | None = None  # the loop's record of executed calls per turn (None: text only)
    reply: str = ""  # the agent's final reply (what the answer facts are checked in)

    def scored(self) -> tuple[BlockParse, tuple[Call, ...]]:
        """(block parse, first step) HierR and ToolPO score: the EXECUTED calls when the loop recorded them (calls
        beyond ``max_parallel_calls`` or after a turn cap were never run and earn nothing), with the text's block
        counts kept for S_fmt (parse errors still cost); else the text's parse."""
        if self.executed is None:
            return self.parsed, self.first_step
        calls = tuple(c for turn in self.executed for c in turn)
        first = next((tuple(turn) for turn in self.executed if turn), ())
        return dataclasses.replace(self.parsed, calls=calls), first


@dataclass(frozen=True, slots=True)
class _ResetSession:
    """Looks like an Environment whose `session()` hands out one live session, reset to the initial DB."""

    live: Any

    def session(self, limits: Any = None) -> Any:
        self.live.reset()
        return contextlib.nullcontext(self.live)


class _DiscardSession(Exception):
    def __init__(self, result: StateResult) -> None:
        super().__init__(result.error)
        self.result = result


class SessionPool:
    """Live sandbox sessions per environment folder, reused (reset) across trajectories; thread-safe.

    verl runs the synchronous reward function in executor threads, so several replays may run at once: each takes
    a free session of its environment (or starts one) and puts it back after the replay.
    """

    def __init__(self) -> None:
        self._free: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lease(self, env_dir: Path) -> Iterator[Any]:
        """A live session of `env_dir`, returned to the pool afterwards (closed instead if the replay failed)."""
        key = str(env_dir)
        with self._lock:
            free = self._free.setdefault(key, [])
            session = free.pop() if free else None
        if session is None:
            session = load_environment(env_dir).session()
        try:
            yield session
        except BaseException:
            session.close()
            raise
        with self._lock:
            self._free[key].append(session)

    def close(self) -> None:
        with self._lock:
            sessions = [s for free in self._free.values() for s in free]
            self._free.clear()
        for session in sessions:
            session.close()


def _empty(error_type: str) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(COMPONENT_KEYS, 0)
    floats = (
        "score",
        "acc",
        "r_tool",
        "r_sum",
        "r_succ",
        "r_action",
        "s_fmt",
        "s_name",
        "s_key",
        "s_val",
        "s_par",
        "r_goal",
        "answer_match",
    )
    out.update({key: 0.0 for key in floats})
    out.update(judge="none", turn_rewards="[]", turn_reward_mean=0.0, state_match=0.0, error_type=error_type)
    return out


class Scorer:
    """Scores trajectories; holds the judge (and its LLM client) and the replay session pool, built once."""

    def __init__(self, config: RewardConfig = RewardConfig(), judge: Judge | None = None) -> None:
        self.config = config
        self.judge = judge if judge is not None else JUDGES.get(config.judge)(dict(config.judge_options))
        self.pool = SessionPool()

    def close(self) -> None:
        """Stop the pooled sandbox sessions."""
        self.pool.close()

    def score_batch(
        self, items: Sequence[tuple[str, Mapping[str, Any] | Any, Mapping[str, Any] | None]]
    ) -> list[dict[str, Any]]:
        """Score many trajectories (state replays reuse the pooled sessions). Results equal `score` item by item.

        Args:
            items: (solution_str, ground_truth, extra_info) per trajectory.

        Returns:
            One components dict per item, in order.
        """
        return [self.score(solution, gt, info) for solution, gt, info in items]

    def score(
        self,
        solution_str: str,
        ground_truth: Mapping[str, Any] | Any,
        extra_info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score one trajectory synchronously (the judge runs inline). Never raises.

        Args:
            solution_str: The decoded response.
            ground_truth: `reward_model.ground_truth` of the row (see `trainer.rows.GroundTruth`).
            extra_info: The row's extra_info merged with the agent loop's extra fields.

        Returns:
            The components dict (exactly `COMPONENT_KEYS`).
        """
        try:
            prep = self._prepare(solution_str, ground_truth, extra_info)
            if isinstance(prep, dict):
                return prep
            judged = None if prep.omission else short_circuit(prep.judge_input) or self.judge.rate(prep.judge_input)
            return self._finish(prep, judged)
        except Exception:  # noqa: BLE001 - the contract: errors become error_type values, verl must not see them
            logger.exception("reward computation failed; scoring the trajectory as internal_error")
            return _empty("internal_error")

    async def ascore(
        self,
        solution_str: str,
        ground_truth: Mapping[str, Any] | Any,
        extra_info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`score` with the judge awaited (for verl's async reward loop). Never raises."""
        try:
            prep = self._prepare(solution_str, ground_truth, extra_info)
            if isinstance(prep, dict):
                return prep
            judged = None
            if not prep.omission:
                judged = short_circuit(prep.judge_input) or await self.judge.arate(prep.judge_input)
            # the state replay talks to a sandbox process: keep it off the event loop
            return await asyncio.to_thread(self._finish, prep, judged)
        except Exception:  # noqa: BLE001 - see score
            logger.exception("reward computation failed; scoring the trajectory as internal_error")
            return _empty("internal_error")

    def _prepare(
        self, solution_str: Any, ground_truth: Any, extra_info: Mapping[str, Any] | None
    ) -> _Prep | dict[str, Any]:
        ground_truth = _plain(ground_truth)
        if not isinstance(ground_truth, Mapping):
            return _empty("invalid_ground_truth")
        allowed_raw = _decode_json(ground_truth.get("allowed_tools"), [])
        if not isinstance(allowed_raw, list) or not all(isinstance(name, str) for name in allowed_raw):
            return _empty("invalid_ground_truth")
        if not allowed_raw:
            return _empty("missing_allowed_tools")
        if not isinstance(solution_str, str):
            solution_str = "" if solution_str is None else str(solution_str)
        info: Mapping[str, Any] = extra_info if isinstance(extra_info, Mapping) else {}
        text = strip_think(solution_str)
        parsed = extract_tool_calls(text, allowed_raw)
        try:
            gold = normalize_gold(ground_truth.get("gold_tool_calls"))
        except (ValueError, TypeError, AttributeError):  # json.JSONDecodeError is a ValueError
            return _empty("invalid_ground_truth")
        turns = agent_turn_calls(solution_str, info)
        question = str(ground_truth.get("question_content") or info.get("question") or "")
        first = first_step_calls(solution_str, allowed_raw)
        return _Prep(
            gt=ground_truth,
            extra_info=info,
            parsed=parsed,
            first_step=tuple(first or ()),
            gold=gold,
            turns=turns,
            omission=bool(gold) and parsed.open_n == 0,
            executed=_recorded_turns(info.get(TURN_CALLS_KEY)) if info.get(TURN_CALLS_KEY) is not None else None,
            judge_input=make_judge_input(question, tool_responses(solution_str), judged_reply(text, info)),
            reply=judged_reply(text, info),
        )

    def _state(
        self, gt: Mapping[str, Any], extra_info: Mapping[str, Any], turns: list[list[Call]], gold: list[list[Call]]
    ) -> StateResult:
        env_dir, expected = str(gt.get("env_dir") or ""), str(gt.get("expected_final_db_hash") or "")
        if self.config.state_mode == "off" or not env_dir or not expected:
            return StateResult(False, False)
        reported = extra_info.get(FINAL_HASH_KEY)
        if self.config.state_mode == "rollout" and reported == expected:
            return StateResult(True, True, str(reported))  # a differing hash is re-checked modulo creation order
        path = Path(env_dir)
        path = path if path.is_absolute() else Path(self.config.env_root) / path
        calls = [call for turn in turns for call in turn]
        try:
            with self.pool.lease(path) as live:
                gold_calls = [call for step in gold for call in step]
                result = state_equivalence(_ResetSession(live), calls, expected, gold_calls=gold_calls)
                if result.error:
                    raise _DiscardSession(result)  # a sandbox fault: do not hand this session out again
                return result
        except _DiscardSession as discarded:
            return discarded.result
        except GustError as exc:  # missing / broken environment folder
            logger.warning("state replay impossible for %s: %s", path, exc)
            return StateResult(True, False, "", f"{type(exc).__name__}: {exc}")

    def _finish(self, prep: _Prep, judged: JudgeResult | None) -> dict[str, Any]:
        gt, gold, turns = prep.gt, prep.gold, prep.turns
        parsed, executed_first = prep.scored()
        cfg = self.config
        out = _empty("none")
        if prep.omission:
            r_tool, r_sum = 0.0, cfg.no_call_penalty
            out.update(omission=1, score=cfg.no_call_penalty)
        else:
            assert judged is not None
            first_step = executed_first if cfg.par_unit == "step" else None
            hier: HierRScores = hierr_score(parsed, gold, cfg.weights, first_step=first_step)
            r_tool, r_sum = hier.r_tool, judged.score
            out.update(s_fmt=hier.s_fmt, s_name=hier.s_name, s_key=hier.s_key, s_val=hier.s_val, s_par=hier.s_par)
            out.update(judge=judged.backend, judge_failed=int(judged.failed))
            out.update(judge_parse_failed=int(judged.parse_failed), no_tool_response=int(judged.no_tool_response))
            out["score"] = cfg.w_process * r_tool + cfg.w_summary * r_sum
        r_succ, r_action = toolpo_rewards(parsed, gold, executed_first)
        turn_level = bool(gt.get("turn_level"))
        turn_rewards = tara_turn_rewards(gold, turns, cfg.turn_rule) if turn_level and gold else []
        state = self._state(gt, prep.extra_info, turns, gold)
        facts = normalize_facts(gt.get("expected_answer"))
        r_goal = goal_reward(turn_rewards, state, facts, prep.reply) if turn_level else 0.0
        if not prep.omission:
            out["score"] = out["score"] + cfg.w_goal * r_goal
        out.update(
            r_goal=float(r_goal),
            answer_checked=int(bool(facts)),
            answer_match=answer_coverage(facts, prep.reply) if facts else 0.0,
            r_tool=float(r_tool),
            r_sum=float(r_sum),
            score=float(out["score"]),
            acc=float(out["score"]),
            r_succ=r_succ,
            r_action=r_action,
            turn_rewards=json.dumps(turn_rewards),
            turn_count=len(turn_rewards),
            turn_reward_mean=sum(turn_rewards) / len(turn_rewards) if turn_rewards else 0.0,
            agent_turns=len(turns),
            state_checked=int(state.checked),
            state_match=1.0 if state.match else 0.0,
            gold_call_count=sum(len(step) for step in gold),
            pred_call_count=len(parsed.calls),  # what HierR scored (executed when recorded)
            text_call_count=len(prep.parsed.calls),  # what the reward's parser reads in the text
        )
        if state.error:
            out["error_type"] = "state_replay_error"
        return out
