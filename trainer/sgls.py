"""SGLS: the schema-guided tool a rollout talks to (a `verl.tools.base_tool.BaseTool`).

One registered verl tool (`sgls`) serves every tool name of every row: the agent loop passes the emitted name as
`original_tool_name`. Per call:

Stage 1 — deterministic validation against the row's own tool schemas (the original JSON, never verl's lossy
`OpenAIFunctionToolSchema`), with fixed error texts:
  ``Tool '<name>' not found in the current available tools set.``                   (SLCA reference text)
  ``Tool '<name>' missing required parameters: ['a', 'b']``                          (SLCA reference text)
  ``Tool '<name>' invalid parameter '<path>': <jsonschema message>``                 (type / enum / const errors)
Stage 2 — a backend from the `SGLS_BACKENDS` registry, one instance per trajectory:
  ``env``    the trajectory's own GUST environment (`envgen.runtime` EnvSession; stateful across calls),
  ``llm``    template-constrained mocking over an OpenAI-compatible endpoint (tool definition + call →
             `<tool_response>…</tool_response>`; tag extraction, format retries, transport retries in the client),
  ``hybrid`` env when the row names an environment, else llm.
Observations are truncated to `max_observation_chars` characters (middle by default, reference markers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from uuid import uuid4

import jsonschema
from pydantic import BaseModel, ConfigDict, Field
from referencing.exceptions import Unresolvable
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from gustforge.errors import ConfigError, GustError, LLMError
from gustforge.registry import Registry
from gustforge.schemas import safe_validator

__all__ = [
    "SGLSConfig",
    "LLMMockConfig",
    "SGLSTool",
    "SGLS_BACKENDS",
    "Backend",
    "validate_call",
    "truncate_observation",
    "extract_tool_response",
    "render_mock_prompt",
    "tool_index",
    "SGLS_TOOL_SCHEMA",
]

logger = logging.getLogger(__name__)

SGLS_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "sgls",
        "description": "Schema-guided tool simulator: executes any tool of the row's catalogue.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}
_CHECKED_VALIDATORS = frozenset({"type", "enum", "const"})
_TAGS = ("tool_response", "tool_call")


class LLMMockConfig(BaseModel):
    """The `llm` backend's endpoint and decoding (reference: T=0.6, 4096 tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.6
    max_tokens: int = 4096
    timeout_s: float = 120.0
    max_retries: int = 2
    format_retries: int = Field(1, ge=0, description="Extra samples when the reply has no <tool_response> tag.")


class SGLSConfig(BaseModel):
    """Tool config (the `config:` block of `trainer/configs/tools.yaml`; `type: native` is verl's)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    backend: str = "hybrid"
    max_observation_chars: int = Field(2048, ge=16)
    truncate_side: Literal["middle", "left", "right"] = "middle"
    env_root: str = "."
    sandbox_cpu_seconds: float = 5.0
    sandbox_memory_mb: int = 512
    sandbox_wall_seconds: float = 10.0
    llm: LLMMockConfig = LLMMockConfig()


def tool_index(tool_schemas: str | list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Name → full OpenAI tool dict (last one wins on duplicates, as in the reference)."""
    tools = json.loads(tool_schemas) if isinstance(tool_schemas, str) else list(tool_schemas)
    return {tool["function"]["name"]: tool for tool in tools}


def _path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<root>"


def validate_call(tools: Mapping[str, Mapping[str, Any]], name: str, args: Mapping[str, Any]) -> str | None:
    """Stage-1 validation of one call.

    Args:
        tools: The row's tools by name (`tool_index`).
        name: The emitted tool name.
        args: The emitted arguments.

    Returns:
        The fixed error text, or None when the call may go to the backend.
    """
    tool = tools.get(name)
    if tool is None:
        return f"Tool '{name}' not found in the current available tools set."
    if not isinstance(args, Mapping):
        return f"Tool '{name}' invalid parameter '<root>': arguments must be a JSON object"
    params = tool.get("function", {}).get("parameters") or {}
    missing = [key for key in params.get("required") or [] if key not in args]
    if missing:
        return f"Tool '{name}' missing required parameters: {missing}"
    try:
        validator = safe_validator(params)
        errors = [e for e in validator.iter_errors(dict(args)) if e.validator in _CHECKED_VALIDATORS]
    except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType, Unresolvable, TypeError, ValueError, KeyError):
        return None  # a malformed raw schema cannot veto a call; the backend decides
    if not errors:
        return None
    first = min(errors, key=lambda e: (_path(e), e.validator))
    return f"Tool '{name}' invalid parameter '{_path(first)}': {first.message}"


