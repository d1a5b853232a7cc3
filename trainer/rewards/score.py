"""One trajectory → the reward-components dict of the contract in `trainer.rewards` (HierR + judge + omission
guard + TARA per-turn + state equivalence).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.rewards import COMPONENT_KEYS, NO_CALL_PENALTY
from trainer.rewards.hierr import HierRScores, HierRWeights, hierr_score
from trainer.rewards.judge import JUDGES, Judge, JudgeInput, JudgeResult, make_judge_input, short_circuit
from trainer.rewards.parse import (
    BlockParse,
    Call,
    extract_tool_calls,
    final_response,
    normalize_gold,
    parse_calls_lenient,
    split_agent_turns,
    strip_think,
    tool_responses,
)
from trainer.rewards.state import StateResult, load_environment, state_equivalence
from trainer.rewards.tara import tara_turn_rewards

__all__ = ["RewardConfig", "Scorer", "TURN_CALLS_KEY", "FINAL_HASH_KEY", "agent_turn_calls"]

# extra_info keys written by `trainer.agent_loop.GustToolAgentLoop` (via the agent loop's extra_fields).
TURN_CALLS_KEY = "gust_turn_calls"
FINAL_HASH_KEY = "gust_final_db_hash"
_STATE_MODES = ("replay", "rollout", "off")


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
        state_mode: "replay" (fresh env, replay the parsed calls), "rollout" (use the final DB hash the agent
            loop reported from the trajectory's own env, replay when absent) or "off".
        env_root: Base folder for relative `env_dir` values.
    """

    judge: str = "heuristic"
    judge_options: Mapping[str, Any] = field(default_factory=dict)
    weights: HierRWeights = HierRWeights()
    w_process: float = 1.0
    w_summary: float = 1.0
    no_call_penalty: float = NO_CALL_PENALTY
    state_mode: str = "replay"
    env_root: str = "."

    def __post_init__(self) -> None:
        if self.state_mode not in _STATE_MODES:
            raise ValueError(f"state_mode must be one of {_STATE_MODES}, got {self.state_mode!r}")


