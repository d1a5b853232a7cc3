"""Evidence rules of the deterministic TDG inferer, the density cap, cross-source fitting and graph figures."""

from __future__ import annotations

import networkx as nx
import pytest

from data.graphs import EdgeType
from data.models import Skeleton, ToolKind, ToolSchema
from tdg.crosssource import fit_rules, leave_one_source_out, rule_counts
from tdg.devset import DevItem
from tdg.evidence import Evidence, RuleCalibration, fills, toolset_evidence, value_format
from tdg.fields import FieldRef
from tdg.graphstats import flow_overlaps, stage_links
from tdg.infer import DensityCap, InferredEdge, cap_density, edges_from_evidence, infer_edges
from tests.tdg._tdg_toolsets import library_tools, tool

S, NUM, INT = {"type": "string"}, {"type": "number"}, {"type": "integer"}


def _by_rule(tools: list[ToolSchema]) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for ev in toolset_evidence(tools):
        out.setdefault(ev.rule, set()).add((ev.src, ev.dst))
    return out


def _described(name: str, description: str, params: dict, **response) -> ToolSchema:
    t = tool(name, ToolKind.ACTION, None, params, list(params), **response)
    return t.model_copy(update={"description": description})


class TestRules:
    def test_key_fields_fill_key_parameters(self) -> None:
        evidence = [e for e in toolset_evidence(library_tools()) if (e.src, e.dst) == ("search_books", "get_book")]
        assert [(e.rule, e.path, e.param) for e in evidence] == [("key_exact", "books[].book_id", "book_id")]
        assert evidence[0].text() == "search_books.response.books[].book_id -> get_book.book_id"

    def test_role_qualified_key(self) -> None:
        tools = [
            tool("search_airport", ToolKind.READ, "airports", {"query": S}, ["query"], skyId=S),
            tool("search_flights", ToolKind.READ, "flights", {"originSkyId": S}, ["originSkyId"], price=NUM),
        ]
        assert ("search_airport", "search_flights") in _by_rule(tools)["key_role"]

    def test_a_tool_echoing_its_own_argument_is_not_its_source(self) -> None:
        find = tool("find_bus", ToolKind.READ, "buses", {"origin": S}, ["origin"], origin=S, departure_time=S)
        buy = tool("buy_ticket", ToolKind.ACTION, None, {"origin": S, "departure_time": S}, ["origin"], ok=S)
        evidence = [e for e in toolset_evidence([find, buy]) if e.rule == "same_name"]
        assert [(e.src, e.param) for e in evidence] == [("find_bus", "departure_time")]  # origin is find_bus's input

    def test_an_update_does_not_depend_on_reading_the_attribute_it_writes(self) -> None:
        order = {"type": "object", "properties": {"order_id": S, "quantity": INT}}
        tools = [
            tool("get_order", ToolKind.READ, "orders", {"order_id": S}, ["order_id"], order=order),
            tool("update_order", ToolKind.UPDATE, "orders", {"order_id": S, "quantity": INT}, ["order_id"]),
        ]
        params = {e.param for e in toolset_evidence(tools) if (e.src, e.dst) == ("get_order", "update_order")}
        assert params == {"order_id"}

    def test_a_parameter_description_naming_the_source(self) -> None:
        rentals = tool("search_car_rentals", ToolKind.READ, "rentals", {"city": S}, ["city"], search_key=S, count=INT)
        summary = tool("booking_summary", ToolKind.READ, "bookings", {
            "key": {"type": "string", "description": "`key` can be retrieved from searchCarRentals."}}, ["key"],
            total=NUM)  # fmt: skip
        evidence = [e for e in toolset_evidence([rentals, summary]) if e.rule == "mentioned_source"]
        assert [(e.src, e.dst, e.param) for e in evidence] == [("search_car_rentals", "booking_summary", "key")]

    def test_a_computed_value_feeds_a_generic_slot_but_a_record_list_does_not(self) -> None:
        calc = tool("calculate_discount", ToolKind.ACTION, None, {"price": NUM}, ["price"], discount_amount=NUM)
        square = tool("calculate_square", ToolKind.ACTION, None, {"number": NUM}, ["number"], squared=NUM)
        listing = tool(
            "list_prices",
            ToolKind.READ,
            "prices",
            {},
            [],
            prices={"type": "array", "items": {"type": "object", "properties": {"value": NUM}}},
        )
        pairs = _by_rule([calc, square, listing]).get("computed_value", set())
        assert ("calculate_discount", "calculate_square") in pairs
        assert not {p for p in pairs if p[0] == "list_prices"}

    def test_described_order_needs_an_ordering_cue(self) -> None:
        login = _described("create_session", "Open a session.", {"user": S}, session=S)
        query = _described("run_query", "Run a query. Call create_session first.", {"sql": S}, rows=S)
        sheet = _described("sec_balance_sheet", "The balance sheet from sec filings.", {"cik": S}, total=NUM)
        filings = _described("sec_filings", "List filings.", {"company": S}, count=INT)
        rules = _by_rule([login, query, sheet, filings])
        assert rules.get("described_order") == {("create_session", "run_query")}

    def test_a_tool_named_for_the_key_it_returns(self) -> None:
        find = tool("find_user_id_by_email", ToolKind.READ, "emails", {"email": S}, ["email"], emails=S)
        details = tool("get_user_details", ToolKind.READ, "users", {"user_id": S}, ["user_id"], full_name=S)
        evidence = toolset_evidence([find, details])
        assert [(e.rule, e.src, e.dst, e.type) for e in evidence] == [
            ("declared_output", "find_user_id_by_email", "get_user_details", EdgeType.SEMANTIC)
        ]

    def test_a_write_handing_back_its_own_key_is_not_a_source(self) -> None:
        order = {"type": "object", "properties": {"order_id": S, "status": S}}
        cancel = tool("cancel_order", ToolKind.UPDATE, "orders", {"order_id": S}, ["order_id"], order=order)
        refund = tool("refund_order", ToolKind.ACTION, "refunds", {"order_id": S}, ["order_id"], refund_id=S)
        lookup = tool("get_order", ToolKind.READ, "orders", {"order_id": S}, ["order_id"], order=order)
        pairs = _by_rule([cancel, refund, lookup])["key_exact"]
        assert ("get_order", "refund_order") in pairs and ("cancel_order", "refund_order") not in pairs

    def test_name_similarity_alone_is_no_evidence(self) -> None:
        a = _described("get_weather_report", "Weather report for a city.", {"city": S}, summary=S)
        b = _described("get_weather_forecast", "Weather forecast for a city.", {"city": S, "days": INT}, outlook=S)
        assert toolset_evidence([a, b]) == []


