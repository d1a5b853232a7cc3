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
            query = text.user_query.lower()
            assert "add a balance" in query or "add the balance" in query, text.user_query
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


def _inputs(stages: list[dict], kinds: dict[str, str], seed: int = 1) -> dict:
    definitions = [{"name": n, "kind": k} for n, k in kinds.items()]
    return {"golden_trace_json": {"trace_id": "t", "stages": stages}, "tool_definitions_json": definitions,
            "dependency_edges_json": [], "stated_values_json": [], "pick_criteria_json": [], "seed": seed}  # fmt: skip


_PRODUCTS = {"status": "success", "message": "ok",
             "products": [{"product_id": "P1", "name": "Hose"}, {"product_id": "P2", "name": "Rake"}]}  # fmt: skip


def _pick(name: str, index: int, purpose: str = "") -> dict:
    return {"name": name, "arguments": {"product_id": f"P{index + 1}"}, "purpose": purpose,
            "output": {"status": "success", "message": "ok", "review": {"review_id": f"R{index}", "stars": 4}},
            "dependency_args": {"product_id": f"list_products.products[{index}].product_id"},
            "pick_criteria": {"product_id": "field=name"}}  # fmt: skip


def test_every_requested_call_is_asked_for_in_words_and_each_pick_names_its_call():
    from data.models import TaskText
    from tdg.taskgen import _trace_of, offline_task
    from tdg.textstats import spaced_tool_names, text_problems, unlinked_picks

    stages = [{"calls": [{"name": "list_products", "arguments": {}, "output": _PRODUCTS}]},
              {"calls": [_pick("openshop_review_product", 0), _pick("openshop_archive_product", 1)]}]  # fmt: skip
    kinds = {"list_products": "read", "openshop_review_product": "create", "openshop_archive_product": "update"}
    trace = _trace_of(_inputs(stages, kinds)["golden_trace_json"])
    for seed in range(16):
        out = offline_task(_inputs(stages, kinds, seed))
        text = TaskText(user_query=out["user_query"], dialogue_history=tuple(out["dialogue_history"]),
                        expected_answer=("R0",))  # fmt: skip
        shown = " ".join([*(t["content"] for t in out["dialogue_history"]), out["user_query"]]).lower()
        assert "review a" in shown and "archive the product" in shown, shown  # behaviour + entity, no namespace
        assert "openshop" not in shown and not spaced_tool_names(trace, text)
        assert unlinked_picks(trace, text) == [] and text_problems(trace, text) == [], shown
        assert shown.count('"hose"') == 1 and shown.count('"rake"') == 1  # each criterion said once, tied


def test_a_provider_is_never_asked_for_but_the_values_the_user_knows_are_said():
    from tdg.taskgen import offline_task

    stages = [{"calls": [{"name": "find_customer", "arguments": {"email": "ann@example.com"},
                          "output": {"customer": {"customer_id": "C7"}}, "purpose": "provides:close_account.customer_id"}]},
              {"calls": [{"name": "close_account", "arguments": {"customer_id": "C7"}, "purpose": "requested",
                          "output": {"account": {"account_id": "A1", "state": "closed"}},
                          "dependency_args": {"customer_id": "find_customer.customer.customer_id"}}]}]  # fmt: skip
    for seed in range(8):
        out = offline_task(_inputs(stages, {"find_customer": "read", "close_account": "update"}, seed))
        shown = " ".join([*(t["content"] for t in out["dialogue_history"]), out["user_query"]]).lower()
        assert "close the account" in shown and '"ann@example.com"' in shown
        assert "find the customer" not in shown and "look up the customer" not in shown and "c7" not in shown


