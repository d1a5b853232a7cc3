"""Mutation scoring of a generated test suite: seed one bug into one tool, rerun that tool's tests, count the kills.

Mutants are wrappers around a tool, made by a factory per operator (`_mut_<operator>(tool, ...)`), so the same
operators apply to the offline templates and to LLM-written code alike (registry `OPERATORS`):
    no_validation    a call the tool rejects is answered with success instead (validation removed)
    filters_ignored  optional arguments are dropped before the tool runs (filters / sort / paging / fields ignored)
    state_skipped    the tool runs on the DB, then the DB is restored (the promised state change never happens)
    wrong_record     the id argument is swapped for another existing id of the same collection
    empty_result     a successful answer loses its payload (lists -> [], records -> {}, values -> None)
    family_swap      the tool's family swapped: a write answers like a lookup (same payload, no state change), a
                     read/computation also writes (an event lands in the DB): the tests must pin the family
Which operators apply to a tool follows its behaviour family (`applicable`). Score = killed / applicable mutants;
`operator_tally` gives one operator's share (the family-swap score of the manifest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from data.models import MutantResult, MutationReport, RefactoredToolset, ToolSchema
from envgen.entities import EnvPlan, ToolPlan, plan_environment
from envgen.testgen import generate_tests_source
from gustforge.errors import SandboxError
from gustforge.registry import Registry
from gustforge.sandbox import SandboxWorker
from gustforge.sandbox.testing import VariantRun

__all__ = ["OPERATORS", "Operator", "applicable", "factories_source", "mutant_source", "operator_tally", "score_suite"]

Params = Callable[[ToolSchema, ToolPlan, EnvPlan], tuple[Any, ...]]


class Operator(NamedTuple):
    """A seeded bug: `factory(original, *params)` returns the mutant of tool `original`. The factory's text is the
    same for every env; only `params` (literals: names, lists of names) depend on the tool."""

    factory: str  # source of `def _mut_<name>(original, ...)`
    params: Params


OPERATORS: Registry[Operator] = Registry("mutation operator")


def _operator(name: str, signature: str, body: list[str], params: Params | None = None) -> None:
    lines = [f"def _mut_{name}(original{signature}):", "    def mutant(db, **kwargs):",
             *(f"        {line}" for line in body), "    return mutant"]  # fmt: skip
    OPERATORS.register(name)(Operator("\n".join(lines) + "\n", params or (lambda tool, plan, env: ())))


_operator("no_validation", "", [
    "out = original(db, **kwargs)",
    "if isinstance(out, dict) and out.get('status') == 'error':",
    "    return {'status': 'success', 'message': 'done'}",
    "return out",
])  # fmt: skip
_operator("filters_ignored", ", required", [
    "kept = {k: v for k, v in kwargs.items() if k in required}",
    "return original(db, **kept)",
], lambda tool, plan, env: (list(tool.parameters.get("required", [])),))  # fmt: skip
_operator("state_skipped", "", [
    "snapshot = _mut_copy.deepcopy(db)", "out = original(db, **kwargs)", "db.clear()", "db.update(snapshot)",
    "return out",
])  # fmt: skip
_operator("wrong_record", ", param, collection", [
    "value = kwargs.get(param)",
    "others = [k for k in db.get(collection, {}) if k.lower() != str(value).lower()]",
    "if others and value is not None:",
    "    kwargs = dict(kwargs)",
    "    kwargs[param] = int(others[0]) if isinstance(value, int) and others[0].isdigit() else others[0]",
    "return original(db, **kwargs)",
], lambda tool, plan, env: (plan.id_param, plan.entity))  # fmt: skip
_operator("empty_result", "", [
    "out = original(db, **kwargs)",
    "if not isinstance(out, dict) or out.get('status') != 'success':",
    "    return out",
    "empty = {}",
    "for key, value in out.items():",
    "    if key in ('status', 'message'):",
    "        empty[key] = value",
    "    elif isinstance(value, list):",
    "        empty[key] = []",
    "    elif isinstance(value, dict):",
    "        empty[key] = {}",
    "    else:",
    "        empty[key] = None",
    "return empty",
])  # fmt: skip
_operator("family_swap", ", mode", [
    "if mode == 'write':",
    "    out = original(_mut_copy.deepcopy(db), **kwargs)",
    "    if isinstance(out, dict) and out.get('status') == 'success':",
    "        return {**out, 'message': 'found'}",
    "    return out",
    "out = original(db, **kwargs)",
    "if isinstance(out, dict) and out.get('status') == 'success':",
    "    log = db.setdefault('action_log', {})",
    "    log['EVT-SWAP-' + str(len(log) + 1)] = {'event_id': 'EVT-SWAP', 'tool': 'family_swap', 'arguments': {}}",
    "return out",
], lambda tool, plan, env: ("write" if plan.template in _WRITES else "read",))  # fmt: skip


def operator_tally(report: MutationReport | None, operator: str) -> dict[str, Any]:
    """One operator's mutants in a report: killed, total, score (None when none applied) and the survivors."""
    mine = [m for m in (report.mutants if report else ()) if m.operator == operator]
    killed = sum(m.killed for m in mine)
    return {"killed": killed, "total": len(mine), "score": round(killed / len(mine), 4) if mine else None,
            "survivors": sorted({m.tool for m in mine if not m.killed})}  # fmt: skip


