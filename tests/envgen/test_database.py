"""envgen.database: seeded, typed, internally consistent mock DBs; the LLM variant is validated."""

from __future__ import annotations

import json
import random
import re

import pytest

from envgen.config import EnvGenConfig
from envgen.database import check_database, sample_value, synthesize_database
from envgen.entities import ACTION_LOG, plan_environment
from envgen.refactor import refactor_toolset
from gustforge.errors import CodegenError
from gustforge.llm import LLMClient, LLMSettings
from tests.envgen._envgen_samples import refactored, sample_toolsets
from tests.fakes.openai_server import FakeOpenAIServer


def test_every_sample_db_is_consistent() -> None:
    for toolset in sample_toolsets():
        rt = refactor_toolset(toolset, EnvGenConfig())
        db = synthesize_database(rt, seed=3)
        assert check_database(plan_environment(rt.tools), db) == [], toolset.name
        assert db[ACTION_LOG] == {}


def test_deterministic_under_the_seed() -> None:
    rt = refactored("Acme Shop")
    assert synthesize_database(rt, seed=1) == synthesize_database(rt, seed=1)
    assert synthesize_database(rt, seed=1) != synthesize_database(rt, seed=2)


def test_layout_counts_and_foreign_keys() -> None:
    rt = refactored("Acme Shop")
    db = synthesize_database(rt, seed=0, records_per_entity=(3, 5))
    assert set(db) == {"products", "customers", "orders", "outbox", ACTION_LOG}
    for name in ("products", "customers", "orders", "outbox"):
        assert 3 <= len(db[name]) <= 5
    for key, order in db["orders"].items():
        assert order["order_id"] == key and key.startswith("ORD-")
        assert order["customer_id"] in db["customers"] and order["product_id"] in db["products"]
        assert 1 <= order["quantity"] <= 10
    categories = {p["category"] for p in db["products"].values()}
    assert categories <= {"books", "electronics", "garden", "toys"}


def test_records_fit_the_scenario() -> None:
    """Record shapes come from the whole toolset (descriptions, entity nouns), values fit entity and field."""
    db = synthesize_database(refactored("Acme Shop"), seed=0)
    product = next(iter(db["products"].values()))
    assert {"name", "price", "stock", "category"} <= set(product)  # get_product promises "price and stock"
    assert isinstance(product["price"], float) and isinstance(product["stock"], int)
    customer = next(iter(db["customers"].values()))
    assert "@" in customer["email"] and " " in customer["name"]  # a person's name, an e-mail address
    stock = synthesize_database(refactored("Stockroom"), seed=0)
    names = [w["name"] for w in stock["warehouses"].values()]
    assert all(not any(first in n for first in ("Alice", "Bruno", "Dana", "Ivan")) for n in names), names
    for toolset in ("Acme Shop", "Stockroom", "Harbor Clinic", "Ledger Bank"):
        rt = refactored(toolset)
        plan = plan_environment(rt.tools)
        for entity in plan.entities:
            assert len(entity.fields) >= 2, (toolset, entity.name, entity.fields)


def test_request_flags_are_not_record_fields() -> None:
    from data.models import RawTool
    from envgen.config import EnvGenConfig
    from envgen.refactor import refactor_toolset
    from tests.envgen._envgen_samples import sample

    toolset = sample("Acme Shop")
    flagged = RawTool(
        name="list_products",
        description="List products.",
        parameters={
            "type": "object",
            "properties": {"category": {"type": "string"}, "include_platform": {"type": "boolean"}},
        },
    )
    rt = refactor_toolset(toolset.model_copy(update={"tools": (flagged, *toolset.tools[1:])}), EnvGenConfig())
    db = synthesize_database(rt, seed=0)
    assert all("include_platform" not in record for record in db["products"].values())


def test_check_database_finds_problems() -> None:
    rt = refactored("Acme Shop")
    plan = plan_environment(rt.tools)
    db = synthesize_database(rt, seed=0)
    first = next(iter(db["orders"]))
    db["orders"][first]["customer_id"] = "CUS-999"
    db["orders"][first]["quantity"] = "many"
    db["products"] = {}
    problems = " | ".join(check_database(plan, db))
    assert "CUS-999" in problems and "'many' is not of type 'integer'" in problems and "products" in problems


@pytest.mark.parametrize(
    ("field", "schema", "check"),
    [
        ("email", {"type": "string"}, lambda v: v.rsplit("@", 1)[1] in ("example.com", "example.org", "example.net")),
        ("due", {"type": "string", "format": "date"}, lambda v: len(v) == 10 and v[4] == "-"),
        ("price", {"type": "number", "minimum": 600}, lambda v: v >= 600),
        ("kind", {"type": "string", "enum": ["a", "b"]}, lambda v: v in ("a", "b")),
        ("tags", {"type": "array", "items": {"type": "integer"}}, lambda v: all(isinstance(x, int) for x in v)),
        ("flag", {"type": "boolean"}, lambda v: isinstance(v, bool)),
    ],
)
def test_sample_value_respects_the_schema(field: str, schema: dict, check) -> None:
    assert check(sample_value(field, schema, random.Random(0)))


