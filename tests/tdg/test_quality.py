"""Quality checks pinned on small hand-made traces: each defect is flagged, its sound counterpart is not."""

from __future__ import annotations

import pytest

from data.models import GoldenTrace, TaskRecord, TaskText, ToolKind, ToolSchema, TraceCall, TraceStage
from tdg.quality import (
    QualityConfig,
    analyze_task,
    assess,
    failure_reasons,
    filler_values,
    goal_missing,
    near_duplicates,
    summarize,
    target_rows,
    undetermined_picks,
)

CFG = QualityConfig(embedder="tfidf")


def _schema(name: str, kind: ToolKind, description: str = "") -> ToolSchema:
    return ToolSchema(
        name=name,
        raw_name=name,
        description=description or f"Tool {name}.",
        parameters={"type": "object", "properties": {}},
        response={"type": "object"},
        kind=kind,
    )


SCHEMAS = {s.name: s for s in (
    _schema("list_products", ToolKind.READ, "List products in the catalogue, optionally filtered by category."),
    _schema("get_order", ToolKind.READ),
    _schema("search_orders", ToolKind.READ),
    _schema("create_order", ToolKind.CREATE),
    _schema("update_order", ToolKind.UPDATE),
    _schema("cancel_order", ToolKind.UPDATE),
    _schema("log_note", ToolKind.ACTION),
)}  # fmt: skip

PRODUCTS = {"status": "success", "message": "2 found",
            "products": [{"product_id": "P1", "name": "Garden Hose"}, {"product_id": "P2", "name": "Rake"}]}  # fmt: skip
ORDER = {"status": "success", "message": "ok", "order": {"order_id": "O1", "quantity": 2, "status": "open"}}


def call(name: str, args: dict, output: dict | None = None, **extra) -> TraceCall:
    return TraceCall(name=name, arguments=args, output=output or {"status": "success", "message": "ok"}, **extra)


def task(*stages: tuple[TraceCall, ...], query: str = "Please help.", history: tuple = (), env: str = "shop",
         task_id: str = "t1") -> TaskRecord:  # fmt: skip
    trace = GoldenTrace(
        trace_id=task_id,
        env_id=env,
        graph_index=0,
        initial_db_hash="h",
        final_db_hash="h",
        stages=tuple(TraceStage(calls=s, db_hash_before="h", db_hash_after="h") for s in stages),
    )
    return TaskRecord(task_id=task_id, env_id=env, text=TaskText(user_query=query, dialogue_history=history),
                      trace=trace, tools=tuple(SCHEMAS), graph_complexity=1, seed=0)  # fmt: skip


def findings(record: TaskRecord):
    return analyze_task(record, SCHEMAS, CFG)


def _pick(text: str, criteria: dict | None = None, output: dict = PRODUCTS) -> TaskRecord:
    order = call("create_order", {"product_id": "P2", "quantity": 3}, ORDER,
                 dependency_args={"product_id": "list_products.products[1].product_id"},
                 pick_criteria=criteria or {})  # fmt: skip
    return task((call("list_products", {}, output),), (order,), query=text)


class TestPicks:
    def test_a_pick_nothing_singles_out_is_undetermined(self):
        found = findings(_pick("Order 3 of something."))
        assert found.undetermined_picks == ("create_order.product_id<-list_products.products[1].product_id (1 of 2)",)
        assert failure_reasons(found, CFG) == ["undetermined_pick"]

    def test_a_pick_by_a_stated_unique_attribute_is_determined(self):
        assert findings(_pick('Order 3 of the "Rake", please.', {"product_id": "field=name"})).undetermined_picks == ()

    def test_a_stated_position_rule_must_match_the_element(self):
        first = _pick("Order 3 of the first product listed.", {"product_id": "position=first"})
        assert findings(first).undetermined_picks  # element 1 is not the first
        last = _pick("Order 3 of the last product listed.", {"product_id": "position=last"})
        assert findings(last).undetermined_picks == ()

    def test_a_list_of_one_or_of_equal_values_leaves_no_choice(self):
        one = {**PRODUCTS, "products": PRODUCTS["products"][:2]}
        one["products"] = [{"product_id": "P2", "name": "Rake"}, {"product_id": "P2", "name": "Rake"}]
        assert findings(_pick("Order 3.", output=one)).undetermined_picks == ()

    def test_verify_reuses_the_check(self):
        record = _pick("Order 3 of something.")
        assert undetermined_picks(record.trace, record.text) and not undetermined_picks(
            record.trace, TaskText(user_query='The "Rake" please.')
        )


