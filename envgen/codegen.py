"""Tool code generation: the untrusted `tools.py` of an environment (ToolVerse §3.1, App. B.1).

`generate_tools_source` emits a module following the tools-module contract: one public function per tool,
`def <tool>(db, **kwargs) -> dict`, that validates its arguments and queries or updates the dict DB. Backends
(registry `CODEGENS`, keyed by `EnvGenConfig.backend`):
    offline   deterministic templates per `ToolPlan.template` (read_one, read_many, create, update, delete, action);
    openai    an `LLMRole` prompted with the schemas, a DB excerpt and the last test failures; its code is returned
              in a JSON field. Both outputs pass `check_source` (the sandbox allow-list) before they are returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from data.models import RefactoredToolset, ToolSchema
from envgen import prompts
from envgen.entities import ACTION_LOG, EnvPlan, ToolPlan, plan_environment
from gustforge.errors import CodegenError, LLMError, SandboxViolation
from gustforge.llm import LLMClient, LLMRole, run_role
from gustforge.registry import Registry
from gustforge.sandbox import check_source

__all__ = ["CODEGENS", "CODEGEN_ROLE", "Codegen", "generate_tools_source", "tool_specs"]

Codegen = Callable[[RefactoredToolset, dict[str, Any], LLMClient | None, Sequence[str]], str]
CODEGENS: Registry[Codegen] = Registry("codegen backend")

_DB_EXCERPT_RECORDS = 2

# The template library every offline tools module starts with. Policy-safe: f-strings (no str.format), no
# dunders, no getattr/type; deterministic: ids derive from collection sizes.
_RUNTIME = """
import copy
import json

ACTION_LOG = %(action_log)r
_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict}


def _error(message):
    return {"status": "error", "message": message}


