"""`gust train --algo A --rehearse`: the CPU pre-flight through verl's classes, for every algorithm.

Each run builds a tiny random model, replays gold and perturbed trajectories of one bundled row through verl's
AgentLoopWorker / RewardLoopWorker, computes advantages with verl's V1 call and runs verl's policy loss backward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.trainer.train_cli import gust_with_train
from trainer.launch import ALGOS
from trainer.rehearse import VARIANTS, script_for

TOOL_SIGNAL = ("slca", "toolpo", "slca_tara")



@pytest.mark.parametrize("algo", ALGOS)
def test_rehearsal_passes_for_every_algorithm(algo: str, tmp_path: Path) -> None:
    args = ["train", "--algo", algo, "--rehearse", "--rehearse-rows", "1", "--run-dir", str(tmp_path)]
    result = CliRunner().invoke(gust_with_train(), args)
    assert result.exit_code == 0, result.output
    assert f"rehearsal {algo}: PASSED" in result.output
    report = json.loads((tmp_path / "rehearsal" / f"rehearsal_{algo}.json").read_text())
    failed = [c for c in report["checks"] if not c["passed"]]
    assert report["passed"] and not failed, failed
    assert report["agent_loop_classes"] == {"trainer.agent_loop.GustToolAgentLoop": len(VARIANTS)}
    by_variant = {t["variant"]: t for t in report["trajectories"]}
    assert set(by_variant) == set(VARIANTS)
    for t in report["trajectories"]:  # the rollout parsed what the reward reads; HierR scored what was executed
        assert t["gust_hermes_parsed"] == t["reward_text_counted"] and t["executed_calls"] == t["reward_counted"]
        if t["variant"] != "beyond_parallel":
            assert t["executed_calls"] == t["gust_hermes_parsed"]
    assert report["golden"]["run"] and max(report["golden"]["max_abs_diff"].values()) <= 1e-4
    # verl's stock parser would have dropped these (the episode would have ended)
    assert {"list_block", "parameters_key"} <= set(report["parser"]["stock_hermes_disagrees_with_reward_on"])
    assert by_variant["no_call"]["omission"] == 1 and by_variant["gold"]["r_succ"] == 1.0
    if algo in TOOL_SIGNAL:
        assert report["advantage"]["tool_nonzero_share"] > 0
    if algo in ("slca", "slca_tara"):
        assert report["isolation"]["tool_unchanged"] and report["isolation"]["summary_changed"]
        assert "[ok] isolation" in result.output
    grads = report["gradients"]
    assert grads["grad_norm"] > 0 and grads["cosine_tool_summary"] is not None
    assert report["mode"] == "fixed_prompt" and not report["user_loop"]["run"]  # recorded as not run


def test_cli_rehearse_user_sim_runs_the_simulated_user_loop(tmp_path: Path) -> None:
    """`--rehearse --user-sim`: every trajectory through the user loop class (verl's worker, the mode's YAML), plus
    the scripted agent that asks the offline user; the user-loop checks are in the report and the exit code."""
    args = ["train", "--algo", "tara", "--rehearse", "--user-sim", "--run-dir", str(tmp_path)]
    result = CliRunner().invoke(gust_with_train(), args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "rehearsal" / "rehearsal_tara.json").read_text())
    assert report["passed"] and report["mode"] == "simulated_user"
    assert set(report["agent_loop_classes"]) == {"trainer.user_agent_loop.GustUserAgentLoop"}
    user = report["user_loop"]
    assert user["run"] and user["ok"] and user["rows"] and user["adv_estimator"] == "tara"
    names = {c["name"] for c in report["checks"] if c["passed"]}
    assert {"user_loop_asked_the_user", "user_loop_user_turns_masked", "user_loop_turn_rewards_all_1",
            "user_loop_rewards_on_agent_turns_only", "user_loop_final_state_matches"} <= names
    for row in user["rows"]:  # user turns interleaved, answered with the stated values, not scored as agent turns
        assert row["user_turns"] >= 1 and row["user_messages"] and all(r == 1.0 for r in row["turn_rewards"])
        assert row["agent_turns_scored"] == len(row["turn_rewards"]) + 1  # the env-facing turns + the report
    assert "[ok] user_loop_user_turns_masked" in result.output


def test_cli_user_sim_refuses_rows_without_a_user_scenario(tmp_path: Path, corpora_dir: Path) -> None:
    from trainer.convert import toucan_to_verl, write_rows

    previews = [json.loads(line) for line in (corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl").open()]
    data = write_rows(tmp_path / "toucan.parquet", toucan_to_verl(previews)[0])
    for extra in (["--rehearse"], ["--dry-run"]):
        result = CliRunner().invoke(gust_with_train(), ["train", "--algo", "grpo", "--user-sim", *extra, "--data", str(data),
                                              "--run-dir", str(tmp_path / "run")])  # fmt: skip
        assert result.exit_code == 2 and "interaction_kwargs" in result.output, result.output


def test_cli_dry_run_user_sim_switches_the_agent_loop_registry(tmp_path: Path) -> None:
    result = CliRunner().invoke(gust_with_train(), ["train", "--algo", "tara", "--dry-run", "--user-sim", "--run-dir",
                                          str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "gust_user_agent_loops.yaml" in result.output and "user_simulator: offline" in result.output
    fixed = CliRunner().invoke(gust_with_train(), ["train", "--algo", "tara", "--dry-run", "--run-dir", str(tmp_path)])
    assert fixed.exit_code == 0 and "gust_agent_loops.yaml" in fixed.output


def test_cli_rehearse_fails_when_the_rollout_parser_disagrees_with_the_reward(tmp_path: Path) -> None:
    """verl's stock `hermes` parser drops list blocks and "parameters" keys that the reward counts."""
    args = ["train", "--algo", "slca", "--rehearse", "--rehearse-rows", "1", "--run-dir", str(tmp_path),
            "actor_rollout_ref.rollout.multi_turn.format=hermes"]
    result = CliRunner().invoke(gust_with_train(), args)
    assert result.exit_code == 1, result.output
    assert "[FAIL] rollout_parses_what_reward_reads" in result.output


