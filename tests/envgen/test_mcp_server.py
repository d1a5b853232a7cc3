"""MCP serving of the tiny orders env: in-memory with the low-level server, and a real stdio subprocess."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from envgen.mcp_server import build_server
from envgen.runtime import Environment
from gustforge.sandbox import SandboxLimits

REPO = Path(__file__).resolve().parents[2]
TINY = Path(__file__).resolve().parent / "fixtures" / "tiny_env"
FAST = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)


async def _exercise(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    calls = {
        "first_cancel": await client.call_tool("cancel_order", {"order_id": "ORD-1001"}),
        "second_cancel": await client.call_tool("cancel_order", {"order_id": "ORD-1001"}),
        "get": await client.call_tool("get_order", {"order_id": "ORD-1001"}),
        "bad_args": await client.call_tool("cancel_order", {"order_id": 5}),
        "unknown": await client.call_tool("nope", {}),
    }
    return {"tools": listed.tools, **calls}


def _check(seen: dict[str, Any], env: Environment) -> None:
    assert [(t.name, t.input_schema) for t in seen["tools"]] == [(s.name, s.parameters) for s in env.schemas]
    assert {t.name: t.annotations.read_only_hint for t in seen["tools"]}["get_order"] is True
    first = seen["first_cancel"]
    assert not first.is_error and first.structured_content["refund"] == 25.0
    assert json.loads(first.content[0].text) == first.structured_content
    assert seen["second_cancel"].is_error  # state carried over: already cancelled
    assert "cannot be cancelled" in seen["second_cancel"].structured_content["message"]
    assert seen["get"].structured_content["order"]["status"] == "cancelled"
    assert seen["bad_args"].is_error
    assert seen["bad_args"].content[0].text.count("invalid arguments: order_id: 5 is not of type 'string'") == 1
    assert seen["unknown"].is_error and "unknown tool 'nope'" in seen["unknown"].content[0].text


def test_in_memory_server() -> None:
    env = Environment.load(TINY)

    async def main() -> dict[str, Any]:
        with env.session(FAST) as session:
            async with Client(build_server(env, session)) as client:
                return await _exercise(client)

    _check(anyio.run(main), env)


def test_sandbox_fault_is_an_error_result() -> None:
    env = Environment.load(TINY)
    source = env.tools_source + "\n\ndef get_order(db, order_id):\n    while True:\n        pass\n"
    hanging = Environment.from_parts("hang", env.schemas, env.initial_db, source)

    async def main() -> Any:
        with hanging.session(SandboxLimits(cpu_seconds=30, memory_mb=256, wall_seconds=1)) as session:
            async with Client(build_server(hanging, session)) as client:
                faulty = await client.call_tool("get_order", {"order_id": "ORD-1001"})
                after = await client.call_tool("list_orders", {})
                return faulty, after

    faulty, after = anyio.run(main)
    assert faulty.is_error and faulty.content[0].text.startswith("{") and "SandboxTimeout" in faulty.content[0].text
    assert not after.is_error and after.structured_content["count"] == 3


def test_stdio_subprocess_via_cli() -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "flows.cli_env", "serve", str(TINY)], cwd=str(REPO)
    )

    async def main() -> dict[str, Any]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                return await _exercise(client)

    _check(anyio.run(main), Environment.load(TINY))


@pytest.mark.parametrize("missing", ["nope"])
def test_serve_missing_env_exits_2(missing: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flows.cli_env import app

    result = CliRunner().invoke(app, ["serve", str(tmp_path / missing)])
    assert result.exit_code == 2
