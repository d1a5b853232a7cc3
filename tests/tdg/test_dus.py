"""Dynamic Unlocking Sampling: topological validity, k <= N, determinism, coverage, random-walk baseline."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.models import Skeleton
from gustforge.errors import InputError, TDGCycleError
from tdg.dus import random_walk_skeleton, sample_skeleton, sample_skeletons_for_coverage, skeleton_tools


@st.composite
def _dags(draw: st.DrawFn) -> nx.DiGraph:
    n = draw(st.integers(1, 14))
    g = nx.DiGraph()
    g.add_nodes_from(f"t{i:02d}" for i in range(n))
    for i in range(n):
        for j in range(i + 1, n):
            if draw(st.booleans()) and draw(st.booleans()):
                g.add_edge(f"t{i:02d}", f"t{j:02d}")
    # relabel with a drawn permutation so name order is not the topological order
    perm = draw(st.permutations(sorted(g.nodes)))
    return nx.relabel_nodes(g, dict(zip(sorted(g.nodes), perm, strict=True)))


def _assert_unlocked_in_order(dag: nx.DiGraph, skeleton: Skeleton) -> None:
    done: set[str] = set()
    for stage in skeleton.stages:
        for tool in stage:
            assert set(dag.predecessors(tool)) <= done, f"{tool} ran before its predecessors"
        done |= set(stage)


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(1, 4), st.integers(1, 8), st.integers(0, 2**31))
def test_dus_properties(dag: nx.DiGraph, n: int, max_stages: int, seed: int) -> None:
    skeleton = sample_skeleton(dag, max_parallel=n, max_stages=max_stages, seed=seed, env_id="e", graph_index=0)
    _assert_unlocked_in_order(dag, skeleton)
    assert 1 <= len(skeleton.stages) <= max_stages
    assert all(1 <= len(stage) <= n for stage in skeleton.stages)
    tools = [t for stage in skeleton.stages for t in stage]
    assert len(tools) == len(set(tools))
    # k = min(|Q|, N): a stage below N tools emptied the ready queue, so it held every ready tool.
    assert sample_skeleton(dag, max_parallel=n, max_stages=max_stages, seed=seed, env_id="e", graph_index=0) == skeleton


def test_stage_size_is_min_of_queue_and_n() -> None:
    dag = nx.DiGraph()
    dag.add_nodes_from(["a", "b", "c", "d", "e"])
    dag.add_edges_from([("a", "x"), ("b", "x"), ("c", "x"), ("d", "x"), ("e", "x")])
    skeleton = sample_skeleton(dag, max_parallel=2, max_stages=10, seed=3)
    assert [len(s) for s in skeleton.stages] == [2, 2, 1, 1]
    assert skeleton.stages[-1] == ("x",)


def test_chain_is_walked_in_order() -> None:
    dag = nx.path_graph(["a", "b", "c", "d"], create_using=nx.DiGraph)
    assert sample_skeleton(dag, max_parallel=3, max_stages=10, seed=0).stages == (("a",), ("b",), ("c",), ("d",))
    assert sample_skeleton(dag, max_parallel=3, max_stages=2, seed=0).stages == (("a",), ("b",))


def test_edgeless_graph_gives_single_stage_skeletons() -> None:
    dag = nx.DiGraph()
    dag.add_nodes_from(["a", "b", "c", "d", "e"])
    for seed in range(10):
        skeleton = sample_skeleton(dag, max_parallel=3, max_stages=5, seed=seed)
        assert len(skeleton.stages) == 1 and len(skeleton.stages[0]) == 3


def test_partly_unlocked_join_keeps_sampling_roots() -> None:
    dag = nx.DiGraph([("a", "j"), ("b", "j")])
    dag.add_node("z")
    for seed in range(20):
        skeleton = sample_skeleton(dag, max_parallel=1, max_stages=10, seed=seed)
        if skeleton.stages[0] in (("a",), ("b",)):
            assert ("j",) in skeleton.stages  # the other parent was still sampled to unlock the join


def test_linked_stages_hold_only_unlocked_tools() -> None:
    dag = nx.DiGraph([("a", "b")])
    dag.add_nodes_from(["c", "d", "e", "f"])
    linked = [sample_skeleton(dag, max_parallel=2, max_stages=4, seed=s) for s in range(30)]
    after_a = [sk for sk in linked if "a" in sk.stages[0]]
    assert after_a and all(sk.stages[1] == ("b",) for sk in after_a)  # never b beside roots that receive nothing
    plain = [sample_skeleton(dag, max_parallel=2, max_stages=4, seed=s, linked=False) for s in range(30)]
    assert any(len(sk.stages) > 1 and "a" in sk.stages[0] and len(sk.stages[1]) == 2 for sk in plain)


def test_weights_steer_choice() -> None:
    dag = nx.DiGraph()
    dag.add_nodes_from(["a", "b", "c", "d"])
    picks = [sample_skeleton(dag, max_parallel=1, seed=s, weights={"d": 1000.0}).stages[0] for s in range(30)]
    assert picks.count(("d",)) >= 27


def test_graph_attrs_and_errors() -> None:
    dag = nx.DiGraph([("a", "b")], env_id="env1", graph_index=2)
    skeleton = sample_skeleton(dag, seed=1)
    assert (skeleton.env_id, skeleton.graph_index, skeleton.seed) == ("env1", 2, 1)
    with pytest.raises(TDGCycleError):
        sample_skeleton(nx.DiGraph([("a", "b"), ("b", "a")]))
    with pytest.raises(InputError):
        sample_skeleton(dag, max_parallel=0)


class TestCoverage:
    def _env_dags(self) -> list[nx.DiGraph]:
        full = nx.DiGraph([("r1", "a"), ("a", "b"), ("b", "c"), ("r2", "d"), ("d", "e"), ("r3", "f")], graph_index=0)
        full.add_nodes_from(["g", "h"])
        lean = nx.DiGraph([("r1", "a"), ("r2", "d")], graph_index=1)
        lean.add_nodes_from(full.nodes)
        return [full, lean]

    def test_reaches_full_coverage(self) -> None:
        result = sample_skeletons_for_coverage(self._env_dags(), env_id="e", max_skeletons=20, max_parallel=2,
                                               max_stages=5, seed=0, goal_first=False)  # fmt: skip
        assert result.coverage == 1.0 and result.total == 11
        assert set(result.covered) == set().union(*(skeleton_tools(s) for s in result.skeletons))
        assert {s.graph_index for s in result.skeletons} == {0, 1}
        keys = [(s.graph_index, s.stages) for s in result.skeletons]
        assert len(keys) == len(set(keys))

    def test_bias_beats_unbiased_sampling(self) -> None:
        dags = self._env_dags()
        biased = sample_skeletons_for_coverage(dags, env_id="e", max_skeletons=3, max_parallel=2, max_stages=5,
                                               target_coverage=1.0, seed=0, goal_first=False)  # fmt: skip
        unbiased = set()
        for i in range(3):
            unbiased |= skeleton_tools(sample_skeleton(dags[i % 2], max_parallel=2, max_stages=5, seed=i))
        assert len(biased.covered) >= len(unbiased)

    def test_stops_at_target_and_is_deterministic(self) -> None:
        dags = self._env_dags()
        half = sample_skeletons_for_coverage(dags, env_id="e", target_coverage=0.3, max_parallel=3, seed=5,
                                             goal_first=False)  # fmt: skip
        assert half.coverage >= 0.3 and len(half.skeletons) == 1
        again = sample_skeletons_for_coverage(dags, env_id="e", target_coverage=0.3, max_parallel=3, seed=5,
                                              goal_first=False)  # fmt: skip
        assert again == half

    def test_min_skeletons_and_patience(self) -> None:
        chain = nx.path_graph(["a", "b"], create_using=nx.DiGraph)
        result = sample_skeletons_for_coverage([chain], env_id="e", min_skeletons=5, patience=3, seed=0)
        assert len(result.skeletons) == 1  # only one distinct skeleton exists; duplicates are not kept
        assert result.coverage == 1.0

    def test_edgeless_graph_is_not_sampled_when_another_has_edges(self) -> None:
        edged = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "d")])
        edgeless = nx.DiGraph()
        edgeless.add_nodes_from("abcd")
        result = sample_skeletons_for_coverage([edgeless, edged], env_id="e", min_skeletons=6, seed=3)
        assert result.skeletons and {s.graph_index for s in result.skeletons} == {1}
        assert all(len(s.stages) > 1 for s in result.skeletons)

    def test_edgeless_only_environment_still_yields_skeletons(self) -> None:
        edgeless = nx.DiGraph()
        edgeless.add_nodes_from("abc")
        result = sample_skeletons_for_coverage([edgeless], env_id="e", seed=0)
        assert result.skeletons and all(len(s.stages) == 1 for s in result.skeletons)

    def test_empty_environment(self) -> None:
        result = sample_skeletons_for_coverage([], env_id="e")
        assert result.skeletons == () and result.coverage == 1.0


def test_random_walk_follows_edges_one_tool_per_stage() -> None:
    dag = nx.DiGraph([("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")])
    for seed in range(20):
        walk = random_walk_skeleton(dag, max_len=3, seed=seed, env_id="e", graph_index=0)
        tools = [stage[0] for stage in walk.stages]
        assert all(len(stage) == 1 for stage in walk.stages) and 1 <= len(tools) <= 3
        assert all(dag.has_edge(u, v) for u, v in zip(tools, tools[1:], strict=False))


def _param_edge(dag, src: str, dst: str, param: str) -> None:
    dag.add_edge(src, dst, type="parameter", evidence=f"{src}.response.{param} -> {dst}.{param}")


def test_alternative_providers_of_one_argument_need_only_one():
    import networkx as nx

    from tdg.dus import requirements

    dag = nx.DiGraph(env_id="e", graph_index=0)
    for src in ("get_order", "list_orders", "create_order"):
        _param_edge(dag, src, "ship_order", "order_id")
    _param_edge(dag, "get_carrier", "ship_order", "carrier_id")
    assert requirements(dag, "ship_order") == [
        frozenset({"get_carrier"}),
        frozenset({"create_order", "get_order", "list_orders"}),
    ]
    for seed in range(20):
        skeleton = sample_skeleton(dag, max_parallel=1, max_stages=6, seed=seed)
        tools = [t for stage in skeleton.stages for t in stage]
        if "ship_order" in tools:
            before = set(tools[: tools.index("ship_order")])
            assert "get_carrier" in before and before & {"get_order", "list_orders", "create_order"}
    # with one stage of width 2 both requirements can be met at once and ship_order follows directly
    reached = [sample_skeleton(dag, max_parallel=2, max_stages=2, seed=s).stages for s in range(40)]
    assert any(len(st) == 2 and "ship_order" in st[1] for st in reached)


def test_a_terminal_tool_is_the_lone_finale():
    import networkx as nx

    dag = nx.DiGraph(env_id="e", graph_index=0)
    _param_edge(dag, "create_order", "cancel_order", "order_id")
    _param_edge(dag, "create_order", "update_order", "order_id")
    _param_edge(dag, "create_order", "get_order", "order_id")
    for seed in range(25):
        stages = sample_skeleton(dag, max_parallel=3, max_stages=6, seed=seed).stages
        tools = [t for stage in stages for t in stage]
        if "cancel_order" in tools:
            assert stages[-1] == ("cancel_order",)


def test_coverage_sampling_rejects_single_stage_skeletons_of_a_graph_with_edges():
    import networkx as nx

    dag = nx.DiGraph(env_id="e", graph_index=0)
    _param_edge(dag, "find_user", "get_user", "user_id")
    dag.add_nodes_from(["weather", "time", "calc"])
    result = sample_skeletons_for_coverage([dag], env_id="e", min_skeletons=5, max_skeletons=8, seed=1)
    assert result.skeletons and all(len(s.stages) > 1 for s in result.skeletons)


# --------------------------------------------------------------------------- goal-first DUS (issue 20)
def _serves_a_goal(dag: nx.DiGraph, skeleton: Skeleton) -> None:
    """Every tool is the goal (nothing of the skeleton needs it) or a predecessor of a later tool of the skeleton;
    every requirement group of a tool has a member in an earlier stage; a stage's tools sit on its level."""
    from tdg.dus import requirements

    stage_of = {t: i for i, stage in enumerate(skeleton.stages) for t in stage}
    for tool, i in stage_of.items():
        for group in requirements(dag, tool):
            assert any(stage_of.get(p, i) < i for p in group), f"{tool} runs before a provider of {set(group)}"
        earlier = [stage_of[p] for p in dag.predecessors(tool) if p in stage_of]
        assert i == (1 + max(earlier) if earlier else 0), f"{tool} is not on its dependency level"


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(1, 4), st.integers(1, 8), st.integers(0, 2**31))
def test_goal_skeletons_hold_a_goal_and_its_providers(dag: nx.DiGraph, n: int, max_stages: int, seed: int) -> None:
    from tdg.dus import sample_goal_skeleton

    skeleton = sample_goal_skeleton(dag, max_parallel=n, max_stages=max_stages, seed=seed, env_id="e", graph_index=0)
    assert len(skeleton.stages) <= max_stages
    _serves_a_goal(dag, skeleton)
    tools = skeleton_tools(skeleton)
    if dag.number_of_edges() and len(tools) > 1:
        goals = [t for t in tools if not set(dag.successors(t)) & tools]
        assert all(set(dag.predecessors(g)) & tools for g in goals)  # a goal needs something the skeleton provides
        assert len(skeleton.stages) >= 2
    assert sample_goal_skeleton(dag, max_parallel=n, max_stages=max_stages, seed=seed, env_id="e",
                                graph_index=0) == skeleton  # fmt: skip


