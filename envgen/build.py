"""The closed loop of ToolVerse §3.1: refactor → plan (the LLM planning role, `envgen.planning`, openai backend
only) → mock DB → code → tests → sandbox run → mutation score → repair (K tries) → keep or quarantine. No Prefect
here: `build_environments` does the per-item work of one shard.

Gates, in order: a toolset whose share of log-only tools exceeds `max_log_only_share` is quarantined `mostly_echo`
(before any code is written, and again after repairs); the tests must pass; the suite must kill at least
`min_mutation_score` of the seeded bugs (`envgen.mutation`), else the attempt is repaired and finally quarantined
`weak_tests`. The score and every mutant go into `test_report.json` (`mutation`) and the manifest.

Repair per backend (`REPAIRS`, keyed by `EnvGenConfig.backend`), on failing tests:
    offline   reseed the DB and fall back to the log-only `action` template for every failing tool;
    openai    keep the schemas and re-prompt the code generator with the failures.
Weak tests are repaired by reseeding alone (new data gives the tests other, often more distinguishing, values).
"""

from __future__ import annotations

import copy
import logging
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib import metadata
from typing import Any

from data.envs import EnvArtifacts
from data.models import (
    EnvManifest,
    QuarantineRecord,
    RefactoredToolset,
    StageReport,
    StrictModel,
    TestReport,
    Toolset,
)
from envgen.codegen import generate_tools_source
from envgen.config import EnvGenConfig
from envgen.database import synthesize_database
from envgen.entities import plan_environment
from envgen.fidelity import COMPUTED_FAMILIES, check_call, contradictions, promise
from envgen.ingest import reason_of
from envgen.mutation import operator_tally, score_suite
from envgen.naming import slug
from envgen.planning import apply_decision, plan_toolset
from envgen.refactor import finalize_tools, refactor_toolset
from envgen.testgen import generate_suite, valid_arguments
from gustforge.errors import (
    UNAVAILABLE_REASON,
    CodegenError,
    GustError,
    LLMError,
    RefactorError,
    SandboxError,
    TransientLLMError,
)
from gustforge.hashing import short_hash
from gustforge.llm import LLMClient
from gustforge.registry import Registry
from gustforge.sandbox import SandboxLimits, SandboxPool, SandboxWorker

__all__ = ["EnvBuildResult", "BuildOutcome", "REPAIRS", "build_environment", "build_environments", "make_env_id"]

logger = logging.getLogger(__name__)

STAGE = "envgen"
Progress = Callable[[int, int], None]


class EnvBuildResult(StrictModel):
    """One toolset's outcome: the environment, or why it was quarantined."""

    toolset_id: str
    artifacts: EnvArtifacts | None = None
    quarantine: QuarantineRecord | None = None
    attempts: int = 0


class BuildOutcome(StrictModel):
    """A shard's outcome: per-toolset results in input order, the quarantine and the stage accounting."""

    results: tuple[EnvBuildResult, ...]
    quarantine: tuple[QuarantineRecord, ...]
    report: StageReport

    @property
    def environments(self) -> list[EnvArtifacts]:
        return [r.artifacts for r in self.results if r.artifacts is not None]


# --------------------------------------------------------------------------------------------- repairs

Repair = Callable[[RefactoredToolset, TestReport], RefactoredToolset]
REPAIRS: Registry[Repair] = Registry("repair strategy")


@REPAIRS.register("offline")
def _simplify_failing(refactored: RefactoredToolset, report: TestReport) -> RefactoredToolset:
    """Fall back to the `action` template (validate, log the call, echo referenced records) for failing tools."""
    failing = {case.tool for case in report.failures if case.tool}
    if not failing:
        return refactored
    log_only = tuple(sorted(set(refactored.log_only) | failing))
    logger.info("repair %s: log-only fallback for %s", refactored.toolset_id, sorted(failing))
    tools = finalize_tools(list(refactored.tools), log_only=log_only, overrides=refactored.plan_overrides)
    return refactored.model_copy(update={"tools": tools, "log_only": log_only})


@REPAIRS.register("openai")
def _keep_schemas(refactored: RefactoredToolset, report: TestReport) -> RefactoredToolset:
    """The LLM repairs the code (it sees the failures); the schemas stay."""
    return refactored


# --------------------------------------------------------------------------------------------- one toolset


