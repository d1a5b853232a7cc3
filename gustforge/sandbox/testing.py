"""`run_test_module`: run a generated tests module against the tools loaded in a `SandboxWorker`.

One request per test, each on a fresh DB and with its own wall limit, so a test that hangs or blows the memory
limit fails alone (the worker restarts and the remaining tests still run).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from data.models import TestCaseResult, TestReport
from gustforge.errors import SandboxError

if TYPE_CHECKING:
    from gustforge.sandbox.worker import SandboxWorker

__all__ = ["VariantRun", "run_test_module", "run_tool_variants"]


def run_test_module(
    worker: SandboxWorker, tests_source: str, schemas: dict[str, dict[str, Any]], *, total_seconds: float = 60.0
) -> TestReport:
    """Run every `test_*(env)` function of `tests_source` in `worker` (tools must be loaded).

    Args:
        worker: A worker with a tools module loaded.
        tests_source: The tests module (contract: `def test_<name>(env): ...`).
        schemas: Tool name -> {"parameters": ..., "response": ...}.
        total_seconds: Wall budget for the whole module.

    Returns:
        A `TestReport` with one case per test function, in definition order. Sandbox-level problems that stop
        the whole module (policy violation, import failure, no tests) are reported in `error`, not raised.
    """
    start = time.perf_counter()
    try:
        names = worker._load_tests(tests_source, schemas)
    except SandboxError as exc:
        return _report((), start, error=f"{type(exc).__name__}: {exc}")
    if not names:
        worker._drop_tests()
        return _report((), start, error="the tests module defines no test_* functions")
    deadline = start + total_seconds
    cases = [_run_one(worker, name, deadline, list(schemas)) for name in names]
    worker._drop_tests()
    worker.reset()
    budget_hit = time.perf_counter() >= deadline
    error = f"total time budget of {total_seconds:g}s exhausted" if budget_hit else None
    return _report(tuple(cases), start, error=error)


class VariantRun(NamedTuple):
    """One variant's outcome: `failure` is its first failing test (None: every test passed), `ran` is False when
    it was not run (no tests of its tool, or the time budget ran out first)."""

    failure: TestCaseResult | None
    ran: bool
    note: str = ""


def run_tool_variants(
    worker: SandboxWorker,
    tests_source: str,
    schemas: dict[str, dict[str, Any]],
    variants: Sequence[tuple[str, Mapping[str, str]]],
    *,
    total_seconds: float = 60.0,
) -> tuple[str | None, list[VariantRun]]:
    """Run the tests of one tool once per variant, each with its `env.call_tool` calls redirected, until one fails.

    The tests module is checked and loaded once for every variant (mutation scoring: the variants are the
    mutants of a tool, `(tool, {tool: mutant_function})`). A test belongs to the tool its name starts with (the
    longest match, as in reports). Tests run in definition order, each on a fresh DB; a variant stops at its
    first failing test (that is all a kill needs).

    Returns:
        `(error, runs)`: `error` when the tests module itself could not be loaded (then `runs` is empty).
    """
    start = time.perf_counter()
    try:
        names = worker._load_tests(tests_source, schemas)
    except SandboxError as exc:
        return f"{type(exc).__name__}: {exc}", []
    deadline = start + total_seconds
    tools = list(schemas)
    by_tool: dict[str, list[str]] = {}
    for name in names:
        by_tool.setdefault(_tool_of(name, tools), []).append(name)
    runs = [_run_variant(worker, by_tool.get(tool, []), dict(redirect), deadline, tools)
            for tool, redirect in variants]  # fmt: skip
    worker._drop_tests()
    worker.reset()
    return None, runs


def _run_variant(
    worker: SandboxWorker, names: list[str], redirect: dict[str, str], deadline: float, tools: list[str]
) -> VariantRun:
    if not names:
        return VariantRun(None, ran=False, note="no tests of this tool")
    for name in names:
        if time.perf_counter() >= deadline:
            return VariantRun(None, ran=False, note="total time budget exhausted")
        case = _run_one(worker, name, deadline, tools, redirect=redirect)
        if not case.passed:
            return VariantRun(case, ran=True)
    return VariantRun(None, ran=True)


def _run_one(
    worker: SandboxWorker, name: str, deadline: float, tools: list[str], *, redirect: dict[str, str] | None = None
) -> TestCaseResult:
    remaining = deadline - time.perf_counter()
    tool = _tool_of(name, tools)
    if remaining <= 0:
        return TestCaseResult(name=name, tool=tool, passed=False, message="not run: total time budget exhausted")
    wall = min(worker.limits.wall_seconds, remaining)
    try:
        result = worker._run_test(name, wall_seconds=wall, redirect=redirect)
    except SandboxError as exc:  # the worker has restarted with tools and tests reloaded
        return TestCaseResult(name=name, tool=tool, passed=False, message=f"{type(exc).__name__}: {exc}")
    return TestCaseResult(
        name=name,
        tool=str(result.get("tool") or tool),
        passed=bool(result.get("passed")),
        message=str(result.get("message", "")),
    )


def _tool_of(test_name: str, tools: list[str]) -> str:
    stem = test_name.removeprefix("test_")
    matches = [tool for tool in tools if stem == tool or stem.startswith(tool + "_")]
    return max(matches, key=len) if matches else ""


def _report(cases: tuple[TestCaseResult, ...], start: float, *, error: str | None) -> TestReport:
    passed = error is None and bool(cases) and all(case.passed for case in cases)
    return TestReport(passed=passed, cases=cases, duration_s=round(time.perf_counter() - start, 4), error=error)