def test_goal_skeletons_never_draw_unrelated_tools() -> None:
    from tdg.dus import sample_goal_skeleton

    dag = nx.DiGraph([("list_orders", "get_order"), ("get_order", "get_user")])
    dag.add_nodes_from(["weather", "time", "calc"])  # ready roots that serve no goal
    for seed in range(30):
        tools = skeleton_tools(sample_goal_skeleton(dag, max_parallel=3, seed=seed))
        assert not tools & {"weather", "time", "calc"}
        assert "list_orders" in tools and len(tools) >= 2


def test_a_joining_goal_never_opens_a_stage_beyond_the_limit() -> None:
    from tdg.dus import sample_goal_skeleton

    # list -> create (a write) -> confirm (a write fed by it): confirm joins a create goal as a further write goal,
    # which would be a third stage
    dag = nx.DiGraph([("list_products", "create_order"), ("create_order", "send_confirmation")])
    nx.set_node_attributes(dag, {"create_order": "write", "send_confirmation": "write"}, "kind")
    stage_counts = {len(sample_goal_skeleton(dag, max_parallel=3, max_stages=limit, seed=seed).stages)
                    for limit in (2, 3) for seed in range(20)}  # fmt: skip
    assert max(len(sample_goal_skeleton(dag, max_parallel=3, max_stages=2, seed=s).stages) for s in range(20)) <= 2
    assert 3 in stage_counts  # with room for it, the write goal does join


