"""Behaviour of the sandbox worker, test runner and pool with well-behaved (and faulty) generated code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gustforge.errors import SandboxError, SandboxMemoryError, SandboxTimeout, SandboxViolation
from gustforge.sandbox import SandboxLimits, SandboxPool, SandboxWorker, check_source, validation_errors

TINY = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"
FAST = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)
HANG = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=2)  # for tests that must time out

COUNTER = """
import json
from collections import Counter

PREFIX = "c-"


def bump(db, key, by=1):
    db.setdefault("counts", {})
    db["counts"][key] = db["counts"].get(key, 0) + by
    return {"status": "success", "message": "ok", "value": db["counts"][key]}


def fail(db):
    return {"status": "success", "message": str(1 / 0)}


def words(db, text):
    return {"status": "success", "message": "ok", "top": Counter(text.split()).most_common(1)[0][0]}


def not_a_dict(db):
    return [1, 2]


def not_json(db):
    return {"status": "success", "message": "ok", "value": {1, 2}}


def spin(db):
    while True:
        pass


def new_id(db):
    import uuid
    import random
    return {"status": "success", "message": "ok", "id": str(uuid.uuid4()), "r": random.randint(0, 10**9)}
"""


def _tiny() -> tuple[str, str, dict, dict]:
    schemas = json.loads((TINY / "schemas.json").read_text())
    specs = {s["name"]: {"parameters": s["parameters"], "response": s["response"]} for s in schemas}
    return (
        (TINY / "tools.py").read_text(),
        (TINY / "tests.py").read_text(),
        json.loads((TINY / "db.json").read_text()),
        specs,
    )


@pytest.fixture()
def worker():
    with SandboxWorker(FAST) as w:
        yield w


class TestCheckSource:
    def test_accepts_tiny_env_modules(self) -> None:
        tools, tests, _, _ = _tiny()
        check_source(tools)
        check_source(tests)

    def test_message_names_what_and_where(self) -> None:
        with pytest.raises(SandboxViolation) as info:
            check_source("x = 1\n\nimport os\n")
        assert "line 3" in str(info.value) and "'os'" in str(info.value)

    def test_reports_every_violation(self) -> None:
        with pytest.raises(SandboxViolation) as info:
            check_source("import os\nopen('f')\nx.__class__\n")
        message = str(info.value)
        assert "line 1" in message and "line 2" in message and "line 3" in message

    def test_syntax_error_is_a_violation(self) -> None:
        with pytest.raises(SandboxViolation, match="syntax error"):
            check_source("def f(:\n")

    def test_private_helpers_allowed_dunders_not(self) -> None:
        check_source("def _helper(x):\n    return x\n")
        with pytest.raises(SandboxViolation, match="dunder"):
            check_source("def __init__(self):\n    pass\n")


class TestWorker:
    def test_load_call_and_state(self, worker: SandboxWorker) -> None:
        assert worker.load(COUNTER, {"counts": {"a": 1}})[:3] == ["bump", "fail", "words"]
        assert worker.call("bump", {"key": "a"})["value"] == 2
        assert worker.call("bump", {"key": "a", "by": 5})["value"] == 7
        assert worker.get_db() == {"counts": {"a": 7}}
        assert worker.call("words", {"text": "b a b"})["top"] == "b"

    def test_tool_exceptions_are_structured(self, worker: SandboxWorker) -> None:
        worker.load(COUNTER, {})
        assert worker.call("fail", {}) == {"status": "error", "message": "ZeroDivisionError: division by zero"}
        assert worker.call("bump", {"nope": 1})["message"].startswith("TypeError:")
        assert worker.call("missing", {})["message"].startswith("unknown tool 'missing'")
        assert "returned list, expected a dict" in worker.call("not_a_dict", {})["message"]
        assert "non-JSON" in worker.call("not_json", {})["message"]

    def test_set_db_and_reset(self, worker: SandboxWorker) -> None:
        worker.load(COUNTER, {"counts": {}})
        worker.set_db({"counts": {"z": 41}})
        assert worker.call("bump", {"key": "z"})["value"] == 42
        worker.reset()
        assert worker.get_db() == {"counts": {}}

    def test_seeded_ids_are_reproducible(self, worker: SandboxWorker) -> None:
        worker.load(COUNTER, {})
        first = [worker.call("new_id", {}) for _ in range(2)]
        worker.reset()
        again = [worker.call("new_id", {}) for _ in range(2)]
        assert first == again and first[0] != first[1]
        with SandboxWorker(FAST, seed=1) as other:
            other.load(COUNTER, {})
            assert other.call("new_id", {}) != first[0]

    def test_restarts_after_timeout_with_initial_db(self) -> None:
        worker = SandboxWorker(HANG)
        worker.load(COUNTER, {"counts": {"a": 1}})
        worker.call("bump", {"key": "a"})
        with pytest.raises(SandboxTimeout):
            worker.call("spin", {})
        assert worker.call("bump", {"key": "a"})["value"] == 2  # restarted: tools reloaded on the initial DB
        assert worker.restarts == 1
        worker.close()

    def test_import_failure_is_sandbox_error(self, worker: SandboxWorker) -> None:
        with pytest.raises(SandboxError, match="ZeroDivisionError"):
            worker.load("X = 1 / 0\n", {})
        assert worker.load("def ok(db):\n    return {'status': 'success', 'message': ''}\n", {}) == ["ok"]

    def test_rlimits_are_applied_to_the_child(self, worker: SandboxWorker) -> None:
        worker.ping()  # the child sets its limits at start-up
        limits = Path(f"/proc/{worker.pid}/limits").read_text()
        address = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert str(256 * 1024 * 1024) in address
        assert any(line.startswith("Max file size") and " 0 " in line for line in limits.splitlines())

    def test_rejects_bad_limits(self) -> None:
        with pytest.raises(ValueError):
            SandboxLimits(cpu_seconds=0)


class TestRunTests:
    def test_tiny_env_passes(self, worker: SandboxWorker) -> None:
        tools, tests, db, specs = _tiny()
        worker.load(tools, db)
        report = worker.run_tests(tests, specs)
        assert report.passed, report.failures
        assert len(report.cases) == 9
        assert {c.tool for c in report.cases} == set(specs)
        assert worker.get_db() == db  # tests never leak into the live DB

    def test_failures_are_reported_per_case(self, worker: SandboxWorker) -> None:
        tools, _, db, specs = _tiny()
        worker.load(tools, db)
        tests = (
            "def test_get_order_bad(env):\n"
            "    env.check(env.call('get_order', {'order_id': 'ORD-1001'})['status'] == 'error', 'want error')\n"
            "def test_cancel_order_raises(env):\n"
            "    env.call('cancel_order', {'order_id': 'ORD-1001'})['nope']\n"
            "def test_list_orders_ok(env):\n"
            "    env.check(env.validate({'status': 1}, env.schemas['list_orders']['response']) != [], 'x')\n"
            "def test_fresh_db_each_test(env):\n"
            "    env.check(env.db()['orders']['ORD-1001']['status'] == 'pending', 'db leaked')\n"
        )
        report = worker.run_tests(tests, specs)
        by_name = {c.name: c for c in report.cases}
        assert not report.passed and report.error is None
        assert by_name["test_get_order_bad"].message == "want error"
        assert by_name["test_cancel_order_raises"].message == "KeyError: 'nope'"
        assert by_name["test_cancel_order_raises"].tool == "cancel_order"
        assert by_name["test_list_orders_ok"].passed and by_name["test_fresh_db_each_test"].passed

    def test_hanging_test_fails_alone(self) -> None:
        tools, _, db, specs = _tiny()
        worker = SandboxWorker(HANG)
        worker.load(tools, db)
        tests = (
            "def test_a_hang(env):\n    while True:\n        pass\n"
            "def test_b_ok(env):\n    env.check(env.call('get_order', {'order_id': 'ORD-1002'})['status']"
            " == 'success', 'x')\n"
        )
        report = worker.run_tests(tests, specs)
        assert [c.passed for c in report.cases] == [False, True]
        assert "SandboxTimeout" in report.cases[0].message
        worker.close()

    def test_sandbox_level_errors_do_not_raise(self, worker: SandboxWorker) -> None:
        tools, _, db, specs = _tiny()
        worker.load(tools, db)
        assert "SandboxViolation" in (worker.run_tests("import os\n", specs).error or "")
        assert "no test_" in (worker.run_tests("X = 1\n", specs).error or "")
        report = worker.run_tests("def test_x(env):\n    pass\n", specs)
        assert report.passed

    def test_total_budget(self, worker: SandboxWorker) -> None:
        tools, _, db, specs = _tiny()
        worker.load(tools, db)
        tests = "".join(f"def test_{i}(env):\n    pass\n" for i in range(3))
        report = worker.run_tests(tests, specs, total_seconds=0.0)
        assert not report.passed and all(c.message.startswith("not run") for c in report.cases)


class TestPool:
    def test_a_worker_never_serves_a_second_environment(self) -> None:
        with SandboxPool(size=1, limits=FAST) as pool:
            with pool.acquire(owner="env-a") as first:
                first.load(
                    "STASH = []\ndef keep(db):\n    STASH.append(db['secret'])\n"
                    "    return {'status': 'success', 'message': ''}\n",
                    {"secret": "s3cr3t"},
                )
                first.call("keep", {})
                first_pid = first.pid
            with pool.acquire(owner="env-b") as second:
                assert second is not first and second.pid != first_pid  # a fresh process
                second.load("def peek(db):\n    return {'status': 'success', 'message': str(STASH)}\n", {})
                assert second.call("peek", {})["message"] == "NameError: name 'STASH' is not defined"
                assert "s3cr3t" not in json.dumps(second.get_db())
            assert not first.alive

    def test_same_owner_reuses_its_worker(self) -> None:
        with SandboxPool(size=1, limits=FAST) as pool:
            with pool.acquire(owner="env-a") as first:
                pass
            with pool.acquire(owner="env-a") as again:
                assert again is first and again.alive

    def test_no_owner_means_no_reuse_and_a_warm_replacement(self) -> None:
        with SandboxPool(size=1, limits=FAST) as pool:
            with pool.acquire() as first:
                pass
            with pool.acquire() as second:
                assert second is not first and second.alive
            assert not first.alive

    def test_recycles_after_max_uses(self) -> None:
        with SandboxPool(size=1, limits=FAST, max_uses=1) as pool:
            with pool.acquire(owner="x") as first:
                pass
            with pool.acquire(owner="x") as second:
                assert second is not first and second.alive
            assert not first.alive


def test_validation_errors() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert validation_errors({"n": 1}, schema) == []
    assert validation_errors({"n": "x"}, schema) == ["n: 'x' is not of type 'integer'"]
    assert validation_errors({}, {"type": "nope"})[0].startswith("invalid schema")


def test_worker_starts_and_answers() -> None:  # how fast: bench/sandbox.py
    with SandboxWorker(FAST) as w:
        assert w.ping() >= 0 and w.alive


def test_memory_fault_then_recovery(worker: SandboxWorker) -> None:
    worker.load(
        "def big(db):\n    return {'x': 'a' * 10**10}\ndef ok(db):\n    return {'status': 'success', 'message': ''}\n",
        {},
    )
    with pytest.raises(SandboxMemoryError):
        worker.call("big", {})
    assert worker.call("ok", {})["status"] == "success"


def test_env_manifest_records_the_isolation_the_worker_reported(samples_dir: Path) -> None:
    from envgen.build import build_environment
    from envgen.config import EnvGenConfig
    from envgen.ingest import read_toolsets

    toolset = read_toolsets(sorted((samples_dir / "raw").iterdir())[0]).toolsets[0]
    built = build_environment(toolset, EnvGenConfig())
    assert built.artifacts is not None, built.quarantine
    sandbox = built.artifacts.manifest.sandbox
    assert sandbox["audit_hook"] == "installed" and sandbox["hard_rlimits"] == "lowered to soft"
    assert {"privileges", "network_namespace", "pid_namespace", "platform"} <= set(sandbox)
