"""`run_test_module`: run a generated tests module against the tools loaded in a `SandboxWorker`.

One request per test, each on a fresh DB and with its own wall limit, so a test that hangs or blows the memory
limit fails alone (the worker restarts and the remaining tests still run).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from data.models import TestCaseResult, TestReport
from gustforge.errors import SandboxError

if TYPE_CHECKING:
    from gustforge.sandbox.worker import SandboxWorker

__all__ = ["run_test_module"]


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


def _run_one(worker: SandboxWorker, name: str, deadline: float, tools: list[str]) -> TestCaseResult:
    remaining = deadline - time.perf_counter()
    tool = _tool_of(name, tools)
    if remaining <= 0:
        return TestCaseResult(name=name, tool=tool, passed=False, message="not run: total time budget exhausted")
    wall = min(worker.limits.wall_seconds, remaining)
    try:
        result = worker._run_test(name, wall_seconds=wall)
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