def test_llm_variant_is_validated() -> None:
    rt = refactored("Ledger Bank")
    offline = synthesize_database(rt, seed=0)
    good = {"collections": {k: v for k, v in offline.items() if k != ACTION_LOG}}
    bad = json.loads(json.dumps(good))
    next(iter(bad["collections"]["transactions"].values()))["account_id"] = "ACC-404"
    settings = LLMSettings(backend="openai", model="m", max_retries=0, max_repair_rounds=0)
    with (
        FakeOpenAIServer(lambda req: {"content": json.dumps(good)}) as server,
        LLMClient(settings.model_copy(update={"base_url": server.base_url})) as client,
    ):
        assert synthesize_database(rt, seed=0, client=client) == offline
        assert "Records per collection: 3-5" in server.requests[0]["messages"][1]["content"]
    with (
        FakeOpenAIServer(lambda req: {"content": json.dumps(bad)}) as server,
        LLMClient(settings.model_copy(update={"base_url": server.base_url})) as client,
    ):
        with pytest.raises(CodegenError, match="invalid_database: .*ACC-404"):
            synthesize_database(rt, seed=0, client=client)


def test_collections_keyed_by_one_natural_key_share_their_keys() -> None:
    """`scan_project(project_path)` and `get_progress_statistics(project_path)` address the same projects, so a path
    one returns names a record of the other (data can flow between the two calls of a golden trace)."""
    from data.models import RawTool
    from tests.envgen._envgen_samples import sample

    def lookup(name: str, description: str) -> RawTool:
        return RawTool(name=name, description=description,
                       parameters={"type": "object", "properties": {"project_path": {"type": "string"}},
                                   "required": ["project_path"]})  # fmt: skip

    toolset = sample("Acme Shop").model_copy(update={"name": "iOS migration", "tools": (
        lookup("scan_project", "Scan an iOS project for migration issues."),
        lookup("get_progress_statistics", "Get the migration progress statistics of a project."),
        lookup("evaluate_project_quality", "Evaluate the code quality of a project."),
    )})  # fmt: skip
    rt = refactor_toolset(toolset, EnvGenConfig())
    plan = plan_environment(rt.tools)
    keyed = [e.name for e in plan.entities if e.id_field == "project_path"]
    assert len(keyed) >= 2, [(e.name, e.id_field) for e in plan.entities]
    for seed in range(5):
        db = synthesize_database(rt, seed=seed)
        assert len({frozenset(db[name]) for name in keyed}) == 1, {name: sorted(db[name]) for name in keyed}
        assert check_database(plan, db) == []


def test_values_are_typed_by_field_and_never_codename_fillers():
    from envgen.fakes import field_tokens

    rng = random.Random(4)
    assert re.fullmatch(r"\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}", sample_value("cnpj", {"type": "string"}, rng))
    assert "@" in sample_value("contact_email", {"type": "string"}, rng)
    assert len(sample_value("holder_name", {"type": "string"}, rng).split()) >= 2
    employee_title = sample_value("title", {"type": "string"}, random.Random(1), 1, "employee")
    task_title = sample_value("title", {"type": "string"}, random.Random(1), 1, "task")
    assert employee_title != task_title  # a job title for a person, a work item's title for a task
    for field in ("file_key", "mode", "description", "title", "customer_name"):
        value = str(sample_value(field, {"type": "string"}, random.Random(2)))
        words = set(re.findall(r"\w+", value.lower()))
        assert not set(field_tokens(field)) <= words and "#" not in value, (field, value)


def test_counts_and_positions_are_whole_numbers_even_when_typed_number() -> None:
    rng = random.Random(0)
    for field in ("index", "from_index", "pid", "num", "page", "port"):
        value = sample_value(field, {"type": "number"}, rng)
        assert value == int(value), (field, value)
    assert sample_value("price", {"type": "number"}, random.Random(1)) != int(
        sample_value("price", {"type": "number"}, random.Random(1)))  # a price keeps its cents
    narrow = sample_value("index", {"type": "number", "minimum": 0.2, "maximum": 0.8}, rng)
    assert 0.2 <= narrow <= 0.8  # no whole number fits: the bounds win


def test_typed_values_do_not_depend_on_other_threads() -> None:
    """Faker is re-seeded per value; threads building toolsets at once must not share one instance (a Ray build
    and a local build of the same inputs differed)."""
    from concurrent.futures import ThreadPoolExecutor

    from envgen.fakes import typed_value

    fields = ("email", "full_name", "city", "company", "phone", "street_address") * 20

    def draw(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [str(typed_value(f, {"type": "string"}, rng)) for f in fields]

    alone = [draw(seed) for seed in range(8)]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(draw, range(8)))
    assert together == alone


def test_a_field_takes_the_values_its_schema_offers():
    schema = {"type": "string", "description": "Network ID (e.g., ethereum, solana)"}
    assert {sample_value("network_id", schema, random.Random(0), index) for index in range(1, 5)} == {
        "ethereum", "solana"}  # fmt: skip
    one = {"type": "string", "default": "unstable"}
    values = [sample_value("channel", one, random.Random(0), index) for index in range(1, 5)]
    assert values[0] == values[2] == "unstable" and values[1] != "unstable"  # other records differ: keys stay distinct