def make_env_id(name: str, schemas: Sequence[dict[str, Any]], db: dict[str, Any], tools_source: str) -> str:
    """`<slug-of-name>-<short content hash>`: equal content gives equal ids across runs."""
    return f"{slug(name)}-{short_hash({'schemas': list(schemas), 'db': db, 'tools': tools_source}, 10)}"


def _versions() -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {"gustforge": version("gustforge"), "python": platform.python_version(), "jsonschema": version("jsonschema")}


def _failure_lines(report: TestReport) -> list[str]:
    lines = [f"{case.name} ({case.tool}): {case.message}" for case in report.failures]
    return ([f"module: {report.error}"] if report.error else []) + lines


def _quarantine_reason(report: TestReport) -> tuple[str, str]:
    if report.error:
        return "tests_error", report.error
    first = report.failures[0] if report.failures else None
    if first is None:
        return "tests_failed", "no test passed"
    return f"tests_failed:{first.tool or first.name}", first.message[:500]


class _Sandboxes:
    """Where one toolset's attempts run: a pool worker borrowed for one attempt's sandbox work only (load, tests,
    mutation), so LLM calls between attempts hold no sandbox; or one private worker for the whole build."""

    def __init__(self, pool: SandboxPool | None, cfg: EnvGenConfig, seed: int) -> None:
        self._pool, self._cfg, self._seed = pool, cfg, seed
        self._own: SandboxWorker | None = None
        self.isolation: dict[str, str] = {}  # what the last worker reported (for the manifest)

    @contextmanager
    def session(self) -> Iterator[SandboxWorker]:
        if self._pool is not None:
            with self._pool.acquire(seed=self._seed) as worker:
                self.isolation = dict(worker.isolation)
                yield worker
            return
        if self._own is None:
            self._own = SandboxWorker(_limits(self._cfg), seed=self._seed)
        self.isolation = dict(self._own.isolation)
        yield self._own

    def close(self) -> None:
        own, self._own = self._own, None
        if own is not None:
            own.close()


