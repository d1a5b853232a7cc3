"""Task-text checks: tool names as goals, value dumps, grammar, picks tied to their call, answer facts."""

from __future__ import annotations

from data.models import GoldenTrace, TaskText, TraceCall, TraceStage
from tdg.textstats import (
    answer_problems,
    grammar_problems,
    spaced_tool_names,
    stated_answers,
    text_problems,
    text_stats,
    unlinked_picks,
    value_dumps,
    value_key,
)


def _trace(*stages: list[TraceCall]) -> GoldenTrace:
    return GoldenTrace(
        trace_id="t", env_id="e", graph_index=0, initial_db_hash="h", final_db_hash="h",
        stages=tuple(TraceStage(calls=tuple(calls), db_hash_before="h", db_hash_after="h") for calls in stages),
    )  # fmt: skip


_ORDERS = {"status": "success", "orders": [{"order_id": "O1", "city": "Lisbon"}, {"order_id": "O2", "city": "Porto"}]}


def _two_picks() -> GoldenTrace:
    """list_orders, then cancel_order and refund_payment each pick a different order by its city."""
    cancel = TraceCall(name="cancel_order", arguments={"order_id": "O1"}, output={"status": "success"},
                       dependency_args={"order_id": "list_orders.orders[0].order_id"},
                       pick_criteria={"order_id": "field=city"})  # fmt: skip
    refund = TraceCall(name="refund_payment", arguments={"order_id": "O2"}, output={"refund_id": "R9"},
                       dependency_args={"order_id": "list_orders.orders[1].order_id"},
                       pick_criteria={"order_id": "field=city"})  # fmt: skip
    return _trace([TraceCall(name="list_orders", arguments={}, output=_ORDERS)], [cancel, refund])


class TestSpacedToolNames:
    def test_a_goal_written_as_the_tool_name_is_caught(self):
        trace = _trace([TraceCall(name="openproject_create_project", arguments={}, output={})])
        assert spaced_tool_names(trace, TaskText(user_query="Please create an openproject create project.")) == [
            "openproject_create_project"
        ]
        assert spaced_tool_names(trace, TaskText(user_query="Please create a project for the launch.")) == []

    def test_a_noun_name_or_a_label_before_a_value_is_how_a_user_speaks(self):
        trace = _trace([TraceCall(name="user_profile", arguments={}, output={}),
                        TraceCall(name="refresh_token", arguments={}, output={})])  # fmt: skip
        text = TaskText(user_query='Look up the user profile and refresh the token with refresh token "abc".')
        assert spaced_tool_names(trace, text) == []


def test_value_dumps_are_values_listed_apart_from_their_purpose():
    assert value_dumps(TaskText(user_query='Do it. Details: task id "T1"; url "u"; message "m".'))
    assert value_dumps(TaskText(user_query='Hi. "BTC" as the uuid for the coin price.'))
    assert not value_dumps(TaskText(user_query='Cancel the task with task id "T1" and tell me its status.'))


def test_grammar_problems_catch_template_holes_but_not_quoted_values():
    assert any(p.startswith("dangling article") for p in grammar_problems("Can you help me with an ?"))
    assert any(p.startswith("doubled word") for p in grammar_problems("Create a new new page."))
    assert any(p.startswith("an before a consonant") for p in grammar_problems("Create an new page."))
    assert grammar_problems('Rename the file to "a ?" and tell me its id.') == []
    assert grammar_problems('Rename the file to "the the ." please.') == []


class TestUnlinkedPicks:
    def test_two_criteria_with_nothing_tying_them_to_their_calls(self):
        text = TaskText(user_query='Cancel the order and refund the payment. Pick the order whose city is "Lisbon" '
                                   'and the order whose city is "Porto".')  # fmt: skip
        assert len(unlinked_picks(_two_picks(), text)) == 2

    def test_each_criterion_names_what_it_is_for(self):
        text = TaskText(user_query='To cancel the order, use the order whose city is "Lisbon". For the refund, use '
                                   'the order whose city is "Porto".')  # fmt: skip
        assert unlinked_picks(_two_picks(), text) == []


def test_answer_facts_must_be_set_and_read_from_gold_outputs():
    trace = _two_picks()
    assert answer_problems(trace, TaskText(user_query="x")) == ["no answer facts"]
    assert answer_problems(trace, TaskText(user_query="x", expected_answer=("R9",))) == []
    assert answer_problems(trace, TaskText(user_query="x", expected_answer=("R10",))) == [
        "fact 'R10' is in no gold output"
    ]


