"""GUST tasks on the tiny_env fixture for the gusteval tests: records, a GUST export and a verl parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

from data.gust import write_gust
from data.models import TaskRecord
from tests.trainer.gust_task import TINY_ENV, make_task
from trainer.convert import gust_to_verl, load_env_schemas, write_rows


def dependent_task() -> TaskRecord:
    """list C-1's orders, cancel the pending one: the order id is a dependency (hidden), C-1 a stated fact."""
    record = make_task([[("list_orders", {"customer_id": "C-1"})], [("cancel_order", {"order_id": "ORD-1001"})]],
                       task_id="task-dep")
    stages = list(record.trace.stages)
    call = stages[1].calls[0].model_copy(update={"dependency_args": {"order_id": "list_orders.orders[0].order_id"}})
    stages[1] = stages[1].model_copy(update={"calls": (call,)})
    return record.model_copy(update={"trace": record.trace.model_copy(update={"stages": tuple(stages)})})


def tiny_records() -> list[TaskRecord]:
    return [make_task(task_id="task-1"), make_task([[("cancel_order", {"order_id": "ORD-1003"})]], task_id="task-2")]


def schemas():
    return load_env_schemas(TINY_ENV)


def write_export(root: Path, records: list[TaskRecord]) -> tuple[Path, Path]:
    """OUT/gust + OUT/envs/<env_id> (a copy of tiny_env) + OUT/verl/train.parquet; returns (gust dir, verl file)."""
    envs = root / "envs"
    shutil.copytree(TINY_ENV, envs / records[0].env_id)
    write_gust(records, root / "gust", seed=0, filters_run={})
    rows, quarantined = gust_to_verl(records, envs)
    assert not quarantined
    return root / "gust", write_rows(root / "verl" / "train.parquet", rows)
