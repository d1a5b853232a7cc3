"""Directory-level stage functions: read a shard of items, call the stage library, write outputs, account.

Each stage takes a shard (a list of small JSON-able items) and returns a `ShardResult` whose items feed the next
stage. Prefect tasks in `tasks/` wrap these one-to-one; `gust stage` and the orchestration benchmark call them
without Prefect. Every input item ends as produced or quarantined: `ShardResult.report` balances.

Items per stage (what flows between shards):
    envgen      in: Toolset dumps                 out: {env_id, env_dir, digest}
    tdg         in: env items                     out: env item + {graphs: [paths]}
    sample      in: tdg items                     out: env item + {skeletons: [Skeleton dumps]}
    reconstruct in: sample items                  out: env item + {traces: [GoldenTrace dumps]}
    tasks       in: reconstruct items             out: env item + {records: [TaskRecord dumps]}
    verify      in: tasks items                   out: env item + {records: [verified TaskRecord dumps]}
    quality     in: verify items (all shards)     out: verify items less the hard failures; reports/quality.json
    export      in: verify items (all shards)     out: the GUST folder
    convert     in: export item                   out: verl RL parquet (`OUT/verl/train.parquet`) for `gust train`
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from data import io
from data.models import GoldenTrace, QuarantineRecord, Skeleton, StageReport, StrictModel, TaskRecord, Toolset
from gustforge.config import BuildConfig
from gustforge.errors import UNAVAILABLE_REASON, BudgetExceededError, GustError, TransientLLMError
from gustforge.hashing import content_hash
from gustforge.registry import Registry

__all__ = [
    "STAGE_ORDER",
    "STAGES",
    "ShardResult",
    "StageSpec",
    "shard_items",
    "merge_results",
    "code_digest",
    "ingest_inputs",
    "discover_items",
    "write_stage_report",
    "check_budget",
    "bundled_sample_inputs",
    "save_items",
    "count_reasons",
    "stage_config_key",
    "inputs_digest",
    "finish_stage",
    "write_quarantine",
    "write_ingest_report",
    "RunSummary",
    "write_run_summary",
    "IngestSummary",
    "accounting_rows",
    "stage_markdown",
    "POLICY_REASONS",
    "failure_count",
    "check_ingest_budget",
    "read_llm_usage",
    "llm_usage_markdown",
    "resolve_path",
    "close_llm_clients",
]

log = logging.getLogger(__name__)

STAGE_ORDER: tuple[str, ...] = (
    "envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "quality", "export", "convert"
)  # fmt: skip

Item = dict[str, Any]
Usage = dict[str, dict[str, int]]

# Drops that are deliberate filtering, not failures: reported, but outside the error budgets.
POLICY_REASONS: frozenset[str] = frozenset({
    "too_few_tools", "too_many_tools", "duplicate_of", "duplicate", "env_cap", "teacher_failed", "unsolvable",
    "mostly_echo", "weak_tests",  # envgen quality gates (issue 9)
    "too_many_required_params",  # the paper's parameter cap (envgen.max_params)
})  # fmt: skip
# The quality stage's drops are deliberate filtering too (tdg.quality.DROP_REASONS + OPTIONAL_DROP_REASONS).
QUALITY_REASONS: frozenset[str] = frozenset({
    "undetermined_pick", "noop_write", "after_terminal_state", "conflicting_stage", "leaked_steps",
    "placeholder_value", "echo_only", "single_stage",
})  # fmt: skip
_PATH_KEYS = ("env_dir", "gust_dir", "verl_parquet")
_LLM_RUNTIME_FIELDS = ("max_concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "retry_seed",
                       "breaker_threshold", "breaker_cooldown_s", "max_total_tokens", "api_key_env")  # fmt: skip
_TEACHER_OUTAGE = re.compile(r"APIConnectionError|APITimeoutError|RateLimitError|InternalServerError|Connection error")


class ShardResult(StrictModel):
    """What one shard of one stage produced, dropped and how long it took."""

    stage: str
    shard: int
    items: tuple[Item, ...] = ()
    produced_ids: tuple[str, ...] = ()
    quarantine: tuple[QuarantineRecord, ...] = ()
    report: StageReport
    seconds: float = Field(default=0.0, description="Wall time of the shard's work.")
    llm: Usage = Field(default_factory=dict, description="LLM requests/tokens/retries/cache hits per role.")

    @property
    def retryable(self) -> int:
        """Items dropped only because the LLM endpoint was unreachable: worth another run of this shard."""
        return sum(1 for q in self.quarantine if q.reason == UNAVAILABLE_REASON)


@dataclass(frozen=True)
class StageSpec:
    """A stage: its shard function, the stage whose outputs it reads and the library packages it runs."""

    name: str
    run: Callable[[Sequence[Item], BuildConfig, Path], ShardResult]
    previous: str | None
    packages: tuple[str, ...]
    config_keys: tuple[str, ...]
    policy: frozenset[str] = field(default=POLICY_REASONS)


STAGES: Registry[StageSpec] = Registry("stage")


def _stage(name: str, previous: str | None, packages: tuple[str, ...], config_keys: tuple[str, ...],
           policy: Iterable[str] = POLICY_REASONS) -> Callable[..., Any]:  # fmt: skip
    def decorate(fn: Callable[[Sequence[Item], BuildConfig, Path], ShardResult]) -> Callable[..., Any]:
        STAGES.add(name, StageSpec(name=name, run=fn, previous=previous, packages=packages,
                                   config_keys=config_keys, policy=frozenset(policy)))  # fmt: skip
        return fn

    return decorate


def bundled_sample_inputs() -> tuple[Path, ...]:
    """The raw toolsets shipped in `data/samples/raw/` (what `gust build` builds with no `--input`)."""
    root = Path(__file__).resolve().parents[1] / "data" / "samples" / "raw"
    return (root,)


def code_digest(packages: Iterable[str]) -> str:
    """sha256 over the source files of the given packages: a library edit invalidates the stage cache."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def shard_items(items: Sequence[Item], *, shard_size: int, max_shards: int) -> list[list[Item]]:
    """Split items into at most `max_shards` contiguous shards of about `shard_size` (order kept)."""
    if not items:
        return []
    n_shards = min(max_shards, math.ceil(len(items) / shard_size))
    size = math.ceil(len(items) / n_shards)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def add_usage(a: Usage, b: Usage) -> Usage:
    """Per-role counters summed."""
    out = {role: dict(counts) for role, counts in a.items()}
    for role, counts in b.items():
        mine = out.setdefault(role, {})
        for name, value in counts.items():
            mine[name] = mine.get(name, 0) + value
    return dict(sorted(out.items()))


