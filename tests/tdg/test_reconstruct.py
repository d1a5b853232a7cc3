"""Inverse context reconstruction on real sandboxed environments (hand-written fixtures)."""

from __future__ import annotations

import re
from typing import Any

import networkx as nx
import pytest

from data.models import Skeleton
from envgen.runtime import Environment
from gustforge.hashing import canonical_json
from tdg.dus import sample_skeleton, sample_skeletons_for_coverage
from tdg.infer import build_graphs
from tdg.reconstruct import SkeletonFailed, reconstruct_all, reconstruct_trace, trace_id_for
from tdg.sanitize import sanitize_to_dag
from tests.tdg._tdg_toolsets import SHOP_ENV, TINY_ENV, load_db, load_schemas


def _shop(tools_source: str | None = None) -> Environment:
    source = tools_source if tools_source is not None else (SHOP_ENV / "tools.py").read_text()
    return Environment.from_parts("shop", load_schemas(SHOP_ENV), load_db(SHOP_ENV), source)


def _dags(env: Environment) -> list[nx.DiGraph]:
    return [sanitize_to_dag(g).dag for g in build_graphs(env, n_graphs=3)]


def _value_at(output: Any, path: str) -> Any:
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        output = output[name] if name else output[int(index)]
    return output


@pytest.fixture(scope="module")
def shop_run() -> tuple[Environment, list[nx.DiGraph], list[Skeleton], Any]:
    env = _shop()
    dags = _dags(env)
    coverage = sample_skeletons_for_coverage(dags, env_id=env.env_id, min_skeletons=6, max_skeletons=8, seed=3)
    return env, dags, list(coverage.skeletons), reconstruct_all(env, dags, coverage.skeletons, seed=11)


class TestReconstructAll:
    def test_accounting_and_coverage(self, shop_run) -> None:
        env, _, skeletons, result = shop_run
        assert result.report.balanced and result.report.inputs == len(skeletons) >= 3
        assert result.report.produced >= len(skeletons) - 1
        called = {c.name for t in result.traces for s in t.stages for c in s.calls}
        tools = {t for dag in shop_run[1] for t in dag.nodes}
        assert called == tools  # a tool that shares no data with another is still a requested goal next to a chain
        for trace in result.traces:  # ... and never a whole task of its own: every trace has a real dependency
            assert any(c.dependency_args for s in trace.stages for c in s.calls)

    def test_replay_on_fresh_session_is_byte_identical(self, shop_run) -> None:
        env, _, _, result = shop_run
        with env.session() as session:
            for trace in result.traces:
                session.reset()
                assert session.db_hash() == trace.initial_db_hash
                for stage in trace.stages:
                    assert session.db_hash() == stage.db_hash_before
                    for call in stage.calls:
                        assert canonical_json(session.call(call.name, call.arguments)) == canonical_json(call.output)
                    assert session.db_hash() == stage.db_hash_after
                assert session.db_hash() == trace.final_db_hash

    def test_dependency_args_come_from_earlier_predecessor_outputs(self, shop_run) -> None:
        _, dags, _, result = shop_run
        n_dependency = 0
        for trace in result.traces:
            dag = dags[trace.graph_index]
            outputs: dict[str, Any] = {}
            for stage in trace.stages:
                for call in stage.calls:
                    for arg, source in call.dependency_args.items():
                        tool, path = source.split(".", 1)
                        assert tool in outputs and dag.has_edge(tool, call.name)
                        assert _value_at(outputs[tool], path) == call.arguments[arg]
                        n_dependency += 1
                    assert not set(call.dependency_args) & set(call.context_args)
                    assert set(call.dependency_args) | set(call.context_args) == set(call.arguments)
                for call in stage.calls:
                    outputs[call.name] = call.output
        assert n_dependency >= 3

    def test_context_args_come_from_db_or_schema(self, shop_run) -> None:
        env, _, _, result = shop_run
        db_text = canonical_json(env.initial_db)
        for call in (c for t in result.traces for s in t.stages for c in s.calls):
            props = env.schema(call.name).parameters["properties"]
            for arg in call.context_args:
                value = call.arguments[arg]
                if "enum" in props[arg]:
                    assert value in props[arg]["enum"]
                elif isinstance(value, str):
                    assert canonical_json(value) in db_text  # e.g. city names, user ids
                else:
                    assert props[arg]["minimum"] <= value <= props[arg]["maximum"]

    def test_trace_ids_are_content_hashes_and_runs_are_deterministic(self, shop_run) -> None:
        env, dags, skeletons, result = shop_run
        for trace in result.traces:
            assert trace.trace_id == trace_id_for(env.env_id, trace.graph_index, trace.stages, trace.initial_db_hash)
            assert trace.edges_used and all(dags[trace.graph_index].has_edge(u, v) for u, v in trace.edges_used)
        again = reconstruct_all(env, dags, skeletons, seed=11)
        assert again.traces == result.traces


