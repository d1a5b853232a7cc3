"""The `gust build` flow and the `gust stage` flow. Flows only compose tasks; each stage's work happens in its stage
package (see `tasks.stage_table`).

Both hold the run folder's lock (`gustforge.runlock`) and record the run in `OUT/manifest.json`, written last
(`gustforge.manifest`), whether they run from the CLI, `serve` or a work-pool worker.
"""

# No `from __future__ import annotations` here: `serve` cloudpickles the flow function by value into a spawned
# process, where string annotations such as "BuildConfig" cannot be resolved (`Build_FlowModel is not fully
# defined`); real annotation objects travel with the function.
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, unmapped
from prefect.runtime import flow_run
from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings

from envgen.stage import bundled_sample_inputs
from flows.runners import make_task_runner
from gustforge.config import BuildConfig
from gustforge.llm import close_shared_clients
from gustforge.manifest import run_record
from gustforge.run_summary import RunSummary
from gustforge.runlock import run_lock
from gustforge.shards import ShardResult, code_digest, inputs_digest, shard_items
from tasks.stage_table import STAGE_ORDER, STAGES, downstream_of, needs_rerun, stage_config_key, upstream_key
from tasks.stages import (
    discover_task,
    finish_ingest_task,
    finish_stage_task,
    ingest_task,
    stage_shard_task,
    summarize_task,
)

__all__ = ["build_flow", "stage_flow", "run_build", "run_stage"]


def _run_stage(stage: str, items: Sequence[dict[str, Any]], cfg: BuildConfig, out: str) -> ShardResult:
    """Fan a stage out over shards on the flow's task runner, then merge, report and check the budget."""
    spec = STAGES.get(stage)
    if spec.dataset_wide:
        shards: list[list[dict[str, Any]]] = [list(items)]
    else:
        shards = shard_items(items, shard_size=cfg.runner.shard_size, max_shards=cfg.runner.max_shards)
    get_run_logger().info("stage start: %s: %d items in %d shards", stage, len(items), len(shards))
    keys = (unmapped(cfg), unmapped(out), unmapped(stage_config_key(stage, cfg)),
            unmapped(code_digest(spec.packages)), unmapped(upstream_key(stage, Path(out))))  # fmt: skip
    futures = stage_shard_task.map(unmapped(stage), list(range(len(shards))), shards, *keys)
    results = futures.result()
    # One fresh run for shards that lost items to an unreachable LLM endpoint, for cached shards whose outputs are
    # no longer on disk as recorded (another config's build, a deleted folder: never report a file that is not
    # there), and for cached shards holding items dropped on unusable LLM replies (asked again once per build).
    cached = [future.state.name == "Cached" for future in futures]
    why = {i: needs_rerun(stage, result, Path(out), cached=cached[i]) for i, result in enumerate(results)}
    retry = [i for i, reasons in why.items() if reasons]
    for i in retry:
        get_run_logger().info("%s shard %d re-runs: %s", stage, i, "; ".join(why[i]))
    if retry:
        again = stage_shard_task.with_options(refresh_cache=True).map(unmapped(stage), retry,
                                                                       [shards[i] for i in retry], *keys)  # fmt: skip
        for index, result in zip(retry, again.result(), strict=True):
            results[index] = result
    return finish_stage_task(stage, results, out, getattr(cfg.budgets, stage, 1.0))


def _run_stages(stages: Sequence[str], items: Sequence[dict[str, Any]], cfg: BuildConfig,
                out: str) -> list[ShardResult]:  # fmt: skip
    merged: list[ShardResult] = []
    for stage in stages:
        merged.append(_run_stage(stage, items, cfg, out))
        items = merged[-1].items
    return merged


@flow(name="gust-build")
def build_flow(cfg: BuildConfig) -> RunSummary:
    """envgen → tdg → sample → reconstruct → tasks → verify → quality → export → convert, sharded, cached,
    accounted; one build at a time per run folder."""
    out = str(cfg.out.resolve())
    with run_lock(Path(out), "build"), run_record(Path(out), cfg, command="build", flow_run_id=flow_run.id) as run:
        inputs = tuple(str(Path(p).resolve()) for p in (cfg.inputs or bundled_sample_inputs()))
        digest = inputs_digest([Path(p) for p in inputs])
        ingest = ingest_task(inputs, cfg, digest, stage_config_key("envgen", cfg), code_digest(("envgen", "data")))
        finish_ingest_task(ingest, cfg)
        merged = _run_stages(STAGE_ORDER, ingest.toolsets, cfg, out)
        summary = summarize_task(out, ingest, merged, cfg)
        run.finish(summary)
    return summary


@flow(name="gust-stage", flow_run_name="stage-{stage}")
def stage_flow(stage: str, source: Path, cfg: BuildConfig, only: bool = False) -> RunSummary:
    """Run one stage on an earlier run's outputs (`gust stage NAME --from PATH`), then every stage after it
    (cached where unchanged), so nothing downstream is left describing the old outputs. With `only`, just the
    stage: the manifest then names the downstream stages as stale."""
    out = str(cfg.out.resolve())
    with run_lock(Path(out), f"stage {stage}"), run_record(Path(out), cfg, command=f"stage {stage}",
                                                           flow_run_id=flow_run.id) as run:  # fmt: skip
        items = discover_task(stage, str(Path(source).resolve()), cfg)
        later = downstream_of(stage)
        merged = _run_stages((stage,) if only else (stage, *later), items, cfg, out)
        summary = summarize_task(out, None, merged, cfg)
        run.finish(summary, stale=later if only else ())
    return summary


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


def run_stage(stage: str, source: Path, cfg: BuildConfig, *, only: bool = False) -> RunSummary:
    """Run `stage_flow` (see there); returns the run summary (this run's stages, earlier ones from `OUT/reports`)."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    try:
        with _storage(cfg):
            return stage_flow.with_options(task_runner=make_task_runner(cfg.runner))(stage, source, cfg, only)
    finally:
        close_shared_clients()
