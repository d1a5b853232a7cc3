"""TDG inference: known dependencies on hand-written toolsets, flows, the LLM judge (offline and over HTTP)."""

from __future__ import annotations

import itertools
import json
import re
from types import SimpleNamespace
from typing import Any

import networkx as nx
import pytest

from data.graphs import EdgeType
from data.models import ToolKind
from gustforge.errors import ConfigError, InputError, RegistryError
from gustforge.llm import LLMClient, LLMSettings
from tdg.dus import sample_skeleton
from tdg.fields import evidence_is_executable, parse_evidence
from tdg.infer import (
    DensityCap,
    build_graphs,
    candidate_pairs,
    edge_overlap,
    flow_specs,
    infer_edges,
    infer_graph,
    judge_pairs,
    select_flow,
)
from tdg.sanitize import sanitize_to_dag
from tests.fakes.openai_server import FakeOpenAIServer
from tests.tdg._tdg_toolsets import (
    LIBRARY_PLAUSIBLE,
    LIBRARY_REQUIRED,
    SHOP_ENV,
    TINY_ENV,
    TINY_PLAUSIBLE,
    TINY_REQUIRED,
    library_tools,
    load_db,
    load_schemas,
    tool,
)


def _precision_recall(edges: set[tuple[str, str]], required: set, plausible: set) -> tuple[float, float]:
    precision = len(edges & (required | plausible)) / len(edges) if edges else 0.0
    return precision, len(edges & required) / len(required)


def _env(env_dir, env_id="env") -> SimpleNamespace:
    return SimpleNamespace(env_id=env_id, schemas=load_schemas(env_dir), initial_db=load_db(env_dir))