def _edgeless_shop(n: int, max_parallel: int = 3) -> tuple[Environment, nx.DiGraph, list[Skeleton]]:
    """The shop with a graph of no edges and `n` skeletons sampled on it: every trace is independent calls."""
    env = _shop()
    dag = nx.DiGraph(env_id="shop", graph_index=0)
    dag.add_nodes_from(env.tool_names)
    return env, dag, [sample_skeleton(dag, max_parallel=max_parallel, seed=s) for s in range(n)]


def test_env_without_edges_yields_single_stage_traces() -> None:
    env, dag, skeletons = _edgeless_shop(4)
    assert all(len(s.stages) == 1 for s in skeletons)
    result = reconstruct_all(env, [dag], skeletons, seed=0)
    assert result.report.produced + result.report.dropped.get("duplicate_trace", 0) == len(skeletons)
    assert result.report.produced >= len({s.stages for s in skeletons})
    assert all(len(t.stages) == 1 and not t.edges_used for t in result.traces)
    assert all(not c.dependency_args for t in result.traces for c in t.stages[0].calls)


def test_unlinked_traces_are_capped_per_env_keeping_coverage() -> None:
    """Independent calls make weak tasks: at most `max_unlinked` of them are kept, those covering the most tools."""
    from tdg.reconstruct import is_linked

    env, dag, skeletons = _edgeless_shop(6)
    everything = reconstruct_all(env, [dag], skeletons, seed=0)
    capped = reconstruct_all(env, [dag], skeletons, seed=0, max_unlinked=2)
    assert everything.report.produced > 2 and not any(is_linked(t) for t in everything.traces)
    assert capped.report.produced == 2 and capped.report.balanced
    assert capped.report.dropped["single_stage"] == everything.report.produced - 2
    tools = [{c.name for c in t.stages[0].calls} for t in everything.traces]
    kept = {c.name for t in capped.traces for c in t.stages[0].calls}
    assert len(kept) >= max(len(a | b) for a in tools for b in tools)  # greedy pair covers as much as any pair


def test_linked_traces_are_never_capped(shop_run) -> None:
    from tdg.reconstruct import is_linked

    env, dags, skeletons, result = shop_run
    capped = reconstruct_all(env, dags, skeletons, seed=11, max_unlinked=0)
    assert capped.traces == [t for t in result.traces if is_linked(t)] and capped.traces


