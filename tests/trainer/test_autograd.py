"""Isolation through verl's PPO policy loss: with SLCA, changing only R_sum leaves tool-token gradients unchanged."""

from __future__ import annotations

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_policy_loss_fn
from verl.workers.config import FSDPActorConfig

from trainer.estimators import compute_slca_advantage, segment_runs
from trainer.reward_manager import place_rewards

ROWS = ["111001100111", "110001110000", "111100000000", "110011111000"]


def _infos(r_sum_row0: float) -> list[dict[str, float]]:
    return [
        {"score": 0.9 + r_sum_row0, "r_tool": 0.9, "r_sum": r_sum_row0, "omission": 0},
        {"score": 1.05, "r_tool": 0.55, "r_sum": 0.5, "omission": 0},
        {"score": -0.5, "r_tool": 0.0, "r_sum": -0.5, "omission": 1},
        {"score": 1.7, "r_tool": 0.7, "r_sum": 1.0, "omission": 0},
    ]


def _grad(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """d(verl vanilla PPO loss)/d(log-prob) per token, with ratios off 1 so clipping and dual-clip engage."""
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(mask.shape, generator=gen)
    log_prob = (old + 0.4 * torch.randn(mask.shape, generator=gen)).requires_grad_(True)
    config = FSDPActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=4)
    loss_fn = get_policy_loss_fn("vanilla")
    loss, _ = loss_fn(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=advantages,
        response_mask=mask.float(),
        loss_agg_mode="token-mean",
        config=config,
    )
    loss.backward()
    assert log_prob.grad is not None
    return log_prob.grad


def _setup(r_sum_row0: float) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    mask = torch.tensor([[int(c) for c in r] for r in ROWS])
    rewards = torch.stack([place_rewards(mask[i], info, layout="slca") for i, info in enumerate(_infos(r_sum_row0))])
    return rewards, mask, np.array(["g"] * 4, dtype=object)


def test_slca_tool_token_gradients_ignore_r_sum() -> None:
    grads = []
    for r_sum in (0.75, 0.0):
        rewards, mask, idx = _setup(r_sum)
        adv, _ = compute_slca_advantage(rewards, mask, idx, None)
        grads.append(_grad(adv, mask))
    runs = segment_runs(mask)
    summary = runs.run_id == (runs.n_runs - 1).unsqueeze(1)
    tool = runs.mask & ~summary
    assert torch.equal(grads[0][tool], grads[1][tool])
    assert not torch.allclose(grads[0][summary], grads[1][summary])
    assert torch.all(grads[0][~runs.mask] == 0)


def test_grpo_tool_token_gradients_depend_on_r_sum() -> None:
    grads = []
    for r_sum in (0.75, 0.0):
        rewards, mask, idx = _setup(r_sum)
        scores = torch.zeros_like(rewards)
        scores[:, -1] = torch.tensor([info["score"] for info in _infos(r_sum)])
        adv, _ = compute_grpo_outcome_advantage(scores, mask.float(), idx)
        grads.append(_grad(adv, mask))
    runs = segment_runs(mask)
    tool = runs.mask & ~(runs.run_id == (runs.n_runs - 1).unsqueeze(1))
    assert not torch.allclose(grads[0][tool], grads[1][tool])
