"""Unit-test generation: the `tests.py` of an environment (ToolVerse App. B.1), per the tests-module contract.

For every tool: a call with valid arguments drawn from the DB (response checked against the response schema;
state-changing tools must change the DB as declared, read tools must not), calls with invalid arguments
(missing required, wrong type, unknown id / foreign key) that must yield `status == "error"` and leave the DB
alone, and chain tests where a query tool's output feeds an update/delete/action tool.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator

from data.models import RefactoredToolset, ToolSchema
from envgen.database import sample_value
from envgen.entities import ACTION_LOG, EntitySpec, EnvPlan, ToolPlan, plan_environment

__all__ = ["generate_tests_source", "valid_arguments"]

_UNKNOWN_STR = "UNKNOWN-404"
_UNKNOWN_INT = 987654
_WRONG = {"string": 12345, "integer": "not-a-number", "number": "not-a-number", "boolean": "yes",
          "array": "not-a-list", "object": "not-an-object"}  # fmt: skip

_HELPERS = """

def _ok(env, tool, out):
    env.check(out.get("status") == "success", f"{tool}: expected success, got {str(out)[:300]}")
    errors = env.validate(out, env.schemas[tool]["response"])
    env.check(not errors, f"{tool}: response violates its schema: {errors[:3]}")


def _rejected(env, tool, out, before):
    env.check(out.get("status") == "error", f"{tool}: expected an error, got {str(out)[:300]}")
    env.check(env.db() == before, f"{tool}: a rejected call changed the DB")


def _without(db, name):
    return {key: value for key, value in db.items() if key != name}
"""


# --------------------------------------------------------------------------------------------- argument values


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    """An id as the parameter's type wants it (ids are str keys; integer-typed parameters take ints)."""
    if schema.get("type") in ("integer", "number") and str(value).isdigit():
        return int(value)
    if schema.get("type") == "string":
        return str(value)
    return value


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    return Draft202012Validator(schema).is_valid(value)


def _first_text(record: dict[str, Any], id_field: str) -> str:
    texts = [v for k, v in record.items() if isinstance(v, str) and k != id_field]
    return texts[0] if texts else str(record.get(id_field, ""))


def _param_value(
    param: str, schema: dict[str, Any], plan: ToolPlan, ctx: _Context, record: dict[str, Any] | None
) -> Any:
    if param == plan.id_param and record is not None and ctx.entity is not None:
        return _coerce(record[ctx.entity.id_field], schema)
    if param == plan.id_param and plan.template == "create":
        return _coerce(_UNKNOWN_INT if schema.get("type") in ("integer", "number") else "NEW-900", schema)
    if record is not None and plan.template == "read_many" and param in record and _valid(record[param], schema):
        return record[param]
    if param in plan.ref_params:
        ids = list(ctx.db.get(plan.ref_params[param], {}))
        return _coerce(ids[0], schema) if ids else sample_value(param, schema, ctx.rng)
    if param == plan.limit_param:
        return (
            schema["enum"][-1]
            if schema.get("enum")
            else max(schema.get("minimum", 10), min(schema.get("maximum", 10), 10))
        )
    if record is not None and param in plan.query_params:
        return _first_text(record, ctx.entity.id_field if ctx.entity else "")
    return sample_value(param, schema, ctx.rng, 7)


class _Context:
    def __init__(self, db: dict[str, Any], entity: EntitySpec | None, rng: random.Random) -> None:
        self.db = db
        self.entity = entity
        self.rng = rng

    def records(self) -> list[dict[str, Any]]:
        return list(self.db.get(self.entity.name, {}).values()) if self.entity else []


def _included(tool: ToolSchema, plan: ToolPlan) -> list[str]:
    props = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    keep = set(required)
    if plan.template in ("create", "update"):
        keep |= set(plan.field_params) | set(plan.ref_params)
    if plan.id_param and plan.template in ("read_one", "update", "delete"):
        keep.add(plan.id_param)
    return [p for p in props if p in keep]


def _target_record(plan: ToolPlan, ctx: _Context) -> dict[str, Any] | None:
    records = ctx.records()
    if not records or plan.template in ("create", "action"):
        return None
    return records[-1] if plan.template == "delete" else records[0]


