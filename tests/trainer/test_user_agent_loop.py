"""Simulated-user mode through verl's agent-loop machinery, in verl's order, on CPU.

The registry file `trainer/configs/gust_user_agent_loops.yaml` is loaded into verl's registry in a fresh interpreter
BEFORE any module of ours is imported (as `AgentLoopWorker.__init__` does), then every row's loop is built by name
with `hydra.utils.instantiate` and run with the row's fields: a scripted agent asks the offline user for the stated
values, gets them, replays the gold calls and reports. Checked per trajectory: the configured class, user turns
masked out of the loss, final DB = gold, TARA turn rewards all 1 and placed on the agent's env-facing turns only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.gusteval._tasks import dependent_task, tiny_records, write_export
from trainer.rows import AGENT_NAME
from trainer.user_agent_loop import USER_AGENT_NAME, agent_turn_mask, user_sim_overrides

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
for entry in OmegaConf.load(sys.argv[2]):          # AgentLoopWorker.__init__: registry file first
    _agent_loop_registry[entry.name] = entry
from trainer.user_rehearsal import rehearse_user_loop  # our modules are imported only now
print(json.dumps(rehearse_user_loop(sys.argv[1], limit=3, agent_name=sys.argv[3], register=False)))
"""


@pytest.fixture(scope="module")
def verl_rows(tmp_path_factory) -> Path:
    return write_export(tmp_path_factory.mktemp("user-loop"), [*tiny_records(), dependent_task()])[1]


@pytest.mark.parametrize("name", [USER_AGENT_NAME, AGENT_NAME])  # the mode's own name and the rows' name
def test_user_loop_in_verls_order(verl_rows, name):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(verl_rows), str(REPO / "trainer" / "configs" /
                           "gust_user_agent_loops.yaml"), name], capture_output=True, text=True, cwd=REPO,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rows = report["rows"]
    assert len(rows) == 3 and report["ok"], json.dumps(rows, indent=1)
    assert {r["loop_class"] for r in rows} == {"trainer.user_agent_loop.GustUserAgentLoop"}  # every trajectory, not just the first
    dep = next(r for r in rows if r["task_id"] == "task-dep")
    assert dep["user_messages"] == ['The customer id is "C-1".'] and dep["user_reasons"] == ["answer", "goal_reached"]
    assert dep["turn_rewards"] == [1.0, 1.0] and dep["agent_turns_scored"] == 3  # 2 tool turns + the report


def test_agent_turn_mask_zeroes_only_conversational_runs():
    mask = [1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1]
    assert agent_turn_mask(mask, [0, 2]).tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    assert torch.equal(agent_turn_mask(mask, []), torch.tensor(mask))


def test_simulated_user_mode_composes_and_validates():
    from trainer.launch import compose_config, validate_training_config

    cfg = compose_config("tara", overrides=user_sim_overrides("offline"))
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path.endswith("gust_user_agent_loops.yaml")
    assert cfg.gust.user_simulator == "offline"
    assert validate_training_config(cfg).reward_layout == "tara"


@pytest.mark.parametrize("layout", ["tara", "slca", "slca_tara", "outcome"])
def test_segment_rewards_skip_runs_answered_by_the_user(layout):
    """The reward layouts count and reward only the runs not listed in `gust_user_turns` (the loop's record)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics

    from trainer.reward_manager import SegmentRewardOutput, with_segment_rewards
    from trainer.rewards import COMPONENT_KEYS
    from trainer.user_agent_loop import USER_TURNS_KEY

    mask = [1, 1, 0, 1, 0, 0, 1, 1, 0, 1]  # runs: 0 asks the user, 1 and 2 call tools, 3 reports
    info = {k: 0.0 for k in COMPONENT_KEYS} | {"score": 0.9, "r_tool": 0.7, "r_sum": 0.2, "omission": 0,
                                                 "turn_rewards": json.dumps([0.5, 1.0])}  # fmt: skip
    plain = SegmentRewardOutput(prompt_ids=[1], response_ids=list(range(len(mask))), response_mask=mask,
                                reward_score=0.9, metrics=AgentLoopMetrics(),
                                extra_fields={"reward_extra_info": info, USER_TURNS_KEY: json.dumps([0])})  # fmt: skip
    rm = with_segment_rewards(plain, layout=layout).as_dict()["rm_scores"]
    expected = {"tara": {3: 0.5, 7: 1.0}, "slca": {7: 0.7, 9: 0.2}, "slca_tara": {3: 0.5, 7: 1.0, 9: 0.2},
                "outcome": {9: 0.9}}[layout]  # fmt: skip
    assert {i: round(float(v), 6) for i, v in enumerate(rm) if v} == expected
