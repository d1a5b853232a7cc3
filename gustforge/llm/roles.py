"""LLM roles are data: (prompt template, output JSON schema, deterministic offline implementation).

`run_role` picks the backend named by the client's settings in `ROLE_BACKENDS`. The openai backend renders
the prompt, calls the endpoint, parses the JSON with bounded repair, validates it, and re-asks with the
validation error at most `max_repair_rounds` times. Stage modules define their own `LLMRole` objects; there
is no global role registry.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError

from gustforge.errors import ConfigError, InputError, LLMOutputError
from gustforge.llm.client import LLMClient
from gustforge.llm.json_repair import repair_json
from gustforge.registry import Registry
from gustforge.schemas import safe_validator

__all__ = [
    "LLMRole",
    "RoleBackend",
    "ROLE_BACKENDS",
    "render_messages",
    "validate_output",
    "run_role",
    "run_role_async",
]

_SCHEMA_INSTRUCTION = (
    "\n\nReply with one JSON object and nothing else. It must validate against this JSON schema:\n{schema}"
)
_REASK = (
    "Your previous reply was rejected: {error}\n"
    "Reply again with only one JSON object that validates against the schema given in the system message."
)


@dataclass(frozen=True, eq=False)
class LLMRole:
    """One LLM job with a deterministic offline twin.

    Attributes:
        name: Short id used in logs and error messages (e.g. "refactor", "tdg_judge").
        system_prompt: System message; the output schema is appended to it automatically.
        user_template: `str.format` template over the `inputs` keys (write literal braces as `{{` `}}`).
            Non-string input values are inserted as canonical JSON.
        output_schema: JSON schema the reply object must satisfy.
        offline: Deterministic implementation taking the same inputs and returning a valid object.
        params: Extra request fields for this role (`max_tokens`, `response_format`, ...).
    """

    name: str
    system_prompt: str
    user_template: str
    output_schema: dict[str, Any]
    offline: Callable[[dict[str, Any]], dict[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            Draft202012Validator.check_schema(self.output_schema)
        except JSONSchemaError as exc:
            raise ConfigError(f"role {self.name!r}: invalid output_schema: {exc.message}") from exc

    @property
    def template_fields(self) -> frozenset[str]:
        """Names the user template reads from `inputs`."""
        return frozenset(
            name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(self.user_template) if name
        )


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def render_messages(role: LLMRole, inputs: Mapping[str, Any]) -> list[dict[str, str]]:
    """The system + user messages for `inputs`; deterministic, so equal inputs hit the same cache entry.

    Raises:
        InputError: `inputs` lacks a field the template uses.

    Example:
        >>> role = LLMRole("echo", "Be brief.", "Say {word}.", {"type": "object"}, lambda i: {})
        >>> render_messages(role, {"word": "hi"})[1]
        {'role': 'user', 'content': 'Say hi.'}
    """
    missing = sorted(role.template_fields - set(inputs))
    if missing:
        raise InputError(f"role {role.name!r}: inputs lack template fields {missing}")
    schema = json.dumps(role.output_schema, ensure_ascii=False, sort_keys=True)
    system = role.system_prompt + _SCHEMA_INSTRUCTION.format(schema=schema)
    user = role.user_template.format(**{k: _as_text(v) for k, v in inputs.items()})
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def validate_output(role: LLMRole, value: Any) -> dict[str, Any]:
    """Return `value` if it validates against `role.output_schema`.

    Raises:
        LLMOutputError: With the first (deepest-path) validation errors, for the re-ask message.
    """
    validator = safe_validator(role.output_schema, Draft202012Validator)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    if errors:
        detail = "; ".join(f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors[:5])
        raise LLMOutputError(f"role {role.name!r}: output does not match schema: {detail}")
    return value


class RoleBackend(Protocol):
    """How one backend runs a role; looked up by `LLMSettings.backend` in `ROLE_BACKENDS`."""

    def run(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]: ...

    async def arun(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]: ...


class _OfflineBackend:
    """Calls the role's deterministic twin; no event loop, no HTTP."""

    def run(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
        return validate_output(role, role.offline(dict(inputs)))

    async def arun(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
        return self.run(role, inputs, client)


class _OpenAIBackend:
    """Renders the prompt, calls the endpoint, repairs/validates JSON, re-asks with the error.

    Only a reply that validated is cached, under the key of the first request (so a rerun answers from the cache
    without the re-ask); a cached reply that no longer validates is re-drawn once. Roles named in
    `settings.refresh_roles` skip the cache lookup.
    """

    def run(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
        return client.run_sync(self.arun(role, inputs, client))

    async def arun(self, role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
        messages: list[dict[str, Any]] = list(render_messages(role, inputs))
        options = client.settings.role_options(role.name)
        params: dict[str, Any] = dict(role.params)
        for name in ("max_tokens", "temperature", "chat_template_kwargs"):
            value = getattr(options, name)
            if value is not None:
                params.setdefault(name, value)
        refresh = role.name in client.settings.refresh_roles
        rounds = client.settings.max_repair_rounds
        round_no = 0
        first_key: str | None = None
        while True:
            result = await client.achat(messages, role=role.name, store=False, refresh=refresh,
                                        timeout_s=options.timeout_s, priority=options.priority or 0,
                                        **params)  # fmt: skip
            first_key = first_key or result.key
            try:
                if not result.content:
                    raise LLMOutputError(f"role {role.name!r}: empty reply (finish_reason={result.finish_reason})")
                value = validate_output(role, repair_json(result.content))
            except LLMOutputError as exc:
                if result.cached and not refresh:  # stale entry (e.g. the schema changed): draw it again
                    refresh = True
                    continue
                if round_no == rounds:
                    raise LLMOutputError(f"{exc} (after {rounds} repair round(s))") from exc
                round_no += 1
                messages += [
                    {"role": "assistant", "content": result.content or ""},
                    {"role": "user", "content": _REASK.format(error=exc)},
                ]
                continue
            client.remember(result, first_key)
            return value


ROLE_BACKENDS: Registry[RoleBackend] = Registry("LLM backend")
ROLE_BACKENDS.add("offline", _OfflineBackend())
ROLE_BACKENDS.add("openai", _OpenAIBackend())


async def run_role_async(role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
    """Run `role` on `inputs` with the backend named by `client.settings.backend`.

    Args:
        role: The role to run.
        inputs: Template fields (openai) / arguments of `role.offline` (offline).
        client: Supplies the settings and, for the openai backend, the endpoint.

    Returns:
        An object valid against `role.output_schema`.

    Raises:
        InputError: `inputs` lacks a template field.
        LLMOutputError: No valid object after repair and re-asks (or the offline twin is wrong).
        LLMError: The endpoint failed for good.
    """
    return await ROLE_BACKENDS.get(client.settings.backend).arun(role, inputs, client)


def run_role(role: LLMRole, inputs: Mapping[str, Any], client: LLMClient) -> dict[str, Any]:
    """Blocking `run_role_async` (same arguments, result, errors); see `LLMClient` for threading."""
    return ROLE_BACKENDS.get(client.settings.backend).run(role, inputs, client)
