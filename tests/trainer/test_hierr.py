"""HierR R_tool: hand-computed cases, the reference's worked example (§6.11) and the SLCA preview gold."""

from __future__ import annotations

import json

import pytest

from trainer.rewards.hierr import (
    HierRWeights,
    hierr_score,
    key_value_scores,
    loose_eq,
    name_f1,
    parallel_score,
)
from trainer.rewards.parse import Call, extract_tool_calls, normalize_gold, strip_think

TOOLS = ["radians_to_degrees", "degrees_to_radians", "sin", "power"]
GOLD = [
    {"name": "radians_to_degrees", "arguments": {"radians": 0.7853981634}},
    {"name": "sin", "arguments": {"x": 0.7853981634}},
    {"name": "power", "arguments": {"base": 0.7071067812, "exponent": 2}},
]


def _block(name: str, args: dict) -> str:
    return "<think>plan</think><tool_call>\n" + json.dumps([{"name": name, "arguments": args}]) + "\n</tool_call>"


def _rollout(first: str) -> str:
    obs = "\nuser\n<tool_response>\n0.7\n</tool_response>\nassistant\n"
    return (
        _block(first, {"radians": 0.7853981634})
        + obs
        + _block("sin", {"x": 0.7853981634})
        + obs
        + _block("power", {"base": 0.7071067812, "exponent": 2})
        + obs
        + "The result is 0.5."
    )


def _score(solution: str, gold, tools=TOOLS):
    return hierr_score(extract_tool_calls(strip_think(solution), tools), normalize_gold(gold))


def test_reference_worked_example_sample_1():
    s = _score(_rollout("radians_to_degrees"), GOLD)
    assert (s.s_fmt, s.s_name, s.s_key, s.s_val, s.s_par) == (1.0, 1.0, 1.0, 1.0, 0.0)
    assert s.r_tool == pytest.approx(0.70)


def test_reference_worked_example_sample_2_wrong_tool():
    s = _score(_rollout("degrees_to_radians"), GOLD)
    assert s.s_name == pytest.approx(2 * 2 / 6)
    assert s.s_key == pytest.approx(2 / 3) and s.s_val == pytest.approx(2 / 3)
    assert s.r_tool == pytest.approx(0.50, abs=1e-9)


def test_nested_gold_gets_parallel_term():
    nested = json.dumps([[g] for g in GOLD])
    assert _score(_rollout("radians_to_degrees"), nested).r_tool == pytest.approx(1.0)


def test_hand_computed_partial_arguments():
    # gold: f(a=1, b="X"); pred: f(a="1.0", b="y", c=3) -> key = 2/3, val = 1/2
    key, val = key_value_scores([Call("f", {"a": "1.0", "b": "y", "c": 3})], [Call("f", {"a": 1, "b": "X"})])
    assert key == pytest.approx(2 / 3) and val == pytest.approx(0.5)
    text = '<tool_call>{"name": "f", "arguments": {"a": "1.0", "b": "y", "c": 3}}</tool_call><tool_call>oops'
    s = hierr_score(extract_tool_calls(text, ["f"]), [[Call("f", {"a": 1, "b": "X"})]])
    # S_fmt = 1/2, S_name = 1, S_par = 1
    assert s.r_tool == pytest.approx(0.10 * 0.5 + 0.25 + 0.15 * (2 / 3) + 0.20 * 0.5 + 0.30)


def test_greedy_matching_consumes_best_pred_only_when_positive():
    gold = [Call("f", {"a": 1}), Call("f", {"a": 2})]
    preds = [Call("f", {"b": 9}), Call("f", {"a": 2}), Call("f", {"a": 1})]
    key, val = key_value_scores(preds, gold)
    assert key == pytest.approx(1.0) and val == pytest.approx(1.0)


def test_no_gold_arguments_means_full_key_value():
    assert key_value_scores([], [Call("f", {})]) == (1.0, 1.0)
    assert key_value_scores([], [Call("f", {"a": 1})]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("Paris ", "paris", True),
        ("3", 3.0, True),
        (True, "true", True),
        ("1", True, True),
        ("false", 0, True),
        ([1, 2], [1, 2], True),
        ({"x": [1]}, {"x": [1]}, True),
        ([2, 1], [1, 2], False),
        (None, None, True),
        (None, "None", False),
        ("abc", "abd", False),
    ],
)
def test_loose_eq(a, b, equal):
    assert loose_eq(a, b) is equal


def test_name_f1_and_parallel_edges():
    assert name_f1([], []) == 1.0 and name_f1(["a"], []) == 0.0
    assert name_f1(["a", "a", "b"], ["a", "b", "b"]) == pytest.approx(2 * 2 / 6)
    assert parallel_score([], []) == 1.0
    assert parallel_score([(Call("a", {}),)], []) == 0.0


def test_weights_are_the_papers():
    w = HierRWeights()
    assert (w.fmt, w.name, w.key, w.val, w.par) == (0.10, 0.25, 0.15, 0.20, 0.30)


def test_slca_preview_gold_names_only(corpora_dir):
    rows = [json.loads(line) for line in (corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl").open()]
    gt = rows[3]["reward_model"]["ground_truth"]
    gold = normalize_gold(gt["gold_tool_calls"])
    assert len(gold) == 1 and len(gold[0]) == 5
    first = gold[0][0].name
    one_call = f'<tool_call>{{"name": "{first}", "arguments": {{"query": "button"}}}}</tool_call>'
    s = _score(one_call, gt["gold_tool_calls"], gt["allowed_tools"])
    # flat gold: arguments unknown -> S_key = S_val = 1; S_par compares 1 call with 5 gold calls
    assert (s.s_fmt, s.s_key, s.s_val, s.s_par) == (1.0, 1.0, 1.0, 0.0)
    assert s.s_name == pytest.approx(2 * 1 / 6)
    assert s.r_tool == pytest.approx(0.10 + 0.25 / 3 + 0.35)