def test_cli_rehearse_refuses_turn_level_algos_on_rows_without_turn_gold(tmp_path: Path, corpora_dir: Path) -> None:
    from trainer.convert import toucan_to_verl, write_rows

    previews = [json.loads(line) for line in (corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl").open()]
    data = write_rows(tmp_path / "toucan.parquet", toucan_to_verl(previews)[0])
    result = CliRunner().invoke(gust_with_train(), ["train", "--algo", "tara", "--rehearse", "--data", str(data),
                                          "--run-dir", str(tmp_path / "run")])  # fmt: skip
    assert result.exit_code == 2 and "turn-level gold" in result.output


def test_scripts_perturb_exactly_one_thing() -> None:
    gold = [[{"name": "f", "arguments": {"a": 1}}], [{"name": "g", "arguments": {}}, {"name": "h", "arguments": {}}]]
    final = "answer"
    scripts = {v: script_for(v, gold, final) for v in VARIANTS}
    assert scripts["gold"] == ['<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
                               '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
                               '<tool_call>\n{"name": "h", "arguments": {}}\n</tool_call>', final]  # fmt: skip
    assert scripts["no_call"] == [final]
    assert '"WRONG-1"' in scripts["wrong_argument"][0] and scripts["wrong_argument"][1:] == scripts["gold"][1:]
    assert scripts["missing_call"][1].count("<tool_call>") == 1
    assert scripts["extra_call"][0].count("<tool_call>") == 2
    assert scripts["list_block"][0].startswith('<tool_call>\n[{"name": "f"')
    assert '"arguments": "{\\"a\\": 1}"' in scripts["string_arguments"][0]
    assert '"parameters": {"a": 1}' in scripts["parameters_key"][0]
    assert scripts["think_call"][0].startswith("<think><tool_call>") and scripts["think_call"][1:] == scripts["gold"][1:]
    assert scripts["think_call"][0].endswith(scripts["gold"][0]) and '"WRONG-1"' in scripts["think_call"][0]
    assert script_for("beyond_parallel", gold, final, parallel_cap=3)[0].count("<tool_call>") == 4


def test_the_gradient_step_takes_the_shortest_trajectories_that_fit_in_memory() -> None:
    import torch

    from trainer.rehearse import _ATTENTION_BUDGET_BYTES, _affordable_rows

    def trajectory(prompt: int, response: int) -> dict:
        return {"prompts": torch.zeros(prompt, dtype=torch.long), "responses": torch.zeros(response, dtype=torch.long)}

    fields = [trajectory(9000, 1000), trajectory(100, 50), trajectory(200, 40), trajectory(5000, 10)]
    chosen = _affordable_rows(fields, heads=4)
    assert chosen == [1, 2, 3]  # shortest first; adding the 10k-token one would need 4 x 4 x 10k^2 x 4 B = 6.4 GB
    width = 5000 + 50
    assert len(chosen) * 4 * width * width * 4 <= _ATTENTION_BUDGET_BYTES
    assert _affordable_rows([trajectory(60000, 10)], heads=4) == []  # reported as not run, never as passed
