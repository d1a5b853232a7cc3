"""The export stage: verified tasks written as the GUST dataset (parquet shards, card, statistics figure).

Stage functions take a shard of items, the build config and the run folder, and return a `ShardResult`
(see `gustforge.shards`); the stage table (`tasks.stage_table`) wires them into the build.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

from data.models import TaskRecord
from gustforge.config import BuildConfig
from gustforge.shards import Item, ShardResult, portable, stage_result

__all__ = ["run_export"]


def _teacher_ran(records: Sequence[TaskRecord]) -> bool:
    return any(r.teacher_status in ("passed", "failed") for r in records)


def run_export(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Write the GUST parquet shards, dataset card and statistics figure under `OUT/gust/`."""
    from data.gust import write_gust

    started = time.perf_counter()
    records = [TaskRecord.model_validate(r) for item in items for r in item["records"]]
    folder = write_gust(records, out / "gust", seed=cfg.seed,
                        filters_run={"replay": True, "solvability": cfg.verify.require_solvable,
                                     "teacher_pass_at_k": _teacher_ran(records), "quality": cfg.quality.enabled},
                        quality_report=out / "reports" / "quality.json",
                        heldout_fraction=cfg.export.heldout_fraction, split_seed=cfg.export.split_seed)  # fmt: skip
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.parquet")))).hexdigest()
    item = {"gust_dir": portable(out, folder), "rows": len(records), "digest": digest,
            "teacher_ran": _teacher_ran(records)}  # digest keys the convert cache  # fmt: skip
    return stage_result("export", [item], [r.task_id for r in records], [], len(records), started)
