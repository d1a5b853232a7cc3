"""`gust train` pre-flight: the GPUs a config asks for (`trainer.nnodes` × `trainer.n_gpus_per_node`) against the
GPUs this machine or the Ray cluster really has, checked before Ray starts.

Without it, a launch on a machine short of GPUs waits in Ray's placement-group scheduling for resources that never
come, silently, and leaves Ray actors behind when interrupted.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from omegaconf import DictConfig

from gustforge.errors import ConfigError

__all__ = ["GpuCount", "visible_gpus", "gpu_shortfall", "check_gpus"]

SINGLE_NODE_HINT = ("on one machine: append trainer.nnodes=1 trainer.n_gpus_per_node=<GPUs it has> "
                    "(README: Training on verl, one machine)")  # fmt: skip


class GpuCount(NamedTuple):
    """GPUs seen, and where they were counted."""

    count: int
    source: str


def visible_gpus(nnodes: int) -> GpuCount:
    """GPUs available to the launch: the Ray cluster's `GPU` resources when one is configured (`RAY_ADDRESS`, or
    required for nnodes > 1), else torch's CUDA devices on this machine (`CUDA_VISIBLE_DEVICES` respected)."""
    address = os.environ.get("RAY_ADDRESS")
    if address:
        import ray

        started = not ray.is_initialized()
        if started:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        try:
            return GpuCount(int(ray.cluster_resources().get("GPU", 0)), f"the Ray cluster at {address}")
        finally:
            if started:
                ray.shutdown()
    if nnodes > 1:
        return GpuCount(0, "no Ray cluster (RAY_ADDRESS is not set)")
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = "torch.cuda on this machine" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
    return GpuCount(torch.cuda.device_count() if torch.cuda.is_available() else 0, where)


def gpu_shortfall(nnodes: int, per_node: int, seen: GpuCount) -> str | None:
    """Why the configured layout cannot start on what was seen, with the fix; None when it fits."""
    need = nnodes * per_node
    if seen.count >= need:
        return None
    message = (f"trainer.nnodes={nnodes} × trainer.n_gpus_per_node={per_node} = {need} GPU(s), but "
               f"{seen.source} shows {seen.count}; ")  # fmt: skip
    if nnodes > 1 and "RAY_ADDRESS" not in os.environ:
        message += ("start a Ray cluster first (`ray start --head` on one node, `ray start --address HEAD:6379` on "
                    "the others, then export RAY_ADDRESS=HEAD:6379), or ")  # fmt: skip
    return message + SINGLE_NODE_HINT


def check_gpus(cfg: DictConfig) -> None:
    """Raise `ConfigError` when the config asks for more GPUs than the launch can get."""
    nnodes, per_node = int(cfg.trainer.nnodes), int(cfg.trainer.n_gpus_per_node)
    problem = gpu_shortfall(nnodes, per_node, visible_gpus(nnodes))
    if problem:
        raise ConfigError(problem)