def _type_ok(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _check_args(spec, kwargs):
    for name in spec["required"]:
        if kwargs.get(name) is None:
            return f"missing required argument '{name}'"
    for name, value in kwargs.items():
        prop = spec["params"].get(name)
        if prop is None:
            return f"unknown argument '{name}'"
        if value is None:
            continue
        if not _type_ok(value, prop["type"]):
            return f"argument '{name}' must be of type {prop['type']}"
        if "enum" in prop and value not in prop["enum"]:
            return f"argument '{name}' must be one of {prop['enum']}"
        if prop["type"] == "array" and "items" in prop:
            if not all(_type_ok(item, prop["items"]) for item in value):
                return f"items of argument '{name}' must be of type {prop['items']}"
    return None


def _key(value):
    return str(value)


def _check_refs(db, spec, kwargs):
    for param, collection in spec["refs"].items():
        value = kwargs.get(param)
        if value is not None and _key(value) not in db.get(collection, {}):
            return _error(f"no record '{value}' in {collection} (argument '{param}')")
    return None


def _target(db, spec, kwargs):
    value = kwargs.get(spec["id_param"])
    if value is None:
        return None, _error(f"missing required argument '{spec['id_param']}'")
    record = db.get(spec["collection"], {}).get(_key(value))
    if record is None:
        return None, _error(f"{spec['singular']} '{value}' not found")
    return record, None


def _matches(stored, wanted):
    if isinstance(stored, str) and isinstance(wanted, str):
        return wanted.lower() in stored.lower()
    if isinstance(stored, list) and not isinstance(wanted, list):
        return wanted in stored
    return stored == wanted


def _text_match(record, text):
    needle = str(text).lower()
    return any(needle in str(value).lower() for value in record.values() if isinstance(value, (str, int, float)))


def _read_one(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is None:
        error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    return {"status": "success", "message": f"{spec['singular']} '{kwargs[spec['id_param']]}' found",
            spec["response_key"]: copy.deepcopy(record)}


def _read_many(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    found = []
    for record in db.get(spec["collection"], {}).values():
        if not all(kwargs.get(p) is None or _matches(record.get(f), kwargs[p]) for p, f in spec["filters"].items()):
            continue
        if not all(kwargs.get(q) is None or _text_match(record, kwargs[q]) for q in spec["queries"]):
            continue
        found.append(copy.deepcopy(record))
    limit = kwargs.get(spec["limit"]) if spec["limit"] else None
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit >= 0:
        found = found[: int(limit)]
    return {"status": "success", "message": f"{len(found)} {spec['collection']} found",
            spec["response_key"]: found, "count": len(found)}


def _format_id(spec, number):
    if spec["id_type"] == "integer":
        return number
    return spec["prefix"] + "-" + str(number).zfill(3)


def _new_id(collection, spec):
    number = len(collection) + 1
    while _key(_format_id(spec, number)) in collection:
        number += 1
    return _format_id(spec, number)


def _create(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    collection = db.setdefault(spec["collection"], {})
    new_id = kwargs.get(spec["id_param"]) if spec["id_param"] else None
    if new_id is None:
        new_id = _new_id(collection, spec)
    elif _key(new_id) in collection:
        return _error(f"{spec['singular']} '{new_id}' already exists")
    record = {spec["id_field"]: new_id}
    for name in spec["fields"]:
        if kwargs.get(name) is not None:
            record[name] = copy.deepcopy(kwargs[name])
    collection[_key(new_id)] = record
    return {"status": "success", "message": f"{spec['singular']} '{new_id}' created",
            spec["response_key"]: copy.deepcopy(record), spec["id_field"]: new_id}


def _update(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is None:
        error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    changes = {name: copy.deepcopy(kwargs[name]) for name in spec["fields"] if kwargs.get(name) is not None}
    if spec["status_value"]:
        changes["status"] = spec["status_value"]
    if not changes:
        return _error("no fields to update were given")
    record.update(changes)
    return {"status": "success", "message": f"{spec['singular']} '{kwargs[spec['id_param']]}' updated",
            spec["response_key"]: copy.deepcopy(record)}


def _delete(db, spec, kwargs):
    record, error = _target(db, spec, kwargs)
    if error is not None:
        return error
    db[spec["collection"]].pop(_key(kwargs[spec["id_param"]]))
    return {"status": "success", "message": f"{spec['singular']} '{kwargs[spec['id_param']]}' deleted",
            spec["id_field"]: record[spec["id_field"]]}


def _action(db, spec, kwargs):
    error = _check_refs(db, spec, kwargs)
    if error is not None:
        return error
    log = db.setdefault(ACTION_LOG, {})
    number = len(log) + 1
    while "EVT-" + str(number).zfill(3) in log:
        number += 1
    event_id = "EVT-" + str(number).zfill(3)
    log[event_id] = {"event_id": event_id, "tool": spec["name"], "arguments": copy.deepcopy(kwargs)}
    result = {"tool": spec["name"], "arguments": copy.deepcopy(kwargs)}
    for param, collection in spec["refs"].items():
        if kwargs.get(param) is not None:
            result[param[:-3] if param.endswith("_id") else param] = copy.deepcopy(db[collection][_key(kwargs[param])])
    return {"status": "success", "message": f"{spec['name']} completed", "event_id": event_id, "result": result}


_TEMPLATES = {"read_one": _read_one, "read_many": _read_many, "create": _create, "update": _update,
              "delete": _delete, "action": _action}


def _run(db, name, kwargs):
    spec = _TOOLS[name]
    problem = _check_args(spec, kwargs)
    if problem is not None:
        return _error(problem)
    return _TEMPLATES[spec["template"]](db, spec, kwargs)
"""


def _param_spec(schema: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": schema.get("type", "string")}
    if schema.get("enum"):
        spec["enum"] = schema["enum"]
    items = schema.get("items")
    if (
        spec["type"] == "array"
        and isinstance(items, dict)
        and items.get("type") in ("string", "integer", "number", "boolean", "object")
    ):
        spec["items"] = items["type"]
    return spec


def tool_specs(refactored: RefactoredToolset, plan: EnvPlan) -> dict[str, dict[str, Any]]:
    """The data each generated tool runs on: argument specs plus its `ToolPlan` resolved against the entities."""
    specs = {}
    for tool, tool_plan in zip(refactored.tools, plan.tools, strict=True):
        entity = plan.entity(tool_plan.entity)
        filters = {p: p for p in tool_plan.field_params}
        if tool_plan.id_param and entity is not None and tool_plan.template == "read_many":
            filters[tool_plan.id_param] = entity.id_field
        specs[tool.name] = {
            "name": tool.name,
            "template": tool_plan.template,
            "required": list(tool.parameters.get("required", [])),
            "params": {k: _param_spec(v) for k, v in tool.parameters.get("properties", {}).items()},
            "collection": tool_plan.entity,
            "singular": entity.singular if entity else None,
            "id_param": tool_plan.id_param,
            "id_field": entity.id_field if entity else None,
            "id_type": entity.id_type if entity else None,
            "prefix": entity.id_prefix if entity else None,
            "fields": list(tool_plan.field_params),
            "filters": filters,
            "queries": list(tool_plan.query_params),
            "limit": tool_plan.limit_param,
            "refs": dict(tool_plan.ref_params),
            "response_key": tool_plan.response_key,
            "status_value": tool_plan.status_value,
        }
    return specs


def _function(tool: ToolSchema, plan: ToolPlan) -> str:
    summary = tool.description.splitlines()[0][:200] if tool.description else tool.name
    return f"\n\ndef {tool.name}(db, **kwargs):\n    {summary!r}\n    return _run(db, {tool.name!r}, kwargs)\n"


@CODEGENS.register("offline")
def _offline(
    refactored: RefactoredToolset, db: dict[str, Any], client: LLMClient | None, failures: Sequence[str]
) -> str:
    plan = plan_environment(refactored.tools)
    header = f'"""Tools of {refactored.name!r} (toolset {refactored.toolset_id}); generated by envgen.codegen."""\n'
    # One JSON string constant instead of a dict literal: a fraction of the AST the sandbox checks on every load.
    specs = json.dumps(tool_specs(refactored, plan), ensure_ascii=False, sort_keys=False)
    body = "".join(_function(tool, tool_plan) for tool, tool_plan in zip(refactored.tools, plan.tools, strict=True))
    runtime = _RUNTIME.replace("%(action_log)r", repr(ACTION_LOG))
    return header + runtime + f"\n\n_TOOLS = json.loads({specs!r})\n" + body


_CODEGEN_OUTPUT = {
    "type": "object",
    "required": ["code"],
    "properties": {"code": {"type": "string", "minLength": 1}},
}


def _offline_reply(inputs: dict[str, Any]) -> dict[str, Any]:
    refactored = RefactoredToolset.model_validate_json(inputs["refactored"])
    return {"code": _offline(refactored, json.loads(inputs["db"]), None, ())}


CODEGEN_ROLE = LLMRole(
    name="codegen",
    system_prompt=prompts.CODEGEN_SYSTEM,
    user_template=prompts.CODEGEN_USER,
    output_schema=_CODEGEN_OUTPUT,
    offline=_offline_reply,
)


def _db_excerpt(db: dict[str, Any]) -> dict[str, Any]:
    return {name: dict(list(rows.items())[:_DB_EXCERPT_RECORDS]) for name, rows in db.items() if isinstance(rows, dict)}


@CODEGENS.register("openai")
def _llm(refactored: RefactoredToolset, db: dict[str, Any], client: LLMClient | None, failures: Sequence[str]) -> str:
    if client is None:
        raise CodegenError("llm_codegen_failed: the openai backend needs an LLM client")
    schemas = [{**t.openai_tool()["function"], "response": t.response} for t in refactored.tools]
    inputs = {
        "schemas": json.dumps(schemas, ensure_ascii=False),
        "db_excerpt": json.dumps(_db_excerpt(db), ensure_ascii=False),
        "failures": "\n".join(failures) or "(none)",
        "refactored": refactored.model_dump_json(),
        "db": json.dumps(db),
    }
    try:
        return str(run_role(CODEGEN_ROLE, inputs, client)["code"])
    except LLMError as exc:
        raise CodegenError(f"llm_codegen_failed: {exc}") from exc


def generate_tools_source(
    refactored: RefactoredToolset,
    db: dict[str, Any],
    *,
    backend: str = "offline",
    client: LLMClient | None = None,
    failures: Sequence[str] = (),
) -> str:
    """Generate the tools module of an environment.

    Args:
        refactored: the refactored toolset.
        db: its initial mock DB (the LLM sees an excerpt; templates only need the plan).
        backend: "offline" (templates) or "openai" (LLM, needs `client`).
        client: the LLM client for the openai backend.
        failures: failure messages of the previous attempt, for the LLM repair prompt.

    Returns:
        Python source that passes `check_source` (checked here for LLM code; the offline template library is
        covered by a unit test, and every source is checked again by the sandbox on load).

    Raises:
        CodegenError: `sandbox_violation: ...` when the code breaks the allow-list, or an LLM failure.
    """
    source = CODEGENS.get(backend)(refactored, db, client, failures)
    if backend == "offline":
        return source  # fixed templates + JSON data + repr'd docstrings; the sandbox still checks it on load
    try:
        check_source(source)
    except SandboxViolation as exc:
        raise CodegenError(f"sandbox_violation: {exc}") from exc
    return source
