"""The `gust build` flow and single-stage flows. Flows only compose tasks; each stage's work happens in its stage
package (see `tasks.stage_table`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, unmapped
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

from envgen.stage import bundled_sample_inputs
from flows.runners import make_task_runner
from gustforge.accounting import check_ingest_budget
from gustforge.config import BuildConfig
from gustforge.llm import close_shared_clients
from gustforge.run_summary import RunSummary
from gustforge.shards import ShardResult, code_digest, inputs_digest, shard_items
from tasks.stage_table import STAGE_ORDER, STAGES, stage_config_key
from tasks.stages import discover_task, finish_stage_task, ingest_task, stage_shard_task, summarize_task

__all__ = ["build_flow", "stage_flow", "run_build", "run_stage"]


def _run_stage(stage: str, items: Sequence[dict[str, Any]], cfg: BuildConfig, out: str) -> ShardResult:
    """Fan a stage out over shards on the flow's task runner, then merge, report and check the budget."""
    spec = STAGES.get(stage)
    if spec.dataset_wide:
        shards: list[list[dict[str, Any]]] = [list(items)]
    else:
        shards = shard_items(items, shard_size=cfg.runner.shard_size, max_shards=cfg.runner.max_shards)
    keys = (unmapped(cfg), unmapped(out), unmapped(stage_config_key(stage, cfg)),
            unmapped(code_digest(spec.packages)))  # fmt: skip
    results = stage_shard_task.map(unmapped(stage), list(range(len(shards))), shards, *keys).result()
    # Shards that lost items to an unreachable LLM endpoint (fresh or cached) get one fresh attempt.
    retry = [i for i, result in enumerate(results) if result.retryable]
    if retry:
        again = stage_shard_task.with_options(refresh_cache=True).map(unmapped(stage), retry,
                                                                       [shards[i] for i in retry], *keys)  # fmt: skip
        for index, result in zip(retry, again.result(), strict=True):
            results[index] = result
    return finish_stage_task(stage, results, out, getattr(cfg.budgets, stage, 1.0))


@flow(name="gust-build")
def build_flow(cfg: BuildConfig) -> RunSummary:
    """envgen → tdg → sample → reconstruct → tasks → verify → export, sharded, cached, accounted."""
    out = str(cfg.out.resolve())
    inputs = tuple(str(Path(p).resolve()) for p in (cfg.inputs or bundled_sample_inputs()))
    digest = inputs_digest([Path(p) for p in inputs])
    code = code_digest(("envgen", "data"))
    ingest = ingest_task(inputs, cfg, digest, stage_config_key("envgen", cfg), code)
    check_ingest_budget(ingest, cfg)
    items: Sequence[dict[str, Any]] = ingest.toolsets
    merged: list[ShardResult] = []
    for stage in STAGE_ORDER:
        merged.append(_run_stage(stage, items, cfg, out))
        items = merged[-1].items
    return summarize_task(out, ingest, merged, cfg)


@flow(name="gust-stage", flow_run_name="stage-{stage}")
def stage_flow(stage: str, source: Path, cfg: BuildConfig) -> ShardResult:
    """Run one stage on an earlier run's outputs (`gust stage NAME --from PATH`)."""
    items = discover_task(stage, str(Path(source).resolve()), cfg)
    return _run_stage(stage, items, cfg, str(cfg.out.resolve()))


def _storage(cfg: BuildConfig) -> Any:
    return temporary_settings(updates={PREFECT_RESULTS_LOCAL_STORAGE_PATH: str(cfg.out.resolve() / ".prefect-results")})


def run_build(cfg: BuildConfig) -> RunSummary:
    """Run `build_flow` on the configured task runner with the stage cache under `OUT/.prefect-results`."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    try:
        with _storage(cfg):
            return build_flow.with_options(task_runner=make_task_runner(cfg.runner))(cfg)
    finally:
        close_shared_clients()


def run_stage(stage: str, source: Path, cfg: BuildConfig) -> ShardResult:
    cfg.out.mkdir(parents=True, exist_ok=True)
    try:
        with _storage(cfg):
            return stage_flow.with_options(task_runner=make_task_runner(cfg.runner))(stage, source, cfg)
    finally:
        close_shared_clients()
