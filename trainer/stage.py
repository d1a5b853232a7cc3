"""The convert stage: the GUST dataset → verl RL parquet for `gust train`: `OUT/verl/train.parquet` from the train
split, `OUT/verl/test.parquet` from the held-out environments (verl's `data.val_files`).

Imports neither torch nor verl (only `trainer.convert`, which works in an install without the `train` extra).
The stage table (`tasks.stage_table`) wires it into the build.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.models import QuarantineRecord
from gustforge.config import BuildConfig
from gustforge.shards import Item, ShardResult, portable, resolve_path, stage_result

__all__ = ["run_convert"]


def run_convert(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """GUST parquet → verl RL parquet (Hermes prompt, nested gold calls, env dir and final DB hash per row)."""
    from data.gust import read_gust
    from trainer.convert import gust_to_verl, write_rows

    started = time.perf_counter()
    outputs: dict[str, Any] = {}
    produced_ids: list[str] = []
    quarantine: list[QuarantineRecord] = []
    inputs = 0
    for split, key in (("train", "verl_parquet"), ("test", "verl_test_parquet")):  # test: held-out environments
        records = [record for item in items for record in read_gust(resolve_path(out, item["gust_dir"]), split=split)]
        inputs += len(records)
        if not records and split == "test":
            (out / "verl" / "test.parquet").unlink(missing_ok=True)
            continue
        rows, dropped = gust_to_verl(records, out / "envs")
        outputs[key] = portable(out, write_rows(out / "verl" / f"{split}.parquet", rows))
        outputs[f"{split}_rows"] = len(rows)
        quarantine += dropped
        produced_ids += [r.task_id for r in records if r.task_id not in {q.item_id for q in dropped}]
    outputs["rows"] = outputs.get("train_rows", 0)
    return stage_result("convert", [outputs], produced_ids, quarantine, inputs, started)