class TestDeterministicInferer:
    # On clean, typed schemas every true dependency is an ID flow a key rule sees, so recall must be complete; the
    # one extra edge allowed is a defensible flow (checkout_book's loan names the book: checkout_book -> get_book).
    def test_library_precision_recall(self) -> None:
        g = infer_graph(library_tools())
        precision, recall = _precision_recall(set(g.edges), LIBRARY_REQUIRED, LIBRARY_PLAUSIBLE)
        assert recall == 1.0
        assert precision >= 0.85
        assert g.graph["embedder"] == "none"  # the rules use no embedder

    def test_calibrated_model_is_kept_for_comparison(self) -> None:
        g = infer_graph(library_tools(), inferer="calibrated", embedder="lexical")
        assert g.graph["embedder"] == "lexical"
        assert set(g.edges) & LIBRARY_REQUIRED

    def test_opaque_responses_are_completed_from_db_record_shapes(self) -> None:
        with_db = infer_graph(load_schemas(TINY_ENV), db=load_db(TINY_ENV))
        precision, recall = _precision_recall(set(with_db.edges), TINY_REQUIRED, TINY_PLAUSIBLE)
        # the calibrated model may leave out a second provider of one ID (list_orders -> cancel_order beside
        # get_order -> cancel_order): 4 of the 5 required edges
        assert recall >= 0.8 and precision >= 0.8
        without_db = infer_graph(load_schemas(TINY_ENV))
        assert without_db.number_of_edges() == 0  # opaque records: no field can fill an argument

    def test_parameter_evidence_names_real_fields(self) -> None:
        g = infer_graph(library_tools())
        params = [(u, v, d) for u, v, d in g.edges(data=True) if d["type"] == "parameter"]
        assert params
        for u, v, d in params:
            ok, detail = evidence_is_executable(d["evidence"], u, v, g.nodes[u]["response"], g.nodes[v]["parameters"])
            assert ok, detail
            assert 0 < d["confidence"] <= 1

    def test_known_evidence_string(self) -> None:
        g = infer_graph(library_tools())
        assert g.edges["list_members", "checkout_book"]["evidence"] == (
            "list_members.response.members[].member_id -> checkout_book.member_id"
        )

    def test_mutation_echo_and_new_record_id_are_not_dependencies(self) -> None:
        g = infer_graph(library_tools())
        assert not g.has_edge("return_book", "renew_loan")  # delete echoing loan_id back to an update
        assert not g.has_edge("renew_loan", "checkout_book")  # update feeding the create of its own entity

    def test_parameter_edges_only_between_key_fields(self) -> None:
        S, INT = {"type": "string"}, {"type": "integer"}
        order = {"type": "object", "properties": {"order_id": S, "quantity": INT, "note": S}}
        tools = [
            tool("get_order", ToolKind.READ, "orders", {"order_id": S}, ["order_id"], order=order),
            tool(
                "update_order", ToolKind.UPDATE, "orders", {"order_id": S, "quantity": INT}, ["order_id"], order=order
            ),
        ]
        edges = {(e.src, e.dst): e for e in infer_edges(tools, embedder="lexical")}
        edge = edges[("get_order", "update_order")]
        assert edge.type is EdgeType.PARAMETER
        assert [ev.param for ev in parse_evidence(edge.evidence)] == ["order_id"]  # never quantity

    def test_calibrated_confidence_is_a_probability(self) -> None:
        for edge in infer_edges(library_tools(), embedder="lexical"):
            assert edge.confidence is not None and 0 < edge.confidence < 1

    def test_verb_order_alone_draws_no_edge(self) -> None:
        S = {"type": "string"}
        tools = [
            tool("add_note", ToolKind.CREATE, "notes", {"text": S}, ["text"]),
            tool("list_notes", ToolKind.READ, "notes", {}, []),
            tool("archive_note", ToolKind.UPDATE, "notes", {"title": S}, ["title"]),
            tool("purge_notes", ToolKind.DELETE, "notes", {}, []),
        ]
        assert infer_graph(tools).number_of_edges() == 0  # same entity, CRUD order, nothing passed: no evidence

    def test_semantic_edge_carries_its_evidence(self) -> None:
        S = {"type": "string"}
        tools = [
            tool("create_ticket", ToolKind.CREATE, "tickets", {"title": S}, ["title"], created=S),
            tool("close_ticket", ToolKind.UPDATE, "tickets", {"ticket_id": S}, ["ticket_id"], closed=S),
        ]
        edge = {(e.src, e.dst): e for e in infer_edges(tools)}[("create_ticket", "close_ticket")]
        assert edge.type is EdgeType.SEMANTIC
        assert edge.evidence.startswith("semantic[creates_record]:") and "ticket_id" in edge.evidence

    def test_isolated_tool_has_no_edges(self) -> None:
        g = infer_graph(library_tools())
        assert g.degree("get_weather") == 0
        assert set(g.nodes["get_weather"]) >= {"description", "parameters", "response", "kind", "entity"}

    def test_errors(self) -> None:
        tools = library_tools()
        with pytest.raises(InputError, match="duplicate"):
            infer_edges(tools + tools[:1])
        with pytest.raises(RegistryError, match="deterministic"):
            infer_edges(tools, inferer="nope")
        edges = infer_edges(tools)
        with pytest.raises(InputError, match="flow_variant"):
            select_flow(tools, edges, flow_variant=len(flow_specs(tools, edges, seed=0)), seed=0)