def test_goal_skeletons_put_independent_consumers_in_one_stage() -> None:
    from tdg.dus import sample_goal_skeleton

    dag = nx.DiGraph([("list_orders", "get_order"), ("list_orders", "refund_order"), ("list_orders", "ship_order")])
    shapes = {sample_goal_skeleton(dag, max_parallel=3, seed=s).stages for s in range(40)}
    assert all(len(stages) == 2 and stages[0] == ("list_orders",) for stages in shapes)
    assert any(len(stages[1]) >= 2 for stages in shapes)  # extra goals share the provider's stage level


def test_goal_skeletons_prefer_writes_and_cover_an_environment() -> None:
    from tdg.dus import sample_goal_skeleton

    dag = nx.DiGraph([("list_orders", "get_order"), ("list_orders", "update_order")])
    dag.nodes["update_order"]["kind"] = "update"
    writes = sum("update_order" in skeleton_tools(sample_goal_skeleton(dag, max_parallel=1, seed=s))
                 for s in range(60))  # fmt: skip
    assert writes > 40  # weight 6 against 1
    env = [nx.DiGraph([("a", "b"), ("b", "c"), ("a", "d")], graph_index=0), nx.DiGraph([("e", "f")], graph_index=1)]
    result = sample_skeletons_for_coverage(env, env_id="e", max_skeletons=20, seed=0)
    assert result.coverage == 1.0


