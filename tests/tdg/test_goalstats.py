"""Goal-first statistics: real dependencies, depth, required calls, order-sensitive stages."""

from __future__ import annotations

from typing import Any

from data.models import GoldenTrace, ToolKind, ToolSchema, TraceCall, TraceStage
from tdg.goalstats import analyze_trace, depth_levels, order_sensitive, real_dependencies, source_call


def _call(name: str, args: dict[str, Any], output: dict[str, Any] | None = None, *, dep: dict[str, str] | None = None,
          purpose: str = "", changed: bool = False) -> TraceCall:  # fmt: skip
    dep = dep or {}
    return TraceCall(name=name, arguments=args, output=output or {"status": "success"}, dependency_args=dep,
                     context_args=tuple(a for a in args if a not in dep), db_changed=changed, purpose=purpose)  # fmt: skip


def _trace(*stages: list[TraceCall]) -> GoldenTrace:
    return GoldenTrace(trace_id="t", env_id="e", graph_index=0, initial_db_hash="h0", final_db_hash="h0",
                       stages=tuple(TraceStage(calls=tuple(s), db_hash_before="h0", db_hash_after="h0")
                                    for s in stages))  # fmt: skip


def _schema(name: str, kind: ToolKind, props: dict[str, Any] | None = None, entity: str | None = None) -> ToolSchema:
    return ToolSchema(name=name, raw_name=name, description=name, kind=kind, entity=entity,
                      parameters={"type": "object", "properties": props or {}},
                      response={"type": "object"})  # fmt: skip


LIST = _call("list_orders", {}, {"orders": [{"id": "o7"}]})
GET = _call("get_order", {"order_id": "o7"}, {"order": {"id": "o7", "user_id": "u2"}},
            dep={"order_id": "list_orders.orders[0].id"})
USER = _call("get_user", {"user_id": "u2"}, dep={"user_id": "get_order.order.user_id"})


def test_a_chain_of_produced_values_is_real_and_deep() -> None:
    deps = real_dependencies([LIST, GET, USER])
    assert [(d.provider, d.consumer, d.arg) for d in deps] == [(0, 1, "order_id"), (1, 2, "user_id")]
    assert depth_levels(3, deps) == [0, 1, 2]
    figures = analyze_trace(_trace([LIST], [GET], [USER]))
    assert (figures.depth, figures.real_dependencies, figures.isolated) == (3, 2, 0)


def test_a_value_the_task_states_is_no_real_dependency() -> None:
    stated = _call("cancel_order", {"order_id": "o7"})  # the text states o7 for this call
    deps = real_dependencies([LIST, GET, stated])
    assert all(d.arg != "order_id" for d in deps)
    assert analyze_trace(_trace([LIST], [GET, stated])).depth == 1
    # a value found in the task text is stated too
    assert real_dependencies([LIST, GET], text="please look at order o7") == []


def test_a_value_nested_in_a_stated_argument_is_no_real_dependency() -> None:
    relation = {"source": "/srv/notes.txt", "target": "inbox"}
    create = _call("create_relations", {"relations": [relation]}, {"relations": [relation]}, changed=True)
    delete = _call("delete_relation", {"source": "/srv/notes.txt"}, dep={"source": "create_relations.relations[0].source"},
                   changed=True)  # fmt: skip
    assert real_dependencies([create, delete]) == []
    fresh = _call("delete_relation", {"source": "/srv/other.txt"}, dep={"source": "create_relations.relations[0].x"})
    assert len(real_dependencies([create, fresh])) == 1


def test_enum_and_boolean_arguments_are_no_real_dependency() -> None:
    sort = _call("list_items", {"order": "desc"}, dep={"order": "list_orders.orders[0].order"})
    schemas = {"list_items": _schema("list_items", ToolKind.READ, {"order": {"type": "string", "enum": ["asc", "desc"]}})}
    assert len(real_dependencies([LIST, sort])) == 1
    assert real_dependencies([LIST, sort], schemas=schemas) == []


def test_source_call_takes_the_longest_matching_name() -> None:
    assert source_call("get_order.order.id", ["get", "get_order"]) == 1
    assert source_call("get_order_items.items[0].id", ["get_order", "get_order_items"]) == 1
    assert source_call("other.x", ["get_order"]) is None


def test_required_calls_follow_purpose() -> None:
    provider = LIST.model_copy(update={"purpose": "provides:get_order.order_id"})
    wrong = LIST.model_copy(update={"purpose": "provides:get_order.user_id"})  # names an argument it does not fill
    goal = GET.model_copy(update={"purpose": "requested"})
    assert analyze_trace(_trace([provider], [goal])).required == 2
    assert analyze_trace(_trace([wrong], [goal])).required == 1
    # without recorded purposes: a call with no real dependency in a longer trace serves no goal
    weather = _call("get_weather", {"city": "Oslo"})
    assert analyze_trace(_trace([LIST, weather], [GET])).required == 2


def test_two_creates_in_one_collection_make_a_stage_order_sensitive() -> None:
    schemas = {"add_note": _schema("add_note", ToolKind.CREATE, entity="notes"),
               "add_tag": _schema("add_tag", ToolKind.CREATE, entity="tags")}  # fmt: skip
    a = _call("add_note", {"text": "a"}, changed=True)
    b = _call("add_note", {"text": "b"}, changed=True)
    tag = _call("add_tag", {"label": "x"}, changed=True)
    assert order_sensitive([a, b]) and order_sensitive([a, b], schemas)
    assert not order_sensitive([a, tag], schemas)
    assert not order_sensitive([a, b.model_copy(update={"db_changed": False})], schemas)


def test_gust_quality_reports_the_goal_figures_against_targets() -> None:
    from data.models import TaskRecord, TaskText
    from tdg.quality import QualityConfig, assess

    trace = _trace([LIST.model_copy(update={"purpose": "provides:get_order.order_id"})],
                   [GET.model_copy(update={"purpose": "requested"})])  # fmt: skip
    record = TaskRecord(task_id="t1", env_id="e", text=TaskText(user_query="Show me my latest order."), trace=trace,
                        tools=("list_orders", "get_order"), graph_complexity=1, seed=0)  # fmt: skip
    schemas = {"e": {n: _schema(n, ToolKind.READ) for n in ("list_orders", "get_order")}}
    report = assess([record], schemas, QualityConfig(embedder="tfidf"), drop=False).quality
    assert report.dataset["required_call_share"] == 1.0 and report.dataset["real_dependency_depth_median"] == 2.0
    rows = {r["metric"]: r["met"] for r in report.targets}
    assert rows["required_call_share"] and rows["real_dependency_task_share"]


def test_punctuation_and_a_tool_name_word_do_not_state_a_value() -> None:
    """Issue 67: repo_path "." was "in" every sentence ending with a period, and category "docs" in "browse the docs
    by category"; a value counts as stated when the text says it (quoted, for a word of a tool name)."""
    listing = _call("list_tasks", {}, {"tasks": [{"repo_path": ".", "category": "docs"}]})
    browse = _call("browse_docs_by_category", {"category": "docs", "repo_path": "."},
                   dep={"category": "list_tasks.tasks[0].category", "repo_path": "list_tasks.tasks[0].repo_path"})
    assert len(real_dependencies([listing, browse], text="please browse the docs by category.")) == 2
    said = real_dependencies([listing, browse], text='please browse the category "docs" in repo ".".')
    assert [d.arg for d in said] == ["repo_path"]  # a quoted tool-name word is said; "." never is