def factories_source() -> str:
    """Every operator's factory, one module text for all envs (checked once per process, then remembered)."""
    parts = ["# ---- mutation operators (envgen.mutation) ----\nimport copy as _mut_copy\n"]
    parts += [f"\n\n{OPERATORS.get(name).factory}" for name in sorted(OPERATORS.names())]
    return "".join(parts)


def _binding(name: str, tool: ToolSchema, plan: ToolPlan, env: EnvPlan, operator: str) -> str:
    """`name = _mut_<operator>(<tool>, <literal params>)`: the only per-env text of a mutant."""
    params = "".join(f", {value!r}" for value in OPERATORS.get(operator).params(tool, plan, env))
    return f"{name} = _mut_{operator}({tool.name}{params})\n"


_WRITES = {"create", "update", "delete", "transition", "transfer", "payment", "message", "schedule", "action"}
_RESULTS = {"read_one", "read_many", "arithmetic", "convert", "text"}
_ID_TOOLS = {"read_one", "update", "delete", "transition", "transfer", "payment"}


def _optional_effective(tool: ToolSchema, plan: ToolPlan) -> bool:
    """Does the tool promise an effect for some optional parameter (a filter, paging, a stored field)?"""
    required = set(tool.parameters.get("required", []))
    used = set(plan.field_params) | set(plan.query_params) | {plan.limit_param}
    used |= {v for v in plan.options.values() if isinstance(v, str)}
    if plan.template == "read_many" and plan.id_param:
        used.add(plan.id_param)
    if plan.template in ("arithmetic", "convert", "text", "read_one", "action", "delete"):
        return False
    return any(p in used for p in tool.parameters.get("properties", {}) if p not in required)


def applicable(tool: ToolSchema, plan: ToolPlan, env: EnvPlan, db: dict[str, Any]) -> list[str]:
    """The operators that seed a real bug into `tool` (no equivalent mutants by construction)."""
    ops = []
    if tool.parameters.get("properties"):
        ops.append("no_validation")
    if _optional_effective(tool, plan):
        ops.append("filters_ignored")
    if plan.template in _WRITES:
        ops.append("state_skipped")
    batch = plan.options.get("batch")
    if plan.template in _ID_TOOLS and plan.id_param and not batch and len(db.get(plan.entity or "", {})) >= 2:
        ops.append("wrong_record")
    if plan.template in _RESULTS:
        ops.append("empty_result")
    if plan.template in _WRITES or plan.template in _RESULTS:
        ops.append("family_swap")
    return ops