class TestBuildGraphs:
    def test_distinct_flows_with_indices(self) -> None:
        graphs = build_graphs(_env(SHOP_ENV, "shop"), n_graphs=3)
        assert [g.graph["graph_index"] for g in graphs] == list(range(len(graphs)))
        assert 2 <= len(graphs) <= 3
        edge_sets = [frozenset(g.edges) for g in graphs]
        assert len(set(edge_sets)) == len(edge_sets)
        assert all(g.graph["env_id"] == "shop" and set(g.nodes) == set(graphs[0].nodes) for g in graphs)
        assert graphs[0].graph["flow"] == "full"
        assert all(set(g.edges) <= set(graphs[0].edges) for g in graphs[1:])  # every flow is a sub-flow

    def test_deterministic(self) -> None:
        first = build_graphs(_env(SHOP_ENV), n_graphs=3, seed=7)
        second = build_graphs(_env(SHOP_ENV), n_graphs=3, seed=7)
        assert [nx.node_link_data(g, edges="edges") for g in first] == [
            nx.node_link_data(g, edges="edges") for g in second
        ]

    def test_flows_overlap_at_most_the_limit_and_change_the_sampled_tasks(self) -> None:
        graphs = build_graphs(_env(SHOP_ENV, "shop"), n_graphs=3)
        assert len(graphs) >= 2
        assert graphs[1].graph["flow"].startswith(("goal:", "entity:"))
        for i, j in itertools.combinations(range(len(graphs)), 2):
            assert edge_overlap(set(graphs[i].edges), set(graphs[j].edges)) <= 0.7
        per_graph = []
        for g in graphs:
            dag = sanitize_to_dag(g).dag
            per_graph.append(frozenset(
                tuple(map(tuple, sample_skeleton(dag, max_parallel=3, max_stages=6, seed=seed, env_id="shop",
                                                 graph_index=0).stages)) for seed in range(6)
            ))  # fmt: skip
        assert len(set(per_graph)) >= 2  # the same seeds on different graphs give different task skeletons

    def test_a_stricter_overlap_limit_keeps_fewer_flows(self) -> None:
        env = _env(SHOP_ENV, "shop")
        assert len(build_graphs(env, n_graphs=3, max_overlap=0.0)) <= len(build_graphs(env, n_graphs=3))
        assert len(build_graphs(env, n_graphs=3, max_overlap=1.0)) == 3

    def test_goal_flows_rotate_with_the_seed(self) -> None:
        env = _env(SHOP_ENV, "shop")
        first = [g.graph["flow"] for g in build_graphs(env, n_graphs=3, seed=0)]
        other = [g.graph["flow"] for g in build_graphs(env, n_graphs=3, seed=1)]
        assert first[0] == other[0] == "full"  # the full graph is the inference itself
        assert first[1:] != other[1:]

    def test_edgeless_env_gives_one_graph(self) -> None:
        S = {"type": "string"}
        env = SimpleNamespace(env_id="misc", initial_db={}, schemas=[
            tool("get_time", ToolKind.READ, None, {"zone": S}, ["zone"], time=S),
            tool("roll_dice", ToolKind.ACTION, None, {"sides": {"type": "integer"}}, ["sides"], value=S),
        ])  # fmt: skip
        graphs = build_graphs(env, n_graphs=3)
        assert len(graphs) == 1 and graphs[0].number_of_edges() == 0


