"""Realistic reconstruction values: from the schema and the DB, shaped by the parameter's name, never 'sample X'."""

from __future__ import annotations

import random
import re

from tdg.values import new_value, realistic_number, realistic_value, search_term


def test_schema_hints_win():
    rng = random.Random(0)
    assert realistic_value("x", {"type": "string", "default": "EUR"}, rng) == "EUR"
    assert realistic_value("x", {"type": "string", "examples": ["AAPL"]}, rng) == "AAPL"
    assert realistic_value("order_ref", {"type": "string", "description": "Order id, e.g. ORD-001"}, rng) == "ORD-001"
    assert re.fullmatch(r"2025-\d\d-\d\d", realistic_value("when", {"type": "string", "format": "date"}, rng))


def test_names_shape_the_value_and_nothing_is_a_placeholder():
    rng = random.Random(1)
    assert re.fullmatch(r"[a-z0-9._]+@example\.(com|org|net)", realistic_value("contact_email", {}, rng))
    assert re.fullmatch(r"2025-\d\d-\d\d", realistic_value("check_in_date", {}, rng))
    assert len(realistic_value("customer_name", {}, rng).split()) == 2
    for param in ("month", "query", "memory_dump_path", "foo", "notes"):
        value = realistic_value(param, {}, random.Random(7))
        assert not value.lower().startswith(("sample", "example")) and param not in value


def test_new_value_differs_from_the_current_one_and_avoids_terminal_statuses():
    db = {"orders": {"O1": {"status": "open", "qty": 2}, "O2": {"status": "shipped", "qty": 5}}}
    for seed in range(20):
        rng = random.Random(seed)
        status = new_value("status", {"enum": ["open", "shipped", "cancelled"]}, "open", db, rng,
                           avoid={"cancelled"}, default=lambda: "x")  # fmt: skip
        assert status == "shipped"
        qty = new_value("qty", {"type": "integer"}, 2, db, rng, default=lambda r=rng: r.randint(1, 9))
        assert isinstance(qty, int) and qty != 2
    assert new_value("status", {"enum": ["open"]}, "open", db, random.Random(0), default=lambda: "open") is None


def test_search_terms_come_from_stored_records_of_the_entity():
    db = {"books": {"B1": {"book_id": "B1", "title": "Dune Messiah"}}, "users": {"U1": {"name": "Ada Byron"}}}
    for seed in range(5):
        assert search_term("query", {"type": "string"}, db, "book", random.Random(seed)) in {"Dune", "Messiah"}
    assert search_term("limit", {"type": "integer"}, db, "book", random.Random(0)) is None


def test_a_search_term_selects_records_not_the_word_every_record_shares():
    items = {f"I{i}": {"item_id": f"I{i}", "name": f"{surname} Item"}
             for i, surname in enumerate(("Garcia", "Silva", "Okafor", "Garcia"))}  # fmt: skip
    terms = {search_term("query", {"type": "string"}, {"items": items}, "item", random.Random(seed))
             for seed in range(20)}  # fmt: skip
    assert terms == {"Silva", "Okafor", "Garcia"}  # "Item" finds all four; "Garcia" still finds two of them
    one = {"I1": {"item_id": "I1", "name": "Dune Item"}}  # one record: every word of it is selective
    assert search_term("query", {"type": "string"}, {"items": one}, "item", random.Random(0)) in {"Dune", "Item"}


def test_typed_fields_get_realistic_values_not_codename_fillers():
    rng = random.Random(3)
    assert re.fullmatch(r"\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}", realistic_value("cnpj", {}, rng))
    assert realistic_value("port", {}, rng).isdigit()
    assert "." in realistic_value("host", {}, rng)
    assert re.fullmatch(r"[A-Z0-9]{1,6}", realistic_value("ticker", {}, rng))
    for param in ("file_key", "holder_name", "title", "description", "mode"):
        words = realistic_value(param, {}, random.Random(5)).lower().split()
        assert not set(param.split("_")) <= set(words) and not any(w.startswith("#") for w in words), param


def test_a_typed_filter_takes_a_stored_value_of_its_shape_never_a_word_of_text():
    db = {"transactions": {"T1": {"id": "T1", "date": "2025-04-12", "memo": "Detailed monthly statement"}}}
    assert search_term("month", {"type": "string"}, db, "transaction", random.Random(0)) == "2025-04"
    assert search_term("date", {"type": "string"}, db, "transaction", random.Random(0)) == "2025-04-12"
    assert search_term("email", {"type": "string"}, db, "transaction", random.Random(0)) is None


def test_values_are_seeded():
    assert [realistic_value(p, {}, random.Random(9)) for p in ("email", "cnpj", "city")] == [
        realistic_value(p, {}, random.Random(9)) for p in ("email", "cnpj", "city")
    ]


def test_numbers_fall_in_ranges_their_names_suggest_and_respect_bounds():
    for seed in range(10):
        rng = random.Random(seed)
        assert 5 <= realistic_number("price", {"type": "number"}, rng) <= 500
        assert 2018 <= realistic_number("year", {"type": "integer"}, rng) <= 2025
        assert 1 <= realistic_number("quantity", {"type": "integer", "maximum": 3}, rng) <= 3
        assert realistic_number("amount", {"type": "number", "exclusiveMinimum": 600}, rng) > 600


def test_a_letters_only_typed_filter_never_takes_a_word_of_another_field():
    db = {"verses": {"V1": {"verse_id": "V1", "audio": "environment", "words": "performance"}}}
    assert search_term("language", {"type": "string"}, db, "verse", random.Random(0)) is None
    db["verses"]["V1"]["language"] = "ar"
    assert search_term("language", {"type": "string"}, db, "verse", random.Random(0)) == "ar"


def test_values_nothing_else_describes_come_from_the_tools_domain():
    from envgen.domain import domain_of
    from envgen.valuestats import is_person_name
    from tdg.values import tool_domain

    tool = {"name": "get_token_transfers", "description": "Get ERC-20 token transfers of a wallet address on an EVM "
            "chain, with the contract and block number.", "parameters": {"type": "object", "properties": {}}}
    domain = tool_domain(tool)
    assert {"evm", "crypto"} <= domain.kinds
    for seed in range(5):
        rng = random.Random(seed)
        assert re.fullmatch(r"0x[0-9a-f]{40}", realistic_value("address", {"type": "string"}, rng, domain))
        note = realistic_value("notes", {"type": "string"}, rng, domain)
        assert set(re.findall(r"[a-z]+", note.lower())) & {"token", "transfers", "contract", "block", "chain", "wallet", "address"}, note
        assert not is_person_name(realistic_value("name", {"type": "string"}, rng, domain))
        assert realistic_value("operation", {"type": "string"}, rng, domain) in domain.words  # not "himself"
    assert domain_of("", "", (tool,)) == domain


def test_every_value_a_schema_offers_counts_the_same_way_as_in_the_db():
    schema = {"type": "string", "description": "Mode to switch to (architect, ask, code, debug)"}
    assert {realistic_value("mode", schema, random.Random(s)) for s in range(20)} == {"architect", "ask", "code",
                                                                                      "debug"}  # fmt: skip
    assert realistic_value("x", {"type": "string", "default": "EUR", "examples": ["USD"]}, random.Random(0)) == "EUR"