def _unavailable(exc: BaseException) -> bool:
    """True when an LLM outage (after retries, breaker, token budget) caused `exc`: not final, retried later."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TransientLLMError):
            return True
        seen = seen.__cause__
    return False


@contextmanager
def _sandboxes(pool: SandboxPool | None, cfg: EnvGenConfig, seed: int) -> Iterator[_Sandboxes]:
    sandboxes = _Sandboxes(pool, cfg, seed)
    try:
        yield sandboxes
    finally:
        sandboxes.close()


def _limits(cfg: EnvGenConfig) -> SandboxLimits:
    return SandboxLimits(cpu_seconds=cfg.sandbox_cpu_seconds, memory_mb=cfg.sandbox_memory_mb,
                         wall_seconds=cfg.sandbox_wall_seconds)  # fmt: skip


class _Attempt(StrictModel):
    refactored: RefactoredToolset
    db: dict[str, Any]
    tools_source: str
    tests_source: str
    report: TestReport
    seed: int
    isolation: dict[str, str] = {}
    broken_promises: dict[str, str] = {}


def _attempt(
    refactored: RefactoredToolset, cfg: EnvGenConfig, sandboxes: _Sandboxes, *, seed: int,
    client: LLMClient | None, failures: list[str], timings: dict[str, float],
) -> _Attempt:  # fmt: skip
    start = time.perf_counter()
    db = synthesize_database(refactored, seed=seed, records_per_entity=cfg.records_per_entity, client=client)
    # the tests depend on the schemas and the DB, not on the code: written before the code request, their CPU
    # overlaps other toolsets' requests instead of adding to the tail after the last code reply
    tests_source, rejected = generate_suite(refactored, db, seed=seed)
    tools_source = generate_tools_source(refactored, db, backend=cfg.backend, client=client, failures=failures)
    timings["generate_s"] = timings.get("generate_s", 0.0) + time.perf_counter() - start
    start = time.perf_counter()
    schemas = {t.name: {"parameters": t.parameters, "response": t.response} for t in refactored.tools}
    broken: dict[str, str] = {}
    try:
        # one worker for the whole sandbox part of the attempt: the tests, then the mutants of the same env.
        # Builds in other threads run their own workers meanwhile (the static check serializes only its parse).
        with sandboxes.session() as worker:
            worker.load(tools_source, db)
            report = worker.run_tests(tests_source, schemas, total_seconds=cfg.test_budget_seconds)
            if report.passed:
                broken = _call_fidelity(refactored, db, worker, seed=seed)
            if report.passed and cfg.mutation_testing:
                mutation_start = time.perf_counter()
                mutation = score_suite(refactored, db, tools_source, worker, seed=seed, tests_source=tests_source,
                                       budget_seconds=cfg.test_budget_seconds)  # fmt: skip
                report = report.model_copy(update={"mutation": mutation})
                timings["mutation_s"] = timings.get("mutation_s", 0.0) + time.perf_counter() - mutation_start
        report = report.model_copy(update={"rejected_calls": rejected})
    except SandboxError as exc:
        report = TestReport(passed=False, cases=(), duration_s=0.0, error=f"{type(exc).__name__}: {exc}")
    timings["sandbox_s"] = timings.get("sandbox_s", 0.0) + time.perf_counter() - start
    return _Attempt(refactored=refactored, db=db, tools_source=tools_source, tests_source=tests_source,
                    report=report, seed=seed, isolation=dict(sandboxes.isolation),
                    broken_promises=broken)  # fmt: skip


def _call_fidelity(refactored: RefactoredToolset, db: dict[str, Any], worker: SandboxWorker, *, seed: int
                   ) -> dict[str, str]:  # fmt: skip
    """The dynamic fidelity check: each tool called once in the sandbox with arguments it accepts; its DB diff
    and output are compared with what its description promises (`envgen.fidelity.check_call`)."""
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    broken = {}
    for tool, tool_plan in zip(refactored.tools, plan.tools, strict=True):
        said = promise(tool)
        if said.effect not in ("read", "write") or tool_plan.family in COMPUTED_FAMILIES:
            continue  # "Add two numbers": the math matcher, not the verb, decided it computes
        args = valid_arguments(tool, tool_plan, plan.entity(tool_plan.entity), db, seed=seed)
        worker.set_db(copy.deepcopy(db))
        before = worker.get_db()
        out = worker.call(tool.name, args)
        check = check_call(said, before, worker.get_db(), out)
        if not check.ok:
            broken[tool.name] = f"call: {check.reason}"
    worker.set_db(copy.deepcopy(db))
    return broken


def _artifacts(
    toolset: Toolset, cfg: EnvGenConfig, done: _Attempt, attempts: int, timings: dict[str, float],
    original: RefactoredToolset,
) -> EnvArtifacts:  # fmt: skip
    schemas = done.refactored.tools
    behaviours = family_map(done.refactored)
    before = family_map(original)
    repaired = {name: family for name, family in before.items() if behaviours.get(name) != family}
    dumps = [s.model_dump(mode="json") for s in schemas]
    env_id = make_env_id(toolset.name, dumps, done.db, done.tools_source)
    manifest = EnvManifest(
        env_id=env_id,
        toolset_id=toolset.toolset_id,
        name=toolset.name,
        provenance=toolset.provenance,
        backend=cfg.backend,
        model=cfg.llm.model if cfg.backend != "offline" else None,
        seed=done.seed,
        attempts=attempts,
        tool_count=len(schemas),
        name_map=done.refactored.name_map,
        versions=_versions(),
        timings={k: round(v, 4) for k, v in sorted(timings.items())},
        repaired_tools=repaired,
        sandbox=done.isolation,
        behaviours=behaviours,
        log_only_tools=[name for name, family in behaviours.items() if family == "log_only"],
        mutation_score=done.report.mutation.score if done.report.mutation else None,
        notes={**plan_reasons(done.refactored), **done.refactored.notes},
        plan_overrides=done.refactored.plan_overrides,
        contradictions={**done.broken_promises, **contradictions(schemas, behaviours)},
        family_swap=operator_tally(done.report.mutation, "family_swap") if done.report.mutation else {},
    )
    return EnvArtifacts(manifest=manifest, schemas=schemas, db=done.db, tools_source=done.tools_source,
                        tests_source=done.tests_source, test_report=done.report)  # fmt: skip


def plan_reasons(refactored: RefactoredToolset) -> dict[str, str]:
    """tool -> why the planner overruled its name-based draft or fell back to log-only (manifest notes)."""
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    return {tool.name: f"behaviour: {tool.reason}" for tool in plan.tools if tool.reason}


def family_map(refactored: RefactoredToolset) -> dict[str, str]:
    """tool -> behaviour family it is implemented with (`log_only` for the fallback)."""
    plan = plan_environment(refactored.tools, refactored.log_only, refactored.plan_overrides)
    return {tool.name: tool.family for tool in plan.tools}


def _mostly_echo(refactored: RefactoredToolset, cfg: EnvGenConfig) -> str | None:
    families = family_map(refactored)
    log_only = sorted(name for name, family in families.items() if family == "log_only")
    share = len(log_only) / max(1, len(families))
    if share > cfg.max_log_only_share:
        return (
            f"{len(log_only)}/{len(families)} tools only log and echo their call ({share:.0%} > "
            f"max_log_only_share={cfg.max_log_only_share:.0%}): {', '.join(log_only)}"
        )
    return None


def _weak(report: TestReport, cfg: EnvGenConfig) -> str | None:
    mutation = report.mutation
    if not cfg.mutation_testing or mutation is None:
        return None
    if mutation.score is None:
        return "no seeded bug applies to any tool: the tests cannot be scored"
    if mutation.score < cfg.min_mutation_score:
        survivors = [f"{m.operator}@{m.tool}" for m in mutation.mutants if not m.killed]
        return (
            f"mutation score {mutation.score:.2f} < min_mutation_score={cfg.min_mutation_score}; "
            f"survived: {', '.join(survivors[:12])}"
        )
    return None


def _quarantined(toolset: Toolset, reason: str, detail: str, attempts: int) -> EnvBuildResult:
    record = QuarantineRecord(item_id=toolset.toolset_id, stage=STAGE, reason=reason, detail=detail,
                              provenance=toolset.provenance)  # fmt: skip
    return EnvBuildResult(toolset_id=toolset.toolset_id, quarantine=record, attempts=attempts)


def _threads(cfg: EnvGenConfig, client: LLMClient | None) -> int:
    """Build threads: one per sandbox worker offline; enough to keep the endpoint's concurrency busy with an LLM."""
    # twice the endpoint's concurrency: threads waiting for the sandbox leave others to keep requests in flight
    # (one thread per toolset measured the same on bench/llm_throughput.py)
    llm = 2 * client.settings.max_concurrency if client is not None and cfg.backend == "openai" else 0
    return max(cfg.sandbox_workers, llm)


