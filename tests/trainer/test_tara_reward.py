"""TARA per-turn binary reward: r_t = 1 iff the agent's turn t matches the golden calls of turn t one to one ("exact",
the default) or holds them as dict-subsets of distinct calls ("subset", the paper's rule)."""

from __future__ import annotations

import pytest

from gustforge.errors import RegistryError
from trainer.rewards.parse import Call
from trainer.rewards.tara import TURN_RULES, call_subset, tara_turn_rewards, turn_exact, turn_matches, value_subset

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


def _with_every_other_tool(turns):
    return [[*turn, Call("list_orders", {}), Call("delete_everything", {})] for turn in turns]


def test_extra_or_repeated_calls_cost_the_turn_by_default():
    """The paper's subset rule let "gold + every other tool" and "every gold call twice" tie gold on every turn."""
    spam = _with_every_other_tool(GOLD)
    twice = [[c for c in turn for _ in (0, 1)] for turn in GOLD]
    assert tara_turn_rewards(GOLD, GOLD) == [1.0, 1.0, 1.0]
    assert tara_turn_rewards(GOLD, spam) == [0.0, 0.0, 0.0]
    assert tara_turn_rewards(GOLD, twice) == [0.0, 0.0, 0.0]
    assert tara_turn_rewards(GOLD, spam, "subset") == tara_turn_rewards(GOLD, twice, "subset") == [1.0, 1.0, 1.0]


def test_exact_rule_still_allows_defaults_and_any_order():
    pred = [
        Call("notify", {"user": {"id": 7, "name": "x"}}),
        Call("update_status", {"order_id": "o1", "status": "shipped"}),
    ]
    assert turn_exact(GOLD[1], pred)
    assert not turn_exact(GOLD[1], pred[:1])
    assert not turn_exact(GOLD[1], [*pred, pred[0]])


def test_turn_rules_registry():
    assert TURN_RULES.names() == ["exact", "subset"]
    with pytest.raises(RegistryError):
        tara_turn_rewards(GOLD, GOLD, "loose")
