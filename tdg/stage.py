"""The TDG stages: dependency graphs → skeletons (DUS) → golden traces → user tasks → verified tasks → quality.

Stage functions take a shard of items, the build config and the run folder, and return a `ShardResult`
(see `gustforge.shards`); the stage table (`tasks.stage_table`) wires them into the build.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.models import GoldenTrace, QuarantineRecord, Skeleton, TaskRecord
from envgen.stage import load_env
from gustforge.config import BuildConfig
from gustforge.errors import UNAVAILABLE_REASON, GustError, LLMOutputError, TransientLLMError
from gustforge.llm.shared import llm_workers, role_usage, stage_client
from gustforge.shards import Item, ShardResult, parallel_map, portable, resolve_path, stage_result

__all__ = ["run_tdg", "run_sample", "run_reconstruct", "run_tasks", "run_verify", "run_quality"]

_TEACHER_OUTAGE = re.compile(r"APIConnectionError|APITimeoutError|RateLimitError|InternalServerError|Connection error")


def _env_item(item: Item) -> Item:
    return {"env_id": item["env_id"], "env_dir": item["env_dir"], "digest": item["digest"]}


def _sandbox_limits(cfg: BuildConfig) -> Any:
    from gustforge.sandbox import SandboxLimits

    return SandboxLimits(cpu_seconds=cfg.envgen.sandbox_cpu_seconds, memory_mb=cfg.envgen.sandbox_memory_mb,
                         wall_seconds=cfg.envgen.sandbox_wall_seconds)  # fmt: skip


def run_tdg(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Infer and sanitize `n_graphs` dependency graphs per environment; write them as node-link JSON.

    With the LLM judge, environments are judged concurrently (the client bounds the requests in flight).
    """
    started = time.perf_counter()
    produced: list[Item] = []
    quarantine: list[QuarantineRecord] = []
    client = stage_client(cfg.llm, out)
    workers = llm_workers(client) if cfg.tdg.inferer == "llm" else 1

    def one(item: Item) -> list[str] | GustError:
        try:
            return _write_graphs(item, cfg, out, client)
        except GustError as exc:
            return exc

    for item, outcome in zip(items, parallel_map(one, list(items), workers), strict=True):
        if isinstance(outcome, GustError):
            reason = _quarantine_reason(outcome)
            quarantine.append(QuarantineRecord(item_id=item["env_id"], stage="tdg", reason=reason,
                                               detail=str(outcome)))  # fmt: skip
            continue
        produced.append({**_env_item(item), "graphs": outcome})
    result = stage_result("tdg", produced, [i["env_id"] for i in produced], quarantine, len(items), started)
    return result.model_copy(update={"llm": role_usage(client)})


def _quarantine_reason(error: GustError) -> str:
    if isinstance(error, TransientLLMError):
        return UNAVAILABLE_REASON
    if isinstance(error, LLMOutputError):  # the judge's unusable replies: re-asked by the next build
        return "malformed_judge_reply"
    return type(error).__name__


