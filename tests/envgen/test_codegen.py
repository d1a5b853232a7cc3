"""envgen.codegen: generated tools run in the real sandbox and behave per template; LLM code is policy-checked."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from data.models import RefactoredToolset, ToolKind, ToolSchema
from envgen.codegen import _RUNTIME, generate_tools_source
from envgen.database import synthesize_database
from gustforge.errors import CodegenError
from gustforge.llm import LLMClient, LLMSettings
from gustforge.sandbox import SandboxLimits, SandboxWorker, check_source
from tests.envgen._envgen_samples import refactored
from tests.fakes.openai_server import FakeOpenAIServer

LIMITS = SandboxLimits(cpu_seconds=2, memory_mb=256, wall_seconds=5)


@pytest.fixture(scope="module")
def worker() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as w:
        yield w


@pytest.fixture()
def shop(worker: SandboxWorker) -> tuple[SandboxWorker, dict]:
    rt = refactored("Acme Shop")
    db = synthesize_database(rt, seed=0)
    names = worker.load(generate_tools_source(rt, db), db)
    assert names == [t.name for t in rt.tools]
    return worker, db


def test_template_library_passes_the_policy() -> None:
    source = generate_tools_source(refactored("Acme Shop"), {})
    assert _RUNTIME.strip().splitlines()[-1] in source
    check_source(source)


def test_output_is_deterministic() -> None:
    rt = refactored("Harbor Clinic")
    db = synthesize_database(rt, seed=0)
    assert generate_tools_source(rt, db) == generate_tools_source(rt, db)


def test_read_tools(shop: tuple[SandboxWorker, dict]) -> None:
    worker, db = shop
    order_id, order = next(iter(db["orders"].items()))
    out = worker.call("get_order", {"order_id": order_id})
    assert out["status"] == "success" and out["order"] == order
    assert worker.call("get_order", {"order_id": "ORD-404"})["status"] == "error"
    category = next(iter(db["products"].values()))["category"]
    listed = worker.call("list_products", {"category": category})
    assert listed["count"] == sum(p["category"] == category for p in db["products"].values()) >= 1
    assert worker.get_db() == db


def test_create_update_cancel(shop: tuple[SandboxWorker, dict]) -> None:
    worker, db = shop
    customer, product = next(iter(db["customers"])), next(iter(db["products"]))
    created = worker.call("create_order", {"customer_id": customer, "product_id": product, "quantity": 2})
    new_id = f"ORD-{len(db['orders']) + 1:03d}"
    assert created["status"] == "success" and created["order_id"] == new_id and created["order"]["quantity"] == 2
    updated = worker.call("update_order", {"order_id": new_id, "shipping_address": "1 Main St"})
    assert updated["order"]["shipping_address"] == "1 Main St"
    assert worker.call("cancel_order", {"order_id": new_id})["order"]["status"] == "cancelled"
    assert worker.get_db()["orders"][new_id]["status"] == "cancelled"


def test_messages_go_to_the_outbox(shop: tuple[SandboxWorker, dict]) -> None:
    worker, db = shop
    order_id = next(iter(db["orders"]))
    out = worker.call("send_order_confirmation", {"order_id": order_id, "email": "ana@example.com"})
    assert out["status"] == "success", out
    stored = worker.get_db()["outbox"][out["message_id"]]
    assert stored["order_id"] == order_id and stored["email"] == "ana@example.com" and stored["status"] == "sent"
    assert len(worker.get_db()["outbox"]) == len(db["outbox"]) + 1
    bad = worker.call("send_order_confirmation", {"order_id": order_id, "email": "not-an-address"})
    assert bad["status"] == "error" and "e-mail" in bad["message"]


def test_action_fallback_logs_and_echoes(worker: SandboxWorker) -> None:
    rt = refactored("Acme Shop")
    rt = rt.model_copy(update={"log_only": ("get_order",)})
    db = synthesize_database(rt, seed=0)
    worker.load(generate_tools_source(rt, db), db)
    order_id = next(iter(db["orders"]))
    out = worker.call("get_order", {"order_id": order_id})
    assert out["status"] == "success" and out["event_id"] == "EVT-001"
    assert out["result"]["arguments"] == {"order_id": order_id}
    assert list(worker.get_db()["action_log"]) == ["EVT-001"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"customer_id": "CUS-001", "product_id": "PRO-001"}, "missing required argument 'quantity'"),
        ({"customer_id": "CUS-001", "product_id": "PRO-001", "quantity": "2"}, "must be of type integer"),
        ({"customer_id": "CUS-404", "product_id": "PRO-001", "quantity": 1}, "no record 'CUS-404' in customers"),
        (
            {"customer_id": "CUS-001", "product_id": "PRO-001", "quantity": 1, "colour": "red"},
            "unknown argument 'colour'",
        ),
    ],
)
def test_bad_arguments_are_structured_errors(shop: tuple[SandboxWorker, dict], args: dict, message: str) -> None:
    worker, db = shop
    out = worker.call("create_order", args)
    assert out["status"] == "error" and message in out["message"]
    assert worker.get_db() == db


def test_delete(worker: SandboxWorker) -> None:
    rt = refactored("Projects")
    db = synthesize_database(rt, seed=0)
    worker.load(generate_tools_source(rt, db), db)
    task_id = next(iter(db["tasks"]))
    assert worker.call("delete_task", {"task_id": task_id}) == {
        "status": "success",
        "message": f"task '{task_id}' deleted",
        "task_id": task_id,
    }
    assert task_id not in worker.get_db()["tasks"]


class TestLLMCodegen:
    def _run(self, code: str) -> str:
        rt = refactored("Acme Shop")
        db = synthesize_database(rt, seed=0)
        with (
            FakeOpenAIServer(lambda req: {"content": json.dumps({"code": code})}) as server,
            LLMClient(LLMSettings(backend="openai", base_url=server.base_url, model="m", max_retries=0)) as client,
        ):
            source = generate_tools_source(rt, db, backend="openai", client=client, failures=["test_x: boom"])
            prompt = server.requests[0]["messages"][1]["content"]
            assert "test_x: boom" in prompt and "ORD-001" in prompt
            return source

    def test_code_from_the_reply(self) -> None:
        code = "def get_order(db, **kwargs):\n    return {'status': 'success', 'message': 'ok'}\n"
        assert self._run(code) == code

    def test_policy_violation_is_a_codegen_error(self) -> None:
        with pytest.raises(CodegenError, match="sandbox_violation: .*'os'"):
            self._run("import os\n")


def _debugger() -> RefactoredToolset:
    session = {"type": "object", "properties": {
        "session_id": {"type": "string"}, "program": {"type": "string"}, "gdb_pid": {"type": "integer"},
        "breakpoint_ref": {"type": "string"}}}  # fmt: skip
    response = {"type": "object", "properties": {"status": {"type": "string"}, "session": session}}
    tools = (
        ToolSchema(name="start_session", raw_name="start_session", description="Start a debugging session for a program.", kind=ToolKind.CREATE,
                   entity="sessions", parameters={"type": "object", "properties": {"program": {"type": "string"}},
                                                  "required": ["program"]}, response=response),
        ToolSchema(name="find_sessions", raw_name="find_sessions", description="Find debugging sessions.",
                   kind=ToolKind.READ, entity="sessions", response=response,
                   parameters={"type": "object", "properties": {"gdb_pid": {"type": "integer"},
                                                                "breakpoint_ref": {"type": "string"}}}),
    )  # fmt: skip
    return RefactoredToolset(toolset_id="dbg", name="Debugger", tools=tools,
                             name_map={t.name: t.name for t in tools})  # fmt: skip


def test_a_created_record_gets_the_values_the_server_assigns(worker: SandboxWorker) -> None:
    rt = _debugger()
    db = synthesize_database(rt, seed=0)
    stored = list(db["sessions"].values())
    worker.load(generate_tools_source(rt, db), db)
    first = worker.call("start_session", {"program": "./app"})["session"]
    second = worker.call("start_session", {"program": "./app"})["session"]
    pids = [r["gdb_pid"] for r in stored]
    assert first["gdb_pid"] == max(pids) + 1 and second["gdb_pid"] == first["gdb_pid"] + 1
    refs = {r.get("breakpoint_ref") for r in stored}
    if any(any(ch.isdigit() for ch in str(r)) for r in refs):  # shaped like the stored refs, new, and per record
        assert first["breakpoint_ref"] not in refs and first["breakpoint_ref"] != second["breakpoint_ref"]
        assert len(first["breakpoint_ref"]) == len(next(iter(refs)))
    assert first["program"] == "./app"  # what the caller gave is kept as given
