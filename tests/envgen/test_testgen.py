"""envgen.testgen: generated unit tests pass on correct tools and catch broken ones (mutants)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jsonschema import Draft202012Validator

from data.models import RefactoredToolset
from envgen.codegen import generate_tools_source
from envgen.config import EnvGenConfig
from envgen.database import synthesize_database
from envgen.entities import plan_environment
from envgen.refactor import refactor_toolset
from envgen.testgen import generate_tests_source, valid_arguments
from gustforge.sandbox import SandboxLimits, SandboxWorker
from tests.envgen._envgen_samples import refactored, sample_toolsets

LIMITS = SandboxLimits(cpu_seconds=2, memory_mb=256, wall_seconds=5)


@pytest.fixture(scope="module")
def worker() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as w:
        yield w


def _schemas(rt: RefactoredToolset) -> dict:
    return {t.name: {"parameters": t.parameters, "response": t.response} for t in rt.tools}


def _run(worker: SandboxWorker, rt: RefactoredToolset, tools_source: str | None = None):
    db = synthesize_database(rt, seed=0)
    worker.load(tools_source or generate_tools_source(rt, db), db)
    return worker.run_tests(generate_tests_source(rt, db), _schemas(rt))


def test_sample_envs_pass_their_tests(worker: SandboxWorker) -> None:
    for toolset in sample_toolsets():
        rt = refactor_toolset(toolset, EnvGenConfig())
        report = _run(worker, rt)
        assert report.passed, (toolset.name, [(c.name, c.message) for c in report.failures])
        tested = {c.tool for c in report.cases}
        assert tested == {t.name for t in rt.tools}


def test_case_names_cover_families_errors_and_chains() -> None:
    rt = refactored("Projects")
    source = generate_tests_source(rt, synthesize_database(rt, seed=0))
    assert "def test_update_task_updates(env):" in source and "def test_update_task_rejects_bad_input(env):" in source
    assert "def test_delete_task_chain_from_list_projects" not in source  # different collection
    assert "def test_update_task_chain_from_list_tasks" not in source  # list_tasks needs project_id
    assert "env.call_tool(" in source  # positive and negative calls reach the tool code directly
    rt = refactored("Help Desk")
    source = generate_tests_source(rt, synthesize_database(rt, seed=0))
    assert "def test_close_ticket_transitions(env):" in source


def test_valid_arguments_come_from_the_db() -> None:
    rt = refactored("Acme Shop")
    db = synthesize_database(rt, seed=0)
    plan = plan_environment(rt.tools)
    for tool, tool_plan in zip(rt.tools, plan.tools, strict=True):
        args = valid_arguments(tool, tool_plan, plan.entity(tool_plan.entity), db, seed=0)
        assert Draft202012Validator(tool.parameters).is_valid(args), tool.name
    create = valid_arguments(rt.tools[3], plan.tools[3], plan.entity("orders"), db, seed=0)
    assert create["customer_id"] in db["customers"] and create["product_id"] in db["products"]


@pytest.mark.parametrize(
    ("mutation", "broken_test"),
    [
        (("    record.update(changes)\n", "    pass\n"), "test_update_order_updates"),
        (("    collection[_key(new_id)] = record\n", "    pass\n"), "test_create_order_creates"),
        (
            ("    return _success(f\"{spec['singular']} '{value}' found\",", "    db.clear()\n    return _success('',"),
            "test_get_order_returns_record_0",
        ),
        # validation inside the tool matters now: the tests call the tool code directly
        (
            ('    if "minimum" in prop and value < prop["minimum"]:\n', "    if False:\n"),
            "test_create_order_rejects_bad_input",
        ),
        (('    record["status"] = target\n', "    pass\n"), "test_cancel_order_transitions"),
        (
            (
                "    if record is None:\n        return None, _not_found(",
                "    if False:\n        return None, _not_found(",
            ),
            "test_get_order_rejects_bad_input",
        ),
    ],
)
def test_mutants_are_caught(worker: SandboxWorker, mutation: tuple[str, str], broken_test: str) -> None:
    rt = refactored("Acme Shop")
    source = generate_tools_source(rt, synthesize_database(rt, seed=0))
    old, new = mutation
    assert old in source
    report = _run(worker, rt, source.replace(old, new, 1))
    failed = {c.name for c in report.failures}
    assert not report.passed and broken_test in failed, failed
