"""verl reward entry point: `reward.custom_reward_function.path=pkg://trainer.compute_score`, `name=compute_score`.

A thin adapter over `trainer.rewards.score.Scorer`; the returned dict follows the reward-components contract
documented in `trainer.rewards` (every key lands in verl's `reward_extra_info`, `score` on the last token).
Options come from `reward_kwargs` (e.g. `+reward.custom_reward_function.reward_kwargs.judge=llm`); nothing is read
from environment variables, so Ray workers cannot silently fall back to other values.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from trainer.rewards.hierr import HierRWeights
from trainer.rewards.score import RewardConfig, Scorer
from trainer.rewards.tara import DEFAULT_TURN_RULE

__all__ = ["compute_score", "compute_score_async", "config_from_kwargs", "scorer_for"]

_JUDGE_OPTION_PREFIX = "judge_"
_WEIGHT_KEYS = {"w_fmt": "fmt", "w_name": "name", "w_key": "key", "w_val": "val", "w_par": "par"}


def config_from_kwargs(kwargs: Mapping[str, Any]) -> RewardConfig:
    """Build a `RewardConfig` from flat reward kwargs.

    Recognised keys: judge, judge_<option> (base_url, model, api_key_env, timeout_s, max_retries, max_tokens,
    max_concurrency),
    w_fmt/w_name/w_key/w_val/w_par, w_process, w_summary, w_goal, no_call_penalty, state_mode, env_root, par_unit,
    turn_rule.
    Unknown keys (e.g. verl's reward_router_address) are ignored; ``None`` means "default".

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
    given = {key: value for key, value in kwargs.items() if value is not None}
    weights = HierRWeights(**{field: float(given[key]) for key, field in _WEIGHT_KEYS.items() if key in given})
    simple = {k: given[k] for k in ("w_process", "w_summary", "w_goal", "no_call_penalty") if k in given}
    return RewardConfig(
        judge=str(given.get("judge", "heuristic")),
        judge_options=judge_options,
        weights=weights,
        state_mode=str(given.get("state_mode", "rollout")),
        env_root=str(given.get("env_root", ".")),
        par_unit=str(given.get("par_unit", "step")),
        turn_rule=str(given.get("turn_rule", DEFAULT_TURN_RULE)),
        **{k: float(v) for k, v in simple.items()},
    )


_OPTION_KEYS = frozenset(
    {
        "judge",
        "state_mode",
        "env_root",
        "par_unit",
        "turn_rule",
        "w_process",
        "w_summary",
        "w_goal",
        "no_call_penalty",
        *_WEIGHT_KEYS,
    }
)


def _options_key(kwargs: Mapping[str, Any]) -> str:
    options = {k: v for k, v in kwargs.items() if k in _OPTION_KEYS or k.startswith(_JUDGE_OPTION_PREFIX)}
    return json.dumps(options, sort_keys=True, default=str)


@functools.lru_cache(maxsize=16)
def _cached_scorer(options_json: str) -> Scorer:
    return Scorer(config_from_kwargs(json.loads(options_json)))


def scorer_for(kwargs: Mapping[str, Any]) -> Scorer:
    """The process-wide scorer for these reward options: built once (judge, LLM client, replay session pool),
    not per trajectory."""
    return _cached_scorer(_options_key(kwargs))


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
    return scorer_for(kwargs).score(solution_str, ground_truth, extra_info)


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Mapping[str, Any] | Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`compute_score` with the judge awaited (select with `name=compute_score_async`)."""
    return await scorer_for(kwargs).ascore(solution_str, ground_truth, extra_info)
