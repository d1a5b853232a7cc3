"""Rebuild `train.parquet`: three GUST tasks on the hand-written tiny_env fixture, converted by `trainer.convert`.

Run from the repository root: `.venv/bin/python data/samples/verl/build_sample.py`. Golden traces are produced by
really running the calls in the sandbox (so the DB hashes are real); env_dir is relative to the repository root
(the SGLS tool's default `env_root: "."`).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from tests.trainer.gust_task import make_task  # noqa: E402
from trainer.convert import gust_to_verl, write_rows  # noqa: E402

TASKS = {
    "sample-1": [[("get_order", {"order_id": "ORD-1001"})],
                 [("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"}),
                  ("cancel_order", {"order_id": "ORD-1003"})]],
    "sample-2": [[("list_orders", {"customer_id": "C-1"})],
                 [("update_order_status", {"order_id": "ORD-1002", "new_status": "delivered"})]],
    "sample-3": [[("get_order", {"order_id": "ORD-1003"})], [("cancel_order", {"order_id": "ORD-1003"})],
                 [("list_orders", {"status": "cancelled"})]],
}


def main() -> None:
    records = [make_task(stages, task_id=task_id) for task_id, stages in TASKS.items()]
    rows, quarantined = gust_to_verl(records, REPO / "tests" / "envgen" / "fixtures",
                                     env_dir_prefix="tests/envgen/fixtures")
    assert not quarantined, quarantined
    write_rows(Path(__file__).resolve().parent / "train.parquet", rows)


if __name__ == "__main__":
    main()
