"""`gust stage NAME --direct`: the stage flow's work in this process, without Prefect (no stage cache, no UI).

The same library functions as `flows.build.stage_flow`, in the same order, with the same lock, reports, summary
and manifest; each stage runs as one shard. Importing this module imports no Prefect.
"""

from __future__ import annotations

from pathlib import Path

from gustforge.accounting import finish_stage, write_quarantine
from gustforge.config import BuildConfig
from gustforge.manifest import run_record
from gustforge.run_summary import RunSummary, write_run_summary
from gustforge.runlock import run_lock
from gustforge.shards import ShardResult
from tasks.stage_table import STAGE_ORDER, STAGES, discover_items, downstream_of, run_shard

__all__ = ["run_stages_direct"]


def run_stages_direct(stage: str, source: Path, cfg: BuildConfig, *, only: bool = False) -> RunSummary:
    """Run `stage` on `source`'s outputs, then every later stage unless `only` (then they are recorded stale)."""
    out = cfg.out.resolve()
    with run_lock(out, f"stage {stage} --direct"), run_record(out, cfg, command=f"stage {stage}") as run:
        items = discover_items(stage, source.resolve(), cfg)
        later = downstream_of(stage)
        merged: list[ShardResult] = []
        for name in (stage,) if only else (stage, *later):
            result = run_shard(name, items, cfg, out)
            if result.retryable:  # items lost to an unreachable endpoint get one fresh attempt, as in the flow
                result = run_shard(name, items, cfg, out)
            spec = STAGES.get(name)
            merged.append(finish_stage(name, [result], out, getattr(cfg.budgets, name, 1.0), spec.policy))
            items = merged[-1].items
        write_quarantine(out)
        summary = write_run_summary(out, None, merged, cfg, STAGE_ORDER)
        run.finish(summary, stale=later if only else ())
    return summary