def test_a_computed_result_feeds_the_next_calculation() -> None:
    """A semantic edge whose closest fields are `mean.result ~ floor.number` passes the mean on, even at a low
    cosine: a calculation feeding the next one is data flow."""
    from data.models import ToolSchema

    number = {"type": "object", "properties": {"result": {"type": "number"}, "count": {"type": "integer"},
                                               "status": {"type": "string"}}}  # fmt: skip
    schemas = [
        ToolSchema(name="mean", raw_name="mean", description="Mean of numbers.", kind="action", response=number,
                   parameters={"type": "object", "properties": {"numbers": {"type": "array", "items": {
                       "type": "number"}, "minItems": 1}}, "required": ["numbers"]}),
        ToolSchema(name="floor", raw_name="floor", description="Round a number down.", kind="action", response=number,
                   parameters={"type": "object", "properties": {"number": {"type": "number"}},
                               "required": ["number"]}),
    ]  # fmt: skip
    source = (
        "import math\n"
        "def mean(db, numbers):\n    return {'status': 'success', 'result': sum(numbers) / len(numbers), 'count': 2}\n"
        "def floor(db, number):\n    return {'status': 'success', 'result': math.floor(number)}\n"
    )
    env = Environment.from_parts("calc", schemas, {}, source)
    dag = nx.DiGraph(env_id="calc", graph_index=0)
    dag.add_edge("mean", "floor", evidence="semantic: P(edge)=0.20 from names and descriptions; closest fields "
                 "mean.response.result ~ floor.number (cos 0.218)")  # fmt: skip
    skeleton = Skeleton(env_id="calc", graph_index=0, stages=(("mean",), ("floor",)), seed=0)
    trace = reconstruct_trace(env, dag, skeleton, seed=0)
    mean, floor = trace.stages[0].calls[0], trace.stages[1].calls[0]
    assert floor.dependency_args == {"number": "mean.result"}
    assert floor.arguments["number"] == mean.output["result"]
    # a merely similar field is no data flow (`bggs[].id ~ maxbggrating (cos 0.567)` in a real Toucan graph)
    dag.edges["mean", "floor"]["evidence"] = ("semantic: P(edge)=0.52 from names and descriptions; closest fields "
                                              "mean.response.count ~ floor.number (cos 0.567)")  # fmt: skip
    assert reconstruct_trace(env, dag, skeleton, seed=0, goal_first=False).stages[1].calls[0].dependency_args == {}
    # goal-first: `mean` then serves no goal and is pruned; `floor` is the requested goal
    (only,) = [c for s in reconstruct_trace(env, dag, skeleton, seed=0).stages for c in s.calls]
    assert (only.name, only.purpose, only.dependency_args) == ("floor", "requested", {})


def test_a_raising_tool_drops_only_its_skeletons() -> None:
    source = (
        (SHOP_ENV / "tools.py")
        .read_text()
        .replace(
            "def get_weather(db, city):\n", 'def get_weather(db, city):\n    raise ValueError("weather service down")\n'
        )
    )
    env = _shop(source)
    dags = _dags(env)
    with_weather = Skeleton(env_id="shop", graph_index=0, stages=(("get_weather", "list_users"),), seed=0)
    without = Skeleton(env_id="shop", graph_index=0, stages=(("list_products", "list_users"), ("create_order",)),
                       seed=0)  # fmt: skip
    result = reconstruct_all(env, dags, [with_weather, without], seed=0)
    assert [q.reason for q in result.quarantine] == ["tool_error:get_weather"]
    assert "ValueError" in result.quarantine[0].detail
    assert [t.stages[-1].calls[0].name for t in result.traces] == ["create_order"]
    assert result.report.dropped == {"tool_error": 1} and result.report.balanced


def test_bad_skeletons_are_quarantined_with_reasons() -> None:
    env = _shop()
    dags = _dags(env)
    bad = [
        Skeleton(env_id="shop", graph_index=0, stages=(("no_such_tool",),), seed=0),
        Skeleton(env_id="shop", graph_index=0, stages=(("list_users",), ("list_users",)), seed=0),
        Skeleton(env_id="shop", graph_index=9, stages=(("list_users",),), seed=0),
        Skeleton(env_id="shop", graph_index=0, stages=(("list_users",),), seed=0),
        Skeleton(env_id="shop", graph_index=0, stages=(("list_users",),), seed=1),  # same trace again
    ]
    result = reconstruct_all(env, dags, bad, seed=0)
    assert [q.reason for q in result.quarantine] == [
        "unknown_tool:no_such_tool",
        "repeated_tool",
        "unknown_graph",
        "duplicate_trace",
    ]
    assert len(result.traces) == 1 and result.report.balanced


def test_state_constraints_are_met_by_redrawing_arguments() -> None:
    # tiny_env: update_order_status only allows the next status, cancel_order only pending/processing orders.
    env = Environment.load(TINY_ENV)
    dag = _dags(env)[0]
    skeleton = sample_skeleton(dag, max_parallel=3, max_stages=6, seed=0)
    assert [t for s in skeleton.stages for t in s] == ["list_orders", "get_order", "update_order_status",
                                                       "cancel_order"]  # fmt: skip

    def produced(tries: int) -> int:
        count = 0
        with env.session() as session:
            for seed in range(8):
                try:
                    reconstruct_trace(env, dag, skeleton, seed=seed, tries=tries, session=session)
                    count += 1
                except SkeletonFailed as exc:
                    assert exc.reason.startswith("tool_error:")
        return count

    single, redrawn = produced(1), produced(6)
    assert redrawn >= 6 and redrawn > single


