"""SFT (ShareGPT) and RL (VerlRow) rows and the written artifacts."""

from __future__ import annotations

import json
from pathlib import Path

from data.io import read_json, read_jsonl
from data.verl_rows import read_verl_rows
from toucan.export import meta_path, sharegpt_row, verl_row, write_prepared
from toucan.prepare import Prepared
from trainer.rewards.parse import normalize_gold


def test_sharegpt_roles_alternate(prepared_sample: Prepared) -> None:
    for d in prepared_sample.sft:
        roles = [m["from"] for m in sharegpt_row(d)["conversations"]]
        assert all(r in ("human", "observation") for r in roles[0::2])
        assert all(r in ("gpt", "function_call") for r in roles[1::2])
        assert roles[-1] == "gpt"


def test_verl_row_has_nested_gold_readable_by_the_reward(prepared_sample: Prepared) -> None:
    sample = next(s for s in prepared_sample.rl if len(s.gold_steps) > 1 or len(s.gold_steps[0].calls) > 1)
    row = verl_row(sample, index=0, split="train")
    gold = normalize_gold(row.reward_model.ground_truth.gold_tool_calls)
    assert [[c.name for c in step] for step in gold] == [[c.name for c in st.calls] for st in sample.gold_steps]
    assert [[c.arguments for c in step] for step in gold] == [
        [c.arguments for c in st.calls] for st in sample.gold_steps
    ]
    assert row.prompt[-1].content == sample.question
    assert row.extra_info.task_id == f"{sample.uuid}:{sample.turn_index}"


def test_written_artifacts_are_deterministic(prepared_sample: Prepared, tmp_path: Path) -> None:
    a = write_prepared(prepared_sample, tmp_path / "a")
    b = write_prepared(prepared_sample, tmp_path / "b")
    for name in ("test", "rl", "sft"):
        assert a[name].read_bytes() == b[name].read_bytes()
    rows = read_verl_rows(a["test"])
    meta = list(read_jsonl(meta_path(a["test"])))
    assert [r["extra_info"]["task_id"] for r in rows] == [m["task_id"] for m in meta]
    report = read_json(a["report"])
    assert all(p["balanced"] for p in report["phases"])
    info = read_json(a["dataset_info"])["toucan_sft"]
    assert info["formatting"] == "sharegpt" and json.loads(json.dumps(info))["file_name"] == "sft.parquet"