def valid_arguments(
    tool: ToolSchema, plan: ToolPlan, entity: EntitySpec | None, db: dict[str, Any], *, seed: int
) -> dict[str, Any]:
    """Arguments that a correct implementation of `tool` accepts on `db` (ids and keys drawn from the DB).

    Args:
        tool: the refactored tool.
        plan: its execution plan.
        entity: the collection it works on, if any.
        db: the initial DB.
        seed: seed for synthesized values.

    Returns:
        A dict valid against the tool's parameters schema.
    """
    ctx = _Context(db, entity, random.Random(seed))
    record = _target_record(plan, ctx)
    props = tool.parameters.get("properties", {})
    args = {p: _param_value(p, props[p], plan, ctx, record) for p in _included(tool, plan)}
    for param, value in list(args.items()):
        if not _valid(value, props[param]):
            args[param] = sample_value(param, props[param], ctx.rng, 3)
    return args


# --------------------------------------------------------------------------------------------- test bodies


def _check(condition: str, message: str) -> str:
    return f"    env.check({condition}, {message!r})"


def _checks_valid(tool: ToolSchema, plan: ToolPlan, entity: EntitySpec | None, args: dict[str, Any]) -> Iterator[str]:
    name, coll = tool.name, plan.entity
    yield "    before = env.db()"
    yield f"    out = env.call({name!r}, {args!r})"
    yield f"    _ok(env, {name!r}, out)"
    yield "    after = env.db()"
    if plan.template in ("read_one", "read_many"):
        yield _check("after == before", f"{name}: a read tool changed the DB")
    if entity is None or coll is None:
        if plan.template == "action":
            log = repr(ACTION_LOG)
            yield _check(f"len(after.get({log}, {{}})) == len(before.get({log}, {{}})) + 1",
                         f"{name}: the action was not logged")  # fmt: skip
            yield _check(f"_without(after, {log}) == _without(before, {log})",
                         f"{name}: the action changed other collections")  # fmt: skip
        return
    key, id_field = plan.response_key, entity.id_field
    rows, rows_before = f"after.get({coll!r}, {{}})", f"before.get({coll!r}, {{}})"
    target = str(args.get(plan.id_param or "", ""))
    if plan.template == "read_one":
        yield f"    got = (out.get({key!r}) or {{}}).get({id_field!r})"
        yield _check(f"str(got) == {target!r}", f"{name}: returned another record")
    elif plan.template == "read_many" and _filters_used(plan, args):
        yield f"    ids = [str(r.get({id_field!r})) for r in out.get({key!r}) or []]"
        yield _check("bool(ids)", f"{name}: the filter drawn from the DB matched nothing")
    elif plan.template == "create":
        yield f"    new_key = str(out.get({id_field!r}))"
        yield _check(f"len({rows}) == len({rows_before}) + 1", f"{name}: no record was added")
        yield _check(f"new_key in {rows}", f"{name}: the new id is not in the DB")
        for field in (f for f in plan.field_params if f in args):
            yield _check(f"{rows}.get(new_key, {{}}).get({field!r}) == {args[field]!r}", f"{name}: {field} not stored")
    elif plan.template == "update":
        yield f"    row = {rows}.get({target!r}, {{}})"
        for field in (f for f in plan.field_params if f in args):
            yield _check(f"row.get({field!r}) == {args[field]!r}", f"{name}: {field} not updated")
        if plan.status_value:
            yield _check(f"row.get('status') == {plan.status_value!r}", f"{name}: status not set")
    elif plan.template == "delete":
        yield _check(f"{target!r} not in {rows}", f"{name}: the record is still there")
        yield _check(f"len({rows}) == len({rows_before}) - 1", f"{name}: wrong number of records removed")


def _filters_used(plan: ToolPlan, args: dict[str, Any]) -> bool:
    return any(p in args for p in (*plan.field_params, *plan.query_params, plan.id_param or ""))


def _test(name: str, body: list[str]) -> str:
    return f"\n\ndef {name}(env):\n" + "\n".join(body) + "\n"