class TestCompatibility:
    def test_value_formats(self) -> None:
        assert value_format("start_date") == "datetime" and value_format("contact_email") == "email"
        assert value_format("reply_to", {"format": "email"}) == "email" and value_format("quantity") is None

    def test_fills_checks_type_format_and_enum(self) -> None:
        email = FieldRef("user.email", "email", "user", "string")
        assert fills("email", S, email)
        assert not fills("email", INT, email)  # types
        assert not fills("start_date", S, FieldRef("contact_email", "contact_email", None, "string"))  # formats
        assert not fills("mode", {"type": "string", "enum": ["a", "b"]}, FieldRef("order_id", "order_id", None,
                                                                                  "string"))  # fmt: skip


def _edge(src: str, dst: str, param: str, confidence: float) -> InferredEdge:
    return InferredEdge(src, dst, EdgeType.PARAMETER, confidence, f"{src}.response.x -> {dst}.{param}")


class TestDensityCap:
    def test_providers_per_argument(self) -> None:
        edges = [_edge(f"p{i}", "b", "order_id", 0.5 + i / 10) for i in range(4)]
        kept = cap_density(edges, 10, DensityCap(max_providers=2))
        assert {e.src for e in kept} == {"p2", "p3"}

    def test_edges_per_tool(self) -> None:
        edges = [_edge("a", f"b{i}", "x", 0.9 - i / 100) for i in range(8)]
        kept = cap_density(edges, 4, DensityCap(max_edges_per_tool=1.0))
        assert [e.dst for e in kept] == ["b0", "b1", "b2", "b3"]

    def test_builds_stay_under_the_cap(self) -> None:
        tools = library_tools()
        assert len(infer_edges(tools, cap=DensityCap(max_edges_per_tool=0.5))) <= len(tools) // 2
        assert len(infer_edges(tools, cap=DensityCap(max_edges_per_tool=5.0))) >= len(tools) // 2


