"""verl reward entry point: `reward.custom_reward_function.path=pkg://trainer.compute_score`, `name=compute_score`.

A thin adapter over `trainer.rewards.score.Scorer`; the returned dict follows the reward-components contract
documented in `trainer.rewards` (every key lands in verl's `reward_extra_info`, `score` on the last token).
Options come from `reward_kwargs` (e.g. `+reward.custom_reward_function.reward_kwargs.judge=llm`); nothing is read
from environment variables, so Ray workers cannot silently fall back to other values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainer.rewards.hierr import HierRWeights
from trainer.rewards.score import RewardConfig, Scorer

__all__ = ["compute_score", "compute_score_async", "config_from_kwargs"]

_JUDGE_OPTION_PREFIX = "judge_"
_WEIGHT_KEYS = {"w_fmt": "fmt", "w_name": "name", "w_key": "key", "w_val": "val", "w_par": "par"}


def config_from_kwargs(kwargs: Mapping[str, Any]) -> RewardConfig:
    """Build a `RewardConfig` from flat reward kwargs.

    Recognised keys: judge, judge_<option> (base_url, model, api_key_env, timeout_s, max_retries, max_tokens),
    w_fmt/w_name/w_key/w_val/w_par, w_process, w_summary, no_call_penalty, state_mode, env_root. Unknown keys
    (e.g. verl's reward_router_address) are ignored.

    Args:
        kwargs: The keyword arguments verl passed to `compute_score`.

    Returns:
        The reward configuration.
    """
    judge_options = {
        key[len(_JUDGE_OPTION_PREFIX) :]: value
        for key, value in kwargs.items()
        if key.startswith(_JUDGE_OPTION_PREFIX) and value is not None
    }
    weights = HierRWeights(**{field: float(kwargs[key]) for key, field in _WEIGHT_KEYS.items() if key in kwargs})
    simple = {k: kwargs[k] for k in ("w_process", "w_summary", "no_call_penalty") if k in kwargs}
    return RewardConfig(
        judge=str(kwargs.get("judge", "heuristic")),
        judge_options=judge_options,
        weights=weights,
        state_mode=str(kwargs.get("state_mode", "replay")),
        env_root=str(kwargs.get("env_root", ".")),
        **{k: float(v) for k, v in simple.items()},
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Mapping[str, Any] | Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one rollout (sync; verl runs it in an executor thread).

    Args:
        data_source: The row's data source ("gust" or "toucan_toolcall"); not used for dispatch.
        solution_str: The decoded response (generations and observations).
        ground_truth: The row's `reward_model.ground_truth`.
        extra_info: The row's extra_info merged with the agent loop's extra fields.
        **kwargs: Reward options, see `config_from_kwargs`.

    Returns:
        `{"score": float, **components}` with exactly the keys `trainer.rewards.COMPONENT_KEYS`.
    """
    return Scorer(config_from_kwargs(kwargs)).score(solution_str, ground_truth, extra_info)


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Mapping[str, Any] | Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`compute_score` with the judge awaited (select with `name=compute_score_async`)."""
    return await Scorer(config_from_kwargs(kwargs)).ascore(solution_str, ground_truth, extra_info)