class TestWrites:
    def test_a_recorded_no_op_update_is_flagged_a_change_is_not(self):
        noop = call("update_order", {"order_id": "O1", "quantity": 2}, ORDER, db_changed=False)
        change = call("update_order", {"order_id": "O1", "quantity": 5}, ORDER, db_changed=True)
        assert findings(task((noop,))).noop_writes == ("update_order",)
        assert findings(task((change,))).noop_writes == ()

    def test_an_update_copying_the_current_value_is_flagged_without_a_record(self):
        copied = call(
            "update_order",
            {"order_id": "O1", "quantity": 2},
            ORDER,
            dependency_args={"order_id": "get_order.order.order_id", "quantity": "get_order.order.quantity"},
        )
        stated = call(
            "update_order",
            {"order_id": "O1", "quantity": 7},
            ORDER,
            dependency_args={"order_id": "get_order.order.order_id"},
            context_args=("quantity",),
        )
        assert findings(task((call("get_order", {"order_id": "O1"}, ORDER),), (copied,))).noop_writes
        assert not findings(task((call("get_order", {"order_id": "O1"}, ORDER),), (stated,))).noop_writes

    def test_a_write_after_a_cancel_is_flagged_a_read_is_not(self):
        cancelled = {"status": "success", "message": "ok", "order": {"order_id": "O1", "status": "cancelled"}}
        cancel = call("cancel_order", {"order_id": "O1"}, cancelled)
        update = call("update_order", {"order_id": "O1", "quantity": 4}, ORDER)
        assert findings(task((cancel,), (update,))).after_terminal == ("update_order",)
        assert findings(task((cancel,), (call("get_order", {"order_id": "O1"}, cancelled),))).after_terminal == ()
        assert "after_terminal_state" in failure_reasons(findings(task((cancel,), (update,))), CFG)

    def test_a_read_showing_an_old_cancelled_record_is_no_transition(self):
        old = {"status": "success", "message": "ok", "order": {"order_id": "O1", "status": "cancelled"}}
        update = call("update_order", {"order_id": "O1", "quantity": 4}, ORDER)
        assert findings(task((call("get_order", {"order_id": "O1"}, old),), (update,))).after_terminal == ()

    def test_a_stage_mixing_a_write_and_a_call_on_the_same_record_conflicts(self):
        write = call("update_order", {"order_id": "O1", "quantity": 4}, ORDER)
        assert findings(task((write, call("get_order", {"order_id": "O1"}, ORDER)))).conflicting_stages == (0,)
        assert findings(task((write, call("get_order", {"order_id": "O2"}, ORDER)))).conflicting_stages == ()
        reads = (call("get_order", {"order_id": "O1"}, ORDER), call("search_orders", {"order_id": "O1"}, ORDER))
        assert findings(task(reads)).conflicting_stages == ()


