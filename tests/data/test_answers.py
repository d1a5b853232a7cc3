"""Answer facts: one matcher for the reward, `gust eval gust` and the teacher."""

from __future__ import annotations

import numpy as np

from data.answers import answer_complete, answer_coverage, fact_found, normalize_facts


def test_facts_are_found_case_and_space_insensitively():
    reply = "Your order  ORD-1001 is now PROCESSING; the refund of 12.50 USD is on its way."
    assert fact_found("ord-1001", reply) and fact_found("processing", reply) and fact_found("12.5", reply)
    assert not fact_found("ORD-1002", reply)


def test_numbers_do_not_match_inside_longer_numbers():
    assert fact_found("3", "You have 3 open tickets.")
    assert fact_found("3", "Total: 3.0 items") and fact_found("3.0", "You have 3 items")
    assert not fact_found("3", "Ticket 1234 is open") and not fact_found("12", "it costs 12.5")


def test_coverage_and_completeness():
    facts = normalize_facts(["C-1", "delivered", ""])
    assert facts == ("c-1", "delivered")
    assert answer_coverage(facts, "C-1's order was delivered.") == 1.0
    assert answer_coverage(facts, "I did it.") == 0.0 and not answer_complete(facts, "C-1 only")
    assert answer_complete((), "") and answer_coverage((), "") == 1.0


def test_normalize_accepts_parquet_columns():
    assert normalize_facts(np.array(["A", "b"])) == ("a", "b")
    assert normalize_facts(None) == normalize_facts("") == normalize_facts(7) == ()