class TestSoundTraces:
    """Item 2 of issue 10: updates change something, picks are determined, nothing acts on an ended record."""

    @pytest.fixture(scope="class")
    def sound(self) -> tuple[Environment, list[Any]]:
        env = _shop()
        dags = _dags(env)
        coverage = sample_skeletons_for_coverage(dags, env_id=env.env_id, min_skeletons=10, max_skeletons=12, seed=5)
        result = reconstruct_all(env, dags, coverage.skeletons, seed=2)
        assert len(result.traces) >= 3
        return env, result.traces

    def test_every_update_changes_the_db(self, sound) -> None:
        env, traces = sound
        updates = [c for t in traces for s in t.stages for c in s.calls if env.schema(c.name).kind.value == "update"]
        assert updates and all(c.db_changed for c in updates)
        assert all(c.db_changed is False for t in traces for s in t.stages for c in s.calls
                   if env.schema(c.name).kind.value == "read")  # fmt: skip

    def test_every_list_pick_is_singled_out_by_a_recorded_rule(self, sound) -> None:
        from tdg.quality import list_pick

        _, traces = sound
        picks = 0
        for trace in traces:
            outputs: dict[str, Any] = {}
            for stage in trace.stages:
                for call in stage.calls:
                    for arg, source in call.dependency_args.items():
                        tool, path = source.split(".", 1)
                        picked = list_pick(outputs[tool], path)
                        distinct = (
                            picked
                            and len(
                                {
                                    canonical_json(_value_at(e, path.rsplit("].", 1)[-1]))
                                    if "]." in path
                                    else canonical_json(e)
                                    for e in picked[1]
                                }
                            )
                            > 1
                        )
                        if distinct:
                            picks += 1
                            assert call.pick_criteria.get(arg, "").startswith(("field=", "position=first"))
                    outputs[call.name] = call.output
        assert picks >= 1

    def test_no_stage_conflicts_and_nothing_acts_after_a_delete(self, sound) -> None:
        from data.models import TaskText
        from tdg.quality import QualityConfig, analyze_task
        from tdg.taskgen import make_task_record

        env, traces = sound
        schemas = {s.name: s for s in env.schemas}
        for trace in traces:
            found = analyze_task(make_task_record(trace, TaskText(user_query="x"), env, seed=0), schemas,
                                 QualityConfig())  # fmt: skip
            assert found.conflicting_stages == () and found.after_terminal == () and found.noop_writes == ()
            assert found.placeholder_values == ()
            names = [c.name for s in trace.stages for c in s.calls]
            if "delete_order" in names:  # a terminal tool is the finale, alone in the last stage
                assert trace.stages[-1].calls[0].name == "delete_order" and len(trace.stages[-1].calls) == 1


class TestKeysFromTheLiveDB:
    """Lookups and get-by-id calls of real Toucan servers name records that exist (plan-driven key draws)."""

    @pytest.fixture(scope="class")
    def built(self, corpora_dir) -> dict[str, Any]:
        from envgen.build import build_environment
        from envgen.config import EnvGenConfig
        from envgen.ingest import read_toolsets
        from gustforge.sandbox import SandboxPool

        cfg = EnvGenConfig(sandbox_cpu_seconds=2, sandbox_memory_mb=256, sandbox_wall_seconds=5)
        path = corpora_dir / "toucan" / "toucan_mcp_servers.remote_valid.jsonl"
        wanted = {"Yahoo Finance Data Server", "AI Research Assistant - Semantic Scholar"}
        toolsets = [t for t in read_toolsets(path, cfg=cfg).toolsets if t.name in wanted]
        assert {t.name for t in toolsets} == wanted
        runs = {}
        with SandboxPool(size=1) as pool:
            for toolset in toolsets:
                a = build_environment(toolset, cfg, sandbox_pool=pool).artifacts
                assert a is not None
                env = Environment.from_parts(a.env_id, a.schemas, a.db, a.tools_source, a.manifest)
                dags = _dags(env)
                skeletons = sample_skeletons_for_coverage(dags, env_id=env.env_id, min_skeletons=8,
                                                          max_skeletons=10, seed=1).skeletons  # fmt: skip
                runs[toolset.name] = (env, reconstruct_all(env, dags, skeletons, seed=2))
        return runs

    def test_lookups_never_fail_on_made_up_keys(self, built) -> None:
        for name, (_, result) in built.items():
            assert result.traces, name
            assert not [q for q in result.quarantine if q.reason.startswith("tool_error")], name

    def test_key_arguments_name_stored_records(self, built) -> None:
        from tdg.reconstruct import env_key_rules

        checked = 0
        for env, result in built.values():
            rules = env_key_rules(env)
            for trace in result.traces:
                for stage in trace.stages:
                    for call in stage.calls:
                        for param, rule in rules.get(call.name, {}).items():
                            if rule.exists and param in call.arguments:
                                value = call.arguments[param]
                                keys = {str(k).lower() for k in env.initial_db.get(rule.collection, {})}
                                assert {str(v).lower() for v in (value if isinstance(value, list) else [value])} <= keys
                                assert call.output.get("status") != "error"
                                checked += 1
        assert checked >= 10


