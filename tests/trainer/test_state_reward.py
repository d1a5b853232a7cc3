"""State-equivalence outcome reward: replay the agent's calls on a fresh tiny_env and compare final DB hashes."""

from __future__ import annotations

from envgen.runtime import Environment
from tests.trainer.gust_task import GOLD_STAGES, TINY_ENV, make_task
from trainer.rewards.parse import Call
from trainer.rewards.state import replay_final_hash, state_equivalence


def _calls(stages):
    return [Call(n, a) for stage in stages for n, a in stage]


def test_golden_calls_reach_golden_state():
    task = make_task()
    env = Environment.load(TINY_ENV)
    result = state_equivalence(env, _calls(GOLD_STAGES), task.trace.final_db_hash)
    assert result.checked and result.match and result.final_hash == task.trace.final_db_hash


def test_reads_and_invalid_calls_do_not_change_state():
    task = make_task()
    env = Environment.load(TINY_ENV)
    detour = [Call("list_orders", {"status": "pending"}), Call("get_order", {"order_id": 5}),
              Call("no_such_tool", {}), *_calls(GOLD_STAGES)]
    assert state_equivalence(env, detour, task.trace.final_db_hash).match


def test_missing_or_wrong_write_mismatches():
    task = make_task()
    env = Environment.load(TINY_ENV)
    assert not state_equivalence(env, _calls(GOLD_STAGES)[:-1], task.trace.final_db_hash).match
    wrong = _calls(GOLD_STAGES)[:-1] + [Call("cancel_order", {"order_id": "ORD-1002"})]
    assert not state_equivalence(env, wrong, task.trace.final_db_hash).match


def test_each_replay_starts_from_the_initial_db():
    task = make_task()
    env = Environment.load(TINY_ENV)
    first = replay_final_hash(env, _calls(GOLD_STAGES))
    assert replay_final_hash(env, _calls(GOLD_STAGES)) == first
    assert replay_final_hash(env, []) == task.trace.initial_db_hash
