"""Reward-hacking probes (`trainer.rewards.probes`): gold strictly above every probe on score and TARA's turn reward."""

from __future__ import annotations

import pytest

from tests.trainer.gust_task import TINY_ENV, make_task
from trainer.convert import load_env_schemas
from trainer.rewards.parse import Call
from trainer.rewards.probes import (
    ENFORCED_SIGNALS,
    PROBES,
    margin_summary,
    probe_failures,
    probe_tasks,
    probe_tasks_from_records,
)
from trainer.rewards.score import RewardConfig

GOLD = [[Call("get_order", {"order_id": "ORD-1001"})], [Call("cancel_order", {"order_id": "ORD-1003"}),
                                                        Call("list_orders", {"status": "pending"})]]  # fmt: skip
ALLOWED = ("get_order", "list_orders", "update_order_status", "cancel_order")


def test_probe_policies():
    assert PROBES.get("idle")(GOLD, ALLOWED) == []
    spam = PROBES.get("call_everything")(GOLD, ALLOWED)
    assert spam[0] == GOLD[0] and spam[1] == [*GOLD[1], Call("update_order_status", {})]
    assert [len(t) for t in PROBES.get("repeated")(GOLD, ALLOWED)] == [2, 4]
    wrong = PROBES.get("wrong_argument")(GOLD, ALLOWED)
    assert wrong[0] == [Call("get_order", {"order_id": "ORD-1001-wrong"})] and wrong[1] == GOLD[1]
    assert PROBES.get("reordered")(GOLD, ALLOWED) == [GOLD[1], GOLD[0]]
    assert PROBES.get("reordered")(GOLD[:1], ALLOWED) is None
    assert PROBES.get("call_everything")(GOLD, ("get_order", "cancel_order", "list_orders")) is None


@pytest.fixture(scope="module")
def tiny_tasks():
    records = [
        make_task(task_id="t-gold"),
        make_task(
            [
                [("list_orders", {"customer_id": "C-1"})],
                [("update_order_status", {"order_id": "ORD-1002", "new_status": "delivered"})],
            ],
            task_id="t-two",
        ),  # fmt: skip
    ]
    records[1] = records[1].model_copy(update={"text": records[1].text.model_copy(
        update={"expected_answer": ("ORD-1002", "delivered")})})  # fmt: skip
    return probe_tasks_from_records(records, {records[0].env_id: load_env_schemas(TINY_ENV)},
                                    {records[0].env_id: TINY_ENV})  # fmt: skip


def test_gold_is_strictly_above_every_probe(tiny_tasks):
    results = probe_tasks(tiny_tasks)
    assert set(results) == {"t-gold", "t-two"}
    for result in results.values():
        assert set(result.probes) == set(PROBES.names())
        for probe, margins in result.margins().items():
            assert all(margins[s] > 0 for s in ENFORCED_SIGNALS), (result.task_id, probe, margins)
        # slca's r_sum comes from the offline heuristic judge (a grounding proxy): extra tool outputs can raise it,
        # so slca is reported, not enforced; idle and repeated still lose on it
        assert result.margins()["idle"]["slca"] > 0 and result.margins()["repeated"]["slca"] > 0
    assert probe_failures(results) == {}
    summary = margin_summary(results)
    assert summary["idle"]["score"]["below"] == 1.0 and summary["call_everything"]["tara"]["min"] > 0


def test_the_papers_subset_rule_lets_spam_tie_gold(tiny_tasks):
    """What the old TARA reward did: call_everything and repeated earned gold's turn reward on every task."""
    results = probe_tasks(tiny_tasks, RewardConfig(state_mode="rollout", turn_rule="subset"))
    for result in results.values():
        assert result.margins()["call_everything"]["tara"] == 0.0 and result.margins()["repeated"]["tara"] == 0.0
        assert {"call_everything", "repeated"} <= set(result.ties())
    failures = probe_failures(results)
    assert set(failures) == {"t-gold", "t-two"}
    assert all(reason.startswith("probe_ties_gold:") for reason, _ in failures.values())
