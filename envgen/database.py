"""Mock database synthesis (ToolVerse App. B.1): 3-5 coherent records per inferred entity, seeded.

Layout (see `envgen.entities`): `{collection: {str(id): record}}` plus an empty `ACTION_LOG` collection. Records
carry their own id field; every foreign key names an existing record; enum, format and bounds of the parameter
schemas are respected, so the outputs of query tools are valid inputs of update/action tools.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from data.models import RefactoredToolset
from envgen import prompts
from envgen.behaviours import BALANCES, CURRENCIES, PERSON_NOUNS
from envgen.domain import Domain, domain_of, stable_index
from envgen.entities import ACTION_LOG, EXCHANGE_RATES, EntitySpec, EnvPlan, plan_environment, record_schema
from envgen.fakes import (
    CITIES,
    ENS_NAMES,
    FREE_TEXT_TOKENS,
    domain_text,
    entity_name,
    field_kind,
    field_tokens,
    plain_value,
    schema_examples,
    typed_value,
)
from gustforge.errors import CodegenError, LLMError
from gustforge.llm import LLMClient, LLMRole, run_role
from gustforge.schemas import safe_validator

__all__ = [
    "synthesize_database",
    "check_database",
    "sample_value",
    "format_id",
    "DATABASE_ROLE",
]

logger = logging.getLogger(__name__)

_FIRST = ("Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Julia", "Kofi", "Lena")
_LAST = ("Smith", "Okafor", "Li", "Novak", "Garcia", "Haddad", "Ito", "Kowalski", "Mensah", "Silva", "Berg")
_CITIES = CITIES[:10]

Generator = Callable[[random.Random, int, str], Any]


# Ordered (regex on the field name, generator) rules for string fields `typed_value` has no rule for.
_STRING_RULES: tuple[tuple[re.Pattern[str], Generator], ...] = (
    (re.compile(r"(^|_)(condition|weather)$"), lambda r, i, f: r.choice(("sunny", "cloudy", "rain", "snow", "windy"))),
    (re.compile(r"(^|_)(severity|priority)$"), lambda r, i, f: r.choice(("low", "medium", "high"))),
    (re.compile(r"(^|_)(role|department)$"), lambda r, i, f: r.choice(("engineering", "sales", "support", "finance"))),
    (re.compile(r"(^|_)(license)$"), lambda r, i, f: r.choice(("MIT", "Apache-2.0", "GPL-3.0", "BSD-3-Clause"))),
    (re.compile(r"_id$"), lambda r, i, f: f"{f[:-3][:3].upper()}-{r.randint(100, 999)}"),
)
_NUMBER_RULES: tuple[tuple[re.Pattern[str], tuple[float, float]], ...] = (
    (re.compile(r"price|amount|cost|balance|total|fee|salary"), (5.0, 500.0)),
    (re.compile(r"rating|score"), (1.0, 5.0)),
    (re.compile(r"(^|_)lat"), (-60.0, 60.0)),
    (re.compile(r"(^|_)(lon|lng)"), (-150.0, 150.0)),
    (re.compile(r"percent|rate"), (0.0, 100.0)),
)
_INT_RULES: tuple[tuple[re.Pattern[str], tuple[int, int]], ...] = (
    (re.compile(r"(_id|_index|_number|_no)$"), (1, 4)),  # shared by several records, like real foreign keys
    (re.compile(r"year"), (2018, 2025)),
    (re.compile(r"(^|_)age$"), (18, 80)),
    (re.compile(r"quantity|count|stock|seats|capacity|guests|copies|nights|days"), (1, 20)),
    (re.compile(r"page|limit|num|max|top"), (1, 10)),
)


_WHOLE = re.compile(  # names of counts, positions and ids: whole numbers even where the schema says "number"
    r"(^|_)(index|idx|pid|id|port|count|num|number|no|page|limit|offset|year|age|quantity|position|rank|level|"
    r"step|days|nights|seats|guests|copies|stock|top|max|min|version|revision|seq|sequence)s?$"
)


def _bounded(lo: float, hi: float, schema: dict[str, Any]) -> tuple[float, float]:
    low = schema.get("minimum", lo)
    high = schema.get("maximum", hi)
    if low > high:
        low, high = (schema.get("minimum", lo), schema.get("minimum", lo) + (hi - lo))
    return low, max(low, high)


_CHAINS = ("Ethereum", "Polygon", "Arbitrum One", "Optimism", "Base", "BNB Smart Chain")  # chain ids 1, 137, ...
_ENTITY_NAMES = {  # entity noun -> realistic names of its records
    "chain": _CHAINS,
    "blockchain": _CHAINS,
    "network": _CHAINS,
    "pool": ("ETH/USDC", "WBTC/ETH", "DAI/USDC", "UNI/ETH", "LINK/ETH", "USDT/USDC"),
    "coin": ("Bitcoin", "Ethereum", "Solana", "Cardano", "Polkadot", "Litecoin"),
    "token": ("USDC", "Chainlink", "Uniswap", "Aave", "Maker", "Dai"),
    "crypto": ("Bitcoin", "Ethereum", "Solana", "Cardano", "Polkadot", "Litecoin"),
    "language": ("English", "Spanish", "Arabic", "Japanese", "Swahili", "German"),
    "country": ("Portugal", "Japan", "Kenya", "Canada", "Germany", "Peru"),
    "city": _CITIES,
    "location": _CITIES,
    "station": tuple(f"{c} Central" for c in _CITIES),
    "company": ("Acme Corp", "Globex", "Initech", "Umbrella Labs", "Stark Industries", "Wayne Logistics"),
    "product": ("Ceramic Mug", "Trail Backpack", "Desk Lamp", "Wireless Mouse", "Garden Hose", "Yoga Mat"),
    "model": ("gpt-4o", "llama-3-70b", "mistral-large", "claude-3-haiku", "gemma-2-9b", "qwen2-72b"),
    "package": ("lodash", "express", "react", "axios", "chalk", "zod"),
    "repository": ("acme/api", "acme/web", "octo/cli", "octo/docs", "lab/engine", "lab/tools"),
    "edition": ("Sahih International", "Pickthall", "Yusuf Ali", "Muhsin Khan", "Hilali", "Clear Quran"),
    "department": ("Engineering", "Sales", "Finance", "Customer Support", "Marketing", "Legal"),
    "team": ("Platform", "Mobile", "Data", "Growth", "Payments", "Design"),
    "project": (
        "Website Redesign",
        "Billing Migration",
        "Mobile App v2",
        "Data Warehouse",
        "Office Move",
        "CRM Rollout",
    ),
    "hotel": (
        "Seaside Inn",
        "Grand Central Hotel",
        "Harbor View Suites",
        "Old Town Lodge",
        "Parkside Plaza",
        "Riverside Hotel",
    ),
    "restaurant": (
        "Casa Lupita",
        "Blue Fin Sushi",
        "The Green Fork",
        "Trattoria Roma",
        "Spice Route",
        "Le Petit Bistro",
    ),
    "course": (
        "Intro to Python",
        "Data Analysis 101",
        "Public Speaking",
        "Spanish A1",
        "UX Fundamentals",
        "Statistics I",
    ),
    "category": ("Electronics", "Garden", "Kitchen", "Outdoor", "Office", "Books"),
    "warehouse": ("North Depot", "Harbor Warehouse", "East Hub", "Central Stores", "Riverside Yard", "Airport DC"),
}


def _person(entity: str | None) -> bool:
    return bool(entity) and (entity in PERSON_NOUNS or entity.split("_")[-1] in PERSON_NOUNS)  # type: ignore[union-attr]


def _entity_name(entity: str | None, rng: random.Random, index: int, domain: Domain | None = None) -> str:
    """A record's name: a person's name for a person, the kind's real names (chains, coins, hotels), else a name
    composed from the domain's words ("Transfer Pool") — never "<Surname> <Entity>"."""
    if _person(entity):
        return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
    head = (entity or "").split("_")[-1]
    if domain is not None and "evm" in domain.kinds and head in ("name", "ens", "domain"):
        return ENS_NAMES[(index - 1) % len(ENS_NAMES)]  # a chain's names are ENS names
    names = _ENTITY_NAMES.get(head) or _ENTITY_NAMES.get(entity or "")
    if names:
        return names[(index - 1) % len(names)]
    return entity_name(domain or domain_of(entity or "record"), entity or "record", index)


