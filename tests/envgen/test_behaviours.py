"""Behaviour families on real Toucan servers: tools compute or change state, and their suites kill seeded bugs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from data.models import RawTool, Toolset
from envgen.build import build_environment
from envgen.codegen import generate_tools_source
from envgen.config import EnvGenConfig
from envgen.database import synthesize_database
from envgen.entities import plan_environment
from envgen.ingest import read_toolsets
from envgen.mutation import applicable, score_suite
from envgen.refactor import refactor_toolset
from envgen.runtime import Environment
from envgen.testgen import generate_tests_source
from gustforge.sandbox import SandboxLimits, SandboxPool, SandboxWorker
from tests.envgen._envgen_samples import sample

FAST = EnvGenConfig(sandbox_cpu_seconds=2, sandbox_memory_mb=256, sandbox_wall_seconds=5)
LIMITS = SandboxLimits(cpu_seconds=2, memory_mb=256, wall_seconds=5)


@pytest.fixture(scope="module")
def toucan(corpora_dir: Path) -> dict[str, Toolset]:
    ingest = read_toolsets(corpora_dir / "toucan" / "toucan_mcp_servers.remote_valid.jsonl", cfg=FAST)
    return {t.name: t for t in ingest.toolsets}


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1, limits=LIMITS) as p:
        yield p


@pytest.fixture(scope="module")
def worker() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as w:
        yield w


def _env(toolset: Toolset, pool: SandboxPool) -> Environment:
    result = build_environment(toolset, FAST, sandbox_pool=pool)
    assert result.artifacts is not None, result.quarantine
    a = result.artifacts
    return Environment.from_parts(a.env_id, a.schemas, a.db, a.tools_source, a.manifest, tests_source=a.tests_source)


def test_calculator_computes(toucan: dict[str, Toolset], pool: SandboxPool) -> None:
    env = _env(toucan["Advanced Calculator Server"], pool)
    assert set(env.manifest.behaviours.values()) == {"math"} and env.manifest.mutation_score == 1.0
    with env.session(LIMITS) as session:
        before = session.db()
        assert session.call("add", {"a": 3, "b": 3})["result"] == 6
        assert session.call("div", {"a": 7, "b": 2})["result"] == 3.5
        assert session.call("div", {"a": 1, "b": 0})["status"] == "error"
        assert session.call("square_root", {"x": 16})["result"] == 4
        assert session.call("square_root", {"x": -1})["status"] == "error"
        assert session.call("factorial", {"n": 5})["result"] == 120
        assert session.call("gcd", {"a": 12, "b": 18})["result"] == 6
        assert session.call("quadratic_roots", {"a": 1, "b": -3, "c": 2})["result"] == [1, 2]
        assert session.db() == before  # math reads nothing and writes nothing


def test_token_transfer_moves_the_amount(toucan: dict[str, Toolset], pool: SandboxPool) -> None:
    env = _env(toucan["GOAT"], pool)
    assert env.manifest.behaviours["transfer"] == "payment" and env.manifest.behaviours["transfer_from"] == "payment"
    holders = list(env.initial_db["balances"])
    own, other = holders[0], holders[1]
    start = {h: env.initial_db["balances"][h]["balance"] for h in holders}
    with env.session(LIMITS) as session:
        out = session.call("transfer", {"token_address": "0xtoken", "to": other, "amount": "2.5"})
        assert out["status"] == "success", out
        balances = session.db()["balances"]
        assert balances[own]["balance"] == round(start[own] - 2.5, 2)
        assert balances[other]["balance"] == round(start[other] + 2.5, 2)
        assert all(balances[h] == env.initial_db["balances"][h] for h in holders[2:])
        after = session.db()
        assert session.call("transfer", {"token_address": "0xt", "to": "0xnobody", "amount": "1"})["status"] == "error"
        assert session.call("transfer", {"token_address": "0xt", "to": other, "amount": "1e12"})["status"] == "error"
        assert session.db() == after


def test_stockroom_transfer_moves_the_item(pool: SandboxPool) -> None:
    env = _env(sample("Stockroom"), pool)
    item_id, item = next(iter(env.initial_db["items"].items()))
    target = next(w for w in env.initial_db["warehouses"] if w != item["warehouse_id"])
    with env.session(LIMITS) as session:
        out = session.call("transfer_item", {"item_id": item_id, "warehouse_id": target})
        assert out["status"] == "success" and out["previous"] == item["warehouse_id"]
        db = session.db()
        assert db["items"][item_id] == {**item, "warehouse_id": target}
        assert {k: v for k, v in db.items() if k != "items"} == {
            k: v for k, v in env.initial_db.items() if k != "items"
        }
        assert session.call("transfer_item", {"item_id": item_id, "warehouse_id": "WAR-404"})["status"] == "error"


@pytest.mark.parametrize(
    ("server", "tool", "edit"),
    [  # seeded bugs the harness-only suites let through: no validation inside the tool, filters ignored
        ("Advanced Calculator Server", "mul", ("    problem = _check_args(spec, kwargs)\n", "    problem = None\n")),
        ("DexPaprika", "get_network_dexes",
         ("    limit = kwargs.get(spec[\"limit\"]) if spec[\"limit\"] else None\n", "    limit = None\n")),
        ("Stockroom", "list_items", ("    if isinstance(stored, str) and isinstance(wanted, str):\n        return wanted",
                                     "    if isinstance(stored, str) and isinstance(wanted, str):\n        return True or wanted")),
    ],
)  # fmt: skip
def test_suites_kill_what_survived_before(
    toucan: dict[str, Toolset], worker: SandboxWorker, server: str, tool: str, edit: tuple[str, str]
) -> None:
    toolset = toucan.get(server) or sample(server)
    rt = refactor_toolset(toolset, FAST)
    db = synthesize_database(rt, seed=0)
    source = generate_tools_source(rt, db)
    schemas = {t.name: {"parameters": t.parameters, "response": t.response} for t in rt.tools}
    tests = generate_tests_source(rt, db, seed=0)
    worker.load(source, db)
    assert worker.run_tests(tests, schemas).passed
    old, new = edit
    assert old in source
    worker.load(source.replace(old, new, 1), db)
    report = worker.run_tests(tests, schemas)
    assert not report.passed and tool in {c.tool for c in report.failures}, [c.name for c in report.failures]


def test_mutation_operators_follow_the_family(toucan: dict[str, Toolset]) -> None:
    rt = refactor_toolset(sample("Stockroom"), FAST)
    db = synthesize_database(rt, seed=0)
    plan = plan_environment(rt.tools)
    ops = {t.name: applicable(t, p, plan, db) for t, p in zip(rt.tools, plan.tools, strict=True)}
    assert ops["transfer_item"] == ["no_validation", "state_skipped", "wrong_record", "family_swap"]
    assert ops["get_item"] == ["no_validation", "wrong_record", "empty_result", "family_swap"]
    assert "filters_ignored" in ops["list_items"] and "state_skipped" not in ops["list_items"]


def test_score_counts_kills_and_a_hollow_suite_scores_zero(worker: SandboxWorker) -> None:
    rt = refactor_toolset(sample("Stockroom"), FAST)
    db = synthesize_database(rt, seed=0)
    source = generate_tools_source(rt, db)
    report = score_suite(rt, db, source, worker, seed=0)
    assert report.score == 1.0 and report.killed == report.total > 10
    assert {m.operator for m in report.mutants} == {
        "no_validation", "filters_ignored", "state_skipped", "wrong_record", "empty_result", "family_swap"
    }  # fmt: skip
    hollow = "".join(f"def test_{t.name}_runs(env):\n    env.call_tool({t.name!r}, {{}})\n" for t in rt.tools)
    weak = score_suite(rt, db, source, worker, seed=0, tests_source=hollow)
    assert weak.score == 0.0 and weak.total == report.total
    assert all(m.by == "" for m in weak.mutants)  # every mutant ran its tool's (hollow) test and survived


def test_families_are_chosen_from_name_schema_and_description() -> None:
    def tool(name: str, props: dict, required: tuple[str, ...] = (), description: str = "") -> RawTool:
        return RawTool(name=name, description=description,
                       parameters={"type": "object", "properties": props, "required": list(required)})  # fmt: skip

    num, text = {"type": "number"}, {"type": "string"}
    toolset = Toolset(
        toolset_id="t", name="mixed", provenance=sample("Stockroom").provenance,
        tools=(
            tool("multiply", {"x": num, "y": num}, ("x", "y")),
            tool("convert_currency", {"amount": num, "from_currency": text, "to_currency": text}, ("amount",)),
            tool("count_words", {"text": text}, ("text",)),
            tool("list_products", {"category": text, "limit": {"type": "integer"}, "sort_by": text}),
            tool("get_product", {"product_id": text}, ("product_id",), "Get a product with price and stock."),
            tool("cancel_order", {"order_id": text}, ("order_id",)),
            tool("send_email", {"to_email": text, "body": text}, ("to_email", "body")),
            tool("get_weather", {"city": text}, ("city",)),
        ),
    )  # fmt: skip
    rt = refactor_toolset(toolset, FAST)
    families = {p.name: p.family for p in plan_environment(rt.tools).tools}
    assert families == {
        "multiply": "math", "convert_currency": "conversion", "count_words": "text", "list_products": "search",
        "get_product": "get_by_id", "cancel_order": "status_transition", "send_email": "messaging",
        "get_weather": "lookup",
    }  # fmt: skip
    products = plan_environment(rt.tools).entity("products")
    assert products is not None and {"price", "stock"} <= set(products.fields)


def test_an_echoing_implementation_fails_the_suite(worker: SandboxWorker) -> None:
    """What an LLM's code is judged by: a module whose tools only log and echo no longer passes."""
    rt = refactor_toolset(sample("Stockroom"), FAST)
    db = synthesize_database(rt, seed=0)
    echo = "".join(
        f"\n\ndef {t.name}(db, **kwargs):\n    db.setdefault('action_log', {{}})[str(len(db['action_log']))] = kwargs\n"
        f"    return {{'status': 'success', 'message': 'done', 'result': {{'arguments': kwargs}}}}\n"
        for t in rt.tools
    )
    schemas = {t.name: {"parameters": t.parameters, "response": t.response} for t in rt.tools}
    worker.load(echo, db)
    report = worker.run_tests(generate_tests_source(rt, db, seed=0), schemas)
    failing = {c.tool for c in report.failures}
    assert failing == {t.name for t in rt.tools}, failing  # every tool's tests notice the echo
