"""Schema refactoring: raw toolset -> executable `RefactoredToolset` (ToolVerse §3.1, App. F.1).

Two backends behind one registry (`REFACTORERS`, keyed by `EnvGenConfig.backend`):
    offline   deterministic normalizer: snake_case unique names, typed parameters, optional parameter cap,
              inferred kind/entity and a response schema with `status`/`message` plus the tool's output keys.
    openai    the paper's "Reproduce Tool Definition" prompt as an `LLMRole`; the reply is validated with
              jsonschema and re-run through the same deterministic checks, or rejected with `RefactorError`.
"""

from __future__ import annotations

import builtins
import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema.exceptions import SchemaError as JSONSchemaError
from jsonschema.validators import validator_for

from data.models import PlanOverride, RawTool, RefactoredToolset, ToolKind, ToolSchema, Toolset
from envgen import prompts
from envgen.config import EnvGenConfig
from envgen.entities import infer_entity, infer_kind, plan_environment, response_schema
from envgen.naming import snake_case, unique_name
from gustforge.errors import LLMError, RefactorError
from gustforge.llm import LLMClient, LLMRole, run_role
from gustforge.registry import Registry
from gustforge.sandbox.policy import FORBIDDEN_NAMES

__all__ = [
    "REFACTORERS",
    "REFACTOR_ROLE",
    "Refactorer",
    "normalize_parameters",
    "refactor_toolset",
    "finalize_tools",
]

logger = logging.getLogger(__name__)

Refactorer = Callable[[Toolset, EnvGenConfig, LLMClient | None], RefactoredToolset]
REFACTORERS: Registry[Refactorer] = Registry("refactor backend")

_TYPE_ALIASES = {
    "str": "string", "text": "string", "int": "integer", "long": "integer", "float": "number",
    "double": "number", "decimal": "number", "bool": "boolean", "list": "array", "tuple": "array",
    "dict": "object", "map": "object",
}  # fmt: skip
_SUPPORTED = {"string", "integer", "number", "boolean", "array", "object"}
_FORMATS = {"date", "date-time", "time", "email", "uri", "url", "uuid"}
# Tool names become module-level functions of the generated code: never shadow a builtin or the `copy` module.
_RESERVED = frozenset(dir(builtins)) | FORBIDDEN_NAMES | {"copy", "db", "kwargs"}
_MAX_DEPTH = 3
_MAX_PARAM_DESCRIPTION = 300
_MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_SPACES = re.compile(r"\s+")


# --------------------------------------------------------------------------------------------- parameters


def _clean_text(text: Any, limit: int) -> str:
    text = _SPACES.sub(" ", _MARKDOWN_IMAGE.sub("", str(text or ""))).strip()
    return text if len(text) <= limit else text[: limit - 12].rstrip() + " [truncated]"


def _pick_type(schema: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The single JSON type of a property (first non-null of a list, first typed anyOf/oneOf branch, ...)."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None:
        for key in ("anyOf", "oneOf", "allOf"):
            branches = [b for b in schema.get(key) or [] if isinstance(b, dict) and b.get("type") not in (None, "null")]
            if branches:
                return _pick_type(
                    {**branches[0], **{k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "allOf")}}
                )
        if "enum" in schema and schema["enum"]:
            kind = _json_type(schema["enum"][0])
        elif "const" in schema:
            kind, schema = _json_type(schema["const"]), {**schema, "enum": [schema["const"]]}
        elif "properties" in schema:
            kind = "object"
        elif "items" in schema:
            kind = "array"
        else:
            kind = "string"
    kind = str(kind).lower()
    return _TYPE_ALIASES.get(kind, kind), schema


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {list: "array", dict: "object"}.get(type(value), "string")


def _matches(value: Any, kind: str) -> bool:
    return _json_type(value) == kind or (kind == "number" and _json_type(value) == "integer")


