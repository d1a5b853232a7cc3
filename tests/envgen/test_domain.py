"""envgen.domain + the DB builder: an environment's values come from its own domain, not from a global bank."""

from __future__ import annotations

import random
import re
from typing import Any

from data.models import RawTool
from envgen.config import EnvGenConfig
from envgen.database import sample_value, synthesize_database
from envgen.domain import domain_of
from envgen.fakes import field_kind, typed_value
from envgen.refactor import refactor_toolset
from envgen.valuestats import descriptive_values, is_person_name, person_named_entities
from tests.envgen._envgen_samples import sample

_OLD_BANK = ("Organic cotton, machine washable.", "Stainless steel, dishwasher safe, 350 ml.",
             "Fixes the login timeout on mobile.", "Quarterly budget review", "Sea-view room with a balcony.")  # fmt: skip


def _tool(tool_name: str, text: str, /, **params: dict[str, Any]) -> RawTool:
    return RawTool(name=tool_name, description=text,
                   parameters={"type": "object", "properties": params, "required": list(params)[:1]})  # fmt: skip


def _chain_explorer():
    tools = (
        _tool("get_chains_list", "List the EVM blockchain networks Blockscout indexes, with their chain id."),
        _tool("get_address_info", "Get the balance and token holdings of an Ethereum address on a chain.",
              chain_id={"type": "string", "description": "The chain id"}, address={"type": "string"}),
        _tool("get_token_transfers_by_address", "Get ERC-20 token transfers of a wallet address on a chain.",
              chain_id={"type": "string"}, address={"type": "string"}),
        _tool("get_address_by_ens_name", "Resolve an ENS name to its Ethereum address.", name={"type": "string"}),
        _tool("get_transaction_info", "Get a transaction with its block number and gas fee.",
              chain_id={"type": "string"}, transaction_hash={"type": "string"}),
    )  # fmt: skip
    toolset = sample("Acme Shop").model_copy(
        update={"name": "Blockscout MCP Server", "description": "Blockchain explorer for EVM chains.", "tools": tools}
    )
    return refactor_toolset(toolset, EnvGenConfig())


def _clinic():
    tools = (
        _tool("list_appointments", "List the clinic's appointments with their doctor and treatment room."),
        _tool("get_treatment", "Get a treatment plan with its dosage and description.",
              treatment_id={"type": "string"}),
        _tool("update_treatment", "Change a treatment plan's description or dosage.",
              treatment_id={"type": "string"}, description={"type": "string"}),
    )  # fmt: skip
    toolset = sample("Acme Shop").model_copy(
        update={
            "name": "Harbor Clinic",
            "description": "Appointments and treatment plans of a dental clinic.",
            "tools": tools,
        }
    )
    return refactor_toolset(toolset, EnvGenConfig())


def _strings(value: Any, key: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _strings(v, k)]
    if isinstance(value, list):
        return [pair for v in value for pair in _strings(v, key)]
    return [(key, value)] if isinstance(value, str) else []


def test_a_domain_is_read_from_the_toolsets_own_text():
    rt = _chain_explorer()
    domain = domain_of(rt.name, rt.description, rt.tools)
    assert domain.label == "Blockscout"
    assert {"evm", "crypto"} <= domain.kinds
    assert {"token", "transfers", "chain"} <= set(domain.words)
    assert "token transfers" in domain.phrases
    assert not set(domain.words) & {"get", "with", "their", "list"}  # no generic API words
    assert domain_of(rt.name, rt.description, rt.tools) == domain  # a pure function of the text


def test_a_blockchain_db_has_chain_values_and_no_product_sentences():
    db = synthesize_database(_chain_explorer(), seed=0)
    strings = _strings(db)
    assert strings
    assert not {v for _, v in strings} & set(_OLD_BANK)
    addresses = [v for k, v in strings if k == "address"]
    assert addresses and all(re.fullmatch(r"0x[0-9a-f]{40}", a) for a in addresses), addresses
    chain_ids = {v for k, v in strings if k == "chain_id"}
    assert "1" in chain_ids  # the id a real user gives (Ethereum mainnet) names a stored chain
    names = {v for k, v in strings if k == "name"}
    assert "vitalik.eth" in names or "Ethereum" in names, names
    words = re.findall(r"[a-z]+", " ".join(descriptive_values(db)).lower())
    assert {"token", "chain", "transfers", "address", "blockscout"} & set(words)


def test_non_person_records_are_never_named_like_people():
    for rt in (_chain_explorer(), _clinic(), refactor_toolset(sample("Stockroom"), EnvGenConfig())):
        for seed in range(3):
            db = synthesize_database(rt, seed=seed)
            assert person_named_entities(db) == set(), (rt.name, person_named_entities(db))
    assert is_person_name("Garcia Network") and is_person_name("Dana Smith")
    assert not is_person_name("Transfer Pool") and not is_person_name("Ethereum")


def test_one_descriptive_sentence_never_appears_in_two_different_domains():
    chain, clinic = (descriptive_values(synthesize_database(rt, seed=0)) for rt in (_chain_explorer(), _clinic()))
    assert chain and clinic
    assert chain.isdisjoint(clinic), chain & clinic


def test_field_kinds_depend_on_the_domain():
    chain = domain_of(*(lambda rt: (rt.name, rt.description, rt.tools))(_chain_explorer()))
    clinic = domain_of("Harbor Clinic", "Appointments of a dental clinic.")
    rng = random.Random(0)
    assert field_kind("address", {}, chain) == "evm_address"
    assert field_kind("address", {}, clinic) is None
    assert re.fullmatch(r"0x[0-9a-f]{40}", typed_value("wallet_address", {}, rng, domain=chain))
    assert not typed_value("address", {}, rng, domain=clinic).startswith("0x")  # a street address
    assert typed_value("chain_id", {}, rng, domain=chain, index=1) == "1"
    assert typed_value("ens_name", {}, rng, domain=chain, index=1) == "vitalik.eth"
    assert typed_value("symbol", {}, rng, domain=chain, index=1) == "ETH"
    assert field_kind("age_from", {}, chain) is None  # a date filter is not an address
    sql = domain_of("Postgres MCP", "Run read-only SQL queries against a PostgreSQL database.")
    assert typed_value("query", {}, rng, domain=sql).startswith("SELECT ")


def test_a_version_is_a_whole_number_and_a_free_form_document_is_not_empty():
    for seed in range(10):
        assert type(sample_value("lock_version", {"type": "number"}, random.Random(seed))) is int
    documents = sample_value("documents", {"type": "array", "items": {"type": "object"}}, random.Random(0))
    assert documents and all(isinstance(d, dict) and d for d in documents), documents