def mutant_source(tools_source: str, tool: ToolSchema, plan: ToolPlan, env: EnvPlan, operator: str) -> str:
    """The tools module with `operator` applied to `tool` (the tool's name is rebound to the mutant)."""
    return f"{tools_source}\n\n{factories_source()}\n{_binding(tool.name, tool, plan, env, operator)}"


def _alias(index: int, tool: str) -> str:
    return f"mut_{index}_{tool}"[:120]


def score_suite(
    refactored: RefactoredToolset,
    db: dict[str, Any],
    tools_source: str,
    worker: SandboxWorker,
    *,
    seed: int,
    budget_seconds: float = 60.0,
    tests_source: str | None = None,
) -> MutationReport:
    """Run every applicable mutant against the tests of its tool; a mutant is killed when any test fails.

    The tools module is loaded once and every mutant is added to it as an extra function (`SandboxWorker.extend`):
    the operators' factories (one text for all envs), then one line per mutant, `mut_<i>_<tool> =
    _mut_<operator>(<tool>, <literals>)`. Each text passes the static check on its own (the module's when it was
    loaded); the factories' check is remembered across envs, so a mutant costs one checked line. The env's tests
    module is loaded once; each mutant runs the tests of its tool with their `env.call_tool(tool, ...)` calls
    pointed at the mutant, in order, and stops at the first failing test.

    Args:
        refactored: the refactored toolset.
        db: the env's initial DB.
        tools_source: the tools module the tests passed on.
        worker: a sandbox worker (left loaded with the mutants; the caller reloads what it needs next).
        seed: the seed the tests were generated with.
        budget_seconds: wall budget; mutants left when it runs out count as not killed.
        tests_source: the env's tests module (generated from `refactored`, `db` and `seed` when omitted).

    Returns:
        The `MutationReport` (score None when no operator applies).
    """
    env = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    schemas = {t.name: {"parameters": t.parameters, "response": t.response} for t in refactored.tools}
    planned: list[tuple[str, str, str]] = []  # (tool, operator, alias)
    bindings: list[str] = []
    for tool, plan in zip(refactored.tools, env.tools, strict=True):
        for operator in applicable(tool, plan, env, db):
            alias = _alias(len(planned), tool.name)
            bindings.append(_binding(alias, tool, plan, env, operator))
            planned.append((tool.name, operator, alias))
    if not planned:
        return MutationReport(score=None, killed=0, total=0)
    if tests_source is None:
        tests_source = generate_tests_source(refactored, db, seed=seed)
    try:
        worker.load(tools_source, db)
        worker.extend(factories_source())  # the same text for every env: its static check is remembered
        loaded = set(worker.extend("".join(bindings)))
        missing = [alias for _, _, alias in planned if alias not in loaded]
        if missing:  # never score a harness fault as a kill
            raise SandboxError(f"mutants not loaded: {', '.join(missing[:5])}")
        variants = [(tool, {tool: alias}) for tool, _, alias in planned]
        error, runs = worker.run_tool_variants(tests_source, schemas, variants, total_seconds=budget_seconds)
    except SandboxError as exc:
        error, runs = f"{type(exc).__name__}: {exc}", []
    if error is not None:
        results = [MutantResult(operator=op, tool=tool, killed=False, by=f"not run: {error}"[:200])
                   for tool, op, _ in planned]  # fmt: skip
        return MutationReport(score=0.0, killed=0, total=len(results), mutants=tuple(results))
    results = [_result(tool, op, run) for (tool, op, _), run in zip(planned, runs, strict=True)]
    killed = sum(r.killed for r in results)
    return MutationReport(score=round(killed / len(results), 4), killed=killed, total=len(results),
                          mutants=tuple(results))  # fmt: skip


def _result(tool: str, operator: str, run: VariantRun) -> MutantResult:
    if not run.ran:
        return MutantResult(operator=operator, tool=tool, killed=False, by=f"not run: {run.note}"[:200])
    first = run.failure
    return MutantResult(operator=operator, tool=tool, killed=first is not None,
                        by=f"{first.name}: {first.message[:160]}" if first else "")  # fmt: skip
