"""Prefect task wrappers of the pipeline stages. Each stage's work lives in its stage package (looked up in
`tasks.stage_table`); sharding, accounting and the run summary in `gustforge.shards`, `.accounting`, `.run_summary`.

Caching: a shard task's key is its items + the stage's config keys + the stage libraries' source digest
(`code`) + the digest of earlier stages' run-folder files (`upstream`) + this file's source; `cfg` itself is
excluded so an edit to another stage's config is not a miss. A cache hit is served only while the outputs it
recorded are still on disk (`tasks.stage_table.needs_rerun`, checked by the flow).
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE

from envgen.stage import ingest_inputs
from gustforge.accounting import (
    accounting_rows,
    check_ingest_budget,
    finish_stage,
    stage_markdown,
    write_ingest_report,
    write_quarantine,
)
from gustforge.config import BuildConfig
from gustforge.errors import TransientLLMError
from gustforge.run_summary import RunSummary, write_run_summary
from gustforge.shards import IngestSummary, ShardResult
from tasks.stage_table import STAGE_ORDER, STAGES, discover_items, run_shard

__all__ = ["ingest_task", "finish_ingest_task", "stage_shard_task", "finish_stage_task", "discover_task",
           "summarize_task"]

_STAGE_CACHE = (INPUTS - "cfg") + TASK_SOURCE


def _transient(task_obj: object, task_run: object, state: object) -> bool:
    """Retry only transient failures (LLM 429/5xx/timeouts); a deterministic error fails at once."""
    try:
        state.result()  # type: ignore[attr-defined]  # re-raises the task's exception
    except TransientLLMError:
        return True
    except Exception:
        return False
    return False


@task(name="ingest", cache_policy=_STAGE_CACHE, persist_result=True)
def ingest_task(inputs: tuple[str, ...], cfg: BuildConfig, inputs_digest: str, config_key: str,
                code: str) -> IngestSummary:  # fmt: skip
    summary = ingest_inputs([Path(p) for p in inputs], cfg)
    get_run_logger().info("ingest read: %d inputs", summary.report.inputs)  # not logged when served from the cache
    return summary


@task(name="finish-ingest")
def finish_ingest_task(ingest: IngestSummary, cfg: BuildConfig) -> None:
    """Write `reports/ingest.jsonl` on every run (a cached ingest writes nothing) and check the ingest budget."""
    write_ingest_report(cfg.out, ingest)
    get_run_logger().info("ingest: %d toolsets, %d quarantined", ingest.report.produced, len(ingest.quarantine))
    check_ingest_budget(ingest, cfg)


@task(cache_policy=_STAGE_CACHE, persist_result=True, task_run_name="{stage}-shard-{shard}", retries=3,
      retry_delay_seconds=[1, 4, 16], retry_jitter_factor=0.5, retry_condition_fn=_transient)  # fmt: skip
def stage_shard_task(stage: str, shard: int, items: list[dict], cfg: BuildConfig, out: str, config_key: str,
                     code: str, upstream: str) -> ShardResult:  # fmt: skip
    result = run_shard(stage, items, cfg, Path(out))
    report = result.report
    get_run_logger().info("%s shard %d: %d in, %d produced, dropped %s", stage, shard, report.inputs,
                          report.produced, dict(report.dropped) or "none")  # fmt: skip
    for role, usage in result.llm.items():
        get_run_logger().info("%s shard %d: LLM %s: %d requests, %d cache hits, %d retries, %d tokens", stage, shard,
                              role, usage.get("requests", 0), usage.get("cache_hits", 0), usage.get("retries", 0),
                              usage.get("total_tokens", 0))  # fmt: skip
    return result.model_copy(update={"shard": shard})


@task(name="finish-stage", task_run_name="finish-{stage}")
def finish_stage_task(stage: str, results: list[ShardResult], out: str, budget: float) -> ShardResult:
    merged = finish_stage(stage, results, Path(out), budget, STAGES.get(stage).policy)
    get_run_logger().info("stage done: %s", stage)
    create_table_artifact(key=f"{stage}-accounting", table=accounting_rows(merged),
                          description=f"{stage}: produced / dropped by reason")  # fmt: skip
    create_markdown_artifact(key=f"{stage}-summary", markdown=stage_markdown(merged, Path(out)))
    return merged


@task(name="discover", task_run_name="discover-{stage}")
def discover_task(stage: str, source: str, cfg: BuildConfig) -> list[dict]:
    return discover_items(stage, Path(source), cfg)


@task(name="summarize")
def summarize_task(out: str, ingest: IngestSummary | None, merged: list[ShardResult],
                   cfg: BuildConfig) -> RunSummary:  # fmt: skip
    write_quarantine(Path(out))
    return write_run_summary(Path(out), ingest, merged, cfg, STAGE_ORDER)