def test_range_ends_are_drawn_in_order() -> None:
    from tdg.reconstruct import order_ranges

    drawn = {"start_date": "2025-12-28", "end_date": "2025-02-07", "minPrice": 80.0, "maxPrice": 12.5,
             "event": {"date_from": "2025-06-23", "date_to": "2025-02-23"}, "tomorrow": "x"}  # fmt: skip
    assert order_ranges(drawn) == {"start_date": "2025-02-07", "end_date": "2025-12-28", "minPrice": 12.5,
                                   "maxPrice": 80.0, "event": {"date_from": "2025-02-23", "date_to": "2025-06-23"},
                                   "tomorrow": "x"}  # fmt: skip
    in_order = {"start_date": "2025-01-01", "end_date": "2025-02-01", "min_price": 1, "max_price": "9"}
    assert order_ranges(in_order) == in_order  # already ordered, or not comparable: untouched
    # a value that came from an earlier call is not moved
    assert order_ranges({"start_date": "2025-03-01", "end_date": "2025-01-01"}, frozenset({"end_date"}))[
        "start_date"] == "2025-03-01"


def test_a_descriptive_value_passes_on_only_within_its_own_kind() -> None:
    """`create_employee.name` is not the name of a department `list_departments` returned (a real sample trace
    named the new employee "Engineering"); the department's id passes on, as the edge says."""
    from tdg.fields import FieldRef
    from tdg.reconstruct import _same_kind

    department_name = FieldRef("departments[0].name", "name", "departments", "string")
    employee_name = FieldRef("employee.name", "name", "employee", "string")
    department_id = FieldRef("departments[0].department_id", "department_id", "departments", "string")
    assert not _same_kind("name", department_name, "employee")
    assert _same_kind("name", employee_name, "employees")
    assert _same_kind("department_id", department_id, "employee")
    assert _same_kind("name", FieldRef("name", "name", None, "string"), "employee")  # a top-level result


def test_one_offered_element_of_a_longer_list_still_gets_a_pick_rule() -> None:
    """Only `databases[2]` fits the next call, but the agent sees five databases: the task must say which."""
    import random

    from tdg.reconstruct import _determined_pick

    output = {"databases": [{"name": n, "size_mb": s} for n, s in
                            (("sales", 10), ("hr", 20), ("audit", 30), ("crm", 40), ("ops", 50))]}  # fmt: skip
    path, value, criterion = _determined_pick(output, [("databases[2].name", "audit")], random.Random(0))
    assert (path, value) == ("databases[2].name", "audit") and criterion is not None
    single = {"database": {"name": "audit"}}
    assert _determined_pick(single, [("database.name", "audit")], random.Random(0))[2] is None