def _write_graphs(item: Item, cfg: BuildConfig, out: Path, client: Any) -> list[str]:
    from data.graphs import graph_path, write_graph
    from tdg.infer import DensityCap, build_graphs
    from tdg.sanitize import sanitize_to_dag

    env = load_env(item, out)
    cap = DensityCap(max_providers=cfg.tdg.max_providers, max_edges_per_tool=cfg.tdg.max_edges_per_tool)
    graphs = build_graphs(env, n_graphs=cfg.tdg.n_graphs, inferer=cfg.tdg.inferer, seed=cfg.tdg.seed, client=client,
                          cap=cap, max_overlap=cfg.tdg.max_flow_overlap)  # fmt: skip
    paths = []
    for index, graph in enumerate(graphs):
        sanitized = sanitize_to_dag(graph)
        path = write_graph(graph_path(out, env.env_id, index), sanitized.dag, list(sanitized.removed))
        paths.append(portable(out, path))
    return paths


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
            min_skeletons=cfg.tdg.min_skeletons, seed=cfg.tdg.seed, linked=cfg.tdg.linked_stages,
            goal_first=cfg.tdg.goal_first,
        )  # fmt: skip
        if not result.skeletons:
            quarantine.append(QuarantineRecord(item_id=item["env_id"], stage="sample", reason="no_skeleton",
                                               detail="DUS produced no skeleton"))  # fmt: skip
            continue
        produced.append({**item, "skeletons": [s.model_dump(mode="json") for s in result.skeletons],
                         "coverage": result.coverage})  # fmt: skip
    return stage_result("sample", produced, [i["env_id"] for i in produced], quarantine, len(items), started)


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
        env = load_env(item, out)
        dags = [read_graph(resolve_path(out, p)).dag for p in item["graphs"]]
        result = reconstruct_all(
            env, dags, skeletons, seed=cfg.tdg.seed, max_unlinked=cfg.tdg.max_unlinked_traces,
            state_variants=cfg.tdg.state_variants, variant_budget=cfg.tdg.variant_budget,
        )
        inputs += result.report.inputs
        quarantine.extend(result.quarantine)
        if result.traces:
            produced_ids.extend(t.trace_id for t in result.traces)
            produced.append({**_env_item(item), "graphs": item["graphs"], "coverage": item.get("coverage"),
                             "traces": [t.model_dump(mode="json") for t in result.traces]})  # fmt: skip
    return stage_result("reconstruct", produced, produced_ids, quarantine, inputs, started)


def run_tasks(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Write a user task (query, dialogue history, reasoning chain) for every golden trace.

    With an endpoint, every trace of the shard is written concurrently (the client bounds the requests in flight).
    """
    from tdg.taskgen import write_tasks

    started = time.perf_counter()
    client = stage_client(cfg.llm, out)
    envs = [load_env(item, out) for item in items]
    jobs = [(index, GoldenTrace.model_validate(t)) for index, item in enumerate(items) for t in item["traces"]]
    outcomes = parallel_map(lambda job: write_tasks([job[1]], envs[job[0]], client=client, seed=cfg.seed), jobs,
                            llm_workers(client))  # fmt: skip
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
    result = stage_result("tasks", produced, produced_ids, quarantine, len(jobs), started)
    return result.model_copy(update={"llm": role_usage(client)})


def _teacher_outage(record: QuarantineRecord) -> QuarantineRecord:
    """A teacher that could not reach its endpoint is an outage (retried next build), not a verdict."""
    if record.reason == "teacher_error" and _TEACHER_OUTAGE.search(record.detail):
        return record.model_copy(update={"reason": UNAVAILABLE_REASON})
    return record


def run_verify(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Replay (LangGraph), solvability and teacher Pass@k — or `not_run` when no teacher endpoint is set.

    With a teacher, every attempt of every task of the shard runs concurrently: LLM requests up to the teacher's
    `max_concurrency`, and a sandbox session (from a pool of that size) is leased only for each tool step.
    """
    from gustforge.sandbox import SandboxPool
    from tdg.verify import verify_tasks

    started = time.perf_counter()
    teacher = cfg.verify.teacher
    envs = {item["env_id"]: load_env(item, out) for item in items}
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
    return stage_result("verify", produced, [r.task_id for r in kept], dropped, sum(len(g) for g in groups), started)


def run_quality(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Measure every task (tdg.quality), drop the hard failures, write `reports/quality.json`."""
    from tdg.quality import quality_stage

    started = time.perf_counter()
    absolute = [{**item, "env_dir": str(resolve_path(out, item["env_dir"]))} for item in items]
    kept, quarantine, inputs = quality_stage(absolute, cfg.quality, out / "reports" / "quality.json")
    kept = [{**item, "env_dir": portable(out, item["env_dir"])} for item in kept]
    return stage_result("quality", kept, [r["task_id"] for i in kept for r in i["records"]], quarantine, inputs,
                        started)  # fmt: skip