def _decode_json(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        return json.loads(value)
    return value.tolist() if hasattr(value, "tolist") else value


def agent_turn_calls(solution_str: str, extra_info: Mapping[str, Any] | None) -> list[list[Call]]:
    """The agent's calls per generation turn: the agent loop's record when present, else parsed from the text."""
    recorded = (extra_info or {}).get(TURN_CALLS_KEY)
    if recorded is not None and recorded != "":
        turns = _decode_json(recorded, [])
        return [[Call(c["name"], dict(c.get("arguments") or {})) for c in turn] for turn in turns]
    return [parse_calls_lenient(strip_think(turn)) for turn in split_agent_turns(solution_str)]


@dataclass(frozen=True, slots=True)
class _Prep:
    gt: Mapping[str, Any]
    extra_info: Mapping[str, Any]
    parsed: BlockParse
    gold: list[list[Call]]
    turns: list[list[Call]]
    omission: bool
    judge_input: JudgeInput


@dataclass(frozen=True, slots=True)
class _ResetSession:
    """Looks like an Environment whose `session()` hands out one live session, reset to the initial DB."""

    live: Any

    def session(self, limits: Any = None) -> Any:
        self.live.reset()
        return contextlib.nullcontext(self.live)


def _empty(error_type: str) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(COMPONENT_KEYS, 0)
    out.update({key: 0.0 for key in ("score", "r_tool", "r_sum", "s_fmt", "s_name", "s_key", "s_val", "s_par")})
    out.update(judge="none", turn_rewards="[]", turn_reward_mean=0.0, state_match=0.0, error_type=error_type)
    return out


class Scorer:
    """Scores trajectories; holds the judge (and its LLM client) so that it is built once per scorer."""

    def __init__(self, config: RewardConfig = RewardConfig(), judge: Judge | None = None) -> None:
        self.config = config
        self.judge = judge if judge is not None else JUDGES.get(config.judge)(dict(config.judge_options))
        # Only set inside `score_batch`: env dir -> live session reused (reset) across the batch's replays.
        self._sessions: dict[str, Any] | None = None

    def score_batch(
        self, items: Sequence[tuple[str, Mapping[str, Any] | Any, Mapping[str, Any] | None]]
    ) -> list[dict[str, Any]]:
        """Score many trajectories; state replays reuse one sandbox session per environment (reset between
        trajectories) instead of starting a worker per trajectory. Results equal `score` item by item.

        Args:
            items: (solution_str, ground_truth, extra_info) per trajectory.

        Returns:
            One components dict per item, in order.
        """
        self._sessions = {}
        try:
            return [self.score(solution, gt, info) for solution, gt, info in items]
        finally:
            sessions, self._sessions = self._sessions, None
            for session in sessions.values():
                session.close()

    def score(
        self,
        solution_str: str,
        ground_truth: Mapping[str, Any] | Any,
        extra_info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score one trajectory synchronously (the judge runs inline).

        Args:
            solution_str: The decoded response.
            ground_truth: `reward_model.ground_truth` of the row (see `trainer.rows.GroundTruth`).
            extra_info: The row's extra_info merged with the agent loop's extra fields.

        Returns:
            The components dict (exactly `COMPONENT_KEYS`).
        """
        prep = self._prepare(solution_str, ground_truth, extra_info)
        if isinstance(prep, dict):
            return prep
        judged = None if prep.omission else short_circuit(prep.judge_input) or self.judge.rate(prep.judge_input)
        return self._finish(prep, judged)

    async def ascore(
        self,
        solution_str: str,
        ground_truth: Mapping[str, Any] | Any,
        extra_info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`score` with the judge awaited (for verl's async reward loop)."""
        prep = self._prepare(solution_str, ground_truth, extra_info)
        if isinstance(prep, dict):
            return prep
        judged = None
        if not prep.omission:
            judged = short_circuit(prep.judge_input) or await self.judge.arate(prep.judge_input)
        # the state replay talks to a sandbox process: keep it off the event loop
        return await asyncio.to_thread(self._finish, prep, judged)

    def _prepare(
        self, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
    ) -> _Prep | dict[str, Any]:
        if not isinstance(ground_truth, Mapping):
            return _empty("invalid_ground_truth")
        allowed = list(_decode_json(ground_truth.get("allowed_tools"), []) or [])
        if not allowed:
            return _empty("missing_allowed_tools")
        text = strip_think(solution_str)
        parsed = extract_tool_calls(text, allowed)
        gold = normalize_gold(ground_truth.get("gold_tool_calls"))
        turns = agent_turn_calls(solution_str, extra_info)
        question = str(ground_truth.get("question_content") or (extra_info or {}).get("question") or "")
        return _Prep(
            gt=ground_truth,
            extra_info=extra_info or {},
            parsed=parsed,
            gold=gold,
            turns=turns,
            omission=bool(gold) and parsed.open_n == 0,
            judge_input=make_judge_input(question, tool_responses(solution_str), final_response(text)),
        )

    def _state(self, gt: Mapping[str, Any], extra_info: Mapping[str, Any], turns: list[list[Call]]) -> StateResult:
        env_dir, expected = str(gt.get("env_dir") or ""), str(gt.get("expected_final_db_hash") or "")
        if self.config.state_mode == "off" or not env_dir or not expected:
            return StateResult(False, False)
        reported = extra_info.get(FINAL_HASH_KEY)
        if self.config.state_mode == "rollout" and reported:
            return StateResult(True, reported == expected, str(reported))
        path = Path(env_dir)
        path = path if path.is_absolute() else Path(self.config.env_root) / path
        calls = [call for turn in turns for call in turn]
        if self._sessions is None:
            return state_equivalence(load_environment(path), calls, expected)
        key = str(path)
        if key not in self._sessions:
            self._sessions[key] = load_environment(path).session()
        return state_equivalence(_ResetSession(self._sessions[key]), calls, expected)

    def _finish(self, prep: _Prep, judged: JudgeResult | None) -> dict[str, Any]:
        gt, parsed, gold, turns = prep.gt, prep.parsed, prep.gold, prep.turns
        cfg = self.config
        out = _empty("none")
        if prep.omission:
            r_tool, r_sum = 0.0, cfg.no_call_penalty
            out.update(omission=1, score=cfg.no_call_penalty)
        else:
            assert judged is not None
            hier: HierRScores = hierr_score(parsed, gold, cfg.weights)
            r_tool, r_sum = hier.r_tool, judged.score
            out.update(s_fmt=hier.s_fmt, s_name=hier.s_name, s_key=hier.s_key, s_val=hier.s_val, s_par=hier.s_par)
            out.update(judge=judged.backend, judge_failed=int(judged.failed))
            out.update(judge_parse_failed=int(judged.parse_failed), no_tool_response=int(judged.no_tool_response))
            out["score"] = cfg.w_process * r_tool + cfg.w_summary * r_sum
        turn_rewards = tara_turn_rewards(gold, turns) if gt.get("turn_level") and gold else []
        state = self._state(gt, prep.extra_info, turns)
        out.update(
            r_tool=float(r_tool),
            r_sum=float(r_sum),
            score=float(out["score"]),
            turn_rewards=json.dumps(turn_rewards),
            turn_count=len(turn_rewards),
            turn_reward_mean=sum(turn_rewards) / len(turn_rewards) if turn_rewards else 0.0,
            agent_turns=len(turns),
            state_checked=int(state.checked),
            state_match=1.0 if state.match else 0.0,
            gold_call_count=sum(len(step) for step in gold),
            pred_call_count=len(parsed.calls),
        )
        if state.error:
            out["error_type"] = "state_replay_error"
        return out
