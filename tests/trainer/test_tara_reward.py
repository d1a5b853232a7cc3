"""TARA per-turn binary reward: r_t = 1 iff the golden calls of turn t are a dict-subset of the agent's turn t."""

from __future__ import annotations

from trainer.rewards.parse import Call
from trainer.rewards.tara import call_subset, tara_turn_rewards, turn_matches, value_subset

GOLD = [
    [Call("get_order", {"order_id": "o1"})],
    [Call("update_status", {"order_id": "o1", "status": "shipped"}), Call("notify", {"user": {"id": 7}})],
    [Call("cancel_order", {"order_id": "o2"})],
]


def test_value_subset_rules():
    assert value_subset({"a": 1}, {"a": "1", "b": 2})
    assert value_subset({"a": {"b": "X"}}, {"a": {"b": "x", "c": 0}})
    assert not value_subset({"a": 1, "z": 0}, {"a": 1})
    assert value_subset({"l": [1, {"k": 2}]}, {"l": [1, {"k": 2, "extra": 3}]})
    assert not value_subset({"l": [1, 2]}, {"l": [1, 2, 3]})
    assert not value_subset({"a": {"b": 1}}, {"a": "b=1"})


def test_call_subset_needs_same_name():
    assert call_subset(Call("f", {}), Call("f", {"x": 1}))
    assert not call_subset(Call("f", {}), Call("g", {}))


def test_hand_computed_turn_rewards():
    agent = [
        [Call("get_order", {"order_id": "o1", "verbose": True})],  # superset → 1
        [Call("notify", {"user": {"id": 7}}), Call("update_status", {"order_id": "o1", "status": "SHIPPED"})],  # 1
        [Call("cancel_order", {"order_id": "o3"})],  # wrong value → 0
    ]
    assert tara_turn_rewards(GOLD, agent) == [1.0, 1.0, 0.0]


def test_missing_and_shifted_turns_score_zero():
    # the agent spent its first turn on a detour, so every later turn is shifted (TARA is positional)
    agent = [[Call("list_orders", {})], GOLD[0], GOLD[1]]
    assert tara_turn_rewards(GOLD, agent) == [0.0, 0.0, 0.0]
    assert tara_turn_rewards(GOLD, [GOLD[0]]) == [1.0, 0.0, 0.0]
    assert tara_turn_rewards(GOLD, []) == [0.0, 0.0, 0.0]
    assert tara_turn_rewards([], [GOLD[0]]) == []


def test_parallel_turn_needs_distinct_agent_calls():
    gold = [Call("f", {"a": 1}), Call("f", {})]
    assert not turn_matches(gold, [Call("f", {"a": 1})])
    # greedy would give the only a=1 call to the looser gold call; matching must find the assignment
    assert turn_matches([Call("f", {}), Call("f", {"a": 1})], [Call("f", {"a": 1}), Call("f", {"b": 2})])
    assert turn_matches(gold, [Call("f", {"b": 2}), Call("f", {"a": 1})])