def _property(schema: Any, path: str, depth: int = 0) -> dict[str, Any]:
    if schema is True or schema == {}:
        return {"type": "string"}
    if not isinstance(schema, dict):
        raise RefactorError(f"invalid_param_schema: {path} is a {type(schema).__name__}, not a schema")
    kind, schema = _pick_type(schema)
    if kind not in _SUPPORTED:
        raise RefactorError(f"unsupported_type: {path} has type {kind!r}")
    out: dict[str, Any] = {"type": kind}
    if schema.get("description"):
        out["description"] = _clean_text(schema["description"], _MAX_PARAM_DESCRIPTION)
    enum = [v for v in schema.get("enum") or [] if _matches(v, kind)] if isinstance(schema.get("enum"), list) else []
    if enum:
        out["enum"] = list(dict.fromkeys(json.dumps(v, sort_keys=True) for v in enum))
        out["enum"] = [json.loads(v) for v in out["enum"]]
    if kind == "string" and schema.get("format") in _FORMATS:
        out["format"] = "uri" if schema["format"] == "url" else schema["format"]
    for bound in ("minimum", "maximum"):
        if kind in ("integer", "number") and _json_type(schema.get(bound)) in ("integer", "number"):
            out[bound] = schema[bound]
    if "default" in schema and _matches(schema["default"], kind):
        out["default"] = schema["default"]
    if kind == "array":
        items = schema.get("items")
        items = items[0] if isinstance(items, list) and items else items
        out["items"] = (
            _property(items, f"{path}[]", depth + 1)
            if isinstance(items, dict) and depth < _MAX_DEPTH
            else {"type": "string"}
        )
    if kind == "object" and isinstance(schema.get("properties"), dict) and depth < _MAX_DEPTH:
        out["properties"] = {str(k): _property(v, f"{path}.{k}", depth + 1) for k, v in schema["properties"].items()}
        required = [r for r in schema.get("required") or [] if r in out["properties"]]
        if required:
            out["required"] = required
    return out


