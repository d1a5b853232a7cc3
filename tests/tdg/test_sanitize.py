"""TDG sanitization (App. B.2): planted cycles, the priority rule, non-executable edges, graph files."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from data.graphs import EdgeType, RemovedEdge, graph_path, read_graph, read_graphs, write_graph
from tdg.infer import infer_graph
from tdg.sanitize import sanitize_to_dag, unlocked_nodes
from tests.tdg._tdg_toolsets import library_tools


def _graph(*edges: tuple[str, str, str, float | None]) -> nx.DiGraph:
    g = nx.DiGraph()
    for u, v, kind, conf in edges:
        g.add_edge(u, v, type=kind, confidence=conf, evidence="")
    return g


def _removed(g: nx.DiGraph) -> list[tuple[str, str]]:
    result = sanitize_to_dag(g)
    assert nx.is_directed_acyclic_graph(result.dag)
    assert set(result.dag.nodes) == set(g.nodes)
    return [(r.src, r.dst) for r in result.removed]


class TestPriorityRule:
    def test_semantic_edge_goes_before_parameter_edge(self) -> None:
        g = _graph(("a", "b", "parameter", 0.2), ("b", "c", "semantic", 0.99), ("c", "a", "parameter", 0.3))
        assert _removed(g) == [("b", "c")]

    def test_lower_confidence_goes_first_within_a_type(self) -> None:
        g = _graph(("a", "b", "parameter", 0.9), ("b", "c", "parameter", 0.4), ("c", "a", "parameter", 0.7))
        assert _removed(g) == [("b", "c")]

    def test_missing_confidence_counts_as_certain(self) -> None:
        g = _graph(("a", "b", "semantic", None), ("b", "a", "semantic", 0.95))
        assert _removed(g) == [("b", "a")]

    def test_no_confidence_tie_breaks_by_most_newly_unlocked_nodes(self) -> None:
        # a <-> b <-> c. Removing b->a frees a (1 node); removing a->b frees nothing (b still waits for c).
        # Lexicographic order alone would pick (a, b).
        g = _graph(("a", "b", "semantic", None), ("b", "a", "semantic", None),
                   ("b", "c", "semantic", None), ("c", "b", "semantic", None))  # fmt: skip
        removed = _removed(g)
        assert removed[0] == ("b", "a")
        assert len(removed) == 2

    def test_unlock_count_includes_downstream_nodes(self) -> None:
        # a <-> b <-> c, a -> d -> e. Removing b->a unlocks a, d, e (3); removing a->b unlocks nothing.
        g = _graph(
            ("a", "b", "parameter", None),
            ("b", "a", "parameter", None),
            ("b", "c", "parameter", None),
            ("c", "b", "parameter", None),
            ("a", "d", "parameter", None),
            ("d", "e", "semantic", None),
        )
        result = sanitize_to_dag(g)
        assert (result.removed[0].src, result.removed[0].dst) == ("b", "a")
        assert ("a", "b") in result.dag.edges and ("d", "e") in result.dag.edges

    def test_full_tie_is_lexicographic(self) -> None:
        g = _graph(("c", "a", "semantic", None), ("a", "b", "semantic", None), ("b", "c", "semantic", None))
        assert _removed(g) == [("a", "b")]

    def test_self_loop_and_reason_codes(self) -> None:
        g = _graph(("a", "a", "parameter", 1.0), ("a", "b", "semantic", 0.5), ("b", "a", "semantic", 0.4))
        result = sanitize_to_dag(g)
        assert [(r.src, r.dst, r.reason) for r in result.removed] == [("a", "a", "self_loop"), ("b", "a", "cycle")]
        assert result.removed[1].detail.startswith("cycle ")
        assert result.removed[1].type is EdgeType.SEMANTIC and result.removed[1].confidence == 0.4

    def test_two_disjoint_cycles_each_lose_one_edge(self) -> None:
        g = _graph(("a", "b", "parameter", 0.9), ("b", "a", "parameter", 0.5),
                   ("x", "y", "semantic", 0.8), ("y", "x", "parameter", 0.1))  # fmt: skip
        assert sorted(_removed(g)) == [("b", "a"), ("x", "y")]

    def test_input_graph_is_not_modified(self) -> None:
        g = _graph(("a", "b", "semantic", 0.5), ("b", "a", "semantic", 0.4))
        sanitize_to_dag(g)
        assert set(g.edges) == {("a", "b"), ("b", "a")}


class TestNonExecutable:
    def test_edge_naming_missing_fields_is_dropped(self) -> None:
        g = infer_graph(library_tools())
        g.add_edge("get_weather", "get_book", type="parameter", confidence=0.99,
                   evidence="get_weather.response.book.book_id -> get_book.book_id")  # fmt: skip
        g.add_edge("list_members", "renew_loan", type="parameter", confidence=0.99,
                   evidence="list_members.response.members[].member_id -> renew_loan.member_id")  # fmt: skip
        g.add_edge("search_books", "return_book", type="parameter", confidence=0.99, evidence="trust me")
        result = sanitize_to_dag(g)
        dropped = {(r.src, r.dst): r for r in result.removed if r.reason == "non_executable"}
        assert set(dropped) == {("get_weather", "get_book"), ("list_members", "renew_loan"),
                                ("search_books", "return_book")}  # fmt: skip
        assert "no field book.book_id" in dropped["get_weather", "get_book"].detail
        assert "no parameter member_id" in dropped["list_members", "renew_loan"].detail

    def test_inferred_library_graph_keeps_all_parameter_edges_except_cycle_breaks(self) -> None:
        g = infer_graph(library_tools())
        result = sanitize_to_dag(g)
        assert {r.reason for r in result.removed} == {"cycle"}
        assert ("get_book", "checkout_book") in result.dag.edges  # primary-key edge survives the foreign-key one


@st.composite
def _digraphs(draw: st.DrawFn) -> nx.DiGraph:
    n = draw(st.integers(1, 8))
    nodes = [f"t{i}" for i in range(n)]
    pairs = draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=20))
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    for u, v in pairs:
        kind = draw(st.sampled_from(["parameter", "semantic"]))
        conf = draw(st.one_of(st.none(), st.floats(0, 1)))
        g.add_edge(u, v, type=kind, confidence=conf, evidence="")
    return g


@settings(max_examples=150, deadline=None)
@given(_digraphs())
def test_any_graph_becomes_a_dag_and_only_removed_edges_are_missing(g: nx.DiGraph) -> None:
    result = sanitize_to_dag(g)
    assert nx.is_directed_acyclic_graph(result.dag)
    assert unlocked_nodes(result.dag) == set(g.nodes)
    removed = {(r.src, r.dst) for r in result.removed}
    assert set(result.dag.edges) | removed == set(g.edges)
    assert not set(result.dag.edges) & removed
    assert sanitize_to_dag(g).removed == result.removed  # deterministic


class TestGraphFiles:
    def test_round_trip(self, tmp_path) -> None:
        g = infer_graph(library_tools())
        g.graph.update(env_id="lib", graph_index=0)
        result = sanitize_to_dag(g)
        path = write_graph(graph_path(tmp_path, "lib", 0), result.dag, result.removed)
        assert path == tmp_path / "tdg" / "lib" / "0.json"
        loaded = read_graph(path)
        assert nx.utils.graphs_equal(loaded.dag, result.dag)
        assert loaded.removed == result.removed
        assert loaded.dag.graph["env_id"] == "lib"

    def test_bytes_do_not_depend_on_insertion_order(self, tmp_path) -> None:
        g1 = nx.DiGraph([("a", "b", {"type": "parameter"}), ("c", "d", {"type": "semantic"})])
        g2 = nx.DiGraph([("c", "d", {"type": "semantic"}), ("a", "b", {"type": "parameter"})])
        removed = [RemovedEdge(src="b", dst="a", type=EdgeType.SEMANTIC, reason="cycle")]
        p1, p2 = write_graph(tmp_path / "1.json", g1, removed), write_graph(tmp_path / "2.json", g2, removed)
        assert p1.read_bytes() == p2.read_bytes()
        assert [len(f.dag) for f in read_graphs(tmp_path)] == [4, 4]
