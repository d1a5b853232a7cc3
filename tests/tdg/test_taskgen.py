"""Task writing: template text states every stated value and hides dependency values; the LLM path; records."""

from __future__ import annotations

import json

import pytest

from data.models import TaskText
from gustforge.llm import LLMClient, LLMSettings
from tdg.taskgen import (
    TASK_OUTPUT_SCHEMA,
    graph_complexity,
    make_task_record,
    make_task_writer_role,
    stated_arguments,
    write_task,
    write_tasks,
)
from tdg.verify import check_solvable
from tests.fakes.openai_server import FakeOpenAIServer
from tests.tdg._bank_env import CREDIT_PLAN, PARALLEL_PLAN, bank_env, build_trace


@pytest.fixture(scope="module")
def env():
    return bank_env()


@pytest.fixture(scope="module")
def credit_trace(env):
    return build_trace(env, CREDIT_PLAN)


@pytest.fixture(scope="module")
def offline():
    return LLMClient(LLMSettings())


def _task_text(text: TaskText) -> str:
    return " ".join([text.user_query, *(t["content"] for t in text.dialogue_history)])


class TestWriteTaskOffline:
    def test_states_every_context_value_and_hides_dependency_values(self, env, credit_trace, offline):
        text = write_task(credit_trace, env, incoming_edges=credit_trace.edges_used, client=offline, seed=3)
        everything = _task_text(text)
        assert '"Ann Lee"' in everything and " 5" in everything
        # dependency values (user_id u1 from find_user, account acc-7 from get_user) stay implicit
        for hidden in ("u1", "acc-7"):
            assert hidden not in everything
        assert check_solvable(credit_trace, text).ok

    def test_every_non_dependency_argument_is_stated(self, env, offline):
        trace = build_trace(env, PARALLEL_PLAN, trace_id="t2")
        text = write_task(trace, env, incoming_edges=[], client=offline, seed=0)
        for stage in trace.stages:
            for call in stage.calls:
                for value in stated_arguments(call).values():
                    assert json.dumps(value).strip('"') in _task_text(text)

    def test_dialogue_plays_the_information_gap_without_repeating_the_query(self, env, credit_trace, offline):
        texts = [write_task(credit_trace, env, incoming_edges=credit_trace.edges_used, client=offline, seed=s)
                 for s in range(24)]  # fmt: skip
        with_history = [t for t in texts if t.dialogue_history]
        assert with_history and len(with_history) < len(texts)  # seeds vary the shape
        assert {("Ann Lee" in t.dialogue_history[0]["content"]) for t in with_history} == {True, False}
        for text in with_history:
            assert [t["role"] for t in text.dialogue_history] == ["user", "assistant"]
            first = text.dialogue_history[0]["content"]
            assert _task_text(text).count("Ann Lee") == 1  # every value said once, in the history or the query
            assert first not in text.user_query  # the query is the next user turn, not a repeat
        for text in texts:
            assert len(text.reasoning_chain) == 3
            assert "taking account_id from the output get_user.user.account_id" in text.reasoning_chain[2]

    def test_the_query_always_states_the_goal(self, env, credit_trace, offline):
        from tdg.quality import goal_missing

        for seed in range(24):
            text = write_task(credit_trace, env, incoming_edges=(), client=offline, seed=seed)
            assert "add a balance" in text.user_query or "add the balance" in text.user_query, text.user_query
            assert not goal_missing(make_task_record(credit_trace, text, env, seed=seed)), text.user_query

    def test_never_quotes_descriptions_tool_names_or_steps(self, env, credit_trace, offline):
        for seed in range(12):
            text = _task_text(write_task(credit_trace, env, incoming_edges=(), client=offline, seed=seed)).lower()
            for schema in env.schemas:
                assert schema.name not in text
                assert schema.description.rstrip(".").lower() not in text
            assert "stage" not in text and "step" not in text

    def test_deterministic_for_a_seed(self, env, credit_trace, offline):
        texts = {write_task(credit_trace, env, incoming_edges=(), client=offline, seed=s).user_query for s in range(12)}
        again = write_task(credit_trace, env, incoming_edges=(), client=offline, seed=5)
        assert again == write_task(credit_trace, env, incoming_edges=(), client=offline, seed=5)
        assert len(texts) > 1  # seeds vary the wording

    def test_trace_of_another_env_is_rejected(self, credit_trace, offline):
        from gustforge.errors import InputError

        with pytest.raises(InputError, match="not other"):
            write_task(credit_trace, bank_env("other"), incoming_edges=(), client=offline, seed=0)


class TestWriteTaskLLM:
    def test_prompt_holds_trace_edges_and_values_and_reply_is_used(self, env, credit_trace):
        reply = {
            "user_query": "Please credit 5 to Ann Lee's account.",
            "dialogue_history": [{"role": "user", "content": "Hi, it's about Ann Lee."}],
            "reasoning_chain": ["find Ann", "get her account", "credit it"],
        }
        with FakeOpenAIServer(lambda req: {"content": json.dumps(reply)}) as server:
            settings = LLMSettings(backend="openai", base_url=server.base_url, model="fake-model", max_retries=0)
            with LLMClient(settings) as client:
                text = write_task(credit_trace, env, incoming_edges=[("find_user", "get_user")], client=client, seed=1)
            request = server.requests[0]
        assert text.user_query == reply["user_query"] and text.reasoning_chain == tuple(reply["reasoning_chain"])
        system, user = request["messages"][0]["content"], request["messages"][1]["content"]
        assert "expert AI dataset synthesizer" in system and "Implicit Dependencies" in system
        assert '"trace_id":"t1"' in user.replace(" ", "") and '["find_user","get_user"]' in user.replace(" ", "")
        assert '"Ann Lee"' in user

    def test_invalid_reply_is_quarantined_by_write_tasks(self, env, credit_trace):
        bad = {"user_query": "", "dialogue_history": "nope", "reasoning_chain": []}
        with FakeOpenAIServer(lambda req: {"content": json.dumps(bad)}) as server:
            settings = LLMSettings(
                backend="openai", base_url=server.base_url, model="m", max_retries=0, max_repair_rounds=0
            )
            with LLMClient(settings) as client:
                outcome = write_tasks([credit_trace], env, client=client, seed=0)
        assert outcome.records == ()
        assert [q.reason for q in outcome.dropped] == ["writer_bad_output"]
        assert outcome.report.balanced and outcome.report.dropped == {"writer_bad_output": 1}


