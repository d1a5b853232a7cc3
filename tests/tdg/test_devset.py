"""TDG development ground truth: observed edges from NESTFUL references and Toucan value flow, split, scoring."""

from __future__ import annotations

import pytest

from tdg.devset import DevItem, bootstrap_interval, load_devset, load_nestful, load_toucan, score_edges, split_of

pytest.importorskip("nestful", reason="nestful-wrapper (dev/bench extra) not installed")


class TestNestful:
    def test_var_reference_is_an_observed_edge(self) -> None:
        items = load_nestful("nestful_executable")
        flights = [i for i in items if {t.name for t in i.tools} >= {"sky_scrapper_search_airport",
                                                                         "sky_scrapper_flight_search"}]  # fmt: skip
        assert flights
        assert all(("sky_scrapper_search_airport", "sky_scrapper_flight_search") in i.gold for i in flights)
        assert all(("sky_scrapper_flight_search", "sky_scrapper_search_airport") not in i.gold for i in flights)

    def test_tools_carry_the_spec_outputs(self) -> None:
        items = load_nestful("nestful_executable")
        airport = next(t for i in items for t in i.tools if t.name == "sky_scrapper_search_airport")
        assert {"skyId", "entityId"} <= set(airport.response["properties"])
        assert {"status", "message"} <= set(airport.response["properties"])

    def test_every_part_loads_with_gold_edges(self) -> None:
        devset = load_devset(["nestful_executable", "nestful_glaive", "nestful_sgd"])
        sources = {i.source for i in devset.items}
        assert sources == {"nestful_executable", "nestful_glaive", "nestful_sgd"}
        assert sum(len(i.gold) for i in devset.items) > 200
        assert all(len(i.tools) >= 2 for i in devset.items)
        assert all(a != b for i in devset.items for a, b in i.gold)
        assert {i.split for i in devset.items} == {"dev", "heldout"}


class TestToucan:
    def test_returned_value_passed_on_is_an_edge(self, corpora_dir) -> None:
        items = load_toucan(corpora_dir / "toucan")
        gold = {edge for i in items for edge in i.gold}
        # the calculator row: add returns 142, div is called with a=142
        assert any(a.endswith("add") and b.endswith("div") for a, b in gold)


def test_split_is_stable_and_balanced() -> None:
    assert split_of("x:1") == split_of("x:1")
    shares = [split_of(f"item:{n}") == "heldout" for n in range(1000)]
    assert 0.4 < sum(shares) / len(shares) < 0.6


def test_score_edges_counts_only_pairs_inside_the_item() -> None:
    from tests.tdg._tdg_toolsets import library_tools

    tools = library_tools()[:3]
    item = DevItem(item_id="i", source="s", tools=tools, gold=[("search_books", "get_book")], samples=1, split="dev")
    scores = score_edges({"i": [("search_books", "get_book"), ("get_book", "list_members"), ("x", "y")]}, [item])
    assert (scores["true_positive"], scores["predicted"], scores["gold"]) == (1, 2, 1)
    assert scores["precision"] == 0.5 and scores["recall"] == 1.0


def test_bootstrap_interval_brackets_the_estimate() -> None:
    from tests.tdg._tdg_toolsets import library_tools

    tools = library_tools()[:3]
    items = [DevItem(item_id=f"i{n}", source="s", tools=tools, gold=[("search_books", "get_book")], samples=1,
                     split="dev") for n in range(20)]  # fmt: skip
    perfect = {f"i{n}": [("search_books", "get_book")] for n in range(20)}
    assert bootstrap_interval(perfect, items) == {"precision": [1.0, 1.0], "recall": [1.0, 1.0]}
    half = {f"i{n}": [("search_books", "get_book")] for n in range(10)}
    low, high = bootstrap_interval(half, items)["recall"]
    assert low < 0.5 < high