def test_a_provider_over_a_collection_is_said_as_the_one_record_meant():
    from tdg.taskgen import offline_task

    stages = [{"calls": [{"name": "load_more_hotels", "arguments": {"city": "Oslo"}, "purpose": "provides:book_hotel.hotel_id",
                          "output": {"hotels": [{"hotel_id": "H7", "city": "Oslo"}]}}]},
              {"calls": [{"name": "book_hotel", "arguments": {"hotel_id": "H7"}, "purpose": "requested",
                          "output": {"booking": {"booking_id": "B1", "hotel_id": "H7"}},
                          "dependency_args": {"hotel_id": "load_more_hotels.hotels[0].hotel_id"}}]}]  # fmt: skip
    said = set()
    for seed in range(8):
        out = offline_task(_inputs(stages, {"load_more_hotels": "read", "book_hotel": "create"}, seed))
        shown = " ".join([*(t["content"] for t in out["dialogue_history"]), out["user_query"]]).lower()
        assert '"oslo"' in shown and "more hotels i mean" not in shown and "hotels i mean" not in shown, shown
        said.add("the hotel i mean is the one with" in shown)
    assert said == {True}


def test_a_request_that_acts_on_what_an_earlier_request_made_says_so():
    from tdg.taskgen import offline_task

    created = {"status": "success", "palace": {"palace_id": "PAL-5", "name": "Visual"}, "palace_id": "PAL-5"}
    stages = [{"calls": [{"name": "create_palace", "arguments": {"name": "Visual"}, "output": created,
                          "purpose": "requested", "db_changed": True}]},
              {"calls": [{"name": "create_journey", "arguments": {"name": "Walk", "palace_id": "PAL-5"},
                          "output": {"journey": {"journey_id": "J-9"}, "journey_id": "J-9"}, "purpose": "requested",
                          "dependency_args": {"palace_id": "create_palace.palace_id"}, "db_changed": True},
                         {"name": "rename_palace", "arguments": {"palace_id": "PAL-5", "title": "Aural"},
                          "output": {"palace": {"palace_id": "PAL-5"}}, "purpose": "requested",
                          "dependency_args": {"palace_id": "create_palace.palace_id"}, "db_changed": True}]}]  # fmt: skip
    kinds = {"create_palace": "create", "create_journey": "create", "rename_palace": "update"}
    for seed in range(8):
        out = offline_task(_inputs(stages, kinds, seed))
        shown = " ".join([*(t["content"] for t in out["dialogue_history"]), out["user_query"]]).lower()
        assert "for the new palace" in shown and "rename the new palace" in shown, shown
        assert "pal-5" not in shown  # the new id is found, not stated


def test_answer_facts_are_what_the_user_asks_to_know():
    from tdg.taskgen import _trace_of, answer_facts

    stages = [{"calls": [{"name": "get_task", "arguments": {"task_id": "T1"},
                          "output": {"status": "success", "task": {"task_id": "T1", "priority": "high", "due": 3}}}]},
              {"calls": [{"name": "create_note", "arguments": {"text": "hello"},
                          "output": {"status": "success", "note": {"note_id": "N4", "text": "hello"}}}]}]  # fmt: skip
    trace = _trace_of({"trace_id": "t", "stages": stages})
    facts = answer_facts(trace, {"get_task": "read", "create_note": "create"})
    assert [(f.tool, f.field, f.value) for f in facts] == [
        ("get_task", "task.due", "3"), ("get_task", "task.priority", "high"), ("create_note", "note.note_id", "N4")
    ]  # a read's attributes, a write's new id; never a value the user states (T1, "hello")