# --------------------------------------------------------------------------- goal-first traces (issue 20)
class TestGoalFirst:
    def test_every_call_is_requested_or_provides_a_later_calls_argument(self, shop_run) -> None:
        from tdg.goalstats import real_dependencies

        _, _, _, result = shop_run
        providers = 0
        for trace in result.traces:
            calls = [c for s in trace.stages for c in s.calls]
            deps = real_dependencies(calls)
            for index, call in enumerate(calls):
                if call.purpose == "requested":
                    continue
                assert call.purpose.startswith("provides:"), call.purpose
                tool, _, arg = call.purpose.removeprefix("provides:").rpartition(".")
                (consumer,) = [j for j, c in enumerate(calls) if c.name == tool]
                assert any(d.provider == index and d.consumer == consumer and d.arg == arg for d in deps)
                assert calls[consumer].dependency_args[arg].startswith(call.name + ".")
                providers += 1
            if len(calls) > 1:  # no call serves nothing: each is linked by a real dependency or a requested goal
                linked = {d.provider for d in deps} | {d.consumer for d in deps}
                assert all(calls[i].purpose == "requested" for i in set(range(len(calls))) - linked)
                assert linked  # independent requested calls join a chain, never make a task of their own
            # every dependency argument left is a real one
            assert len(deps) == sum(len(c.dependency_args) for c in calls)
        assert providers >= 2

    def test_stages_are_real_dependency_levels(self, shop_run) -> None:
        from tdg.goalstats import real_dependencies

        _, _, _, result = shop_run
        for trace in result.traces:
            calls = [c for s in trace.stages for c in s.calls]
            stage_of = [i for i, s in enumerate(trace.stages) for _ in s.calls]
            for dep in real_dependencies(calls):
                assert stage_of[dep.provider] < stage_of[dep.consumer]
            assert all(stage.calls for stage in trace.stages)


def _read(name: str, args: dict[str, Any], output: dict[str, Any], dep: dict[str, str] | None = None) -> Any:
    from data.models import TraceCall

    dep = dep or {}
    return TraceCall(name=name, arguments=args, output=output, dependency_args=dep,
                     context_args=tuple(a for a in args if a not in dep), db_changed=False)  # fmt: skip


def test_goal_calls_prune_unserving_calls_and_share_a_stage_between_independent_ones() -> None:
    from tdg.reconstruct import _goal_stages, goal_calls

    orders = _read("list_orders", {}, {"orders": [{"id": "o1"}, {"id": "o2"}]})
    weather = _read("get_weather", {"city": "Oslo"}, {"temp": 3})  # DUS filler: feeds nothing, needs nothing
    get = _read("get_order", {"order_id": "o1"}, {"order": {"id": "o1"}}, {"order_id": "list_orders.orders[0].id"})
    ship = _read("track_order", {"order_id": "o2"}, {"eta": 2}, {"order_id": "list_orders.orders[1].id"})
    note = _read("note", {"order_id": "o2", "text": "hi"}, {"ok": True}, {"order_id": "list_orders.orders[1].id"})
    calls = goal_calls([orders, weather, get, note, ship])
    names = [c.name for c in calls]
    assert "get_weather" not in names and names[0] == "list_orders"
    assert calls[0].purpose == "provides:get_order.order_id"
    assert {c.name: c.purpose for c in calls[1:]} == {n: "requested" for n in ("get_order", "note", "track_order")}
    # every call in one stage after its provider: independent calls share the stage
    from data.models import ToolKind, ToolSchema

    reads = {c.name: ToolSchema(name=c.name, raw_name=c.name, description=c.name, kind=ToolKind.READ,
                                parameters={"type": "object"}, response={"type": "object"}) for c in calls}  # fmt: skip
    stages = _goal_stages(calls, reads, keep_order=False)
    assert [[c.name for c in s] for s in stages] == [["list_orders"], ["get_order", "note", "track_order"]]
    # a write on a record another call of the stage reads opens the next stage (no order-dependent turn)
    writes = {**reads, "note": reads["note"].model_copy(update={"kind": ToolKind.UPDATE})}
    stages = _goal_stages(calls, writes, keep_order=False)
    assert [[c.name for c in s] for s in stages] == [["list_orders"], ["get_order", "note"], ["track_order"]]
    # without any real dependency (its provider is gone) the last stage's calls are the goals, the value stated
    only = goal_calls([weather, note], last=1)
    assert [(c.name, c.purpose, c.dependency_args) for c in only] == [("note", "requested", {})]


