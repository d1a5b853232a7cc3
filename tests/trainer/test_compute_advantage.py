"""Round trip through verl: AgentLoopOutput.as_dict (rm_scores) → DataProto → verl's compute_advantage → ours."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from gustforge.errors import InputError
from trainer.launch import compose_config
from trainer.reward_manager import (
    SegmentRewardMixin,
    SegmentRewardOutput,
    TurnTokenCapMixin,
    layout_for_estimator,
    place_rewards,
    run_ends,
    with_segment_rewards,
)

# two groups of four; masks: generated runs (1) and observations (0)
MASKS = [
    "111001100111", "110001110000", "111100000000", "110011111000",
    "110110110110", "111111111111", "101010101010", "110000011110",
]  # fmt: skip
UIDS = np.array(["g1"] * 4 + ["g2"] * 4, dtype=object)


def _info(i: int) -> dict[str, Any]:
    omission = i == 2
    r_tool, r_sum = (0.0, -0.5) if omission else (round(0.1 * i + 0.05, 2), round(1.0 - 0.11 * i, 2))
    turns = [float((i + t) % 2) for t in range(4)]
    return {
        "score": -0.5 if omission else r_tool + r_sum,
        "r_tool": r_tool,
        "r_sum": r_sum,
        "r_succ": float(i % 2),
        "r_action": round(0.25 * (i % 4), 2),
        "omission": int(omission),
        "turn_rewards": json.dumps(turns),
        "judge": "heuristic",
    }


def _rm_scores(layout: str) -> torch.Tensor:
    """What the V1 agent-loop worker stores: as_dict() after _compute_score set reward_score/extra_info."""
    rows = []
    for i, mask in enumerate(MASKS):
        output = AgentLoopOutput(
            prompt_ids=[1, 2, 3],
            response_ids=[7] * len(mask),
            response_mask=[int(c) for c in mask],
            num_turns=2,
            metrics=AgentLoopMetrics(),
        )
        wrapped = with_segment_rewards(output, layout=layout)
        wrapped.reward_score = _info(i)["score"]  # as AgentLoopWorker._compute_score does
        wrapped.extra_fields["reward_extra_info"] = _info(i)
        rows.append(wrapped.as_dict()["rm_scores"])
    return torch.stack(rows)


def _mask() -> torch.Tensor:
    return torch.tensor([[int(c) for c in m] for m in MASKS])


def _expected_rewards(layout: str) -> torch.Tensor:
    """Independent placement from the documented layout rules."""
    out = torch.zeros(len(MASKS), len(MASKS[0]))
    for i, mask in enumerate(MASKS):
        info, ends = _info(i), run_ends([int(c) for c in mask])
        pen = bool(info["omission"])
        turns = json.loads(info["turn_rewards"])
        if layout == "toolpo":  # ToolPO paper rewards: no omission override
            if len(ends) > 1:
                out[i, ends[-2]] = info["r_action"]
            out[i, ends[-1]] = info["r_succ"]
        elif layout == "slca" or layout == "toolpo_hierr":
            if len(ends) > 1:
                out[i, ends[-2]] = 0.0 if pen else info["r_tool"]
            out[i, ends[-1]] = info["score"] if (pen or layout == "toolpo_hierr") else info["r_sum"]
        elif layout == "tara":
            for t in range(min(len(turns), len(ends))):
                out[i, ends[t]] = 0.0 if pen else turns[t]
        elif layout == "slca_tara":
            for t in range(min(len(turns), len(ends) - 1)):
                out[i, ends[t]] = 0.0 if pen else turns[t]
            out[i, ends[-1]] = info["score"] if pen else info["r_sum"]
        else:
            out[i, -1] = info["score"]
    return out


@pytest.fixture(scope="module", params=["slca", "tara", "slca_tara", "toolpo", "grpo"])
def algo(request: pytest.FixtureRequest) -> str:
    return request.param


def test_verl_compute_advantage_round_trip(algo: str) -> None:
    cfg = compose_config(algo)
    layout = layout_for_estimator(algo)
    rm_scores = _rm_scores(layout)
    assert torch.allclose(rm_scores, _expected_rewards(layout))
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rm_scores, "response_mask": _mask()}, non_tensors={"uid": UIDS}
    )
    out = compute_advantage(data, adv_estimator=cfg.algorithm.adv_estimator, config=cfg.algorithm)
    adv = out.batch["advantages"]
    if algo == "grpo":
        want, _ = compute_grpo_outcome_advantage(_expected_rewards("outcome"), _mask(), UIDS)
    else:
        want, _ = get_adv_estimator_fn(algo)(_expected_rewards(layout), _mask(), UIDS, cfg.algorithm)
    assert torch.allclose(adv, want, atol=1e-6)
    assert torch.all(adv[_mask() == 0] == 0)
    assert torch.any(adv != 0)
    keys = [f"{u}_0_0" for u in UIDS]  # the V1 trainer's wrapper with TransferQueue keys
    v1 = compute_advantage_for_multi_trajectories(
        data, batch_keys=keys, adv_estimator=cfg.algorithm.adv_estimator, config=cfg.algorithm
    )
    if algo != "grpo":
        assert torch.allclose(v1.batch["advantages"], want, atol=1e-6)


def test_rm_scores_sum_equals_score_for_slca_rows_with_a_tool_segment() -> None:
    rm = _rm_scores("slca")
    for i in range(len(MASKS)):
        if len(run_ends([int(c) for c in MASKS[i]])) > 1:
            assert rm[i].sum().item() == pytest.approx(_info(i)["score"], abs=1e-6)


def test_place_rewards_requires_the_reward_contract() -> None:
    with pytest.raises(InputError):
        place_rewards([1, 1, 0, 1], {"acc": 1.0}, layout="slca")


def test_outcome_layout_keeps_verl_default() -> None:
    output = AgentLoopOutput(
        prompt_ids=[1], response_ids=[5, 6, 7], response_mask=[1, 0, 1], num_turns=2, metrics=AgentLoopMetrics()
    )
    wrapped = with_segment_rewards(output, layout="outcome")
    output.reward_score = wrapped.reward_score = 0.7
    assert torch.equal(wrapped.as_dict()["rm_scores"], output.as_dict()["rm_scores"])


class _FakeLoop:
    """Stands in for ToolAgentLoop: records the sampling params and returns a plain AgentLoopOutput."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.seen: dict[str, Any] = {}

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        self.seen = sampling_params
        return AgentLoopOutput(
            prompt_ids=[1], response_ids=[5, 6], response_mask=[1, 1], num_turns=2, metrics=AgentLoopMetrics()
        )


class _Loop(SegmentRewardMixin, TurnTokenCapMixin, _FakeLoop):
    pass


def test_mixins_wrap_output_and_cap_turn_tokens() -> None:
    config = OmegaConf.create({"algorithm": {"adv_estimator": "tara"}, "gust": {"max_tokens_per_turn": 1024}})
    loop = _Loop(config)
    output = asyncio.run(loop.run({"temperature": 1.0}))
    assert isinstance(output, SegmentRewardOutput) and output._reward_layout == "tara"
    assert loop.seen == {"temperature": 1.0, "max_tokens": 1024}
    plain = _Loop(OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}}))
    asyncio.run(plain.run({"temperature": 1.0}))
    assert "max_tokens" not in plain.seen