class TestRuleCalibration:
    def test_rules_below_the_minimum_draw_no_edges(self) -> None:
        evidence = [
            Evidence("key_exact", "a", "b", EdgeType.PARAMETER, "x_id", "x_id"),
            Evidence("same_name", "b", "c", EdgeType.PARAMETER, "name", "name"),
        ]
        rules = RuleCalibration(precision={"key_exact": 0.8, "same_name": 0.3}, min_precision=0.45)
        edges = edges_from_evidence(evidence, rules)
        assert [(e.src, e.dst, e.confidence) for e in edges] == [("a", "b", 0.8)]


def _item(source: str, n: int, gold: list[tuple[str, str]]) -> DevItem:
    names = ["t0", "t1", "t2"]
    tools = [tool(name, ToolKind.READ, None, {}, []) for name in names]
    return DevItem(item_id=f"{source}:{n}", source=source, tools=tools, gold=gold, samples=1, split="dev")


class TestCrossSource:
    def test_smoothed_precision(self) -> None:
        items = [_item("a", i, [("t0", "t1")] if i < 2 else []) for i in range(3)]
        evidence = {it.item_id: [Evidence("same_name", "t0", "t1", EdgeType.PARAMETER, "p", "p")] for it in items}
        assert rule_counts(items, evidence) == {"same_name": (2, 3)}
        assert fit_rules(items, evidence).precision == {"same_name": 0.6}  # (2 + 1) / (3 + 2)

    def test_the_left_out_source_never_fits_its_own_rules(self) -> None:
        # The rule is always right in source a and always wrong in b: predicting b uses a's precision (the rule
        # fires, all false), predicting a uses b's (the rule is refused, nothing predicted).
        items = [_item("a", i, [("t0", "t1")]) for i in range(4)] + [_item("b", i, []) for i in range(4)]
        evidence = {it.item_id: [Evidence("same_name", "t0", "t1", EdgeType.PARAMETER, "p", "p")] for it in items}
        result = leave_one_source_out(items, evidence, rounds=20)
        assert result["per_group"]["b"]["predicted"] == 4 and result["per_group"]["b"]["true_positive"] == 0
        assert result["per_group"]["a"]["predicted"] == 0 and result["per_group"]["a"]["recall"] == 0.0
        assert result["pooled"]["gold"] == 4 and set(result["pooled"]["ci95"]) == {"precision", "recall"}


class TestGraphStats:
    def test_stage_links(self) -> None:
        dag = nx.DiGraph()
        dag.add_edge("a", "b", type="parameter")
        dag.add_edge("a", "c", type="semantic")
        dag.add_node("d")
        skeleton = Skeleton(env_id="e", graph_index=0, stages=(("a",), ("b",), ("c", "d")), seed=0)
        links = stage_links(dag, skeleton)
        assert (links.stages, links.every_tool, links.some_tool) == (2, 1, 1)  # c gets no value, d none either

    def test_flow_overlaps(self) -> None:
        g1, g2, g3 = nx.DiGraph([("a", "b"), ("b", "c")]), nx.DiGraph([("a", "b")]), nx.DiGraph()
        assert flow_overlaps([g1, g2, g3]) == pytest.approx([0.5, 0.0, 0.0])