def test_coverage_sampling_makes_uncovered_tools_goals_even_without_edges() -> None:
    """Goal-first keeps DUS's coverage role: uncovered goals first, and tools without edges join a chain as further
    requested goals (independent, first level) instead of never being drawn."""
    from tdg.dus import sample_goal_skeleton

    dag = nx.DiGraph(env_id="e", graph_index=0)
    _param_edge(dag, "find_user", "get_user", "user_id")
    _param_edge(dag, "list_orders", "get_order", "order_id")
    dag.add_nodes_from(["weather", "time", "calc"])
    result = sample_skeletons_for_coverage([dag], env_id="e", max_skeletons=8, seed=1)
    assert result.coverage == 1.0
    for skeleton in result.skeletons:
        assert len(skeleton.stages) >= 2  # a chain is always there; the free tools sit beside it
        tools = skeleton_tools(skeleton)
        assert len([t for t in tools if not set(dag.successors(t)) & tools]) <= 3  # at most max_parallel goals
        assert set(skeleton.stages[-1]) & {"get_user", "get_order"}
    # uncovered goals come first: with get_user covered, every draw aims at get_order
    for seed in range(20):
        skeleton = sample_goal_skeleton(dag, seed=seed, uncovered={"get_order", "list_orders"}, max_parallel=1)
        assert skeleton.stages == (("list_orders",), ("get_order",))
    # without `uncovered` nothing unrelated is drawn (the plain goal-first sampler)
    assert not any({"weather", "time", "calc"} & skeleton_tools(sample_goal_skeleton(dag, seed=s)) for s in range(20))


