"""compute_score is total (never raises, always the same key set and types), S_par per step, ToolPO paper rewards,
and recorded calls with string / list / number / null arguments (what verl's agent loop can record)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.trainer.gust_task import GOLD_STAGES, TINY_ENV, make_task, rollout
from tests.trainer.hostile import TOOLS, hostile_workload
from trainer.compute_score import compute_score
from trainer.convert import gust_row, load_env_schemas
from trainer.rewards import COMPONENT_KEYS
from trainer.rewards.parse import extract_tool_calls, first_step_calls, strip_think
from trainer.rewards.score import TURN_CALLS_KEY, toolpo_rewards

FINAL = "Order ORD-1001 is now processing and ORD-1003 was cancelled as you asked, all done."
_TYPES = {key: type(value) for key, value in compute_score("gust", "x", None).items()}


@pytest.fixture(scope="module")
def gust_gt() -> dict[str, Any]:
    row = gust_row(make_task(), load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=0)
    return row.reward_model.ground_truth.model_dump(mode="json")


def _assert_contract(out: dict[str, Any]) -> None:
    assert tuple(out) == COMPONENT_KEYS
    assert {k: type(v) for k, v in out.items()} == _TYPES, {k: type(v) for k, v in out.items()}
    json.dumps(out)


def test_hostile_workload_never_raises_and_keeps_the_key_set() -> None:
    errors: dict[str, int] = {}
    for solution, gt, extra in hostile_workload(10_000, seed=7):
        out = compute_score("gust", solution, gt, extra, state_mode="replay")
        _assert_contract(out)
        errors[out["error_type"]] = errors.get(out["error_type"], 0) + 1
    assert "internal_error" not in errors, errors
    assert errors["none"] > 5_000 and errors["invalid_ground_truth"] > 0 and errors["state_replay_error"] > 0


@pytest.mark.parametrize("arguments", ["a string", '{"order_id": "ORD-1001"}', [1, 2], 42, 3.5, None, True])
def test_recorded_arguments_of_any_json_type(gust_gt: dict[str, Any], arguments: Any) -> None:
    recorded = json.dumps([[{"name": "get_order", "arguments": arguments}], []])
    out = compute_score("gust", rollout(GOLD_STAGES[:1], FINAL), gust_gt, {TURN_CALLS_KEY: recorded})
    _assert_contract(out)
    assert out["error_type"] == "none"
    # an object (or a JSON string holding one, or null = no arguments) is a call; anything else is not
    turn0 = json.loads(out["turn_rewards"])[0]
    assert turn0 == (1.0 if arguments == '{"order_id": "ORD-1001"}' else 0.0)


def test_numpy_columns_are_accepted(gust_gt: dict[str, Any]) -> None:
    gt = {**gust_gt, "allowed_tools": np.array(gust_gt["allowed_tools"], dtype=object)}
    assert compute_score("gust", rollout(GOLD_STAGES, FINAL), gt, {}) == compute_score(
        "gust", rollout(GOLD_STAGES, FINAL), gust_gt, {})


def test_missing_environment_is_an_error_type_not_an_exception(gust_gt: dict[str, Any]) -> None:
    gt = {**gust_gt, "env_dir": "/nonexistent/env"}
    out = compute_score("gust", rollout(GOLD_STAGES, FINAL), gt, {}, state_mode="replay")
    assert (out["error_type"], out["state_checked"], out["state_match"]) == ("state_replay_error", 1, 0.0)


def test_s_par_counts_the_first_step_not_the_first_block(gust_gt: dict[str, Any]) -> None:
    one_step = [("get_order", {"order_id": "ORD-1001"}), ("list_orders", {"status": "pending"})]
    gt = {**gust_gt, "gold_tool_calls": json.dumps([[{"name": n, "arguments": a} for n, a in one_step]])}
    # the agent follows the prompt: one call per <tool_call> block, both in the first turn
    text = rollout([one_step], FINAL)
    assert compute_score("gust", text, gt, {})["s_par"] == 1.0
    assert compute_score("gust", text, gt, {}, par_unit="block")["s_par"] == 0.0  # the reference code's rule
    split = rollout([one_step[:1], one_step[1:]], FINAL)  # the same calls over two turns
    assert compute_score("gust", split, gt, {})["s_par"] == 0.0


def test_toolpo_paper_rewards_follow_eq_28(gust_gt: dict[str, Any]) -> None:
    gold = [[c for c in stage] for stage in GOLD_STAGES]
    perfect = compute_score("gust", rollout(gold, FINAL), gust_gt, {})
    assert (perfect["r_succ"], perfect["r_action"]) == (1.0, 1.0)
    extra = compute_score("gust", rollout([gold[0] + gold[0], gold[1]], FINAL), gust_gt, {})
    assert (extra["r_succ"], extra["r_action"]) == (0.0, 1.0)  # all gold matched, but an extra call and |Y_init|
    broken = compute_score("gust", rollout(gold, FINAL) + "<tool_call>{", gust_gt, {})
    assert broken["r_succ"] == 0.0  # N_valid = N_open = N_close fails
    extra_keys = [[("get_order", {"order_id": "ORD-1001", "verbose": True})], gold[1]]
    assert compute_score("gust", rollout(extra_keys, FINAL), gust_gt, {})["r_succ"] == 1.0  # gold keys ⊆ pred keys


def test_toolpo_rewards_without_gold() -> None:
    parsed = extract_tool_calls("no calls", TOOLS)
    assert toolpo_rewards(parsed, [], ()) == (1.0, 1.0)
    text = '<tool_call>{"name": "get_order", "arguments": {}}</tool_call>'
    assert toolpo_rewards(extract_tool_calls(text, TOOLS), [], tuple(first_step_calls(text, TOOLS) or ())) == (
        0.0, 0.0)


_call = st.fixed_dictionaries({"name": st.sampled_from([*TOOLS, "x", ""]),
                               "arguments": st.one_of(st.none(), st.text(max_size=8), st.integers(), st.floats(),
                                                      st.lists(st.integers(), max_size=3),
                                                      st.dictionaries(st.text(max_size=5), st.text(max_size=5),
                                                                      max_size=3))})  # fmt: skip
_recorded = st.one_of(st.lists(st.lists(_call, max_size=3), max_size=4).map(json.dumps),
                      st.text(max_size=30), st.none(), st.integers())  # fmt: skip
_fragments = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
    ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>", "\nuser\n",
     "\nassistant\n", '{"name": "get_order", "arguments": {"order_id": "ORD-1001"}}', "[", "]", '"parameters"'])),
    max_size=25).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_fragments, recorded=_recorded)
def test_fuzz_random_text_and_recorded_calls(gust_gt: dict[str, Any], text: str, recorded: Any) -> None:
    out = compute_score("gust", text, gust_gt, {TURN_CALLS_KEY: recorded})
    _assert_contract(out)
    assert out["error_type"] == "none"
    parsed = extract_tool_calls(strip_think(text), TOOLS)
    assert out["text_call_count"] == len(parsed.calls)  # pred_call_count: the executed (recorded) calls scored