class TestTextAndValues:
    def test_placeholder_arguments(self):
        assert findings(task((call("log_note", {"month": "sample month"}),))).placeholder_values
        assert findings(task((call("log_note", {"month": "2025-03"}),))).placeholder_values == ()

    def test_templated_db_fillers_are_measured(self):
        filler = findings(task((call("log_note", {"command": "maple command 2", "city": "Oslo city"}),)))
        assert filler.template_values == ("log_note.command='maple command 2'",)
        assert "placeholder_value" not in failure_reasons(filler, CFG)  # measured, not dropped by default

    def test_description_sentence_and_tool_name_leaks(self):
        listing = (call("list_products", {}, PRODUCTS),)
        quoted = task(listing, query="Please list products in the catalogue, optionally filtered by category.")
        named = task(listing, query="Run list_products for me.")
        plain = task(listing, query="What do you sell in the garden range?")
        assert findings(quoted).description_leaks == ("list_products",)
        assert findings(named).tool_name_leaks == ("list_products",)
        assert findings(plain).description_leaks == findings(plain).tool_name_leaks == ()
        assert failure_reasons(findings(quoted), CFG) == ["leaked_steps"]

    def test_history_counts_as_shown_text(self):
        history = ({"role": "user", "content": "Run list_products."}, {"role": "assistant", "content": "Sure."})
        assert findings(task((call("list_products", {}, PRODUCTS),), history=history)).tool_name_leaks

    def test_empty_reads(self):
        empty = {"status": "success", "message": "0 found", "orders": [], "count": 0}
        assert findings(task((call("search_orders", {"q": "x"}, empty),))).empty_reads == ("search_orders",)
        assert findings(task((call("list_products", {}, PRODUCTS),))).empty_reads == ()

    def test_echo_only_calls(self):
        echo = call(
            "log_note",
            {"text": "hi"},
            {
                "status": "success",
                "message": "done",
                "event_id": "E1",
                "result": {"tool": "log_note", "arguments": {"text": "hi"}},
            },
        )
        computed = call("log_note", {"text": "hi"}, {"status": "success", "message": "done", "words": 1})
        assert findings(task((echo,))).echo_only_calls == ("log_note",)
        assert findings(task((computed,))).echo_only_calls == ()
        assert failure_reasons(findings(task((echo,))), CFG) == ["echo_only"]
        half = task((echo, computed))
        assert "echo_only" not in failure_reasons(findings(half), CFG)  # by default only all-echo tasks drop
        strict = QualityConfig(embedder="tfidf", max_echo_only_share=0.4)
        assert failure_reasons(analyze_task(half, SCHEMAS, strict), strict) == ["echo_only"]

    def test_single_stage_means_no_dependency_used(self):
        one = task((call("get_order", {"order_id": "O1"}, ORDER),))
        unrelated = task((call("get_order", {"order_id": "O1"}, ORDER),), (call("log_note", {"text": "a"}),))
        chained = _pick('Order the "Rake".', {"product_id": "field=name"})
        assert findings(one).single_stage and findings(unrelated).single_stage
        assert not findings(chained).single_stage
        assert failure_reasons(findings(one), CFG) == []  # measured, dropped only on request
        strict = QualityConfig(embedder="tfidf", drop=("single_stage",))
        assert failure_reasons(analyze_task(one, SCHEMAS, strict), strict) == ["single_stage"]