def _client(cfg: EnvGenConfig) -> LLMClient | None:
    return LLMClient(cfg.llm.model_copy(update={"backend": "openai"})) if cfg.backend == "openai" else None


def build_environment(
    toolset: Toolset,
    cfg: EnvGenConfig,
    *,
    sandbox_pool: SandboxPool | None = None,
    client: LLMClient | None = None,
) -> EnvBuildResult:
    """Build one executable environment, repairing up to `cfg.max_repairs` times, or quarantine it.

    Args:
        toolset: an ingested toolset.
        cfg: stage configuration.
        sandbox_pool: warm workers to run the tests in; a one-off worker is started when omitted.
        client: LLM client for the openai backend (built from `cfg.llm` when omitted).

    Returns:
        An `EnvBuildResult` with artifacts, or with a quarantine record whose reason is the first failure
        (`tests_failed:<tool>`, `tests_error`, `unsupported_type`, `sandbox_violation`, `llm_*`, ...).
    """
    owned = client is None and cfg.backend == "openai"
    client = client if client is not None else _client(cfg)
    timings: dict[str, float] = {}
    try:
        start = time.perf_counter()
        refactored = refactor_toolset(toolset, cfg, client=client)
        timings["refactor_s"] = time.perf_counter() - start
        if client is not None and cfg.backend == "openai":  # the model plans behaviours; offline: name-based
            start = time.perf_counter()
            refactored = apply_decision(refactored, plan_toolset(refactored, client))
            timings["plan_s"] = time.perf_counter() - start
        return _repair_loop(toolset, refactored, cfg, sandbox_pool, client, timings)
    except (RefactorError, CodegenError, LLMError, SandboxError) as exc:
        if _unavailable(exc):
            return _quarantined(toolset, UNAVAILABLE_REASON, str(exc), attempts=0)
        return _quarantined(toolset, *reason_of(exc), attempts=0)
    finally:
        if owned and client is not None:
            client.close()


