"""User scenarios (goal, facts, pick criteria only), their verl carrier, and the split by environment."""

from __future__ import annotations

import json

import pytest

from gusteval.scenario import build_scenario, scenario_from_kwargs, split_by_environment
from gustforge.errors import InputError
from tests.gusteval._tasks import dependent_task, schemas, tiny_records
from trainer.convert import gust_row
from trainer.rows import VerlRow


def test_facts_are_the_stated_values_and_nothing_else():
    scenario = build_scenario(dependent_task(), schemas())
    assert [(f.key, f.value) for f in scenario.facts] == [("customer_id", "C-1")]
    dumped = json.dumps(scenario.model_dump(mode="json"))
    assert "ORD-1001" not in dumped  # the dependency value (found with a tool) is hidden
    assert "list_orders" not in dumped and "cancel_order" not in dumped  # no tool names
    assert scenario.pick_criteria[0].about == "order"
    assert scenario.pick_criteria[0].criterion == 'the one whose status is "pending"'


def test_opening_states_the_goal_but_no_value():
    task = tiny_records()[0]
    scenario = build_scenario(task, schemas())
    opening = scenario.opening()
    assert "cancel" in opening.lower()
    descriptions = " ".join(s.description for s in schemas()).lower()
    hidden = [f for f in scenario.facts if str(f.value).lower() not in descriptions]  # "processing" is tool text
    assert hidden and all(str(f.value) not in opening for f in hidden)
    assert opening.count("cancel a pending") == 1  # the end goal is not repeated as a step
    assert {(f.key, f.value) for f in scenario.facts} == {
        ("order_id", "ORD-1001"), ("order_id", "ORD-1003"), ("new_status", "processing")}


def test_gust_rows_carry_the_scenario_through_verl_rows():
    record = dependent_task()
    row = gust_row(record, schemas(), env_dir="/envs/tiny_env", index=0).model_dump(mode="json")
    again = VerlRow.model_validate(row)
    assert scenario_from_kwargs(again.extra_info.interaction_kwargs.model_dump()) == build_scenario(record, schemas())
    with pytest.raises(InputError):
        scenario_from_kwargs({})


def test_split_by_environment_is_disjoint_and_seeded():
    base = tiny_records()[0]
    records = [base.model_copy(update={"task_id": f"t{i}", "env_id": f"env-{i % 5}"}) for i in range(20)]
    train, held = split_by_environment(records, heldout_fraction=0.4, seed=3)
    assert len(train) + len(held) == 20
    assert {r.env_id for r in train}.isdisjoint({r.env_id for r in held})
    assert len({r.env_id for r in held}) == 2
    assert split_by_environment(records, heldout_fraction=0.4, seed=3) == (train, held)
    assert split_by_environment(records[:4], heldout_fraction=0.2)[1]  # at least one env held out
