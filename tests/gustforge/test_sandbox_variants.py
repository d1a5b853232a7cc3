"""Extensions of a loaded tools module and redirected test runs (what mutation scoring is built on)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from gustforge.errors import SandboxError, SandboxTimeout, SandboxViolation
from gustforge.sandbox import SandboxLimits, SandboxWorker
from gustforge.sandbox.policy import _walk, find_violations

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=3)

TOOLS = """
def bump(db, key):
    db.setdefault("counts", {})
    db["counts"][key] = db["counts"].get(key, 0) + 1
    return {"status": "success", "message": "ok", "value": db["counts"][key]}


def spin(db):
    while True:
        pass


def keep(db):
    db["pair"] = (1, 2)
    return {"status": "success", "message": "ok"}


def keep_cycle(db):
    loop = []
    loop.append(loop)
    db["loop"] = loop
    return {"status": "success", "message": "ok"}
"""

BROKEN = """
def broken_bump(db, key):
    return {"status": "success", "message": "ok", "value": 0}


def same_bump(db, key):
    return bump(db, key)
"""

TESTS = """
def test_bump_counts(env):
    out = env.call_tool("bump", {"key": "a"})
    env.check(out.get("value") == 1, f"bump: {out}")


def test_bump_counts_again(env):
    env.call_tool("bump", {"key": "a"})
    out = env.call_tool("bump", {"key": "a"})
    env.check(out.get("value") == 2, f"bump twice: {out}")


def test_keep_sees_the_db_as_json(env):
    env.call_tool("keep", {})
    db = env.db()
    env.check(db["pair"] == [1, 2], f"keep: {db['pair']!r}")
"""
SCHEMAS = {name: {"parameters": {"type": "object"}, "response": {}} for name in ("bump", "spin", "keep")}


@pytest.fixture()
def worker() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as w:
        w.load(TOOLS, {})
        yield w


def test_an_extension_adds_functions_until_the_next_load(worker: SandboxWorker) -> None:
    names = worker.extend(BROKEN)
    assert {"bump", "broken_bump", "same_bump"} <= set(names)
    assert worker.call("same_bump", {"key": "x"})["value"] == 1
    worker.reset()  # a reset re-execs the module and its extensions on the initial DB
    assert worker.call("same_bump", {"key": "x"})["value"] == 1
    assert "broken_bump" not in worker.load(TOOLS, {})


def test_an_extension_passes_the_static_check_on_its_own(worker: SandboxWorker) -> None:
    with pytest.raises(SandboxViolation, match="import of module 'os'"):
        worker.extend("import os\n")
    with pytest.raises(SandboxViolation, match="dunder"):
        worker.extend("def sneaky(db):\n    return __builtins__\n")
    assert worker.call("bump", {"key": "k"})["value"] == 1  # a rejected extension leaves the module as it was


def test_extensions_survive_a_worker_restart(worker: SandboxWorker) -> None:
    worker.extend(BROKEN)
    with pytest.raises(SandboxTimeout):
        worker.call("spin", {})
    assert worker.call("broken_bump", {"key": "k"})["value"] == 0 and worker.restarts == 1


def test_an_extension_needs_a_loaded_module() -> None:
    with SandboxWorker(LIMITS) as fresh, pytest.raises(SandboxError, match="load a tools module"):
        fresh.extend(BROKEN)


def test_variants_redirect_call_tool_and_stop_at_the_first_failure(worker: SandboxWorker) -> None:
    worker.extend(BROKEN)
    variants = [("bump", {"bump": "broken_bump"}), ("bump", {"bump": "same_bump"}), ("spin", {}), ("keep", {})]
    error, runs = worker.run_tool_variants(TESTS, SCHEMAS, variants)
    assert error is None
    broken, same, untested, kept = runs
    assert broken.ran and broken.failure is not None and broken.failure.name == "test_bump_counts"
    assert same.ran and same.failure is None
    assert not untested.ran and untested.note == "no tests of this tool"
    # tests run in a harness of their own: env.db() is the tools worker's DB as JSON (tuples become lists)
    assert kept.ran and kept.failure is None, kept
    _, (cyclic,) = worker.run_tool_variants(TESTS, SCHEMAS, [("keep", {"keep": "keep_cycle"})])
    assert cyclic.failure is not None and "nested deeper" in cyclic.failure.message  # a DB JSON cannot hold fails


def test_a_redirect_to_a_function_that_is_not_loaded_is_refused(worker: SandboxWorker) -> None:
    _, runs = worker.run_tool_variants(TESTS, SCHEMAS, [("bump", {"bump": "missing"})])
    assert runs[0].failure is not None and "not loaded" in runs[0].failure.message


def test_the_static_check_walks_every_node_in_ast_walk_order() -> None:
    tree = ast.parse(TOOLS + BROKEN + TESTS)
    assert [id(node) for node in _walk(tree)] == [id(node) for node in ast.walk(tree)]
    assert find_violations(TOOLS + BROKEN + TESTS) == []
