"""envgen.valuestats: cross-domain filler, person-named entities and stray words, measured over environments."""

from __future__ import annotations

from data.models import GoldenTrace, TaskRecord, TaskText, TraceCall, TraceStage
from envgen.valuestats import (
    descriptive_values,
    person_named_entities,
    shared_descriptive_values,
    stray_words,
    world_summary,
)


def _record(env_id: str, arguments: dict, output: dict | None = None, tool: str = "run_query") -> TaskRecord:
    call = TraceCall(name=tool, arguments=arguments, output=output or {"status": "ok"})
    stage = TraceStage(calls=(call,), db_hash_before="a", db_hash_after="a")
    trace = GoldenTrace(trace_id="t", env_id=env_id, graph_index=0, stages=(stage,), initial_db_hash="a",
                        final_db_hash="a")  # fmt: skip
    return TaskRecord(task_id=f"{env_id}-{tool}", env_id=env_id, text=TaskText(user_query="Run it."), trace=trace,
                      tools=(tool,), graph_complexity=1, seed=0)  # fmt: skip


def test_descriptive_values_are_free_text_not_identifiers():
    db = {"chains": {"1": {"chain_id": "1", "description": "Organic cotton, machine washable.", "name": "Ethereum",
                           "owner_email": "dana.smith@example.com", "path": "/var/log/app/server.log"}}}  # fmt: skip
    assert descriptive_values(db) == {"Organic cotton, machine washable."}


def test_a_value_in_more_than_one_percent_of_environments_is_a_cross_domain_filler():
    dbs = {f"env{i}": {"items": {"1": {"description": f"Token transfers of pool {i} and more."}}} for i in range(150)}
    dbs["env0"]["items"]["2"] = {"description": "Organic cotton, machine washable."}
    dbs["env1"]["items"]["2"] = {"description": "Organic cotton, machine washable."}
    assert shared_descriptive_values(dbs) == {"Organic cotton, machine washable.": 2}


def test_person_names_only_count_on_non_person_records():
    db = {"networks": {"N1": {"name": "Garcia Network"}, "N2": {"name": "Ethereum"}},
          "customers": {"C1": {"name": "Dana Smith"}},
          "pools": {"P1": {"owner_name": "Dana Smith", "name": "Transfer Pool"}}}  # fmt: skip
    assert person_named_entities(db) == {"Garcia Network"}


def test_stray_words_are_dictionary_words_the_schemas_never_use():
    record = _record("e", {"operation": "himself", "mode": "read", "sql": "SELECT 1"})
    assert stray_words(record, frozenset({"mode", "read", "operation"})) == ["run_query.operation='himself'"]


def test_world_summary_counts_tasks_that_show_a_filler_or_a_person_named_entity():
    filler = "Organic cotton, machine washable."
    dbs = {"a": {"pools": {"P1": {"name": "Garcia Pool", "description": filler}}},
           "b": {"chains": {"C1": {"name": "Ethereum", "description": filler}}},
           "c": {"chains": {"C1": {"name": "Polygon", "description": "Chain covering token transfers."}}}}  # fmt: skip
    records = [_record("a", {"pool": "Garcia Pool"}), _record("b", {"q": "x"}, {"description": filler}),
               _record("c", {"query": "Okafor"}), _record("c", {"query": "token transfers"})]  # fmt: skip
    summary = world_summary(dbs, {"a": [], "b": [], "c": []}, records)
    assert summary["cross_domain_filler_value_count"] == 1
    assert summary["cross_domain_filler_env_share"] == round(2 / 3, 4)
    assert summary["cross_domain_filler_task_share"] == 0.25  # the task of env b shows it; env a's does not
    assert summary["person_name_entity_task_share"] == 0.25
    assert summary["person_name_argument_task_share"] == 0.5  # "Garcia Pool" and the surname "Okafor"