class TestDataset:
    def test_near_duplicates_flag_the_later_copy_only(self):
        a = task(query="Cancel my order O1 placed yesterday for the garden hose.", task_id="a")
        b = task(query="Cancel my order O1 placed yesterday for the garden hose.", task_id="b")
        c = task(query="What is the weather in Lisbon tomorrow?", task_id="c")
        dupes, label = near_duplicates([a, b, c], threshold=0.95, embedder="tfidf")
        assert dupes == {"b"} and label.startswith("tfidf (lexical fallback")

    def test_summary_counts_envs_without_tasks_and_coverage(self):
        records = [_pick('Order the "Rake".', {"product_id": "field=name"})]
        found = [findings(r) for r in records]
        summary = summarize(found, {"shop": 7, "empty": 3}, set())
        assert summary["tasks"] == 1 and summary["envs"] == 2 and summary["envs_with_tasks"] == 1
        assert summary["median_tasks_per_env"] == 0.5
        assert summary["tool_coverage"] == pytest.approx(2 / 10)
        assert summary["stages_distribution"] == {"2": 1} and summary["calls_distribution"] == {"2": 1}

    def test_targets(self):
        rows = target_rows({"tasks": 700, "single_stage_share": 0.2}, {"tasks": ">=600", "single_stage_share": "<=0.1"})
        assert [(r["metric"], r["met"]) for r in rows] == [("tasks", True), ("single_stage_share", False)]

    def test_assess_drops_hard_failures_with_a_reason_and_balances(self):
        good = _pick('Order the "Rake".', {"product_id": "field=name"})
        bad = _pick("Anything.").model_copy(update={"task_id": "bad"})
        outcome = assess([good, bad], {"shop": SCHEMAS}, CFG)
        assert [r.task_id for r in outcome.kept] == [good.task_id]
        assert [(q.item_id, q.reason, q.stage) for q in outcome.dropped] == [("bad", "undetermined_pick", "quality")]
        assert outcome.report.balanced and outcome.quality.dropped == {"undetermined_pick": 1}
        assert outcome.quality.candidates["undetermined_pick_task_share"] == 0.5
        assert outcome.quality.dataset["undetermined_pick_task_share"] == 0.0
        assert set(outcome.quality.per_env) == {"shop"}
        measured = assess([good, bad], {"shop": SCHEMAS}, CFG, drop=False)
        assert len(measured.kept) == 2 and measured.dropped == ()

    def test_a_task_where_a_reward_probe_ties_gold_is_dropped_with_the_probe(self):
        good = _pick('Order the "Rake".', {"product_id": "field=name"})
        other = good.model_copy(update={"task_id": "gamed"})
        failures = {"gamed": ("probe_ties_gold:call_everything", '{"margins": {}}')}
        outcome = assess([good, other], {"shop": SCHEMAS}, CFG, probe_failures=failures)
        assert [r.task_id for r in outcome.kept] == [good.task_id]
        assert [(q.item_id, q.reason) for q in outcome.dropped] == [("gamed", "probe_ties_gold:call_everything")]
        assert outcome.report.balanced and outcome.quality.dropped == {"probe_ties_gold:call_everything": 1}
        assert len(assess([good, other], {"shop": SCHEMAS}, CFG, drop=False, probe_failures=failures).kept) == 2

    def test_the_report_carries_the_task_text_figures_with_targets(self):
        good = _pick('Order the "Rake".', {"product_id": "field=name"})
        dataset = assess([good], {"shop": SCHEMAS}, CFG).quality
        for metric in ("spaced_tool_name_goal_task_share", "value_dump_task_share", "broken_grammar_task_share",
                       "unlinked_pick_task_share", "answer_check_coverage", "stated_answer_task_share"):  # fmt: skip
            assert metric in dataset.dataset and metric in {row["metric"] for row in dataset.targets}
        assert dataset.dataset["answer_check_coverage"] == 0.0  # the text carries no answer facts

    def test_drop_list_is_configurable(self):
        bad = _pick("Anything.")
        keep_all = QualityConfig(embedder="tfidf", drop=())
        assert failure_reasons(findings(bad), keep_all) == []
        assert len(assess([bad], {"shop": SCHEMAS}, keep_all).kept) == 1


def test_an_enum_value_is_never_a_placeholder():
    schema = ToolSchema(name="set_state", raw_name="set_state", description="Set.", kind=ToolKind.UPDATE,
                        parameters={"type": "object", "properties": {"status": {"enum": ["todo", "done"]}}},
                        response={"type": "object"})  # fmt: skip
    record = task((call("set_state", {"status": "todo"}),))
    assert analyze_task(record, {**SCHEMAS, "set_state": schema}, CFG).placeholder_values == ()
    assert analyze_task(record, SCHEMAS, CFG).placeholder_values  # without the enum "todo" is a placeholder


class TestFillerValues:
    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("file_key", "summit file key"),
            ("cnpj", "alpha cnpj"),
            ("title", "Harbor Summit 3"),
            ("description", "Detailed description #3, recently added."),
            ("notes", "Lorem ipsum dolor sit amet."),
            ("customer_name", "customer name 2"),
            ("command", "maple command 2"),
        ],
    )
    def test_mock_fillers_are_flagged_and_drop(self, key, value):
        logged = call("log_note", {key: value}, {"status": "success", "message": "ok", "entry_id": "L7"})
        found = findings(task((logged,), query="Log this for me."))
        assert found.filler_values == (f"log_note.{key}={value!r}",)
        assert "filler_value" in failure_reasons(found, CFG)  # lorem ipsum is also a placeholder

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("file_key", "reports/q3-summary.pdf"),
            ("cnpj", "26.594.148/0001-95"),
            ("title", "Quarterly budget review"),
            ("name", "Cobalt Project"),
            ("description", "Stainless steel, dishwasher safe, 350 ml."),
            ("date", "2025-01-01"),
            ("account_id", "ACC-001"),
            ("city", "New York"),
            ("car_id", "CAR-002"),
            ("room", "Room 12"),
            ("customer_name", "Dana Smith"),
        ],
    )
    def test_realistic_values_are_not(self, key, value):
        assert findings(task((call("log_note", {key: value}),), query="Log this for me.")).filler_values == ()

    def test_filler_in_outputs_is_measured_not_dropped(self):
        output = {"status": "success", "message": "ok", "order": {"order_id": "O1", "note": "alpha note"}}
        found = findings(task((call("get_order", {"order_id": "O1"}, output),), query="Show me order O1."))
        assert found.filler_outputs == ("get_order.note='alpha note'",) and found.filler_values == ()
        assert failure_reasons(found, CFG) == []

    def test_patterns_and_words_are_configurable(self):
        cfg = QualityConfig(embedder="tfidf", filler_words=("zephyr",), filler_patterns=())
        assert filler_values({"title": "zephyr title"}, "t", cfg) == ["t.title='zephyr title'"]
        assert filler_values({"title": "Harbor Summit 3"}, "t", cfg) == []