class TestAnswerFactsAreNeverStated:
    """An answer fact is something only the tools tell: a value the user states (in another case or number form)
    would let an agent pass the answer check by echoing the request."""

    def test_a_stated_value_in_another_form_gives_way_to_an_informative_field(self):
        from tdg.taskgen import _trace_of, answer_facts

        member = {"name": "Library Member", "email": "M@X.org", "quota": 5.0, "active": True, "nickname": "",
                  "notes": "n/a", "joined": "2024-05-01"}  # fmt: skip
        stages = [{"calls": [{"name": "register_member", "arguments": {"name": "library member", "email": "m@x.org",
                                                                       "quota": 5},
                              "output": {"status": "success", "member": member}}]}]  # fmt: skip
        facts = answer_facts(_trace_of({"trace_id": "t", "stages": stages}), {"register_member": "create"})
        assert [(f.field, f.value) for f in facts] == [("member.joined", "2024-05-01")]

    def test_a_picked_record_named_by_the_user_is_asked_about_by_another_field(self):
        """'the collection whose name is "Reports"' must not be answered by "Reports"."""
        from tdg.taskgen import _trace_of, answer_facts

        listed = {"collections": [{"collection_id": "C1", "name": "Reports"}, {"collection_id": "C2", "name": "Q3"}]}
        stages = [{"calls": [{"name": "list_collections", "arguments": {}, "output": listed,
                              "purpose": "provides:get_collection.collection_id"}]},
                  {"calls": [{"name": "get_collection", "arguments": {"collection_id": "C1"}, "purpose": "requested",
                              "output": {"api_level": "Reports", "collection": {"collection_id": "C1",
                                         "name": "REPORTS", "size": 12}},
                              "dependency_args": {"collection_id": "list_collections.collections[0].collection_id"},
                              "pick_criteria": {"collection_id": "field=name"}}]}]  # fmt: skip
        facts = answer_facts(_trace_of({"trace_id": "t", "stages": stages}), {"get_collection": "read"})
        assert [(f.field, f.value) for f in facts] == [("collection.size", "12")]

    def test_the_fallback_prefers_a_field_of_the_record_the_goal_is_about(self):
        from tdg.taskgen import _trace_of, answer_facts

        stages = [{"calls": [{"name": "get_collection", "arguments": {"collection_id": "C2"},
                              "output": {"api_level": 3, "collection": {"collection_id": "C2", "owner": "Ann Lee"}}}]},
                  {"calls": [{"name": "rename_collection", "arguments": {"collection_id": "C2", "name": "Q3"},
                              "output": {"collection": {"collection_id": "C2", "name": "Q3", "archived": False}},
                              "dependency_args": {"collection_id": "get_collection.collection.collection_id"}}]}]  # fmt: skip
        facts = answer_facts(_trace_of({"trace_id": "t", "stages": stages}), {"rename_collection": "update"})
        assert [(f.tool, f.field, f.value) for f in facts] == [("get_collection", "collection.owner", "Ann Lee")]

    def test_a_read_of_the_record_just_created_asks_for_its_new_id_not_its_stated_name(self):
        """The sample's add_item + get_item: every field the read returns is stated or its own input."""
        from tdg.taskgen import _trace_of, answer_facts

        item = {"item_id": "ITE-6", "name": "Stock Warehouse", "quantity": 2}
        stages = [{"calls": [{"name": "add_item", "arguments": {"name": "Stock Warehouse", "quantity": 2},
                              "output": {"item": item, "message": "item 'ITE-6' created", "status": "success"}}]},
                  {"calls": [{"name": "get_item", "arguments": {"item_id": "ITE-6"},
                              "output": {"item": item, "message": "item 'ITE-6' found", "status": "success"},
                              "dependency_args": {"item_id": "add_item.item.item_id"}}]}]  # fmt: skip
        facts = answer_facts(_trace_of({"trace_id": "t", "stages": stages}), {"add_item": "create", "get_item": "read"})
        assert [(f.tool, f.field, f.value) for f in facts] == [("add_item", "item.item_id", "ITE-6")]

    def test_with_no_informative_value_left_the_text_is_rejected(self):
        from tdg.taskgen import _trace_of, answer_facts, offline_task, text_rejection

        stages = [{"calls": [{"name": "update_member", "arguments": {"member_id": "M1", "name": "Ann"},
                              "output": {"status": "success", "member": {"member_id": "m1", "name": "ANN",
                                                                         "active": True, "notes": "N/A"}}}]}]  # fmt: skip
        trace = _trace_of({"trace_id": "t", "stages": stages})
        facts = answer_facts(trace, {"update_member": "update"})
        out = offline_task({**_inputs(stages, {"update_member": "update"}), "answer_facts_json": facts})
        text = TaskText(user_query=out["user_query"], expected_answer=tuple(f.value for f in facts))
        assert facts == [] and text_rejection(trace, text)[0] == "no_answer_facts"

    def test_a_writer_text_that_states_the_fact_is_rejected(self):
        from tdg.taskgen import _trace_of, text_rejection

        stages = [{"calls": [{"name": "get_task", "arguments": {"task_id": "T1"},
                              "output": {"task": {"task_id": "T1", "priority": "High Priority"}}}]}]  # fmt: skip
        trace = _trace_of({"trace_id": "t", "stages": stages})
        told = TaskText(user_query='Check task "T1"; it should have high priority. Tell me its priority.',
                        expected_answer=("High Priority",))  # fmt: skip
        assert text_rejection(trace, told)[0] == "stated_answer"
        asked = TaskText(user_query='Check the task with task id "T1" and tell me its priority.',
                         expected_answer=("High Priority",))  # fmt: skip
        assert text_rejection(trace, asked) is None


