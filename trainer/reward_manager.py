"""Place per-turn and per-segment rewards on tokens, so verl's registered estimators can read them back.

Why this lives at the agent-loop output and not in a reward manager (measured on verl 0.9.1):
* A registered estimator receives only ``token_level_rewards``, ``response_mask``, ``index`` and ``config``.
* With a rule-based reward (``reward_model.enable: false``, both papers' setting) the reward is computed in
  the AgentLoopWorker (``AgentLoopWorker._compute_score`` → RewardLoopWorker → reward manager ``run_single``),
  which yields ONE scalar ``reward_score`` per trajectory; ``AgentLoopOutput.as_dict()`` (V1 trainer,
  ``trainer/ppo/v1/agent_loop_tq.py``) then builds ``rm_scores`` with that scalar on the last token, and
  ``rm_scores`` becomes ``token_level_scores``/``token_level_rewards``.
* The reward-manager registry (``verl.experimental.reward_loop.reward_manager.register``) can replace
  ``run_single`` (still one scalar out) and the classmethod ``assemble_rm_scores``, but the latter only runs
  on the colocated reward-MODEL path (``RewardLoopManager.compute_rm_score``) and receives no
  ``response_mask`` there, so it cannot find turn boundaries.
Hence the hook that works without patching verl: the agent loop returns a ``SegmentRewardOutput`` (an
``AgentLoopOutput`` subclass) whose ``as_dict()`` rebuilds ``rm_scores`` from the reward components
(``reward_extra_info``, contract in `trainer.rewards`) and the response mask. Mix ``SegmentRewardMixin``
into the agent loop class (before the verl base) to get it. Legacy trainer (``trainer.use_v1: false``)
builds ``rm_scores`` elsewhere (``AgentLoopWorker._postprocess``) and is not supported; `trainer.launch`
rejects that combination.

Layouts (``LAYOUTS``; chosen from ``algorithm.adv_estimator`` by ``layout_for_estimator``); "end of run j" is
the last mask-1 token of the j-th run of ``response_mask == 1``; the summary is the last run:
* ``outcome`` (grpo and every other verl estimator): ``score`` on the last response token (verl's default).
* ``slca``: ``r_tool`` at the end of the last tool run, ``r_sum`` at the end of the summary run.
* ``tara``: ``turn_rewards[t]`` at the end of run t, for t < min(T, #runs).
* ``slca_tara``: ``turn_rewards[t]`` at the end of tool run t (t < min(T, #runs − 1)), ``r_sum`` at the
  end of the summary run.
* ``toolpo`` (ToolPO's paper rewards, SLCA-GRPO App. C.4): ``r_succ`` (R_succ by the rule of Eq. 28) at the end of
  the summary run, ``r_action`` at the end of the last tool run. No omission override (ToolPO has none).
* ``toolpo_hierr`` (the reference code's ``toolpo_grpo`` variant, ``algorithm.gust.toolpo_reward: hierr``):
  ``score`` (HierR total) at the end of the summary run, ``r_tool`` at the end of the last tool run.
Unscored runs: a loop that adds generations which are not turns of the task (issue 13's simulated user: replies
answered by the user) lists their run indices (0-based runs of ``response_mask == 1``) as JSON in
``extra_fields[UNSCORED_RUNS_KEY]``; ``SegmentRewardOutput`` zeroes those runs before finding the run ends, so every
layout counts and rewards the remaining (environment-facing) runs only.
Omission guard (reference §7.2): when ``omission`` is set or ``score < 0`` every tool-side value is 0 and the
summary carries ``score`` (−0.5) — an override, not a subtraction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from pydantic import PrivateAttr
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from data.models import StrictModel
from gustforge.errors import InputError
from gustforge.registry import Registry
from trainer.rewards import decode_turn_rewards

__all__ = [
    "LAYOUTS",
    "UNSCORED_RUNS_KEY",
    "LayoutFn",
    "SegmentRewardMixin",
    "SegmentRewardOutput",
    "TurnTokenCapMixin",
    "SegmentRewards",
    "layout_for_config",
    "layout_for_estimator",
    "mask_runs",
    "place_rewards",
    "run_ends",
    "with_segment_rewards",
]

UNSCORED_RUNS_KEY = "gust_user_turns"  # extra_fields: JSON list of run indices that get no reward token
_ESTIMATOR_LAYOUT = {"slca": "slca", "tara": "tara", "slca_tara": "slca_tara", "toolpo": "toolpo"}


class SegmentRewards(StrictModel):
    """The reward components the layouts need (a subset of `trainer.rewards.COMPONENT_KEYS`)."""

    score: float
    r_tool: float = 0.0
    r_sum: float = 0.0
    r_succ: float = 0.0
    r_action: float = 0.0
    omission: bool = False
    turn_rewards: tuple[float, ...] = ()

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> SegmentRewards:
        """Build from one sample's ``reward_extra_info`` (numpy scalars and the JSON ``turn_rewards`` ok).

        Raises:
            InputError: ``score`` is missing (the reward function is not `trainer.compute_score`).
        """
        if "score" not in info:
            raise InputError(f"reward_extra_info has no 'score' (keys: {sorted(info)}); use trainer.compute_score")
        return cls(
            score=float(info["score"]),
            r_tool=float(info.get("r_tool", 0.0)),
            r_sum=float(info.get("r_sum", 0.0)),
            r_succ=float(info.get("r_succ", 0.0)),
            r_action=float(info.get("r_action", 0.0)),
            omission=bool(int(info.get("omission", 0))),
            turn_rewards=tuple(decode_turn_rewards(info.get("turn_rewards"))),
        )

    @property
    def penalised(self) -> bool:
        return self.omission or self.score < 0

    @property
    def summary_value(self) -> float:
        return self.score if self.penalised else self.r_sum

    @property
    def tool_value(self) -> float:
        return 0.0 if self.penalised else self.r_tool

    def turn_value(self, t: int) -> float:
        return 0.0 if self.penalised else self.turn_rewards[t]


LayoutFn = Callable[[Sequence[int], int, SegmentRewards], dict[int, float]]
"""(end positions of the runs, response length, rewards) → {token position: reward}."""

LAYOUTS: Registry[LayoutFn] = Registry("reward layout")


@LAYOUTS.register("outcome")
def _outcome(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    return {length - 1: rewards.score} if length else {}


@LAYOUTS.register("slca")
def _slca(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    placed = {ends[-2]: rewards.tool_value} if len(ends) >= 2 else {}
    return {**placed, ends[-1]: rewards.summary_value} if ends else {}


@LAYOUTS.register("tara")
def _tara(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    n = min(len(rewards.turn_rewards), len(ends))
    return {ends[t]: rewards.turn_value(t) for t in range(n)}


@LAYOUTS.register("slca_tara")
def _slca_tara(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    if not ends:
        return {}
    n = min(len(rewards.turn_rewards), len(ends) - 1)
    return {**{ends[t]: rewards.turn_value(t) for t in range(n)}, ends[-1]: rewards.summary_value}


@LAYOUTS.register("toolpo")
def _toolpo(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    placed = {ends[-2]: rewards.r_action} if len(ends) >= 2 else {}
    return {**placed, ends[-1]: rewards.r_succ} if ends else {}


@LAYOUTS.register("toolpo_hierr")
def _toolpo_hierr(ends: Sequence[int], length: int, rewards: SegmentRewards) -> dict[int, float]:
    placed = {ends[-2]: rewards.tool_value} if len(ends) >= 2 else {}
    return {**placed, ends[-1]: rewards.score} if ends else {}


TOOLPO_REWARDS = {"paper": "toolpo", "hierr": "toolpo_hierr"}


def layout_for_estimator(adv_estimator: str, toolpo_reward: str = "paper") -> str:
    """The reward layout an estimator reads (``outcome`` for grpo and every built-in verl estimator).

    Args:
        adv_estimator: ``algorithm.adv_estimator``.
        toolpo_reward: ``algorithm.gust.toolpo_reward`` ("paper": R_succ/R_action; "hierr": the reference code's
            HierR total / R_tool).
    """
    layout = _ESTIMATOR_LAYOUT.get(str(adv_estimator), "outcome")
    if layout == "toolpo":
        if toolpo_reward not in TOOLPO_REWARDS:
            raise InputError(f"algorithm.gust.toolpo_reward must be one of {sorted(TOOLPO_REWARDS)}")
        return TOOLPO_REWARDS[toolpo_reward]
    return layout


def layout_for_config(config: Any) -> str:
    """The layout for a full verl config (reads ``algorithm.adv_estimator`` and ``algorithm.gust``)."""
    gust = config.algorithm.get("gust", None) or {}
    return layout_for_estimator(config.algorithm.adv_estimator, str(gust.get("toolpo_reward", "paper")))


def run_ends(response_mask: Sequence[int] | torch.Tensor) -> list[int]:
    """Positions of the last token of every run of ones, left to right."""
    on = torch.as_tensor(response_mask) > 0
    after = torch.cat([on[1:], on.new_zeros(1)])
    return torch.nonzero(on & ~after).flatten().tolist()


def mask_runs(response_mask: Sequence[int] | torch.Tensor, runs: Sequence[int]) -> torch.Tensor:
    """``response_mask`` with the given runs of ones (0-based, left to right) set to 0."""
    mask = torch.as_tensor(response_mask).clone()
    on = mask > 0
    starts = torch.nonzero(on & ~torch.cat([on.new_zeros(1), on[:-1]])).flatten().tolist()
    ends = run_ends(mask)
    for run in runs:
        if 0 <= run < len(starts):
            mask[starts[run] : ends[run] + 1] = 0
    return mask


def place_rewards(response_mask: Sequence[int] | torch.Tensor, info: Mapping[str, Any], *, layout: str) -> torch.Tensor:
    """Build one trajectory's ``rm_scores`` row (float32, same length as the mask) for ``layout``.

    Args:
        response_mask: The (unpadded) response mask of the trajectory.
        info: Its ``reward_extra_info`` (the dict `trainer.compute_score` returned).
        layout: A name in ``LAYOUTS``.

    Returns:
        The reward row, zero except at the positions the layout chose.
    """
    place = LAYOUTS.get(layout)
    length = len(response_mask)
    row = torch.zeros(length, dtype=torch.float32)
    for pos, value in place(run_ends(response_mask), length, SegmentRewards.from_info(info)).items():
        row[pos] = value
    return row


class SegmentRewardOutput(AgentLoopOutput):
    """An ``AgentLoopOutput`` whose ``rm_scores`` follow a reward layout instead of "score on the last token"."""

    _reward_layout: str = PrivateAttr(default="outcome")

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        if "rm_scores" in output and self._reward_layout != "outcome":
            info = output["extra_fields"].get("reward_extra_info")
            if not isinstance(info, Mapping):
                raise InputError("reward_score is set but extra_fields['reward_extra_info'] is missing")
            unscored = json.loads(output["extra_fields"].get(UNSCORED_RUNS_KEY) or "[]")
            mask = mask_runs(output["response_mask"], unscored) if unscored else output["response_mask"]
            output["rm_scores"] = place_rewards(mask, info, layout=self._reward_layout)
        return output


def with_segment_rewards(output: AgentLoopOutput, *, layout: str) -> SegmentRewardOutput:
    """Re-type an agent-loop output so its ``as_dict()`` places rewards by ``layout``.

    The fields (and pydantic's set-fields record, which ``as_dict`` relies on) are carried over unchanged.
    """
    LAYOUTS.get(layout)
    values = {name: getattr(output, name) for name in type(output).model_fields}
    wrapped = SegmentRewardOutput.model_construct(_fields_set=set(output.model_fields_set), **values)
    wrapped._reward_layout = layout
    return wrapped


class SegmentRewardMixin:
    """Mix into a verl agent loop (``class Loop(SegmentRewardMixin, ToolAgentLoop)``) to lay out rewards.

    The layout follows ``algorithm.adv_estimator`` of the loop's trainer config (``self.config``).
    """

    config: Any

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        output = await super().run(sampling_params, **kwargs)  # type: ignore[misc]  # cooperative mixin
        layout = layout_for_config(self.config)
        if isinstance(output, list):
            return [with_segment_rewards(item, layout=layout) for item in output]
        return with_segment_rewards(output, layout=layout)


class TurnTokenCapMixin:
    """Cap every generation turn at ``gust.max_tokens_per_turn`` tokens (ToolVerse: 1024).

    verl 0.9.1 has no config key for a per-turn budget; the vLLM server honours ``sampling_params["max_tokens"]``
    per generate call, and the agent loop makes one call per turn. ``null``/absent = no cap.
    """

    config: Any

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        cap = (self.config.get("gust") or {}).get("max_tokens_per_turn")
        params = {**sampling_params, "max_tokens": int(cap)} if cap else sampling_params
        return await super().run(params, **kwargs)  # type: ignore[misc]  # cooperative mixin