def test_a_read_that_repeats_an_earlier_output_is_no_provider() -> None:
    from tdg.reconstruct import goal_calls

    create = _read("create_task", {"title": "Inventory"}, {"task": {"task_id": "T5", "title": "Inventory"}})
    create = create.model_copy(update={"db_changed": True})
    listed = _read("list_tasks", {"title": "Inventory"}, {"tasks": [{"task_id": "T5"}]})
    assign = _read("assign_task", {"task_id": "T5", "assignee": "Ann"}, {"ok": True},
                   {"task_id": "list_tasks.tasks[0].task_id"})  # fmt: skip
    calls = goal_calls([create, listed, assign])
    assert [c.name for c in calls] == ["create_task", "assign_task"]
    assert calls[1].dependency_args == {"task_id": "create_task.task.task_id"}
    assert [c.purpose for c in calls] == ["requested", "requested"]  # a write is asked for, even when it provides


def test_a_call_that_echoes_its_input_is_no_provider() -> None:
    from tdg.reconstruct import goal_calls

    tickets = _read("list_tickets", {}, {"tickets": [{"ticket_id": "T1", "title": "a"}, {"ticket_id": "T4", "title": "b"}]})
    get = _read("get_ticket", {"ticket_id": "T4"}, {"ticket": {"ticket_id": "T4", "title": "b"}},
                {"ticket_id": "list_tickets.tickets[1].ticket_id"})  # fmt: skip
    get = get.model_copy(update={"pick_criteria": {"ticket_id": "field=title"}})
    comment = _read("add_comment", {"ticket_id": "T4", "text": "hi"}, {"ok": True},
                    {"ticket_id": "get_ticket.ticket.ticket_id"}).model_copy(update={"db_changed": True})  # fmt: skip
    assert [c.name for c in goal_calls([tickets, get, comment])] == ["list_tickets", "get_ticket", "add_comment"]
    calls = goal_calls([tickets, get, comment], goals={"add_comment"})  # get_ticket was drawn as a provider
    assert [c.name for c in calls] == ["list_tickets", "add_comment"]
    assert calls[1].dependency_args == {"ticket_id": "list_tickets.tickets[1].ticket_id"}
    assert calls[1].pick_criteria == {"ticket_id": "field=title"}
    assert calls[0].purpose == "provides:add_comment.ticket_id"


def test_write_flows_get_variants_on_other_records_within_the_budget(shop_run) -> None:
    """A linked, state-changing flow is reconstructed again with other seeds: new records or values, same tools; the
    variants stop at the budget, every attempt is accounted for, and read-only flows get none."""
    from tdg.reconstruct import changes_state, is_linked

    env, dags, skeletons, plain = shop_run
    writes = [t for t in plain.traces if is_linked(t) and changes_state(t)]
    assert writes, "the shop fixture must have a linked write flow"
    varied = reconstruct_all(env, dags, skeletons, seed=11, state_variants=3, variant_budget=100)
    assert varied.report.balanced and varied.report.inputs > len(skeletons)
    assert varied.traces[: len(plain.traces)] == plain.traces  # variant 0 is the plain trace, byte for byte
    extra = varied.traces[len(plain.traces):]
    assert extra and all(is_linked(t) and changes_state(t) for t in extra)
    skeleton_tools = [{tool for stage in s.stages for tool in stage} for s in skeletons]
    for trace in extra:  # the same flow: the tools of one sampled skeleton (goal-first may prune a provider)
        called = {c.name for s in trace.stages for c in s.calls}
        assert any(called <= tools for tools in skeleton_tools)
    assert len({t.trace_id for t in varied.traces}) == len(varied.traces)
    assert varied.report.inputs <= len(skeletons) + 2 * len(writes)

    budget = len(writes) + 1
    capped = reconstruct_all(env, dags, skeletons, seed=11, state_variants=3, variant_budget=budget)
    assert sum(is_linked(t) and changes_state(t) for t in capped.traces) == budget
    assert capped.report.balanced


def test_the_one_unlinked_trace_kept_changes_state_when_one_can() -> None:
    from tdg.reconstruct import changes_state

    env, dag, skeletons = _edgeless_shop(8, max_parallel=2)
    everything = reconstruct_all(env, [dag], skeletons, seed=0)
    assert any(changes_state(t) for t in everything.traces) and not all(changes_state(t) for t in everything.traces)
    for order in (skeletons, skeletons[::-1]):
        kept = reconstruct_all(env, [dag], order, seed=0, max_unlinked=1).traces
        assert len(kept) == 1 and changes_state(kept[0])