class TestTaskRecord:
    def test_record_fields_and_content_hash_id(self, env, credit_trace, offline):
        text = write_task(credit_trace, env, incoming_edges=(), client=offline, seed=2)
        record = make_task_record(credit_trace, text, env, seed=2)
        assert record.tools == ("get_user", "find_user", "add_balance", "get_balance")
        assert record.graph_complexity == graph_complexity(credit_trace) == 3 + 2
        assert record.teacher_status == "not_run" and record.pass_at_k is None and record.replay_ok is None
        roles = {f"role:{part}" for part in ("schemas", "db", "code", "graphs", "tasks")}
        assert set(record.provenance) == {
            "toolset_id",
            "schemas_sha256",
            "tools_source_sha256",
            "initial_db_sha256",
            *roles,
        }
        assert record.provenance["role:tasks"] == "offline (deterministic templates)"
        assert record.task_id == make_task_record(credit_trace, text, env, seed=2).task_id
        other = text.model_copy(update={"user_query": text.user_query + "!"})
        assert make_task_record(credit_trace, other, env, seed=2).task_id != record.task_id

    def test_write_tasks_balances(self, env, credit_trace, offline):
        traces = [credit_trace, build_trace(env, PARALLEL_PLAN, trace_id="t2")]
        outcome = write_tasks(traces, env, client=offline, seed=9)
        assert len(outcome.records) == 2 and outcome.report.balanced and outcome.report.produced == 2
        assert len({r.task_id for r in outcome.records}) == 2


def test_output_schema_accepts_the_offline_writer():
    role = make_task_writer_role()
    assert role.output_schema is TASK_OUTPUT_SCHEMA


def test_the_goal_is_not_the_step_list_and_picks_are_stated_once():
    from tdg.taskgen import offline_task

    names = [f"send_{w}" for w in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")]
    products = {"status": "success", "message": "ok",
                "products": [{"product_id": "P1", "name": "Hose"}, {"product_id": "P2", "name": "Rake"}]}  # fmt: skip
    pick = {"arguments": {"product_id": "P2"}, "output": {"status": "success", "message": "ok"},
            "dependency_args": {"product_id": "list_products.products[1].product_id"},
            "pick_criteria": {"product_id": "field=name"}}  # fmt: skip
    stages = [{"calls": [{"name": "list_products", "arguments": {}, "output": products}]},
              {"calls": [{"name": "get_product", **pick}, {"name": "check_product", **pick}]},
              *({"calls": [{"name": n, "arguments": {}, "output": {"status": "success", "message": "ok"}}]}
                for n in names)]  # fmt: skip
    definitions = [{"name": n, "kind": "action"} for n in names] + [
        {"name": n, "kind": "read"} for n in ("list_products", "get_product", "check_product")
    ]
    inputs = {"golden_trace_json": {"trace_id": "t", "stages": stages}, "tool_definitions_json": definitions,
              "dependency_edges_json": [], "stated_values_json": [], "pick_criteria_json": [], "seed": 1}  # fmt: skip
    query = offline_task(inputs)["user_query"]
    assert sum(f"send the {w}" in query for w in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")) == 4
    assert "send the alpha" in query and "send the foxtrot" in query
    assert query.count('"Rake"') == 1


def test_the_goal_says_it_only_for_the_same_record():
    import random

    from data.models import TraceCall
    from tdg.taskgen import _goal_phrase

    defs = {
        n: {"kind": k} for n, k in (("create_order", "create"), ("update_order", "update"), ("cancel_order", "update"))
    }
    made = TraceCall(
        name="create_order", arguments={"product_id": "P1"}, output={"order": {"order_id": "O9", "product_id": "P1"}}
    )
    same = TraceCall(name="cancel_order", arguments={"order_id": "O9"}, output={"order_id": "O9"})
    other = TraceCall(
        name="update_order", arguments={"order_id": "O2"}, output={"order": {"order_id": "O2", "product_id": "P1"}}
    )
    rng = random.Random(0)
    assert _goal_phrase([made, same], defs, rng).endswith("cancel it")
    assert "create an order" in _goal_phrase([other, made], defs, rng)  # a shared product is not the same order
    assert _goal_phrase([other, made], defs, rng).startswith("update the order")


def test_goal_verbs_come_from_the_name_the_description_or_the_kind():
    from tdg.taskgen import _goal

    assert _goal("cancel_order", {}) == "cancel the order"
    assert _goal("drag_and_drop", {}) == "drag and drop"
    assert _goal("weather", {"weather": {"description": "Fetches the weather for a city.", "kind": "read"}}) == (
        "fetch the weather"
    )
    assert _goal("user_profile", {"user_profile": {"description": "The profile.", "kind": "read"}}) == (
        "look up the user profile"
    )