def _tool_node(dag, name: str, kind: str, required: list[str]) -> None:
    dag.add_node(name, kind=kind, parameters={"type": "object", "required": required,
                                              "properties": {p: {"type": "string"} for p in required}})  # fmt: skip


def test_goal_first_providers_carry_information_and_fit_the_stage_budget():
    import networkx as nx

    from tdg.dus import requirements, sample_goal_skeleton

    dag = nx.DiGraph(env_id="e", graph_index=0)
    _tool_node(dag, "add_item", "create", ["name", "warehouse_id"])
    _tool_node(dag, "get_item", "read", ["item_id"])
    _tool_node(dag, "get_price", "read", ["item_id"])
    _tool_node(dag, "transfer_item", "update", ["item_id", "warehouse_id"])
    _param_edge(dag, "add_item", "get_item", "item_id")
    _param_edge(dag, "get_item", "get_price", "item_id")  # get_item hands back the item_id it was given: an echo
    dag.add_edge("add_item", "transfer_item", type="parameter", evidence="add_item.response.item_id -> "
                 "transfer_item.item_id; add_item.response.warehouse_id -> transfer_item.warehouse_id")  # fmt: skip
    dag.add_edge("get_item", "transfer_item", type="parameter",
                 evidence="get_item.response.warehouse_id -> transfer_item.warehouse_id")  # fmt: skip
    assert requirements(dag, "get_price", informative=True) == []  # the echo provides nothing
    assert requirements(dag, "get_price") == [frozenset({"get_item"})]  # (the paper's DUS still sees the edge)
    assert requirements(dag, "transfer_item", informative=True) == [frozenset({"add_item"}),
                                                                     frozenset({"get_item"})]  # fmt: skip
    for seed in range(30):  # transfer_item needs get_item (level 1), which reuses add_item: three levels
        assert len(sample_goal_skeleton(dag, max_stages=2, seed=seed).stages) <= 2
    assert any(len(sample_goal_skeleton(dag, max_stages=3, seed=s).stages) == 3 for s in range(30))
