"""``gust_sync``: verl's synchronous V1 trainer plus the TRUE reward as its own training metrics.

verl logs ``critic/score`` as the sum of the rewards laid out on the tokens. Our agent loop lays the reward
components out per algorithm (``trainer.reward_manager``), so that sum differs between algorithms for the same
answer (``slca`` drops R_tool on a one-turn answer, ``toolpo`` carries R_succ and R_action) and cannot compare runs.
This trainer adds, per step, the mean of each reward component ``trainer.compute_score`` returned (same value for
every algorithm): ``gust/score/mean`` (the true HierR total), ``gust/r_tool/mean``, ``gust/r_sum/mean``,
``gust/r_succ/mean``, ``gust/r_action/mean``, ``gust/omission/mean``, ``gust/turn_reward_mean/mean``,
``gust/state_match/mean`` and ``gust/internal_error/rate``. Validation needs no trainer change: the reward returns
``acc = score``, which verl's validation makes its core variable (``val-core/<data_source>/acc/mean@N``).

Selected with ``trainer.v1.trainer_mode: gust_sync`` (``trainer/configs/gust_common.yaml``). verl's V1 base class
compares ``trainer_mode == "sync"`` internally, so the constructor sets it back to ``sync`` after verl's
``TaskRunnerV1`` has picked this class; everything else is ``PPOTrainerSync``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from omegaconf import DictConfig, open_dict
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer

__all__ = ["TRAINER_NAME", "GustTrainerSync", "reward_component_metrics"]

TRAINER_NAME = "gust_sync"
_COMPONENTS = ("score", "r_tool", "r_sum", "r_succ", "r_action", "omission", "turn_reward_mean", "state_match")


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


@register_trainer(TRAINER_NAME)
class GustTrainerSync(PPOTrainerSync):
    """``PPOTrainerSync`` that also logs the true reward components (see the module doc)."""

    def __init__(self, config: DictConfig) -> None:
        with open_dict(config):
            config.trainer.v1.trainer_mode = "sync"  # verl's base class branches on this exact value
        super().__init__(config)

    def _compute_metrics(self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int) -> None:
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        import transfer_queue as tq

        keep = [not tag.get("is_padding", False) for tag in batch.tags]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        fields = data.pop("extra_fields").tolist()
        metrics.update(reward_component_metrics(f for f, k in zip(fields, keep, strict=True) if k))
