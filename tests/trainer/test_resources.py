"""`gust train` pre-flight (issue 25): nodes × GPUs per node against what the launch can get, before Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gustforge.errors import ConfigError
from trainer.resources import GpuCount, gpu_shortfall, visible_gpus


def test_shortfall_names_the_layout_what_was_seen_and_the_single_node_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert gpu_shortfall(1, 1, GpuCount(1, "torch.cuda on this machine")) is None
    assert gpu_shortfall(2, 4, GpuCount(8, "the Ray cluster at head:6379")) is None
    short = gpu_shortfall(1, 8, GpuCount(1, "torch.cuda on this machine"))
    assert short is not None and "nnodes=1 × trainer.n_gpus_per_node=8 = 8 GPU(s)" in short
    assert "shows 1" in short and "trainer.n_gpus_per_node=<GPUs it has>" in short
    multi = gpu_shortfall(4, 8, visible_gpus(4))
    assert multi is not None and "no Ray cluster" in multi and "ray start --head" in multi


def test_launch_on_a_machine_without_the_gpus_is_refused_before_ray(tmp_path: Path) -> None:
    import ray
    import torch

    from trainer.launch import compose_config, launch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    fits = ["data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2"]  # the bundled 2 rows
    cfg = compose_config("slca", run_dir=tmp_path, overrides=["trainer.nnodes=1", *fits,
                                                               f"trainer.n_gpus_per_node={have + 1}"])  # fmt: skip
    with pytest.raises(ConfigError, match=rf"= {have + 1} GPU\(s\), but torch.cuda on this machine.* shows {have}"):
        launch(cfg, allow_heuristic_judge=True)
    assert not ray.is_initialized()
