"""Serve an `Environment` over MCP (stdio) with the official SDK's low-level `Server` (mcp 2.3).

The low-level server takes the tools' JSON schemas exactly (`list_tools` shows them verbatim); arguments are
validated with jsonschema inside the sandbox worker (under its limits) before any tool code runs. Every result
carries the tool's output dict both as text and as `structured_content`; invalid arguments, unknown tools, tool
errors (`status == "error"`) and sandbox faults come back with `is_error=True` and a message, so an agent can read
and correct them.

State: one stdio server process serves one client session, so the server owns one `EnvSession` started from a
copy of the initial DB; state carries across calls and dies with the process. A new connection = a new process.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from data.models import ToolKind, ToolSchema
from envgen.runtime import Environment, EnvSession
from gustforge.errors import SandboxError
from gustforge.sandbox import SandboxLimits

__all__ = ["build_server", "serve_stdio", "mcp_tool"]

logger = logging.getLogger(__name__)


def mcp_tool(schema: ToolSchema) -> types.Tool:
    """The MCP tool definition of a schema: exact input schema, read-only/destructive hints from its kind."""
    annotations = types.ToolAnnotations(
        read_only_hint=schema.kind == ToolKind.READ,
        destructive_hint=schema.kind == ToolKind.DELETE,
    )
    return types.Tool(
        name=schema.name, description=schema.description, input_schema=schema.parameters, annotations=annotations
    )


def _result(output: dict[str, Any], *, is_error: bool) -> types.CallToolResult:
    text = json.dumps(output, ensure_ascii=False, sort_keys=True)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=output, is_error=is_error
    )


def _error(message: str) -> types.CallToolResult:
    return _result({"status": "error", "message": message}, is_error=True)


def build_server(env: Environment, session: EnvSession) -> Server[Any]:
    """A low-level MCP server exposing `env`'s tools, executing them in `session`.

    Args:
        env: The environment (its schemas are listed verbatim).
        session: The live session the calls run in (owned by the caller).

    Returns:
        An `mcp.server.lowlevel.Server`; run it on any transport (stdio, in-memory for tests).
    """
    tools = [mcp_tool(schema) for schema in env.schemas]

    async def on_list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, args = params.name, params.arguments or {}
        if env.schema(name) is None:
            return _error(f"unknown tool {name!r}; available: {', '.join(env.tool_names)}")
        try:  # the session validates the arguments inside its worker, under the sandbox's limits
            output = await anyio.to_thread.run_sync(session.call, name, args)
        except SandboxError as exc:
            logger.warning("env %s tool %s: sandbox fault: %s", env.env_id, name, exc)
            return _error(f"{type(exc).__name__}: {exc}")
        return _result(output, is_error=output.get("status") == "error")

    return Server(f"gust-env-{env.env_id}", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def _serve(env: Environment, limits: SandboxLimits | None) -> None:
    with env.session(limits) as session:
        server = build_server(env, session)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(env: Environment, limits: SandboxLimits | None = None) -> None:
    """Serve `env` over stdio until the client disconnects (one session, one live DB)."""
    anyio.run(_serve, env, limits)