def merge_results(stage: str, results: Sequence[ShardResult]) -> ShardResult:
    """One result for a whole stage: items in shard order, reports and LLM usage summed."""
    dropped: dict[str, int] = {}
    for result in results:
        for reason, count in result.report.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    report = StageReport(
        stage=stage,
        inputs=sum(r.report.inputs for r in results),
        produced=sum(r.report.produced for r in results),
        dropped=dict(sorted(dropped.items())),
    )
    return ShardResult(
        stage=stage,
        shard=-1,
        items=tuple(item for r in results for item in r.items),
        produced_ids=tuple(i for r in results for i in r.produced_ids),
        quarantine=tuple(q for r in results for q in r.quarantine),
        report=report,
        seconds=sum(r.seconds for r in results),
        llm=_sum_usage(r.llm for r in results),
    )


def _sum_usage(usages: Iterable[Usage]) -> Usage:
    total: Usage = {}
    for usage in usages:
        total = add_usage(total, usage)
    return total


def write_stage_report(out: Path, merged: ShardResult) -> Path:
    """`OUT/reports/<stage>.jsonl`: one line per produced or dropped item, then the stage summary."""
    lines: list[dict[str, Any]] = [{"item_id": i, "outcome": "produced"} for i in merged.produced_ids]
    lines += [{"outcome": "dropped", **q.model_dump(mode="json")} for q in merged.quarantine]
    lines.append({"summary": merged.report.model_dump(mode="json"), "seconds": round(merged.seconds, 3),
                  "llm": merged.llm})  # fmt: skip
    return io.write_jsonl(out / "reports" / f"{merged.stage}.jsonl", lines)


def failure_count(report: StageReport, policy: Iterable[str] = POLICY_REASONS) -> int:
    """Drops that are failures (malformed input, tool/code errors, outages), not deliberate filtering."""
    allowed = set(policy)
    return sum(count for reason, count in report.dropped.items() if reason not in allowed)


def check_budget(report: StageReport, budget: float, policy: Iterable[str] = POLICY_REASONS) -> None:
    """Raise when a stage's failures exceed its error budget (a share of its inputs); filtering is not counted.

    Raises:
        BudgetExceededError: naming the stage, the share and the top failure reasons.
    """
    if report.inputs == 0:
        return
    allowed = set(policy)
    failures = failure_count(report, allowed)
    share = failures / report.inputs
    if share > budget:
        ranked = sorted(((k, v) for k, v in report.dropped.items() if k not in allowed), key=lambda kv: -kv[1])
        reasons = ", ".join(f"{k}={v}" for k, v in ranked[:5])
        raise BudgetExceededError(
            f"stage {report.stage!r} failed on {share:.0%} of {report.inputs} inputs, over its error budget "
            f"of {budget:.0%} (top reasons: {reasons}); see reports/{report.stage}.jsonl"
        )