class TestLLMInferer:
    def test_candidate_pruning(self) -> None:
        tools = library_tools()
        pairs = candidate_pairs(tools)
        assert len(pairs) < len(tools) * (len(tools) - 1) / 2
        assert all("get_weather" not in (a.name, b.name) for a, b, _ in pairs)
        judged = {(a.name, b.name) for a, b, _ in pairs}
        assert LIBRARY_REQUIRED <= judged

    def test_offline_client_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="needs an LLM endpoint"):
            infer_edges(library_tools(), inferer="llm")
        with LLMClient(LLMSettings()) as client, pytest.raises(ConfigError):
            infer_edges(library_tools(), inferer="llm", client=client)

    def test_malformed_reply_drops_only_that_pair(self) -> None:
        tools = library_tools()

        def responder(request: dict[str, Any]) -> dict[str, Any]:
            a, b = re.findall(r'"name": "(\w+)"', request["messages"][1]["content"])[:2]
            if (a, b) == ("search_books", "get_book"):
                return {"content": "this is not JSON"}
            verdict = {
                "edge": (a, b) == ("list_members", "checkout_book"),
                "confidence": 0.9,
                "type": "parameter" if (a, b) == ("list_members", "checkout_book") else "none",
                "evidence": "list_members.response.members[].member_id -> checkout_book.member_id",
            }
            return {"content": json.dumps(verdict)}

        with FakeOpenAIServer(responder) as server:
            settings = LLMSettings(
                backend="openai", base_url=server.base_url, model="fake-model", max_retries=0, max_repair_rounds=0
            )
            with LLMClient(settings) as client:
                edges, dropped = judge_pairs(tools, client, concurrency=2)
        assert [(d.src, d.dst) for d in dropped] == [("search_books", "get_book")]
        assert dropped[0].reason.startswith("malformed_judge_reply")
        assert [(e.src, e.dst) for e in edges] == [("list_members", "checkout_book")]

    def test_semantic_verdict_without_evidence_is_dropped(self) -> None:
        tools = library_tools()

        def responder(request: dict[str, Any]) -> dict[str, Any]:
            a, b = re.findall(r'"name": "(\w+)"', request["messages"][1]["content"])[:2]
            semantic = (a, b) in {("search_books", "get_book"), ("checkout_book", "return_book")}
            evidence = "return_book description: 'call checkout_book first'" if a == "checkout_book" else " "
            return {"content": json.dumps({"edge": semantic, "type": "semantic" if semantic else "none",
                                           "confidence": 0.8, "evidence": evidence})}  # fmt: skip

        with FakeOpenAIServer(responder) as server:
            settings = LLMSettings(backend="openai", base_url=server.base_url, model="fake-model", max_retries=0)
            with LLMClient(settings) as client:
                edges, dropped = judge_pairs(tools, client)
        assert [(e.src, e.dst) for e in edges] == [("checkout_book", "return_book")]
        assert [(d.src, d.dst, d.reason) for d in dropped] == [
            ("search_books", "get_book", "semantic_without_evidence")
        ]

    def test_judge_edges_share_the_density_cap(self) -> None:
        tools = library_tools()

        def responder(request: dict[str, Any]) -> dict[str, Any]:
            return {"content": json.dumps({"edge": True, "type": "semantic", "confidence": 0.6,
                                           "evidence": "the scenario says so"})}  # fmt: skip

        with FakeOpenAIServer(responder) as server:
            settings = LLMSettings(backend="openai", base_url=server.base_url, model="fake-model", max_retries=0)
            with LLMClient(settings) as client:
                capped = infer_edges(tools, inferer="llm", client=client, cap=DensityCap(max_edges_per_tool=1.0))
        assert len(capped) == len(tools)

    def test_judge_over_http_and_hallucinated_evidence_is_sanitized(self) -> None:
        tools = library_tools()

        def responder(request: dict[str, Any]) -> dict[str, Any]:
            user = request["messages"][-1]["content"]
            a, b = re.findall(r'"name": "(\w+)"', user)[:2]
            if (a, b) == ("search_books", "get_book"):
                verdict = {
                    "edge": True,
                    "type": "parameter",
                    "confidence": 0.95,
                    "evidence": "search_books.response.books[].book_id -> get_book.book_id",
                }
            elif (a, b) == ("list_members", "checkout_book"):  # names a field that does not exist
                verdict = {
                    "edge": True,
                    "type": "parameter",
                    "confidence": 0.9,
                    "evidence": "list_members.response.members[].card_no -> checkout_book.member_id",
                }
            elif (a, b) == ("checkout_book", "return_book"):
                verdict = {"edge": True, "type": "semantic", "confidence": 0.6, "evidence": "borrow before return"}
            else:
                verdict = {"edge": False, "type": "none", "confidence": 0.8, "evidence": ""}
            return {"content": json.dumps(verdict)}

        with FakeOpenAIServer(responder) as server:
            settings = LLMSettings(backend="openai", base_url=server.base_url, model="fake-model", max_retries=0)
            with LLMClient(settings) as client:
                g = infer_graph(tools, inferer="llm", client=client)
            assert len(server.requests) == len(candidate_pairs(tools))
        assert set(g.edges) == {("search_books", "get_book"), ("list_members", "checkout_book"),
                                ("checkout_book", "return_book")}  # fmt: skip
        assert g.edges["checkout_book", "return_book"]["type"] == "semantic"
        result = sanitize_to_dag(g)
        assert [(r.src, r.dst, r.reason) for r in result.removed] == [
            ("list_members", "checkout_book", "non_executable")
        ]
        assert "card_no" in result.removed[0].detail
        assert parse_evidence(result.dag.edges["search_books", "get_book"]["evidence"])[0].param == "book_id"
