"""``gust_sync``: verl's synchronous V1 trainer plus the TRUE reward as its own training metrics.

verl logs ``critic/score`` as the sum of the rewards laid out on the tokens. Our agent loop lays the reward
components out per algorithm (``trainer.reward_manager``), so that sum differs between algorithms for the same
answer (``slca`` drops R_tool on a one-turn answer, ``toolpo`` carries R_succ and R_action) and cannot compare runs.
This trainer adds, per step, the mean of each reward component ``trainer.compute_score`` returned (same value for
every algorithm): ``gust/score/mean`` (the true HierR total), ``gust/r_tool/mean``, ``gust/r_sum/mean``,
``gust/r_succ/mean``, ``gust/r_action/mean``, ``gust/omission/mean``, ``gust/turn_reward_mean/mean``,
``gust/state_match/mean`` and ``gust/internal_error/rate``. Validation needs no trainer change: the reward returns
``acc = score``, which verl's validation makes its core variable (``val-core/<data_source>/acc/mean@N``).

Turn structure (simulated-user mode). verl hands a registered estimator no per-sample fields, so
``_compute_advantage`` reads each sample's ``extra_fields`` (the agent loop's record of the runs that talked to the
simulated user, ``gust_user_turns``) from TransferQueue for the batch's keys, in the batch's order, and runs verl's own
``_compute_advantage`` inside ``trainer.estimators.agent_turns(record)``: the estimators then segment the agent's
environment-facing turns only (see `trainer.estimators`).

Simulated-user metrics (when the rows ran with a user): ``gust/user_turns/mean`` (messages the user answered per
trajectory), ``gust/user_stop_rate`` (share of trajectories the user ended with its stop marker) and
``gust/user_failed/rate`` (the LLM user failed and the fallback policy ended the dialogue); the judge's failures are
``gust/judge_failed/mean`` (a reward component).

Selected with ``trainer.v1.trainer_mode: gust_sync`` (``trainer/configs/gust_common.yaml``). verl's V1 base class
compares ``trainer_mode == "sync"`` internally, so the constructor sets it back to ``sync`` after verl's
``TaskRunnerV1`` has picked this class; everything else is ``PPOTrainerSync``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from omegaconf import DictConfig, open_dict
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

from trainer.estimators import TurnRecord, agent_turns

__all__ = ["TRAINER_NAME", "GustTrainerSync", "gust_step_metrics", "reward_component_metrics", "user_metrics"]

TRAINER_NAME = "gust_sync"
USER_STOP_REASONS = frozenset({"goal_reached", "agent_gave_up", "llm_stop", "closing_question"})
USER_FAILED_REASON = "user_failed"
EXTRA_FIELDS = "extra_fields"  # the TransferQueue field AgentLoopWorkerTQ stores AgentLoopOutput.extra_fields under
_COMPONENTS = ("score", "r_tool", "r_sum", "r_succ", "r_action", "omission", "turn_reward_mean", "state_match",
               "judge_failed")  # fmt: skip


def reward_component_metrics(extra_fields: Iterable[Any], prefix: str = "gust") -> dict[str, float]:
    """Per-step means of the reward components stored in each sample's ``extra_fields["reward_extra_info"]``.

    Args:
        extra_fields: One ``extra_fields`` dict per (non-padding) sample, as verl stores it.
        prefix: Metric name prefix.

    Returns:
        ``{prefix}/<component>/mean`` for every component present, and ``{prefix}/internal_error/rate``.
    """
    infos = [f.get("reward_extra_info") for f in extra_fields if isinstance(f, Mapping)]
    infos = [info for info in infos if isinstance(info, Mapping)]
    if not infos:
        return {}
    metrics: dict[str, float] = {}
    for key in _COMPONENTS:
        values = [float(info[key]) for info in infos if key in info]
        if values:
            metrics[f"{prefix}/{key}/mean"] = float(np.mean(values))
    errors = [str(info.get("error_type", "none")) == "internal_error" for info in infos]
    metrics[f"{prefix}/internal_error/rate"] = float(np.mean(errors))
    return metrics


def user_metrics(extra_fields: Iterable[Any], prefix: str = "gust") -> dict[str, float]:
    """Simulated-user metrics over the trajectories that ran with a user (none: ``{}``).

    ``user_turns/mean``: messages the user answered per trajectory; ``user_stop_rate``: share the user ended itself
    (its last reason is a stop reason); ``user_failed/rate``: share where the user failed and the fallback ended it.
    """
    rows = [f for f in extra_fields if isinstance(f, Mapping) and "gust_user_reasons" in f]
    if not rows:
        return {}
    reasons = [json.loads(f.get("gust_user_reasons") or "[]") for f in rows]
    turns = [len(json.loads(f.get("gust_user_turns") or "[]")) for f in rows]  # runs the user answered
    return {
        f"{prefix}/user_turns/mean": float(np.mean(turns)),
        f"{prefix}/user_stop_rate": float(np.mean([bool(rs) and rs[-1] in USER_STOP_REASONS for rs in reasons])),
        f"{prefix}/user_failed/rate": float(np.mean([USER_FAILED_REASON in rs for rs in reasons])),
    }


def gust_step_metrics(tags: Sequence[Mapping[str, Any]], extra_fields: Sequence[Any]) -> dict[str, float]:
    """The step's gust metrics over the NON-padding samples (verl pads a batch with copies tagged ``is_padding``).

    Raises:
        ValueError: ``tags`` and ``extra_fields`` differ in length (not the same batch).
    """
    if len(tags) != len(extra_fields):
        raise ValueError(f"{len(tags)} tags vs {len(extra_fields)} extra_fields")
    real = [f for f, tag in zip(extra_fields, tags, strict=True) if not tag.get("is_padding", False)]
    return {**reward_component_metrics(real), **user_metrics(real)}


@register_trainer(TRAINER_NAME)
class GustTrainerSync(PPOTrainerSync):
    """``PPOTrainerSync`` that also logs the true reward components (see the module doc)."""

    def __init__(self, config: DictConfig) -> None:
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"  # verl's base class branches on this exact value
        super().__init__(config)

    def _extra_fields(self, batch: Any) -> list[Any]:
        """Each sample's ``extra_fields`` from TransferQueue, in ``batch.keys`` order."""
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[EXTRA_FIELDS])
        return list(data.pop(EXTRA_FIELDS).tolist())

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        with agent_turns(TurnRecord.from_extra_fields(self._extra_fields(batch))):
            return super()._compute_advantage(batch, metrics)

    def gust_metrics(self, batch: Any) -> dict[str, float]:
        """The true reward components and simulated-user metrics of the step (non-padding samples)."""
        return gust_step_metrics(batch.tags, self._extra_fields(batch))

    def _compute_metrics(self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int) -> None:
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics.update(self.gust_metrics(batch))