class TestGoal:
    @pytest.mark.parametrize(
        "query",
        [
            'Use these: host is "db1.example.com", port is 5432.',
            'Sure: "2025-10-21" as the start date; location "Dublin". Appreciate it.',
            'Here you go: the check in date "2025-09-04", the guest name "Dana Smith". Thank you.',
        ],
    )
    def test_a_query_listing_only_values_has_no_goal(self, query):
        created = call(
            "create_order",
            {"host": "db1", "port": 5432, "start_date": "x", "location": "x", "check_in_date": "x", "guest_name": "x"},
            {"status": "success", "order_id": "O9"},
        )
        record = task((created,), query=query)
        assert goal_missing(record) and findings(record).goal_missing
        assert failure_reasons(findings(record), CFG) == ["goal_missing"]

    @pytest.mark.parametrize(
        "query",
        [
            'Please book a room at "Seaside Inn" from 2025-09-04.',
            "I'd like my order O1 sent to Lisbon.",
            "What is the weather in Lisbon tomorrow?",
            'Cancel order "O1", please.',
            "Could you sort out my subscription?",
            "Hello, I'd like to create a collection. Let me know when it's done.",
            "I'm hoping you can insert the rows into the table.",
            "Next, pull up the ticket. Appreciate it.",  # a read the task writer asks for (taskgen._USER_READ)
        ],
    )
    def test_a_stated_goal_is_found(self, query):
        assert not goal_missing(task((call("create_order", {"check_in_date": "x"}),), query=query))

    def test_the_goal_must_be_in_the_query_not_only_in_the_history(self):
        history = ({"role": "user", "content": "Please cancel my order."}, {"role": "assistant", "content": "Details?"})
        assert goal_missing(task((call("cancel_order", {"order_id": "O1"}),), query='Sure: "O1".', history=history))


def test_a_last_resort_plain_word_is_measured_unless_the_schema_offers_it():
    from envgen.fakes import plain_words
    from tdg.quality import summarize

    word = plain_words("selector")[0]
    found = findings(task((call("search_orders", {"selector": word, "order_id": "O1"}, ORDER),), query="Find O1."))
    assert found.plain_words == (f"search_orders.selector={word!r}",) and failure_reasons(found, CFG) == []
    assert summarize([found], {"shop": 7}, set())["plain_word_task_share"] == 1.0
    offered = {**SCHEMAS, "search_orders": SCHEMAS["search_orders"].model_copy(update={"parameters": {
        "type": "object", "properties": {"selector": {"type": "string", "enum": [word, "#id"]}}}})}  # fmt: skip
    record = task((call("search_orders", {"selector": word}),), query="Find it.")
    assert analyze_task(record, offered, CFG).plain_words == ()
    assert findings(task((call("search_orders", {"selector": "#submit-button"}),))).plain_words == ()


def test_an_identifier_code_is_not_filler_whatever_its_letters_spell():
    assert filler_values({"typescript_code": "MY-9029"}, "t", CFG) == []
    assert filler_values({"file_key": "summit file key"}, "t", CFG) == ["t.file_key='summit file key'"]