def check_ingest_budget(ingest: IngestSummary, cfg: BuildConfig) -> None:
    """The ingest error budget: unreadable/malformed records, not the size filter or duplicates."""
    check_budget(ingest.report, cfg.budgets.ingest)


def count_reasons(quarantine: Sequence[QuarantineRecord]) -> dict[str, int]:
    """Drops per reason code, sorted; "tests_failed:get_order" counts as tests_failed."""
    return dict(sorted(Counter(record.reason.split(":", 1)[0] for record in quarantine).items()))


def _result(stage: str, items: Sequence[Item], produced_ids: Sequence[str], quarantine: Sequence[QuarantineRecord],
            inputs: int, started: float) -> ShardResult:  # fmt: skip
    report = StageReport(stage=stage, inputs=inputs, produced=len(produced_ids), dropped=count_reasons(quarantine))
    if not report.balanced:
        raise GustError(f"stage {stage}: accounting does not balance: {report}")
    return ShardResult(stage=stage, shard=0, items=tuple(items), produced_ids=tuple(produced_ids),
                       quarantine=tuple(quarantine), report=report, seconds=time.perf_counter() - started)  # fmt: skip


def _env_digest(env_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in ("schemas.json", "db.json", "tools.py"):
        digest.update((env_dir / name).read_bytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------------- ingest
class IngestSummary(StrictModel):
    toolsets: tuple[Item, ...]
    quarantine: tuple[QuarantineRecord, ...]
    report: StageReport


def ingest_inputs(inputs: Sequence[Path], cfg: BuildConfig) -> IngestSummary:
    """Read every raw input (file or folder), dedupe across files by content hash, apply the size filter."""
    from envgen.ingest import read_toolsets

    toolsets: list[Toolset] = []
    quarantine: list[QuarantineRecord] = []
    inputs_count = 0
    seen: dict[str, str] = {}
    for path in inputs:
        result = read_toolsets(Path(path), fmt=cfg.input_format, cfg=cfg.envgen)
        inputs_count += result.report.inputs
        quarantine.extend(_relative_provenance(q, Path(path)) for q in result.quarantine)
        for toolset in (_relative_provenance(t, Path(path)) for t in result.toolsets):
            if toolset.toolset_id in seen:
                duplicate = QuarantineRecord(item_id=toolset.toolset_id, stage="ingest",
                                             reason=f"duplicate_of:{toolset.toolset_id}",
                                             detail=f"same tools as {seen[toolset.toolset_id]}",
                                             provenance=toolset.provenance)  # fmt: skip
                quarantine.append(duplicate)
                continue
            seen[toolset.toolset_id] = f"{toolset.provenance.path}#{toolset.provenance.record_id}"
            toolsets.append(toolset)
    toolsets.sort(key=lambda t: t.toolset_id)
    report = StageReport(stage="ingest", inputs=inputs_count, produced=len(toolsets), dropped=count_reasons(quarantine))
    return IngestSummary(toolsets=tuple(t.model_dump(mode="json") for t in toolsets),
                         quarantine=tuple(quarantine), report=report)  # fmt: skip


def _relative_provenance(record: Any, root: Path) -> Any:
    """Provenance paths relative to the input's parent (`raw/shop.json`), so manifests hold no machine paths."""
    prov = record.provenance
    if prov is None:
        return record
    from data.gust import license_near

    base = Path(root).resolve().parent
    license_id = prov.license or license_near(Path(prov.path).resolve())  # found while the path still resolves
    try:
        relative = Path(prov.path).resolve().relative_to(base).as_posix()
    except ValueError:
        relative = prov.path
    return record.model_copy(update={"provenance": prov.model_copy(update={"path": relative, "license": license_id})})


# --------------------------------------------------------------------------------------------------- stages
def resolve_path(out: Path, path: str | Path) -> Path:
    """A path stored in a run folder's items: relative to the run folder (portable) or absolute (outside it)."""
    path = Path(path)
    return path if path.is_absolute() else Path(out) / path


def _portable(out: Path, path: str | Path) -> str:
    """`path` relative to the run folder when it lies inside it, so a moved run folder keeps working."""
    try:
        return Path(path).resolve().relative_to(Path(out).resolve()).as_posix()
    except ValueError:
        return str(Path(path).resolve())


def _rebase(item: Item, source: Path, out: Path) -> Item:
    """Item paths written relative to `source` made valid for a stage writing to `out`."""
    if Path(source).resolve() == Path(out).resolve():
        return item
    fixed = dict(item)
    for key in _PATH_KEYS:
        if isinstance(fixed.get(key), str):
            fixed[key] = _portable(out, resolve_path(source, fixed[key]))
    if isinstance(fixed.get("graphs"), list):
        fixed["graphs"] = [_portable(out, resolve_path(source, p)) for p in fixed["graphs"]]
    return fixed


def _load_env(item: Item, out: Path) -> Any:
    from envgen.runtime import Environment

    return Environment.load(resolve_path(out, item["env_dir"]))


def _llm_view(settings: Any, out: Path) -> Any:
    """A per-shard view of the build's one LLM client; replies are cached under `OUT/cache/llm.sqlite` unless a
    cache path is set. Offline settings get a plain client (no loop, no cache)."""
    from gustforge.llm import LLMClient, shared_client

    if settings.backend != "openai":
        return LLMClient(settings.model_copy(update={"cache_path": None}))
    if settings.cache_path is None:
        settings = settings.model_copy(update={"cache_path": Path(out).resolve() / "cache" / "llm.sqlite"})
    return shared_client(settings).view()


def _usage(client: Any) -> Usage:
    return {role: stats.as_dict() for role, stats in client.role_stats().items()}


def close_llm_clients() -> None:
    """Close the build's shared LLM clients (end of a build)."""
    from gustforge.llm import close_shared_clients

    close_shared_clients()


def _parallel(fn: Callable[[Any], Any], args: Sequence[Any], workers: int) -> list[Any]:
    """`[fn(a) for a in args]`, on `workers` threads when > 1 (LLM-bound work; order kept)."""
    if workers <= 1 or len(args) <= 1:
        return [fn(a) for a in args]
    with ThreadPoolExecutor(max_workers=min(workers, len(args)), thread_name_prefix="gust-llm") as pool:
        return list(pool.map(fn, args))


def _llm_workers(client: Any) -> int:
    return int(client.settings.max_concurrency) if client.settings.backend == "openai" else 1


def _sandbox_limits(cfg: BuildConfig) -> Any:
    from gustforge.sandbox import SandboxLimits

    return SandboxLimits(cpu_seconds=cfg.envgen.sandbox_cpu_seconds, memory_mb=cfg.envgen.sandbox_memory_mb,
                         wall_seconds=cfg.envgen.sandbox_wall_seconds)  # fmt: skip


def _env_item(item: Item) -> Item:
    return {"env_id": item["env_id"], "env_dir": item["env_dir"], "digest": item["digest"]}


@_stage("envgen", None, ("envgen", "gustforge", "data"), ("envgen", "llm", "input_format"))
def run_envgen(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Build, test and write an environment per toolset; failing toolsets are quarantined with the reason."""
    from data.envs import write_env_dir
    from envgen.build import build_environments

    started = time.perf_counter()
    toolsets = [Toolset.model_validate(item) for item in items]
    client = None
    if cfg.envgen.backend == "openai":
        client = _llm_view(cfg.envgen.llm.model_copy(update={"backend": "openai"}), out)
    outcome = build_environments(toolsets, cfg.envgen, client=client)
    produced: list[Item] = []
    for result in outcome.results:
        if result.artifacts is None:
            continue
        env_dir = write_env_dir(out / "envs", result.artifacts)
        produced.append({"env_id": env_dir.name, "env_dir": _portable(out, env_dir), "digest": _env_digest(env_dir)})
    produced.sort(key=lambda i: i["env_id"])
    result = _result("envgen", produced, [i["env_id"] for i in produced], list(outcome.quarantine), len(items),
                     started)  # fmt: skip
    return result.model_copy(update={"llm": _usage(client) if client is not None else {}})


@_stage("tdg", "envgen", ("tdg", "data"), ("tdg.inferer", "tdg.n_graphs", "tdg.seed", "llm"))
def run_tdg(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Infer and sanitize `n_graphs` dependency graphs per environment; write them as node-link JSON.

    With the LLM judge, environments are judged concurrently (the client bounds the requests in flight).
    """
    started = time.perf_counter()
    produced: list[Item] = []
    quarantine: list[QuarantineRecord] = []
    client = _llm_view(cfg.llm, out)
    workers = _llm_workers(client) if cfg.tdg.inferer == "llm" else 1

    def one(item: Item) -> list[str] | GustError:
        try:
            return _write_graphs(item, cfg, out, client)
        except GustError as exc:
            return exc

    for item, outcome in zip(items, _parallel(one, list(items), workers), strict=True):
        if isinstance(outcome, GustError):
            reason = UNAVAILABLE_REASON if isinstance(outcome, TransientLLMError) else type(outcome).__name__
            quarantine.append(QuarantineRecord(item_id=item["env_id"], stage="tdg", reason=reason,
                                               detail=str(outcome)))  # fmt: skip
            continue
        produced.append({**_env_item(item), "graphs": outcome})
    result = _result("tdg", produced, [i["env_id"] for i in produced], quarantine, len(items), started)
    return result.model_copy(update={"llm": _usage(client)})


def _write_graphs(item: Item, cfg: BuildConfig, out: Path, client: Any) -> list[str]:
    from data.graphs import graph_path, write_graph
    from tdg.infer import build_graphs
    from tdg.sanitize import sanitize_to_dag

    env = _load_env(item, out)
    graphs = build_graphs(env, n_graphs=cfg.tdg.n_graphs, inferer=cfg.tdg.inferer, seed=cfg.tdg.seed, client=client)
    paths = []
    for index, graph in enumerate(graphs):
        sanitized = sanitize_to_dag(graph)
        path = write_graph(graph_path(out, env.env_id, index), sanitized.dag, list(sanitized.removed))
        paths.append(_portable(out, path))
    return paths


@_stage("sample", "tdg", ("tdg", "data"), ("tdg",))
def run_sample(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Coverage-oriented Dynamic Unlocking Sampling over each environment's DAGs."""
    from data.graphs import read_graph
    from tdg.dus import sample_skeletons_for_coverage

    started = time.perf_counter()
    produced: list[Item] = []
    quarantine: list[QuarantineRecord] = []
    for item in items:
        dags = [read_graph(resolve_path(out, p)).dag for p in item["graphs"]]
        result = sample_skeletons_for_coverage(
            dags, env_id=item["env_id"], target_coverage=cfg.tdg.target_coverage, max_skeletons=cfg.tdg.max_skeletons,
            patience=cfg.tdg.patience, max_parallel=cfg.tdg.max_parallel, max_stages=cfg.tdg.max_stages,
            min_skeletons=cfg.tdg.min_skeletons, seed=cfg.tdg.seed,
        )  # fmt: skip
        if not result.skeletons:
            quarantine.append(QuarantineRecord(item_id=item["env_id"], stage="sample", reason="no_skeleton",
                                               detail="DUS produced no skeleton"))  # fmt: skip
            continue
        produced.append({**item, "skeletons": [s.model_dump(mode="json") for s in result.skeletons],
                         "coverage": result.coverage})  # fmt: skip
    return _result("sample", produced, [i["env_id"] for i in produced], quarantine, len(items), started)


@_stage("reconstruct", "sample", ("tdg", "envgen", "gustforge", "data"), ("tdg.seed",))
def run_reconstruct(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Inverse context reconstruction of every skeleton on a live environment (counts skeletons)."""
    from data.graphs import read_graph
    from tdg.reconstruct import reconstruct_all

    started = time.perf_counter()
    produced: list[Item] = []
    produced_ids: list[str] = []
    quarantine: list[QuarantineRecord] = []
    inputs = 0
    for item in items:
        skeletons = [Skeleton.model_validate(s) for s in item["skeletons"]]
        inputs += len(skeletons)
        env = _load_env(item, out)
        dags = [read_graph(resolve_path(out, p)).dag for p in item["graphs"]]
        result = reconstruct_all(env, dags, skeletons, seed=cfg.tdg.seed, max_unlinked=cfg.tdg.max_unlinked_traces)
        quarantine.extend(result.quarantine)
        if result.traces:
            produced_ids.extend(t.trace_id for t in result.traces)
            produced.append({**_env_item(item), "graphs": item["graphs"], "coverage": item.get("coverage"),
                             "traces": [t.model_dump(mode="json") for t in result.traces]})  # fmt: skip
    return _result("reconstruct", produced, produced_ids, quarantine, inputs, started)


@_stage("tasks", "reconstruct", ("tdg", "envgen", "gustforge", "data"), ("seed", "llm"))
def run_tasks(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Write a user task (query, dialogue history, reasoning chain) for every golden trace.

    With an endpoint, every trace of the shard is written concurrently (the client bounds the requests in flight).
    """
    from tdg.taskgen import write_tasks

    started = time.perf_counter()
    client = _llm_view(cfg.llm, out)
    envs = [_load_env(item, out) for item in items]
    jobs = [(index, GoldenTrace.model_validate(t)) for index, item in enumerate(items) for t in item["traces"]]
    outcomes = _parallel(lambda job: write_tasks([job[1]], envs[job[0]], client=client, seed=cfg.seed), jobs,
                         _llm_workers(client))  # fmt: skip
    records: dict[int, list[Item]] = {}
    quarantine: list[QuarantineRecord] = []
    produced_ids: list[str] = []
    for (index, _trace), outcome in zip(jobs, outcomes, strict=True):
        quarantine.extend(outcome.dropped)
        for record in outcome.records:
            produced_ids.append(record.task_id)
            records.setdefault(index, []).append(record.model_dump(mode="json"))
    produced = [{**_env_item(item), "coverage": item.get("coverage"), "records": records[index]}
                for index, item in enumerate(items) if index in records]  # fmt: skip
    result = _result("tasks", produced, produced_ids, quarantine, len(jobs), started)
    return result.model_copy(update={"llm": _usage(client)})


def _teacher_outage(record: QuarantineRecord) -> QuarantineRecord:
    """A teacher that could not reach its endpoint is an outage (retried next build), not a verdict."""
    if record.reason == "teacher_error" and _TEACHER_OUTAGE.search(record.detail):
        return record.model_copy(update={"reason": UNAVAILABLE_REASON})
    return record


@_stage("verify", "tasks", ("tdg", "envgen", "gustforge", "data"), ("verify", "quality"))
def run_verify(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Replay (LangGraph), solvability and teacher Pass@k — or `not_run` when no teacher endpoint is set.

    With a teacher, every attempt of every task of the shard runs concurrently: LLM requests up to the teacher's
    `max_concurrency`, and a sandbox session (from a pool of that size) is leased only for each tool step.
    """
    from gustforge.sandbox import SandboxPool
    from tdg.verify import verify_tasks

    started = time.perf_counter()
    teacher = cfg.verify.teacher
    envs = {item["env_id"]: _load_env(item, out) for item in items}
    groups = [[TaskRecord.model_validate(r) for r in item["records"]] for item in items]
    with SandboxPool(size=teacher.max_concurrency if teacher.enabled else 1, limits=_sandbox_limits(cfg)) as pool:
        outcomes = [verify_tasks([r for g in groups for r in g], envs, cfg.verify, pool=pool, quality=cfg.quality)]
    kept = sorted((r for o in outcomes for r in o.kept), key=lambda r: (r.env_id, r.task_id))
    dropped = [_teacher_outage(q) for o in outcomes for q in o.dropped]
    by_env: dict[str, list[Item]] = {}
    for record in kept:
        by_env.setdefault(record.env_id, []).append(record.model_dump(mode="json"))
    produced = [{**_env_item(item), "coverage": item.get("coverage"), "records": by_env[item["env_id"]]}
                for item in items if item["env_id"] in by_env]  # fmt: skip
    return _result("verify", produced, [r.task_id for r in kept], dropped, sum(len(g) for g in groups), started)


def _teacher_ran(records: Sequence[TaskRecord]) -> bool:
    return any(r.teacher_status in ("passed", "failed") for r in records)


@_stage("quality", "verify", ("tdg", "data"), ("quality",), policy=POLICY_REASONS | QUALITY_REASONS)
def run_quality(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Measure every task (tdg.quality), drop the hard failures, write `reports/quality.json`."""
    from tdg.quality import quality_stage

    started = time.perf_counter()
    absolute = [{**item, "env_dir": str(resolve_path(out, item["env_dir"]))} for item in items]
    kept, quarantine, inputs = quality_stage(absolute, cfg.quality, out / "reports" / "quality.json")
    kept = [{**item, "env_dir": _portable(out, item["env_dir"])} for item in kept]
    return _result("quality", kept, [r["task_id"] for i in kept for r in i["records"]], quarantine, inputs, started)


@_stage("export", "quality", ("data",), ("seed", "verify.teacher", "verify.require_solvable"))
def run_export(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Write the GUST parquet shards, dataset card and statistics figure under `OUT/gust/`."""
    from data.gust import write_gust

    started = time.perf_counter()
    records = [TaskRecord.model_validate(r) for item in items for r in item["records"]]
    folder = write_gust(records, out / "gust", seed=cfg.seed,
                        filters_run={"replay": True, "solvability": cfg.verify.require_solvable,
                                     "teacher_pass_at_k": _teacher_ran(records), "quality": cfg.quality.enabled},
                        quality_report=out / "reports" / "quality.json")  # fmt: skip
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.parquet")))).hexdigest()
    item = {"gust_dir": _portable(out, folder), "rows": len(records), "digest": digest,
            "teacher_ran": _teacher_ran(records)}  # digest keys the convert cache  # fmt: skip
    return _result("export", [item], [r.task_id for r in records], [], len(records), started)


@_stage("convert", "export", ("trainer", "data"), ("seed",))
def run_convert(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """GUST parquet → verl RL parquet (Hermes prompt, nested gold calls, env dir and final DB hash per row)."""
    from data.gust import read_gust
    from trainer.convert import gust_to_verl, write_rows

    started = time.perf_counter()
    records = [record for item in items for record in read_gust(resolve_path(out, item["gust_dir"]))]
    rows, quarantine = gust_to_verl(records, out / "envs")
    path = write_rows(out / "verl" / "train.parquet", rows)
    produced_ids = [r.task_id for r in records if r.task_id not in {q.item_id for q in quarantine}]
    return _result("convert", [{"verl_parquet": _portable(out, path), "rows": len(rows)}], produced_ids, quarantine,
                   len(records), started)  # fmt: skip


# --------------------------------------------------------------------------------------------------- discovery
def discover_items(stage: str, source: Path, cfg: BuildConfig) -> list[Item]:
    """Items a stage would receive, read back from an earlier run folder (for `gust stage NAME --from PATH`).

    `source` is a run folder (holding `work/<previous>.jsonl`) or, for `tdg`, a folder of environments.
    """
    source = Path(source)
    spec = STAGES.get(stage)
    if spec.previous is None:
        ingest = ingest_inputs([source], cfg)
        write_ingest_report(cfg.out, ingest)
        check_ingest_budget(ingest, cfg)
        return list(ingest.toolsets)
    saved = source / "work" / f"{spec.previous}.jsonl"
    if saved.is_file():
        return [_rebase(item, source, cfg.out) for item in io.read_jsonl(saved)]
    envs_root = source if stage == "tdg" and not (source / "envs").is_dir() else source / "envs"
    if stage == "tdg" and envs_root.is_dir():
        env_dirs = sorted(p for p in envs_root.iterdir() if (p / "manifest.json").is_file())
        return [{"env_id": p.name, "env_dir": _portable(cfg.out, p), "digest": _env_digest(p)} for p in env_dirs]
    raise GustError(f"stage {stage!r} needs the outputs of {spec.previous!r}: expected {saved}")


def save_items(out: Path, merged: ShardResult) -> Path:
    """`OUT/work/<stage>.jsonl`: the stage's output items, so a later `gust stage` can start from them.

    Paths inside items are relative to the run folder (see `resolve_path`), so a moved run folder still works.
    """
    return io.write_jsonl(out / "work" / f"{merged.stage}.jsonl", merged.items)


# --------------------------------------------------------------------------------------------------- cache keys
def stage_config_key(stage: str, cfg: BuildConfig) -> str:
    """Hash of only the config keys a stage reads: editing one stage's config never invalidates upstream."""
    dumped = cfg.model_dump(mode="json")
    for settings in (dumped["llm"], dumped["envgen"]["llm"]):  # how fast we ask never changes what we get
        for name in _LLM_RUNTIME_FIELDS:
            settings.pop(name, None)
    picked: dict[str, Any] = {}
    for dotted in STAGES.get(stage).config_keys:
        node: Any = dumped
        for part in dotted.split("."):
            node = node[part]
        picked[dotted] = node
    return content_hash(picked)


def inputs_digest(paths: Sequence[Path]) -> str:
    """sha256 over the raw input files' names and bytes (folders walked in sorted order)."""
    digest = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
        for file in files:
            digest.update(str(file).encode())
            if not file.exists():
                digest.update(b"<missing>")
                continue
            with file.open("rb") as handle:  # chunked: a corpus file may be gigabytes
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def finish_stage(stage: str, results: Sequence[ShardResult], out: Path, budget: float) -> ShardResult:
    """Merge shard results, write `reports/<stage>.jsonl` and `work/<stage>.jsonl`, enforce the error budget."""
    merged = merge_results(stage, results)
    write_stage_report(out, merged)
    save_items(out, merged)
    if stage == "envgen":
        write_quarantine(out)
    check_budget(merged.report, budget, STAGES.get(stage).policy)
    return merged


def write_ingest_report(out: Path, ingest: IngestSummary) -> Path:
    """`OUT/reports/ingest.jsonl`, in the same shape as every other stage's report."""
    produced = tuple(str(t["toolset_id"]) for t in ingest.toolsets)
    merged = ShardResult(stage="ingest", shard=-1, produced_ids=produced, quarantine=ingest.quarantine,
                         report=ingest.report)  # fmt: skip
    return write_stage_report(out, merged)


def write_quarantine(out: Path) -> Path:
    """`OUT/quarantine.jsonl`: one line per rejected toolset (provenance, stage, reason), from the ingest and
    envgen reports of this run folder."""
    records: list[QuarantineRecord] = []
    for stage in ("ingest", "envgen"):
        path = out / "reports" / f"{stage}.jsonl"
        if path.is_file():
            records += [QuarantineRecord.model_validate({k: v for k, v in line.items() if k != "outcome"})
                        for line in io.read_jsonl(path) if line.get("outcome") == "dropped"]  # fmt: skip
    return io.write_jsonl(out / "quarantine.jsonl", records)


class RunSummary(StrictModel):
    out: str
    stages: dict[str, StageReport]
    seconds: dict[str, float]
    gust_rows: int
    gust_dir: str | None
    teacher: str = Field(description="'ran' (some teacher call answered) or 'not run'.")
    llm: Usage = Field(default_factory=dict, description="LLM requests/tokens/retries/cache hits per role, this run.")
    llm_outputs: Usage = Field(
        default_factory=dict, description="LLM usage that produced the outputs (cached shards keep their first cost)."
    )
    problems: tuple[str, ...] = Field(default=(), description="Why the build must exit non-zero; empty = success.")


def build_problems(stages: Mapping[str, StageReport], gust_rows: int, cfg: BuildConfig) -> list[str]:
    """Reasons a finished build failed: too few rows, items lost to an unreachable endpoint or the token budget."""
    problems: list[str] = []
    unavailable = {stage: r.dropped.get(UNAVAILABLE_REASON, 0) for stage, r in stages.items()}
    lost = {stage: n for stage, n in unavailable.items() if n}
    if lost:
        where = ", ".join(f"{stage}={n}" for stage, n in lost.items())
        problems.append(f"{sum(lost.values())} item(s) lost to an unreachable LLM endpoint or the token budget "
                        f"(llm_unavailable: {where}); rerun the same command to resume")  # fmt: skip
    if gust_rows < cfg.min_rows:
        dropped = Counter[str]()
        for report in stages.values():
            dropped.update(report.dropped)
        top = ", ".join(f"{k}={v}" for k, v in dropped.most_common(5)) or "no input items"
        problems.append(f"the build produced {gust_rows} GUST row(s), fewer than min_rows={cfg.min_rows} "
                        f"(top drop reasons: {top})")  # fmt: skip
    return problems


def write_run_summary(out: Path, ingest: IngestSummary, merged: Sequence[ShardResult], cfg: BuildConfig) -> RunSummary:
    """`OUT/run_summary.json`: counts per stage and outcome, stage wall times, LLM usage, where the dataset is,
    and the problems that make the build exit non-zero."""
    from gustforge.llm import shared_usage

    stages = {"ingest": ingest.report, **{m.stage: m.report for m in merged}}
    export = next((m for m in merged if m.stage == "export"), None)
    export_item = export.items[0] if export and export.items else {}
    rows = int(export_item.get("rows", 0))
    summary = RunSummary(
        out=str(out),
        stages=stages,
        seconds={m.stage: round(m.seconds, 3) for m in merged},
        gust_rows=rows,
        gust_dir=export_item.get("gust_dir"),
        teacher="ran" if export_item.get("teacher_ran") else "not run",
        llm={role: stats.as_dict() for role, stats in shared_usage().items()},
        llm_outputs=_sum_usage(m.llm for m in merged),
        problems=tuple(build_problems(stages, rows, cfg)),
    )
    io.write_json(out / "run_summary.json", summary)
    io.write_json(out / "config.json", cfg)  # the effective config, saved with every run
    return summary


def read_llm_usage(out: Path) -> Usage:
    """LLM usage per role summed over the stage reports of a run folder (`reports/<stage>.jsonl`).

    For the dataset card: call it while exporting (every earlier stage has written its report by then).
    """
    total: Usage = {}
    for path in sorted((Path(out) / "reports").glob("*.jsonl")):
        for line in io.read_jsonl(path):
            if "summary" in line and isinstance(line.get("llm"), dict):
                total = add_usage(total, line["llm"])
    return total


def llm_usage_markdown(usage: Usage) -> str:
    """A markdown table of LLM usage per role (for the dataset card and stage artifacts); "" when none."""
    if not usage:
        return ""
    columns = ("requests", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens")
    lines = ["| role | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for role, counts in sorted(usage.items()):
        lines.append(f"| {role} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |")
    return "\n".join(lines)


def accounting_rows(merged: ShardResult) -> list[dict[str, Any]]:
    """Rows of the stage's accounting table artifact: produced, then dropped by reason."""
    rows: list[dict[str, Any]] = [{"outcome": "produced", "reason": "", "count": merged.report.produced}]
    rows += [{"outcome": "dropped", "reason": k, "count": v} for k, v in merged.report.dropped.items()]
    return rows


def stage_markdown(merged: ShardResult, out: Path) -> str:
    """The stage's markdown artifact: counts and links to its outputs (and the dataset card and figure)."""
    report = merged.report
    lines = [f"## {report.stage}", "", f"inputs {report.inputs} · produced {report.produced} · "
             f"dropped {sum(report.dropped.values())} · {merged.seconds:.1f} s", "",
             f"- accounting: `{out / 'reports' / (report.stage + '.jsonl')}`",
             f"- outputs: `{out / 'work' / (report.stage + '.jsonl')}`"]  # fmt: skip
    if merged.llm:
        lines += ["", "LLM usage:", "", llm_usage_markdown(merged.llm)]
    for item in merged.items:
        if "gust_dir" in item:
            gust = resolve_path(out, item["gust_dir"])
            lines += [f"- dataset: `{gust}` ({item['rows']} rows)", f"- card: `{gust / 'README.md'}`",
                      f"- statistics figure: `{gust / 'stats.png'}`"]  # fmt: skip
        if "verl_parquet" in item:
            lines.append(f"- verl RL parquet: `{resolve_path(out, item['verl_parquet'])}` ({item['rows']} rows)")
    return "\n".join(lines)
