"""`gust env`: list the tools of a generated environment, call one tool, serve it over MCP stdio, or pull one
from a published GUST dataset.

Exit codes: 0 = the tool ran (its output may be a structured error, e.g. invalid arguments); 2 = the environment
cannot be loaded (missing folder, invalid schemas, tools module rejected); 3 = sandbox fault (timeout, memory).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from envgen.runtime import Environment
from gustforge.errors import CodegenError, InputError, SandboxError, SandboxViolation, SchemaError
from gustforge.sandbox import SandboxLimits

__all__ = ["app"]

logger = logging.getLogger(__name__)

app = typer.Typer(help="Run, inspect, serve or pull a generated tool environment.", no_args_is_help=True,
                  rich_markup_mode=None)  # fmt: skip

_LOAD_ERRORS = (InputError, SchemaError, CodegenError, SandboxViolation)
EnvDir = Annotated[Path, typer.Argument(help="Environment folder (OUT/envs/<env_id>).")]
Cpu = Annotated[float, typer.Option(help="CPU seconds per call.", min=0.1)]
Memory = Annotated[int, typer.Option(help="Memory limit of the sandbox worker, MB (at least 64).", min=64)]
Wall = Annotated[float, typer.Option(help="Wall-clock seconds per call.", min=0.1)]


def _fail(code: int, exc: Exception) -> typer.Exit:
    typer.echo(json.dumps({"status": "error", "message": f"{type(exc).__name__}: {exc}"}), err=True)
    return typer.Exit(code)


def _load(env_dir: Path) -> Environment:
    try:
        return Environment.load(env_dir)
    except _LOAD_ERRORS as exc:
        raise _fail(2, exc) from exc


def _parse_args(raw: str) -> tuple[dict[str, Any] | None, str]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, f"invalid arguments: --args is not JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"invalid arguments: --args must be a JSON object, got {type(value).__name__}"
    return value, ""


@app.command("run")
def run(
    env_dir: EnvDir,
    tool: Annotated[str, typer.Argument(help="Tool name.")],
    args: Annotated[str, typer.Option("--args", help="Tool arguments as a JSON object.")] = "{}",
    cpu_seconds: Cpu = 5.0,
    memory_mb: Memory = 512,
    wall_seconds: Wall = 10.0,
) -> None:
    """Call TOOL once on a fresh copy of the environment's DB and print its JSON output."""
    env = _load(env_dir)
    parsed, problem = _parse_args(args)
    if parsed is None:
        typer.echo(json.dumps({"status": "error", "message": problem}, indent=2))
        return
    limits = SandboxLimits(cpu_seconds=cpu_seconds, memory_mb=memory_mb, wall_seconds=wall_seconds)
    try:
        with env.session(limits) as session:
            output = session.call(tool, parsed)
    except _LOAD_ERRORS as exc:
        raise _fail(2, exc) from exc
    except SandboxError as exc:
        raise _fail(3, exc) from exc
    typer.echo(json.dumps(output, indent=2, ensure_ascii=False))


def _type_of(spec: Any) -> str:
    return str(spec.get("type", "any")) if isinstance(spec, dict) else "any"


@app.command("tools")
def tools(
    env_dir: EnvDir,
    as_json: Annotated[bool, typer.Option("--json", help="Print the OpenAI function schemas as JSON.")] = False,
) -> None:
    """List the environment's tools: name, kind, required and optional arguments (or the full schemas, --json)."""
    env = _load(env_dir)
    if as_json:
        typer.echo(json.dumps([schema.openai_tool() for schema in env.schemas], indent=2, ensure_ascii=False))
        return
    for schema in env.schemas:
        properties = schema.parameters.get("properties") or {}
        required = set(schema.parameters.get("required") or [])
        args = [f"{name}{'' if name in required else '?'}: {_type_of(spec)}" for name, spec in properties.items()]
        typer.echo(f"{schema.name}({', '.join(args)})  [{schema.kind}]")
        if schema.description:
            typer.echo(f"    {schema.description}")


@app.command("pull")
def pull(
    source: Annotated[str, typer.Argument(help="Hub dataset repo ORG/NAME, or a local exported GUST folder.")],
    env_id: Annotated[str, typer.Argument(help="Environment id (a row's env_id).")],
    to: Annotated[Path, typer.Option("--to", help="Folder that receives <env_id>/.")] = Path("envs"),
) -> None:
    """Restore a runnable environment from a published GUST dataset (its envs/<env_id>/ folder)."""
    from data.hub import pull_env
    from gustforge.errors import GustError

    try:
        target = pull_env(source, env_id, to)
    except GustError as exc:
        raise _fail(2, exc) from exc
    except Exception as exc:  # the Hub: unknown repo, no network, no access
        raise _fail(2, exc) from exc
    typer.echo(str(target))


@app.command("serve")
def serve(
    env_dir: EnvDir,
    cpu_seconds: Cpu = 5.0,
    memory_mb: Memory = 512,
    wall_seconds: Wall = 10.0,
) -> None:
    """Serve the environment over MCP stdio (one client session with its own live DB)."""
    from envgen.mcp_server import serve_stdio  # lazy: the MCP SDK is only needed here

    env = _load(env_dir)
    limits = SandboxLimits(cpu_seconds=cpu_seconds, memory_mb=memory_mb, wall_seconds=wall_seconds)
    try:
        serve_stdio(env, limits)
    except _LOAD_ERRORS as exc:
        raise _fail(2, exc) from exc
    except SandboxError as exc:
        raise _fail(3, exc) from exc


if __name__ == "__main__":
    app()