def _repair_loop(
    toolset: Toolset, refactored: RefactoredToolset, cfg: EnvGenConfig, pool: SandboxPool | None,
    client: LLMClient | None, timings: dict[str, float],
) -> EnvBuildResult:  # fmt: skip
    original = refactored
    echo = _mostly_echo(refactored, cfg)
    if echo is not None:
        return _quarantined(toolset, "mostly_echo", echo, attempts=0)
    failures: list[str] = []
    report = TestReport(passed=False, cases=(), duration_s=0.0, error="not run")
    weak: str | None = None
    with _sandboxes(pool, cfg, cfg.seed) as sandboxes:
        for attempt in range(cfg.max_repairs + 1):
            try:
                last = _attempt(refactored, cfg, sandboxes, seed=cfg.seed + attempt, client=client,
                                failures=failures, timings=timings)  # fmt: skip
            except CodegenError as exc:
                if _unavailable(exc):  # an outage is not the code's fault: no repair round spent on it
                    return _quarantined(toolset, UNAVAILABLE_REASON, str(exc), attempts=attempt + 1)
                failures = [str(exc)]
                if attempt == cfg.max_repairs:
                    return _quarantined(toolset, *reason_of(exc), attempts=attempt + 1)
                continue
            report = last.report
            if report.passed:
                weak = _weak(report, cfg)
                if weak is None:
                    artifacts = _artifacts(toolset, cfg, last, attempt + 1, timings, original)
                    return EnvBuildResult(toolset_id=toolset.toolset_id, attempts=attempt + 1, artifacts=artifacts)
                failures = [f"the tests are too weak: {weak}"]
                continue  # the next attempt reseeds the DB, and with it the tests' values
            weak = None
            failures = _failure_lines(report)
            refactored = REPAIRS.get(cfg.backend)(refactored, report)
            echo = _mostly_echo(refactored, cfg)
            if echo is not None:
                return _quarantined(toolset, "mostly_echo", f"after repairs: {echo}", attempts=attempt + 1)
    if weak is not None:
        return _quarantined(toolset, "weak_tests", weak, attempts=cfg.max_repairs + 1)
    return _quarantined(toolset, *_quarantine_reason(report), attempts=cfg.max_repairs + 1)


# --------------------------------------------------------------------------------------------- a shard


def _safe_build(toolset: Toolset, cfg: EnvGenConfig, pool: SandboxPool, client: LLMClient | None) -> EnvBuildResult:
    """The per-item quarantine boundary: a bug on one toolset is counted, logged and quarantined, not fatal."""
    try:
        return build_environment(toolset, cfg, sandbox_pool=pool, client=client)
    except GustError as exc:
        return _quarantined(toolset, *reason_of(exc), attempts=0)
    except Exception as exc:  # noqa: BLE001 - the one quarantine boundary of this stage
        logger.exception("envgen bug on toolset %s", toolset.toolset_id)
        return _quarantined(toolset, f"internal_error:{type(exc).__name__}", str(exc)[:500], attempts=0)


def build_environments(
    toolsets: Sequence[Toolset],
    cfg: EnvGenConfig,
    *,
    progress: Progress | None = None,
    client: LLMClient | None = None,
) -> BuildOutcome:
    """Build every toolset of a shard with a warm sandbox pool (`cfg.sandbox_workers` workers and threads).

    Args:
        toolsets: ingested toolsets.
        cfg: stage configuration.
        progress: optional callback `progress(done, total)` after each toolset.
        client: LLM client for the openai backend (the caller keeps ownership); built from `cfg.llm` if omitted.

    Returns:
        A `BuildOutcome`; results keep the input order and `report.balanced` holds.
    """
    total = len(toolsets)
    results: list[EnvBuildResult | None] = [None] * total
    owned = client is None
    client = client if client is not None else _client(cfg)
    done = 0
    try:
        with (
            SandboxPool(size=cfg.sandbox_workers, limits=_limits(cfg)) as pool,
            ThreadPoolExecutor(max_workers=_threads(cfg, client), thread_name_prefix="envgen") as executor,
        ):
            futures = {executor.submit(_safe_build, t, cfg, pool, client): i for i, t in enumerate(toolsets)}
            for future, index in futures.items():
                results[index] = future.result()
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        if owned and client is not None:
            client.close()
    final = [r for r in results if r is not None]
    quarantine = tuple(r.quarantine for r in final if r.quarantine is not None)
    return BuildOutcome(results=tuple(final), quarantine=quarantine, report=_report(total, final, quarantine))


def _report(total: int, results: list[EnvBuildResult], quarantine: tuple[QuarantineRecord, ...]) -> StageReport:
    dropped: dict[str, int] = {}
    for record in quarantine:
        code = record.reason.split(":", 1)[0]
        dropped[code] = dropped.get(code, 0) + 1
    produced = sum(r.artifacts is not None for r in results)
    logger.info("envgen: %d toolsets, %d environments, dropped %s", total, produced, dropped)
    return StageReport(stage=STAGE, inputs=total, produced=produced, dropped=dropped)