def truncate_observation(text: str, limit: int, side: str = "middle") -> str:
    """Character truncation with verl's side convention and markers: `middle` keeps head and tail, `left` cuts the
    left (keeps the tail), `right` cuts the right (keeps the head)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def extract_tool_response(text: str) -> tuple[str, bool]:
    """Unwrap the mocker's reply (reference post-processing, looped until stable).

    Returns:
        (observation text, whether a complete `<tool_response>` pair was found).
    """
    tagged = f"<{_TAGS[0]}>" in text and f"</{_TAGS[0]}>" in text
    previous = None
    while previous != text:
        previous, text = text, text.strip()
        for tag in _TAGS:
            open_tag, close_tag = f"<{tag}>", f"</{tag}>"
            if open_tag in text and close_tag in text:
                text = text.rsplit(open_tag, 1)[1].split(close_tag, 1)[0]
                break
            if open_tag in text:
                text = text.rsplit(open_tag, 1)[1]
                break
    return text.strip(), tagged


_MOCK_PROMPT = """You are the backend server of an API, not an assistant. You receive one tool call and return \
exactly what the real API would return for it, as JSON.

Rules:
- Output ONLY <tool_response>{{json}}</tool_response>. No prose, no markdown fences, never a <tool_call>.
- Follow the tool definition: its parameters and purpose decide the shape and content of the result.
- Return realistic, self-consistent values; report invalid input the way an API reports errors.

Examples:
Input: <tool_call>[{{"name": "calculator-add", "parameters": {{"a": 2, "b": 3}}, "depend_on": []}}]</tool_call>
Output: <tool_response>{{"result": 5}}</tool_response>

Input: <tool_call>[{{"name": "weather-current", "parameters": {{"city": "Oslo"}}, "depend_on": []}}]</tool_call>
Output: <tool_response>{{"city": "Oslo", "temperature_c": 4.5, "condition": "light rain"}}</tool_response>

Input: <tool_call>[{{"name": "web-search", "parameters": {{"query": "python release"}}, "depend_on": []}}]</tool_call>
Output: <tool_response>{{"results": [{{"title": "Python 3.13 released", "url": "https://www.python.org"}}]}}\
</tool_response>

==========
NOW EXECUTE

Tool Definition:
{definition}

Incoming Request:
{request}

Answer in <tool_response>...</tool_response> format only."""


def render_mock_prompt(tool: Mapping[str, Any], name: str, args: Mapping[str, Any]) -> str:
    """The single user message sent to the mocking LLM (tool definition JSON + the call block)."""
    request = "<tool_call>" + json.dumps(
        [{"name": name, "parameters": dict(args), "depend_on": []}], ensure_ascii=False
    ) + "</tool_call>"
    return _MOCK_PROMPT.format(definition=json.dumps(tool, ensure_ascii=False, indent=2), request=request)


class Backend(Protocol):
    name: str

    async def call(self, tool: Mapping[str, Any], name: str, args: dict[str, Any]) -> str: ...

    def db_hash(self) -> str | None: ...

    async def close(self) -> None: ...


@dataclass
class _EnvBackend:
    """The trajectory's own environment session: state carries across its calls, never across trajectories."""

    session: Any
    name: str = "env"

    @classmethod
    async def open(cls, env_dir: Path, config: SGLSConfig) -> _EnvBackend:
        from envgen.runtime import Environment
        from gustforge.sandbox import SandboxLimits

        limits = SandboxLimits(
            cpu_seconds=config.sandbox_cpu_seconds,
            memory_mb=config.sandbox_memory_mb,
            wall_seconds=config.sandbox_wall_seconds,
        )

        def start() -> Any:
            session = Environment.load(env_dir).session(limits=limits)
            return session.__enter__()

        return cls(await asyncio.to_thread(start))

    async def call(self, tool: Mapping[str, Any], name: str, args: dict[str, Any]) -> str:
        try:
            result = await asyncio.to_thread(self.session.call, name, args)
        except GustError as exc:
            result = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        return json.dumps(result, ensure_ascii=False)

    def db_hash(self) -> str | None:
        return self.session.db_hash()

    async def close(self) -> None:
        await asyncio.to_thread(self.session.__exit__, None, None, None)


@dataclass
class _LLMBackend:
    client: Any
    config: LLMMockConfig
    name: str = "llm"

    async def call(self, tool: Mapping[str, Any], name: str, args: dict[str, Any]) -> str:
        messages = [{"role": "user", "content": render_mock_prompt(tool, name, args)}]
        text = ""
        for attempt in range(self.config.format_retries + 1):
            params: dict[str, Any] = {"temperature": self.config.temperature, "max_tokens": self.config.max_tokens}
            if attempt:
                params["seed"] = attempt  # a distinct cache key: a new sample, not the cached reply
            reply = await self.client.achat(messages, **params)
            text, tagged = extract_tool_response(reply.content or "")
            if tagged:
                break
        return text

    def db_hash(self) -> str | None:
        return None

    async def close(self) -> None:
        return None


