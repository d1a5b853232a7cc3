"""Typed values by field name and by the field's own schema (envgen/fakes.py)."""

from __future__ import annotations

import random
import re

from envgen.fakes import plain_words, schema_examples, typed_value


def test_technical_fields_get_values_of_their_kind_not_plain_words():
    rng = random.Random(7)
    assert re.fullmatch(r"SES-\d{4}", typed_value("session_id", {}, rng))
    assert re.fullmatch(r"0x[0-9a-f]{64}", typed_value("transaction_hash", {}, rng))
    assert re.fullmatch(r"\d{13}", typed_value("barcode", {}, rng))
    assert typed_value("selector", {}, rng)[0] in "#.abdi"  # a CSS selector
    assert len(typed_value("schedule", {}, rng).split()) == 5  # a cron line
    assert typed_value("network", {}, rng) in ("ethereum", "solana", "polygon", "arbitrum", "base", "bsc")
    assert typed_value("question", {}, rng).endswith("?")
    for field in ("session_id", "selector", "schedule", "network", "question", "expression", "input", "package_name"):
        assert typed_value(field, {}, rng) not in plain_words(field), field


def test_a_schema_offers_its_own_examples():
    assert schema_examples({"description": "Network ID (e.g., ethereum, solana)"}) == ("ethereum", "solana")
    assert schema_examples({"description": "Parameter language (e.g., 'en', 'ar', 'fr-CA')"}) == ("en", "ar", "fr-CA")
    assert schema_examples({"default": "unstable", "examples": ["stable"]}) == ("unstable", "stable")
    assert schema_examples({"default": "", "description": "The input string to hash"}) == ()


def test_a_description_lists_its_values_in_several_ways():
    assert schema_examples({"description": "Mode to switch to (architect, ask, code, debug)"}) == (
        "architect", "ask", "code", "debug")  # fmt: skip
    assert schema_examples({"description": "Start time (e.g 2025-05-22T23:00:00Z)."}) == ("2025-05-22T23:00:00Z",)
    assert schema_examples({"default": "1d", "description": '周期，例如 "1d", "1m", "5m" 等'}) == ("1d", "1m", "5m")
    assert schema_examples({"description": "The slug (see docs) to get"}) == ()


def test_more_fields_of_a_known_kind():
    rng = random.Random(2)
    assert typed_value("gdb_pid", {}, rng).isdigit()
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", typed_value("slug", {}, rng))
    assert typed_value("project_root", {}, rng).startswith("/")
    assert typed_value("decision", {}, rng).endswith(".") and " " in typed_value("use_case", {}, rng)


def test_first_use_from_many_threads_at_once_never_deadlocks_on_faker_imports():
    """A corpus build lost two environments to `_DeadlockError` / a half-imported `faker` when threads imported
    Faker's modules at once; the first imports are serialized."""
    import subprocess
    import sys

    code = ("import random, threading\nfrom envgen.fakes import entity_name, typed_value\nfrom envgen.domain import "
            "domain_of\nd = domain_of('Shop', 'Orders of a shop.')\nerrors = []\n"
            "def run(i):\n    try:\n        entity_name(d, 'pool', i); typed_value('cnpj', {}, random.Random(i))\n"
            "        typed_value('email', {}, random.Random(i))\n    except Exception as exc:\n        errors.append(exc)\n"
            "ts = [threading.Thread(target=run, args=(i,)) for i in range(16)]\n[t.start() for t in ts]\n"
            "[t.join() for t in ts]\nassert not errors, errors\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