def _invalid_calls(tool: ToolSchema, plan: ToolPlan, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Argument sets a correct tool must reject: missing required, wrong type, unknown id / foreign key."""
    props = tool.parameters.get("properties", {})
    required = [p for p in tool.parameters.get("required", []) if p in args]
    if required:
        yield {k: v for k, v in args.items() if k != required[0]}
    wrong_param = (required or list(args) or list(props) or [None])[0]
    if wrong_param is not None:
        yield {**args, wrong_param: _WRONG.get(props[wrong_param].get("type", "string"), 12345)}
    unknown = plan.id_param if plan.template in ("read_one", "update", "delete") else next(iter(plan.ref_params), None)
    if unknown is not None and unknown in args:
        numeric = props[unknown].get("type") in ("integer", "number")
        yield {**args, unknown: _UNKNOWN_INT if numeric else _UNKNOWN_STR}


def _negative_tests(tool: ToolSchema, plan: ToolPlan, args: dict[str, Any]) -> Iterator[str]:
    """One test per tool holding all its rejected calls (one sandbox round trip instead of three)."""
    calls = list(_invalid_calls(tool, plan, args))
    if calls:
        body = ["    before = env.db()"]
        body += [f"    _rejected(env, {tool.name!r}, env.call({tool.name!r}, {bad!r}), before)" for bad in calls]
        yield _test(f"test_{tool.name}_invalid_args", body)


def _chain_tests(refactored: RefactoredToolset, plan: EnvPlan, args_of: dict[str, dict[str, Any]]) -> Iterator[str]:
    """A list tool's output feeds each update/delete tool of the same collection (ToolVerse: query -> update)."""
    tools = {t.name: t for t in refactored.tools}
    lists = {
        p.entity: p for p in plan.tools if p.template == "read_many" and not tools[p.name].parameters.get("required")
    }
    for write in plan.tools:
        source = lists.get(write.entity)
        entity = plan.entity(write.entity)
        if write.template not in ("update", "delete") or source is None or entity is None or not write.id_param:
            continue
        id_schema = tools[write.name].parameters["properties"][write.id_param]
        cast = "int" if id_schema.get("type") in ("integer", "number") else "str"
        args = {k: v for k, v in args_of[write.name].items() if k != write.id_param}
        yield _test(f"test_{write.name}_chain_from_{source.name}", [
            f"    listed = env.call({source.name!r}, {{}})",
            f"    ids = [r.get({entity.id_field!r}) for r in listed.get({source.response_key!r}) or []]",
            f"    env.check(bool(ids), {source.name + ' returned no ids to chain'!r})",
            "    if ids:",
            f"        out = env.call({write.name!r}, {{**{args!r}, {write.id_param!r}: {cast}(ids[0])}})",
            f"        _ok(env, {write.name!r}, out)",
        ])  # fmt: skip


def generate_tests_source(refactored: RefactoredToolset, db: dict[str, Any], *, seed: int = 0) -> str:
    """Generate the tests module of an environment.

    Args:
        refactored: the refactored toolset.
        db: its initial DB (arguments are drawn from it; each test runs on a fresh copy).
        seed: seed for synthesized argument values.

    Returns:
        Python source defining `test_<tool>_<case>(env)` functions (the sandbox maps tests to tools by prefix).
    """
    plan = plan_environment(refactored.tools)
    parts = [
        f'"""Unit tests of {refactored.name!r} (toolset {refactored.toolset_id}); generated by envgen.testgen."""\n',
        _HELPERS,
    ]
    args_of: dict[str, dict[str, Any]] = {}
    for index, (tool, tool_plan) in enumerate(zip(refactored.tools, plan.tools, strict=True)):
        entity = plan.entity(tool_plan.entity)
        args = valid_arguments(tool, tool_plan, entity, db, seed=seed * 1000 + index)
        args_of[tool.name] = args
        parts.append(_test(f"test_{tool.name}_valid", list(_checks_valid(tool, tool_plan, entity, args))))
        parts.extend(_negative_tests(tool, tool_plan, args))
    parts.extend(_chain_tests(refactored, plan, args_of))
    return "".join(parts)
