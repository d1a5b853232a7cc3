"""Prefect task wrappers of the pipeline stages. Each stage's work lives in its stage package (looked up in
`tasks.stage_table`); sharding, accounting and the run summary in `gustforge.shards`, `.accounting`, `.run_summary`.

Caching: a shard task's key is its items + the stage's config keys + the stage libraries' source digest
(`code`) + this file's source; `cfg` itself is excluded so an edit to another stage's config is not a miss.
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE

from envgen.stage import ingest_inputs
from gustforge.accounting import accounting_rows, finish_stage, stage_markdown, write_ingest_report, write_quarantine
from gustforge.config import BuildConfig
from gustforge.errors import TransientLLMError
from gustforge.run_summary import RunSummary, write_run_summary
from gustforge.shards import IngestSummary, ShardResult
from tasks.stage_table import STAGES, discover_items

__all__ = ["ingest_task", "stage_shard_task", "finish_stage_task", "discover_task", "summarize_task"]

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
    write_ingest_report(cfg.out, summary)
    get_run_logger().info("ingest: %d toolsets, %d quarantined", summary.report.produced, len(summary.quarantine))
    return summary


@task(cache_policy=_STAGE_CACHE, persist_result=True, task_run_name="{stage}-shard-{shard}", retries=3,
      retry_delay_seconds=[1, 4, 16], retry_jitter_factor=0.5, retry_condition_fn=_transient)  # fmt: skip
def stage_shard_task(stage: str, shard: int, items: list[dict], cfg: BuildConfig, out: str, config_key: str,
                     code: str) -> ShardResult:  # fmt: skip
    result = STAGES.get(stage).run(items, cfg, Path(out))
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
def summarize_task(out: str, ingest: IngestSummary, merged: list[ShardResult],
                   cfg: BuildConfig) -> RunSummary:  # fmt: skip
    write_quarantine(Path(out))
    return write_run_summary(Path(out), ingest, merged, cfg)