BackendFactory = Callable[["SGLSTool", Mapping[str, Any]], Any]
SGLS_BACKENDS: Registry[BackendFactory] = Registry("sgls backend")


@SGLS_BACKENDS.register("env")
async def _make_env(tool: SGLSTool, create_kwargs: Mapping[str, Any]) -> Backend:
    env_dir = str(create_kwargs.get("env_dir") or "")
    if not env_dir:
        raise ConfigError("the env backend needs create_kwargs.env_dir (this row has no environment)")
    path = Path(env_dir)
    return await _EnvBackend.open(path if path.is_absolute() else Path(tool.sgls.env_root) / path, tool.sgls)


@SGLS_BACKENDS.register("llm")
async def _make_llm(tool: SGLSTool, create_kwargs: Mapping[str, Any]) -> Backend:
    return _LLMBackend(tool.llm_client(), tool.sgls.llm)


@SGLS_BACKENDS.register("hybrid")
async def _make_hybrid(tool: SGLSTool, create_kwargs: Mapping[str, Any]) -> Backend:
    name = "env" if create_kwargs.get("env_dir") else "llm"
    return await SGLS_BACKENDS.get(name)(tool, create_kwargs)


@dataclass
class _Instance:
    tools: dict[str, dict[str, Any]]
    backend: Backend
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0


class SGLSTool(BaseTool):
    """verl tool: create → one backend per trajectory; execute → stage 1 then stage 2; release → close it."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        # BaseTool.__init__ prints the schema; set its attributes directly instead.
        self.config = dict(config or {})
        self.tool_schema = tool_schema or OpenAIFunctionToolSchema.model_validate(SGLS_TOOL_SCHEMA)
        self.name = self.tool_schema.function.name
        self.sgls = SGLSConfig.model_validate(self.config)
        SGLS_BACKENDS.get(self.sgls.backend)  # fail at load time on a bad backend name
        self._instances: dict[str, _Instance] = {}
        self._client: Any = None

    def llm_client(self) -> Any:
        """The shared LLM client of the `llm` backend (built on first use)."""
        if self._client is None:
            from gustforge.llm import LLMClient, LLMSettings

            llm = self.sgls.llm
            self._client = LLMClient(
                LLMSettings(
                    backend="openai",
                    base_url=llm.base_url,
                    model=llm.model,
                    api_key_env=llm.api_key_env,
                    timeout_s=llm.timeout_s,
                    max_retries=llm.max_retries,
                    temperature=llm.temperature,
                )
            )
        return self._client

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Create the trajectory's instance from `create_kwargs` (`tool_schemas`, optional `env_dir`)."""
        create_kwargs = dict(kwargs.get("create_kwargs") or {})
        instance_id = instance_id or uuid4().hex
        backend = await SGLS_BACKENDS.get(self.sgls.backend)(self, create_kwargs)
        self._instances[instance_id] = _Instance(tool_index(create_kwargs.get("tool_schemas") or "[]"), backend)
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run one call of the trajectory (calls of one instance are serialised: the environment is stateful).

        Args:
            instance_id: From `create`.
            parameters: The call's arguments.
            **kwargs: `original_tool_name` (the emitted tool name); verl's `agent_data` is ignored.

        Returns:
            (observation, step reward 0.0, info with tool_name, stage, backend, error, latency_s).
        """
        instance = self._instances[instance_id]
        name = str(kwargs.get("original_tool_name") or self.name)
        started = time.perf_counter()
        error = validate_call(instance.tools, name, parameters)
        info: dict[str, Any] = {"tool_name": name, "stage": "validation", "backend": instance.backend.name}
        if error is None:
            info["stage"] = "backend"
            async with instance.lock:
                instance.calls += 1
                try:
                    text = await instance.backend.call(instance.tools[name], name, dict(parameters))
                except LLMError as exc:
                    error = f"Error when executing tool: {exc}"
        text = error if error is not None else text
        info.update(error=error is not None, latency_s=time.perf_counter() - started)
        limited = truncate_observation(text, self.sgls.max_observation_chars, self.sgls.truncate_side)
        return ToolResponse(text=limited), 0.0, info

    def db_hash(self, instance_id: str) -> str | None:
        """The current DB hash of an env-backed instance (None for the llm backend)."""
        return self._instances[instance_id].backend.db_hash()

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Close the trajectory's backend (ends its sandbox worker)."""
        instance = self._instances.pop(instance_id, None)
        if instance is not None:
            await instance.backend.close()