def _string(
    field: str, schema: dict[str, Any], rng: random.Random, index: int, entity: str | None = None,
    domain: Domain | None = None,
) -> str:  # fmt: skip
    if field in ("name", "full_name", "display_name"):
        return _entity_name(entity, rng, index, domain)
    if field in ("title", "job_title", "position", "role") and _person(entity):
        return typed_value("job", {}, rng) or "Analyst"  # an employee's title is a job title
    examples = schema_examples(schema)  # the schema's own default / examples / "e.g." values come first
    if len(examples) > 1 or (examples and index % 2):  # one offered value: every other record, so keys differ
        return examples[(index - 1) % len(examples)]
    if domain is not None and field_kind(field, schema, domain) is None and entity is not None:
        tokens = set(field_tokens(field))
        if field == "title":
            return domain_text("title", domain, rng, noun=entity)
        if tokens & {"description", "details", "summary", "overview", "about"}:
            return domain_text("description", domain, rng, noun=entity)  # "Pool covering token transfers and ..."
    if (value := typed_value(field, schema, rng, index=index, domain=domain)) is not None:
        return value
    for pattern, generate in _STRING_RULES:
        if pattern.search(field):
            return str(generate(rng, index, field))
    if examples:
        return examples[0]  # the one value the schema offers, shared, rather than a word it never uses
    if domain is not None and re.search(r"(^|_)(type|kind)$", field):
        return domain.word(index // 2 + stable_index(field), avoid=field_tokens(field))  # "aggregation", not "premium"
    return plain_value(field, rng, index=index, domain=domain)  # a few values shared across records (filters find two)


_DOCUMENT_FIELDS = ("name", "category", "description", "created_at")


def sample_value(
    field: str, schema: dict[str, Any], rng: random.Random, index: int = 1, entity: str | None = None,
    domain: Domain | None = None,
) -> Any:  # fmt: skip
    """A plausible value for `field` that is valid against its (normalized) JSON schema.

    Args:
        field: field or parameter name; drives realistic values (emails, prices, dates, ...).
        schema: the field's JSON schema (`type`, optional `enum`, `format`, `minimum`/`maximum`, `items`).
        rng: the random generator (the caller's seed).
        index: record number, used to make values distinct.
        entity: singular noun of the record's collection (a warehouse's name is a warehouse name).
        domain: the environment's domain (`envgen.domain.domain_of`): free text, names and domain formats
            (0x addresses, chain ids, SQL) come from it.

    Returns:
        A JSON value.
    """
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    kind = schema.get("type", "string")
    name = field.lower()
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "integer":
        lo, hi = next((b for p, b in _INT_RULES if p.search(name)), (1, 100))
        low, high = _bounded(lo, hi, schema)
        return rng.randint(int(low), int(max(low, high)))
    if kind == "number" and not any(p.search(name) for p, _ in _NUMBER_RULES) and _WHOLE.search(name):
        whole = sample_value(field, {**schema, "type": "integer"}, rng, index, entity, domain)  # not 27.51
        if schema.get("minimum", whole) <= whole <= schema.get("maximum", whole):
            return whole
    if kind == "number":
        lo, hi = next((b for p, b in _NUMBER_RULES if p.search(name)), (1.0, 100.0))
        low, high = _bounded(lo, hi, schema)
        return round(min(high, max(low, rng.uniform(low, high))), 2)
    if kind == "array":
        item = schema.get("items") or {"type": "string"}
        count = rng.randint(max(1, int(schema.get("minItems", 1))), max(1, min(2, int(schema.get("maxItems", 2)))))
        return [sample_value(singular_of(field), item, rng, index * 10 + k, None, domain) for k in range(1, count + 1)]
    if kind == "object":
        props = schema.get("properties") or {}
        if not props and schema.get("additionalProperties") is not False:  # a free-form document is not {}
            props = {key: {"type": "string"} for key in _DOCUMENT_FIELDS}
        return {key: sample_value(key, sub, rng, index, singular_of(field), domain) for key, sub in props.items()}
    return _string(name, schema, rng, index, entity, domain)


def singular_of(field: str) -> str:
    return field[:-1] if field.endswith("s") and len(field) > 3 else field


def format_id(entity: EntitySpec, number: int) -> str | int:
    """The id of the `number`-th record (`ORD-001`, or `1` for integer ids)."""
    return number if entity.id_type == "integer" else f"{entity.id_prefix}-{number:03d}"


def _natural_ids(entity: EntitySpec, rng: random.Random, count: int, domain: Domain | None = None) -> list[str | int]:
    if entity.name == EXCHANGE_RATES:
        return list(CURRENCIES)[: max(count, 4)]
    if entity.name == BALANCES:
        return [f"0x{rng.getrandbits(160):040x}" for _ in range(max(count, 2))]
    schema = entity.id_schema or ({"type": "integer"} if entity.id_type == "integer" else {"type": "string"})
    if schema.get("enum"):
        return list(dict.fromkeys(schema["enum"]))[: max(count, 2)]
    ids: list[str | int] = []
    for index in range(1, count * 4 + 1):
        value = sample_value(entity.id_field, schema, rng, index, entity.singular, domain)
        if value not in ids:
            ids.append(value)
        if len(ids) == count:
            break
    return ids


def _shared_pool(entity: EntitySpec, pools: dict[tuple[str, str], list[str | int]]) -> list[str | int] | None:
    """The keys an earlier collection keyed by the same natural key already holds, when they fit this one."""
    pool = pools.get((entity.id_field, entity.id_type))
    schema = entity.id_schema or {"type": entity.id_type}
    if pool is None or entity.name in (EXCHANGE_RATES, BALANCES):
        return None
    return pool if all(_fits(value, schema) for value in pool) else None


def _well_known_ids(entity: EntitySpec, rng: random.Random, count: int, domain: Domain | None) -> list[str] | None:
    """Ids a real user would give for a synthetic-keyed collection whose key has well-known values (chain id "1",
    "137", ...): then those, so a plausible call finds its record; None otherwise."""
    if domain is None or entity.id_type != "string" or field_kind(entity.id_field, {}, domain) != "chain_id":
        return None
    return [str(typed_value(entity.id_field, {}, rng, index=n, domain=domain)) for n in range(1, count + 1)]


def _ids(
    plan: EnvPlan, rng: random.Random, low: int, high: int, domain: Domain | None = None
) -> dict[str, list[str | int]]:
    """Record ids per collection. Collections keyed by the same natural key (`project_path`, `city`) share one
    pool of keys, so a value one tool returns names a record of the next (`scan_project` then
    `get_progress(project_path)`): that is what makes data flow between calls in the golden traces."""
    ids: dict[str, list[str | int]] = {}
    pools: dict[tuple[str, str], list[str | int]] = {}
    for entity in sorted(plan.entities, key=lambda e: e.natural_key):  # synthetic ids first: lookups may key on them
        count = rng.randint(low, high)
        if entity.key_source in ids and not plan.entity(entity.key_source).natural_key:  # type: ignore[union-attr]
            source = ids[entity.key_source]
            ids[entity.name] = [v if entity.id_type == "integer" else str(v) for v in source]
        elif entity.natural_key:
            shared = _shared_pool(entity, pools)
            ids[entity.name] = list(shared) if shared is not None else _natural_ids(entity, rng, count, domain)
            pools.setdefault((entity.id_field, entity.id_type), ids[entity.name])
        else:
            known = _well_known_ids(entity, rng, count, domain)
            ids[entity.name] = list(known) if known else [format_id(entity, n) for n in range(1, count + 1)]
    return ids


def _field_value(
    entity: EntitySpec, field: str, schema: dict[str, Any], rng: random.Random, index: int, domain: Domain | None
) -> Any:
    if entity.name == EXCHANGE_RATES:
        return None
    if field == "status" and schema.get("enum"):
        return schema["enum"][(index - 1) % len(schema["enum"])]  # every state is represented
    if field in ("balance",) and schema.get("type") in ("number", "integer"):
        return round(rng.uniform(200, 5000), 2)
    return sample_value(field, schema, rng, index, entity.singular, domain)


_DISTINCT_TOKENS = FREE_TEXT_TOKENS | {"title", "name", "filename", "path", "file", "subject", "headline"}


def _distinct_value(
    entity: EntitySpec, field: str, schema: dict[str, Any], rng: random.Random, index: int, collection: dict[str, Any],
    domain: Domain | None = None,
) -> Any:  # fmt: skip
    """A field value, re-drawn (up to 3 times) when another record of the collection already has it: distinct
    attributes let a task single out one record of a list ("the file named notes.txt")."""
    value = _field_value(entity, field, schema, rng, index, domain)
    if not set(field_tokens(field)) & _DISTINCT_TOKENS:
        return value  # a short attribute (category, network) is shared on purpose: filters find several records
    taken = {repr(r.get(field)) for r in collection.values()}
    for _ in range(3):
        if repr(value) not in taken or not isinstance(value, str):
            break
        value = _field_value(entity, field, schema, rng, index, domain)
    return value


def _records(
    entity: EntitySpec, ids: dict[str, list[str | int]], rng: random.Random, shared: dict[str, list[Any]],
    domain: Domain | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Records of one collection; a field named like a lookup's natural key (`city`) takes one of its keys."""
    collection: dict[str, Any] = {}
    for index, record_id in enumerate(ids[entity.name], start=1):
        record: dict[str, Any] = {entity.id_field: record_id}
        if entity.name == EXCHANGE_RATES:
            record.update(name=str(record_id), rate_to_usd=CURRENCIES[str(record_id)])
            collection[str(record_id)] = record
            continue
        for field, schema in entity.fields.items():
            target = entity.refs.get(field)
            keys = [k for k in shared.get(field, []) if _fits(k, schema)]
            if field in ("name", "title", "label") and _ENTITY_NAMES.get(entity.singular.split("_")[-1]):
                keys = []  # a chain is named like a chain, not after another collection's keys
            if target is None and keys:
                record[field] = rng.choice(keys)
            elif target is None:
                record[field] = _distinct_value(entity, field, schema, rng, index, collection, domain)
            else:  # a string-typed key to an integer-keyed collection holds the key's text
                value = rng.choice(ids[target])
                record[field] = str(value) if schema.get("type") == "string" else value
        collection[str(record_id)] = record
    return collection


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type", "string")
    if schema.get("enum") and value not in schema["enum"]:
        return False
    return (kind == "string" and isinstance(value, str)) or (kind == "integer" and type(value) is int)


def _offline(
    plan: EnvPlan, seed: int, records_per_entity: tuple[int, int], domain: Domain | None = None
) -> dict[str, Any]:
    # the domain joins the seed: two environments built with one seed draw different values (no shared address)
    rng = random.Random(f"{seed}:{domain.label if domain is not None else ''}")
    ids = _ids(plan, rng, *records_per_entity, domain)
    shared = {e.id_field: ids[e.name] for e in plan.entities if e.natural_key and e.name != EXCHANGE_RATES}
    db: dict[str, Any] = {
        entity.name: _records(entity, ids, rng, {k: v for k, v in shared.items() if k != entity.id_field}, domain)
        for entity in plan.entities
    }
    _link_attributes(plan, db)
    db[ACTION_LOG] = {}
    return db


def _owner_field(field: str, owner: EntitySpec) -> str | None:
    """The field of `owner` that a field named after it holds (`pool_address` -> pools.pool_address or
    pools.address, `edition_name` -> editions.name); None when `field` does not name `owner`."""
    tokens = field_tokens(field)
    head = field_tokens(owner.singular)
    if len(tokens) <= len(head) or tokens[: len(head)] != head:
        return None
    rest = "_".join(tokens[len(head):])
    for candidate in (field, rest):
        if candidate in owner.fields and candidate != owner.id_field and owner.fields[candidate].get("type") in (
            "string", "integer",
        ):  # fmt: skip
            return candidate
    return None


def _link_attributes(plan: EnvPlan, db: dict[str, Any]) -> None:
    """Make a field that names another collection's attribute hold that attribute's values (transactions'
    `pool_address` is the address of a stored pool, a manzil's `edition_name` the name of a stored edition), in
    turn, so every owner value is referenced: a value one tool lists then finds its records with the next tool.
    Foreign keys to ids (`refs`) and natural keys are linked already; this covers attributes."""
    entities = {e.name: e for e in plan.entities if e.name not in (EXCHANGE_RATES, BALANCES)}
    for entity in entities.values():
        for field, schema in entity.fields.items():
            if field in entity.refs or field == entity.id_field:
                continue
            owners = [(o, f) for o in entities.values() if o.name != entity.name
                      and (f := _owner_field(field, o)) is not None]  # fmt: skip
            if len(owners) != 1:
                continue
            owner, owner_field = owners[0]
            values = [r[owner_field] for r in db.get(owner.name, {}).values()
                      if isinstance(r, Mapping) and _fits(r.get(owner_field), schema)]  # fmt: skip
            if not values:
                continue
            for index, record in enumerate(db.get(entity.name, {}).values()):
                if isinstance(record, dict) and field in record:
                    record[field] = values[index % len(values)]


def check_database(plan: EnvPlan, db: dict[str, Any]) -> list[str]:
    """Problems of a DB against the plan (missing collections, key/id mismatches, invalid records, dangling FKs).

    Returns:
        Human-readable problems; empty when the DB is usable.
    """
    problems: list[str] = []
    for entity in plan.entities:
        collection = db.get(entity.name)
        if not isinstance(collection, dict) or not collection:
            problems.append(f"collection {entity.name!r} is missing or empty")
            continue
        validator = safe_validator(record_schema(entity))
        for key, record in collection.items():
            if not isinstance(record, dict) or str(record.get(entity.id_field)) != key:
                problems.append(f"{entity.name}[{key}]: id field {entity.id_field!r} does not match its key")
                continue
            problems += [f"{entity.name}[{key}]: {e.message}" for e in validator.iter_errors(record)]
            for field, target in entity.refs.items():
                if field in record and str(record[field]) not in db.get(target, {}):
                    problems.append(f"{entity.name}[{key}].{field}: {record[field]!r} not in {target}")
    if not isinstance(db.get(ACTION_LOG, {}), dict):
        problems.append(f"{ACTION_LOG!r} must be an object")
    return problems


_DATABASE_OUTPUT = {
    "type": "object",
    "required": ["collections"],
    "properties": {"collections": {"type": "object", "additionalProperties": {"type": "object"}}},
}


def _collections_brief(plan: EnvPlan) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            "id_field": e.id_field,
            "id_example": f"a real {e.id_field} value" if e.natural_key else format_id(e, 1),
            "fields": e.fields,
            "refs": e.refs,
        }
        for e in plan.entities
    ]


