"""The environment runtime on the hand-written tiny orders env (tests/envgen/fixtures/tiny_env)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from data.models import TestReport as StoredReport  # aliased: pytest would try to collect Test*
from data.models import ToolSchema
from envgen.runtime import Environment, call_tool_once
from gustforge.errors import CodegenError, InputError, SandboxError, SandboxTimeout, SandboxViolation, SchemaError
from gustforge.hashing import content_hash
from gustforge.sandbox import SandboxLimits, SandboxPool

TINY = Path(__file__).resolve().parent / "fixtures" / "tiny_env"
FAST = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)


@pytest.fixture(scope="module")
def env() -> Environment:
    return Environment.load(TINY)


class TestLoad:
    def test_reads_every_part(self, env: Environment) -> None:
        assert env.env_id == "tiny_env" and env.manifest is not None and env.manifest.tool_count == 4
        assert env.tool_names == ["get_order", "list_orders", "update_order_status", "cancel_order"]
        assert set(env.initial_db["orders"]) == {"ORD-1001", "ORD-1002", "ORD-1003"}
        assert "def cancel_order" in env.tools_source and env.tests_source is not None

    def test_stored_report_matches_a_fresh_run(self, env: Environment) -> None:
        stored = StoredReport.model_validate_json((TINY / "test_report.json").read_text())
        fresh = env.run_tests(FAST)
        assert fresh.passed and [c.name for c in fresh.cases] == [c.name for c in stored.cases]

    def test_missing_folder_and_files(self, tmp_path: Path) -> None:
        with pytest.raises(InputError, match="not found"):
            Environment.load(tmp_path / "nope")
        shutil.copytree(TINY, tmp_path / "env")
        (tmp_path / "env" / "db.json").unlink()
        with pytest.raises(InputError, match="db.json"):
            Environment.load(tmp_path / "env")

    def test_invalid_schemas(self, tmp_path: Path, env: Environment) -> None:
        shutil.copytree(TINY, tmp_path / "env")
        (tmp_path / "env" / "schemas.json").write_text('[{"name": "x"}]')
        with pytest.raises(SchemaError):
            Environment.load(tmp_path / "env")
        bad = env.schemas[0].model_copy(update={"parameters": {"type": "object", "properties": {"a": {"type": 5}}}})
        with pytest.raises(SchemaError, match="invalid parameters schema"):
            Environment.from_parts("x", [bad], {}, env.tools_source)
        with pytest.raises(SchemaError, match="duplicate"):
            Environment.from_parts("x", [env.schemas[0], env.schemas[0]], {}, env.tools_source)


class TestSession:
    def test_calls_change_state_and_hash(self, env: Environment) -> None:
        with env.session(FAST) as session:
            initial = session.db_hash()
            assert initial == content_hash(env.initial_db)
            out = session.call("cancel_order", {"order_id": "ORD-1001", "reason": "late"})
            assert out == {
                "status": "success",
                "message": "order ORD-1001 cancelled",
                "order_id": "ORD-1001",
                "refund": 25.0,
            }
            assert session.db()["orders"]["ORD-1001"]["status"] == "cancelled"
            assert session.db_hash() != initial
            session.reset()
            assert session.db_hash() == initial
        assert env.initial_db["orders"]["ORD-1001"]["status"] == "pending"  # never mutated

    def test_invalid_arguments_never_reach_the_tool(self, env: Environment) -> None:
        with env.session(FAST) as session:
            before = session.db_hash()
            for args in ({"order_id": 1001}, {}, {"order_id": "ORD-1001", "extra": True}, [1]):
                out = session.call("cancel_order", args)  # type: ignore[arg-type]
                assert out["status"] == "error" and out["message"].startswith("invalid arguments"), out
            out = session.call("update_order_status", {"order_id": "ORD-1001", "new_status": "lost"})
            assert "'lost' is not one of" in out["message"]
            assert session.db_hash() == before

    def test_unknown_tool(self, env: Environment) -> None:
        with env.session(FAST) as session:
            out = session.call("drop_tables", {})
            assert out["status"] == "error" and "unknown tool 'drop_tables'" in out["message"]

    def test_sessions_are_isolated(self, env: Environment) -> None:
        with env.session(FAST) as one, env.session(FAST) as two:
            one.call("cancel_order", {"order_id": "ORD-1003"})
            assert two.call("get_order", {"order_id": "ORD-1003"})["order"]["status"] == "processing"

    def test_from_parts_and_faults(self, env: Environment) -> None:
        source = (
            env.tools_source + "\n\ndef list_orders(db, customer_id=None, status=None):\n    while True:\n"
            "        pass\n"
        )
        hanging = Environment.from_parts("hang", env.schemas, env.initial_db, source)
        with hanging.session(SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=2)) as session:
            with pytest.raises(SandboxTimeout):
                session.call("list_orders", {})
            assert session.call("get_order", {"order_id": "ORD-1001"})["status"] == "success"

    def test_missing_tool_function_and_bad_code(self, env: Environment) -> None:
        partial = env.tools_source.replace("def cancel_order(", "def cancel_order_v2(")
        with pytest.raises(CodegenError, match="lacks cancel_order"):
            Environment.from_parts("p", env.schemas, env.initial_db, partial).session(FAST)
        with pytest.raises(SandboxViolation):
            Environment.from_parts("v", env.schemas, env.initial_db, "import os\n").session(FAST)

    def test_pooled_sessions(self, env: Environment) -> None:
        with SandboxPool(size=1, limits=FAST) as pool:
            with env.session(pool=pool) as first:
                first.call("cancel_order", {"order_id": "ORD-1001"})
            with env.session(pool=pool) as second:
                assert second.db_hash() == content_hash(env.initial_db)


def test_call_tool_once() -> None:
    out = call_tool_once(TINY, "list_orders", {"status": "shipped"}, limits=FAST)
    assert out["count"] == 1 and out["orders"][0]["order_id"] == "ORD-1002"


def test_schemas_are_tool_schemas(env: Environment) -> None:
    assert all(isinstance(s, ToolSchema) for s in env.schemas)
    assert env.tool_specs()["get_order"]["parameters"]["required"] == ["order_id"]


def test_closed_session_refuses_calls(env: Environment) -> None:
    with SandboxPool(size=1, limits=FAST) as pool:
        session = env.session(pool=pool)
        session.close()
        with pytest.raises(SandboxError, match="closed"):
            session.call("get_order", {"order_id": "ORD-1001"})
        with pytest.raises(SandboxError, match="closed"):
            session.db()