def normalize_parameters(
    parameters: dict[str, Any], *, tool: str, max_params: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Normalize a raw parameters schema into a typed, valid JSON schema of type object.

    Top-level parameter names become unique snake_case identifiers; every required parameter is kept; with
    `max_params`, optional parameters beyond the cap are dropped and returned so the caller can note them.

    Args:
        parameters: raw JSON schema of the tool's arguments (refs already resolved by ingest).
        tool: tool name, for error messages.
        max_params: cap on the number of parameters, or None.

    Returns:
        (schema, dropped optional parameter names).

    Raises:
        RefactorError: `unsupported_type`, `invalid_param_schema`, `too_many_required_params`.
    """
    raw_props = parameters.get("properties") or {}
    raw_required = [r for r in parameters.get("required") or [] if isinstance(r, str)]
    names: dict[str, str] = {}
    for raw in [*raw_props, *[r for r in raw_required if r not in raw_props]]:
        names[raw] = unique_name(snake_case(str(raw), fallback="arg"), set(names.values()))
    props = {names[raw]: _property(schema, f"{tool}.{raw}") for raw, schema in raw_props.items()}
    for raw in raw_required:
        props.setdefault(names[raw], {"type": "string", "description": f"{raw} (declared required, untyped)"})
    required = list(dict.fromkeys(names[r] for r in raw_required))
    dropped: list[str] = []
    if max_params is not None and len(props) > max_params:
        if len(required) > max_params:
            raise RefactorError(f"too_many_required_params: {tool} has {len(required)} > max_params={max_params}")
        optional = [p for p in props if p not in required]
        keep = set(required) | set(optional[: max_params - len(required)])
        dropped = [p for p in props if p not in keep]
        props = {k: v for k, v in props.items() if k in keep}
    schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
    try:
        validator_for(schema).check_schema(schema)
    except JSONSchemaError as exc:
        raise RefactorError(f"invalid_param_schema: {tool}: {exc.message}") from exc
    return schema, dropped


# --------------------------------------------------------------------------------------------- offline backend


def _strip_server_prefix(names: list[str], toolset_name: str) -> list[str]:
    """Toucan rows prefix every tool with the server slug (`united_states_weather_get_alerts`): drop it."""
    for stem in dict.fromkeys(
        (snake_case(toolset_name, fallback="tool"), snake_case(toolset_name.lower(), fallback="tool"))
    ):
        prefix = stem + "_"
        if len(names) >= 2 and all(n.startswith(prefix) and len(n) > len(prefix) for n in names):
            return [snake_case(n[len(prefix) :], fallback="tool") for n in names]
    return names


def _tool_names(tools: tuple[RawTool, ...], toolset_name: str) -> list[str]:
    base = _strip_server_prefix([snake_case(t.name, fallback="tool") for t in tools], toolset_name)
    base = [f"{n}_tool" if n in _RESERVED else n for n in base]
    taken: set[str] = set()
    names = []
    for name in base:
        name = unique_name(name, taken)
        taken.add(name)
        names.append(name)
    return names


def _draft_tool(raw: RawTool, name: str, cfg: EnvGenConfig, notes: dict[str, str] | None = None) -> ToolSchema:
    """The drafted tool; a pipeline note (dropped parameters) goes into `notes`, never into the description."""
    parameters, dropped = normalize_parameters(raw.parameters, tool=name, max_params=cfg.max_params)
    description = _clean_text(raw.description, cfg.max_description_chars) or name.replace("_", " ").capitalize() + "."
    if dropped and notes is not None:
        notes[name] = f"optional parameters dropped by the refactorer (max_params={cfg.max_params}): " + ", ".join(
            dropped
        )
    kind = infer_kind(name)
    entity = infer_entity(name, parameters, kind)
    return ToolSchema(name=name, raw_name=raw.name, description=description, parameters=parameters,
                      response={"type": "object"}, kind=kind, entity=entity)  # fmt: skip


def finalize_tools(
    tools: list[ToolSchema], *, keep_responses: bool = False, log_only: tuple[str, ...] = (),
    overrides: Mapping[str, PlanOverride] | None = None,
) -> tuple[ToolSchema, ...]:  # fmt: skip
    """Settle kinds/entities against the environment plan and attach response schemas.

    Args:
        tools: drafted tools with names, parameters, kinds and entities.
        keep_responses: keep each tool's own response schema (LLM backend), only forcing status/message in.
        log_only: tools forced to the log-only fallback (see `plan_environment`).
        overrides: behaviours the LLM planner chose over the name-based drafts (see `plan_environment`).

    Returns:
        The tools with final `kind`, `entity` and `response`.
    """
    plan = plan_environment(tools, log_only, overrides)
    out = []
    for tool, tool_plan in zip(tools, plan.tools, strict=True):
        entity = tool_plan.entity or next(iter(tool_plan.ref_params.values()), None)
        response = response_schema(tool_plan, plan.entity(tool_plan.entity))
        if keep_responses:
            response = _merge_response(tool.response, response)
        out.append(tool.model_copy(update={"kind": tool_plan.kind, "entity": entity, "response": response}))
    return tuple(out)


def _merge_response(own: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    props = dict(own.get("properties") or {}) if isinstance(own, dict) else {}
    props.update({k: v for k, v in template["properties"].items() if k in ("status", "message") or k not in props})
    return {"type": "object", "properties": props, "required": ["status", "message"]}


@REFACTORERS.register("offline")
def _refactor_offline(toolset: Toolset, cfg: EnvGenConfig, client: LLMClient | None = None) -> RefactoredToolset:
    names = _tool_names(toolset.tools, toolset.name)
    notes: dict[str, str] = dict(toolset.notes)
    pairs = _draft_all([(raw, name, None) for raw, name in zip(toolset.tools, names, strict=True)], cfg, notes)
    return RefactoredToolset(
        toolset_id=toolset.toolset_id,
        name=toolset.name,
        description=_clean_text(toolset.description, cfg.max_description_chars),
        tools=finalize_tools([draft for draft, _ in pairs]),
        name_map={raw.name: draft.name for draft, raw in pairs},
        notes=notes,
    )


def _draft_all(
    items: list[tuple[RawTool, str, dict[str, Any] | None]], cfg: EnvGenConfig, notes: dict[str, str]
) -> list[tuple[ToolSchema, RawTool]]:
    """Draft every tool; a few tools above the parameter cap are dropped with a note instead of rejecting the
    toolset. The toolset is still rejected (`too_many_required_params`, reasoned) when the dropped tools are more
    than half of it or leave fewer than `min_tools`: then the cap, not one tool, is the problem."""
    out: list[tuple[ToolSchema, RawTool]] = []
    over: list[str] = []
    for raw, name, response in items:
        try:
            draft = _draft_tool(raw, name, cfg, notes)
        except RefactorError as exc:
            if not str(exc).startswith("too_many_required_params"):
                raise
            over.append(name)
            notes[name] = f"tool dropped by the refactorer: {str(exc).partition(': ')[2]}"
            continue
        out.append((draft.model_copy(update={"response": response}) if response is not None else draft, raw))
    if over and (len(over) * 2 > len(items) or len(out) < cfg.min_tools):
        raise RefactorError(
            f"too_many_required_params: {len(over)} of {len(items)} tools have more required parameters than "
            f"max_params={cfg.max_params} ({', '.join(over[:5])})"
        )
    return out


# --------------------------------------------------------------------------------------------- LLM backend

_FUNCTION_SCHEMA = {
    "type": "object",
    "required": ["name", "description", "parameters", "response"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "description": {"type": "string"},
        "parameters": {"type": "object"},
        "response": {"type": "object"},
    },
}
_REFACTOR_OUTPUT = {
    "type": "object",
    "required": ["description", "tools"],
    "properties": {
        "description": {"type": "string"},
        "tools": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["type", "function", "source_name"],
                "properties": {
                    "type": {"const": "function"},
                    "source_name": {"type": "string"},
                    "function": _FUNCTION_SCHEMA,
                },
            },
        },
    },
}


def _offline_reply(inputs: dict[str, Any]) -> dict[str, Any]:
    """The deterministic twin of the LLM refactorer: the offline normalizer in the role's reply format."""
    raw = (
        json.loads(inputs["tools_definition"])
        if isinstance(inputs["tools_definition"], str)
        else inputs["tools_definition"]
    )
    tools = tuple(
        RawTool(name=t["name"], description=t.get("description", ""), parameters=t.get("parameters") or {}) for t in raw
    )
    cfg = EnvGenConfig(max_params=inputs.get("max_params") if isinstance(inputs.get("max_params"), int) else None)
    names = _tool_names(tools, str(inputs.get("toolset_name", "")))
    drafts = finalize_tools([_draft_tool(t, n, cfg) for t, n in zip(tools, names, strict=True)])
    functions = [
        {"name": t.name, "description": t.description, "parameters": t.parameters, "response": t.response}
        for t in drafts
    ]
    return {
        "description": "Offline refactoring of the input toolset.",
        "tools": [
            {"type": "function", "source_name": t.raw_name, "function": f}
            for t, f in zip(drafts, functions, strict=True)
        ],
    }


REFACTOR_ROLE = LLMRole(
    name="refactor",
    system_prompt=prompts.REFACTOR_SYSTEM,
    user_template=prompts.REFACTOR_USER,
    output_schema=_REFACTOR_OUTPUT,
    offline=_offline_reply,
)


def _check_reply(toolset: Toolset, reply: dict[str, Any], cfg: EnvGenConfig) -> RefactoredToolset:
    """Re-run the deterministic checks on an LLM reply; one refactored tool per raw tool, or RefactorError."""
    raw_names = [t.name for t in toolset.tools]
    items = reply["tools"]
    sources = [item["source_name"] for item in items]
    if sorted(sources) != sorted(raw_names):
        raise RefactorError(f"llm_tool_mismatch: refactored {sorted(sources)} but the toolset has {sorted(raw_names)}")
    taken: set[str] = set()
    notes: dict[str, str] = dict(toolset.notes)
    staged = []
    for item in items:
        fn = item["function"]
        name = unique_name(snake_case(fn["name"], fallback="tool"), taken)
        taken.add(name)
        raw = RawTool(name=item["source_name"], description=fn["description"], parameters=fn["parameters"])
        staged.append((raw, name, fn["response"]))
    drafts = [draft for draft, _ in _draft_all(staged, cfg, notes)]
    return RefactoredToolset(
        toolset_id=toolset.toolset_id,
        name=toolset.name,
        description=_clean_text(reply["description"], cfg.max_description_chars),
        tools=finalize_tools(drafts, keep_responses=True),
        name_map={d.raw_name: d.name for d in drafts},
        notes=notes,
    )


@REFACTORERS.register("openai")
def _refactor_llm(toolset: Toolset, cfg: EnvGenConfig, client: LLMClient | None = None) -> RefactoredToolset:
    client = client or LLMClient(cfg.llm.model_copy(update={"backend": "openai"}))
    tools = [t.model_dump(mode="json", exclude={"output_schema"}) for t in toolset.tools]
    inputs = {
        "tools_definition": json.dumps(tools, ensure_ascii=False),
        "max_params": cfg.max_params or "no limit",
        "toolset_name": toolset.name,
    }
    try:
        reply = run_role(REFACTOR_ROLE, inputs, client)
    except LLMError as exc:
        raise RefactorError(f"llm_refactor_failed: {exc}") from exc
    return _check_reply(toolset, reply, cfg)


def refactor_toolset(toolset: Toolset, cfg: EnvGenConfig, *, client: LLMClient | None = None) -> RefactoredToolset:
    """Refactor one toolset with the backend named by `cfg.backend`.

    Args:
        toolset: an ingested toolset.
        cfg: stage configuration (backend, max_params, description limits).
        client: LLM client for the openai backend (built from `cfg` when omitted).

    Returns:
        The refactored toolset: unique snake_case names (`name_map` raw -> new), typed parameters, a response
        schema per tool, inferred `kind` and `entity`.

    Raises:
        RefactorError: with a reason code (`unsupported_type`, `too_many_required_params`, `llm_tool_mismatch`...).
    """
    result = REFACTORERS.get(cfg.backend)(toolset, cfg, client)
    kinds = {k.value: sum(t.kind is k for t in result.tools) for k in ToolKind}
    logger.debug("refactored %s: %d tools %s", toolset.toolset_id, len(result.tools), kinds)
    return result