def _offline_reply(inputs: dict[str, Any]) -> dict[str, Any]:
    plan = EnvPlan.model_validate_json(inputs["plan"]) if isinstance(inputs["plan"], str) else inputs["plan"]
    domain = Domain.model_validate_json(inputs["domain"]) if inputs.get("domain") else None
    db = _offline(plan, int(inputs["seed"]), (int(inputs["records_min"]), int(inputs["records_max"])), domain)
    db.pop(ACTION_LOG)
    return {"collections": db}


DATABASE_ROLE = LLMRole(
    name="database",
    system_prompt=prompts.DATABASE_SYSTEM,
    user_template=prompts.DATABASE_USER,
    output_schema=_DATABASE_OUTPUT,
    offline=_offline_reply,
)


def _llm(
    refactored: RefactoredToolset, plan: EnvPlan, seed: int, span: tuple[int, int], client: LLMClient
) -> dict[str, Any]:
    inputs = {
        "domain": _domain(refactored).model_dump_json(),
        "tools": json.dumps([t.openai_tool() for t in refactored.tools], ensure_ascii=False),
        "collections": json.dumps(_collections_brief(plan), ensure_ascii=False),
        "plan": plan.model_dump_json(),
        "seed": seed,
        "records_min": span[0],
        "records_max": span[1],
    }
    try:
        reply = run_role(DATABASE_ROLE, inputs, client)
    except LLMError as exc:
        raise CodegenError(f"llm_database_failed: {exc}") from exc
    db = {name: reply["collections"].get(name, {}) for name in (e.name for e in plan.entities)}
    db[ACTION_LOG] = {}
    problems = check_database(plan, db)
    if problems:
        raise CodegenError(f"invalid_database: {'; '.join(problems[:5])}")
    return db


def synthesize_database(
    refactored: RefactoredToolset,
    *,
    seed: int,
    records_per_entity: tuple[int, int] = (3, 5),
    client: LLMClient | None = None,
) -> dict[str, Any]:
    """Build the initial mock DB of an environment.

    Args:
        refactored: the refactored toolset (entities are inferred from it with `plan_environment`).
        seed: seed of every random choice; the same seed gives the same DB.
        records_per_entity: inclusive range of records per collection.
        client: when given with the openai backend, the LLM writes the records (validated with
            `check_database`); otherwise the deterministic generator does, with values of the toolset's own
            domain (`envgen.domain.domain_of`: name, overview, tool descriptions).

    Returns:
        `{collection: {str(id): record}, "action_log": {}}`.

    Raises:
        CodegenError: `invalid_database` / `llm_database_failed` (LLM variant only).
    """
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    if client is not None and client.settings.backend != "offline":
        return _llm(refactored, plan, seed, records_per_entity, client)
    return _offline(plan, seed, records_per_entity, _domain(refactored))


def _domain(refactored: RefactoredToolset) -> Domain:
    return domain_of(refactored.name, refactored.description, refactored.tools)