def test_text_problems_and_stats_over_old_and_new_texts():
    from data.models import TaskRecord

    trace = _two_picks()
    old = TaskText(user_query='Could you cancel the order and then refund the payment? Details: a "1"; b "2"; c "3". '
                              'Go with the order whose city is "Lisbon" and the order whose city is "Porto".')  # fmt: skip
    new = TaskText(user_query='To cancel the order, use the order whose city is "Lisbon". To refund the payment, use '
                              'the order whose city is "Porto", and tell me the refund id.', expected_answer=("R9",))
    assert text_problems(trace, new) == []
    assert {p.split(":")[0] for p in text_problems(trace, old)} == {"value dump", "unlinked pick", "no answer facts"}
    records = [TaskRecord(task_id=i, env_id="e", text=t, trace=trace, tools=(), graph_complexity=1, seed=0)
               for i, t in (("a", old), ("b", new))]  # fmt: skip
    stats = text_stats(records)
    assert stats["value_dump_task_share"] == 0.5 and stats["unlinked_pick_task_share"] == 0.5
    assert stats["answer_check_coverage"] == 0.5 and stats["broken_grammar_task_share"] == 0.0


def test_check_solvable_needs_every_pick_tied_to_its_call():
    from tdg.verify import check_solvable

    untied = TaskText(user_query='Cancel the order and refund the payment. Pick the order whose city is "Lisbon" and '
                                 'the order whose city is "Porto".')  # fmt: skip
    tied = TaskText(user_query='To cancel the order, use the order whose city is "Lisbon". To refund the payment, '
                               'use the order whose city is "Porto".')  # fmt: skip
    result = check_solvable(_two_picks(), untied)
    assert not result.ok and [m for m in result.missing if m.startswith("unlinked pick")] == [
        "unlinked pick cancel_order.order_id by field=city", "unlinked pick refund_payment.order_id by field=city"
    ]
    assert check_solvable(_two_picks(), tied).ok


def test_an_answer_fact_is_never_a_value_the_text_already_says():
    from tdg.taskgen import answer_facts

    trace = _two_picks()  # the refund's output holds its id; the orders' cities are pick criteria
    lookup = TraceCall(name="get_city", arguments={}, output={"city": {"name": "Lisbon", "code": "LIS"}})
    trace = trace.model_copy(update={"stages": (*trace.stages, TraceStage(calls=(lookup,), db_hash_before="h",
                                                                           db_hash_after="h"))})  # fmt: skip
    values = [f.value for f in answer_facts(trace, {"get_city": "read"})]
    assert "Lisbon" not in values and "LIS" in values


def test_value_key_compares_whole_values_across_case_spacing_and_number_forms():
    assert value_key(5) == value_key(5.0) == value_key("5.00") == "5"
    assert value_key(" Library  Member ") == value_key('"library member"')
    assert value_key("5.10") == "5.1" and value_key("A5") != value_key("5")


class TestStatedAnswers:
    def test_a_fact_the_text_states_is_counted_and_an_unstated_one_is_not(self):
        from data.models import TaskRecord

        trace = _two_picks()  # the cities are pick criteria, the refund id is only in an output
        stated = TaskText(user_query='To cancel the order, use the order whose city is "Lisbon". To refund the '
                                     'payment, use the order whose city is "Porto", and tell me the city.',
                          expected_answer=("LISBON",))  # fmt: skip
        unstated = stated.model_copy(update={"expected_answer": ("R9",)})
        assert stated_answers(trace, stated) == ["LISBON"] and stated_answers(trace, unstated) == []
        records = [TaskRecord(task_id=i, env_id="e", text=t, trace=trace, tools=(), graph_complexity=1, seed=0)
                   for i, t in (("a", stated), ("b", unstated))]  # fmt: skip
        assert text_stats(records)["stated_answer_task_share"] == 0.5

    def test_numbers_in_another_form_and_longer_values_in_plain_words_are_stated(self):
        trace = _two_picks()
        text = TaskText(user_query="Refund 5 euros on order ORD-7 and tell me the amount.",
                        expected_answer=("5.0", "ORD-7", "7"))  # fmt: skip
        assert stated_answers(trace, text) == ["5.0", "ORD-7"]  # "7" is part of ORD-7, not a number of the text

    def test_a_one_word_fact_counts_only_when_stated_as_a_value(self):
        trace = _two_picks()
        plain = TaskText(user_query="Open the bug report and tell me its status.", expected_answer=("open",))
        quoted = TaskText(user_query='Find the report with status "open" and tell me its status.',
                          expected_answer=("open",))  # fmt: skip
        assert stated_answers(trace, plain) == [] and stated_answers(trace, quoted) == ["open"]
