"""The convert stage: the GUST dataset → verl RL parquet (`OUT/verl/train.parquet`) for `gust train`.

Imports neither torch nor verl (only `trainer.convert`, which works in an install without the `train` extra).
The stage table (`tasks.stage_table`) wires it into the build.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from gustforge.config import BuildConfig
from gustforge.shards import Item, ShardResult, portable, resolve_path, stage_result

__all__ = ["run_convert"]


def run_convert(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """GUST parquet → verl RL parquet (Hermes prompt, nested gold calls, env dir and final DB hash per row)."""
    from data.gust import read_gust
    from trainer.convert import gust_to_verl, write_rows

    started = time.perf_counter()
    records = [record for item in items for record in read_gust(resolve_path(out, item["gust_dir"]))]
    rows, quarantine = gust_to_verl(records, out / "envs")
    path = write_rows(out / "verl" / "train.parquet", rows)
    produced_ids = [r.task_id for r in records if r.task_id not in {q.item_id for q in quarantine}]
    return stage_result("convert", [{"verl_parquet": portable(out, path), "rows": len(rows)}], produced_ids,
                        quarantine, len(records), started)  # fmt: skip