def test_write_tasks_drops_a_reply_with_broken_grammar(env, credit_trace):
    reply = {"user_query": 'Can you help me with an ? Find "Ann Lee" and credit 5.', "dialogue_history": [],
             "reasoning_chain": []}  # fmt: skip
    with FakeOpenAIServer(lambda req: {"content": json.dumps(reply)}) as server:
        settings = LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)
        with LLMClient(settings) as client:
            outcome = write_tasks([credit_trace], env, client=client, seed=0)
    assert outcome.records == () and [q.reason for q in outcome.dropped] == ["broken_grammar"]
    assert "dangling article" in outcome.dropped[0].detail


def test_offline_texts_carry_answer_facts_and_pass_the_text_checks(env, credit_trace, offline):
    from tdg.textstats import text_problems

    for seed in range(12):
        text = write_task(credit_trace, env, incoming_edges=(), client=offline, seed=seed)
        assert text.expected_answer and text_problems(credit_trace, text) == [], text


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


def test_a_pick_never_states_the_value_a_later_call_must_discover():
    """Issue 67: "use the forecast whose city is "Austin"" when get_forecast(city="Austin") consumes that very city
    made the dependency fake (the agent could call get_forecast straight away); the pick says another field."""
    from data.models import TaskText
    from tdg.goalstats import real_dependencies
    from tdg.quality import _norm
    from tdg.taskgen import _trace_of, offline_task
    from tdg.verify import check_solvable

    forecasts = {"status": "success", "forecasts": [{"city": "Austin", "day": 61, "region": "Texas"},
                                                    {"city": "Seoul", "day": 62, "region": "Gyeonggi"}]}  # fmt: skip
    stages = [{"calls": [{"name": "get_fire_risk_forecast", "arguments": {}, "output": forecasts,
                          "purpose": "provides:get_forecast.city"}]},
              {"calls": [{"name": "get_forecast", "arguments": {"city": "Austin"}, "purpose": "requested",
                          "output": {"status": "success", "forecast": {"city": "Austin", "temperature": 31}},
                          "dependency_args": {"city": "get_fire_risk_forecast.forecasts[0].city"},
                          "pick_criteria": {"city": "field=city"}}]}]  # fmt: skip
    kinds = {"get_fire_risk_forecast": "read", "get_forecast": "read"}
    trace = _trace_of(_inputs(stages, kinds)["golden_trace_json"])
    for seed in range(8):
        out = offline_task(_inputs(stages, kinds, seed))
        text = TaskText(user_query=out["user_query"], dialogue_history=tuple(out["dialogue_history"]),
                        expected_answer=("31",))  # fmt: skip
        shown = _norm(" ".join([*(t["content"] for t in out["dialogue_history"]), out["user_query"]]))
        assert "austin" not in shown and ("61" in shown or '"texas"' in shown), shown
        assert real_dependencies(trace, shown), shown
        assert check_solvable(trace, text).ok, check_solvable(trace, text).missing
