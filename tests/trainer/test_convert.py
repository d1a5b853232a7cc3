"""Conversion to the verl RL parquet: GUST records and SLCA/Toucan preview rows, parquet round trips, schemas."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pandas as pd
import pytest
from pydantic import ValidationError

from data.models import ToolKind, ToolSchema
from tests.trainer.gust_task import GOLD_STAGES, TINY_ENV, make_task
from trainer.convert import (
    convert_gust_dir,
    gust_row,
    gust_to_verl,
    hermes_system_prompt,
    load_env_schemas,
    read_rows,
    toucan_to_verl,
    write_rows,
)
from trainer.rows import AGENT_NAME, VerlRow

NESTED = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                      "required": ["sku"]},
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["items"],
}


@pytest.fixture(scope="module")
def task():
    return make_task()


@pytest.fixture(scope="module")
def previews(corpora_dir):
    return [json.loads(line) for line in (corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl").open()]


def test_gust_row_content(task):
    schemas = load_env_schemas(TINY_ENV)
    row = gust_row(task, schemas, env_dir="envs/tiny_env", index=3)
    gt = row.reward_model.ground_truth
    assert row.data_source == "gust" and row.agent_name == AGENT_NAME
    assert row.prompt[0].content == hermes_system_prompt([s.openai_tool() for s in schemas])
    assert row.prompt[-1].content == task.text.user_query and gt.question_content == task.text.user_query
    assert gt.gold_steps() == [[{"name": n, "arguments": a} for n, a in stage] for stage in GOLD_STAGES]
    assert gt.args_known and gt.turn_level and gt.subset_name == "tool_call"
    assert (gt.env_id, gt.env_dir, gt.expected_final_db_hash) == ("tiny_env", "envs/tiny_env", task.trace.final_db_hash)
    create = row.extra_info.tools_kwargs.sgls.create_kwargs
    assert (create.env_dir, create.tool_schemas, row.extra_info.index) == ("envs/tiny_env", gt.tool_schemas, 3)


def test_parquet_round_trip_pandas_datasets_and_bytes(task, previews, tmp_path):
    rows, _ = gust_to_verl([task], TINY_ENV.parent)
    rows += toucan_to_verl(previews)[0]
    a = write_rows(tmp_path / "a.parquet", rows)
    b = write_rows(tmp_path / "b.parquet", rows)
    assert a.read_bytes() == b.read_bytes()
    back = read_rows(a)
    assert back[1:] == rows[1:]  # the GUST row's absolute env dir is stored relative to the recorded env root
    assert back[0].model_dump(exclude={"reward_model", "extra_info"}) == rows[0].model_dump(
        exclude={"reward_model", "extra_info"})
    assert back[0].reward_model.ground_truth.env_dir == "tiny_env"
    frame = pd.read_parquet(a)
    assert list(frame.columns) == ["prompt", "data_source", "agent_name", "reward_model", "extra_info"]
    hf = datasets.load_dataset("parquet", data_files=str(a))["train"]
    first = hf[0]
    assert first["prompt"][0]["role"] == "system" and first["agent_name"] == AGENT_NAME
    assert first["extra_info"]["tools_kwargs"]["sgls"]["create_kwargs"]["env_dir"].endswith("tiny_env")
    gold = json.loads(first["reward_model"]["ground_truth"]["gold_tool_calls"])
    assert gold == rows[0].reward_model.ground_truth.gold_steps()


def test_previews_convert_exactly(previews):
    rows, quarantined = toucan_to_verl(previews)
    assert len(rows) == 5 and quarantined == []
    for raw, row in zip(previews, rows, strict=True):
        gt = row.reward_model.ground_truth
        assert [m.model_dump() for m in row.prompt] == raw["prompt"]
        tools = json.loads(raw["reward_model"]["ground_truth"]["tool_schemas"])
        assert row.prompt[0].content == hermes_system_prompt(tools)
        names = [c["name"] for step in gt.gold_steps() for c in step]
        assert names == raw["reward_model"]["ground_truth"]["gold_tool_calls"]
        assert not gt.args_known and not gt.turn_level and gt.env_dir == ""
        assert gt.subset_name == raw["reward_model"]["ground_truth"]["subset_name"]


def test_nested_array_schema_survives_but_not_in_verls_schema_model(tmp_path):
    """verl's OpenAIFunctionToolSchema drops `items` (and nested properties); our rows carry the original JSON."""
    from verl.tools.schemas import OpenAIFunctionToolSchema

    tool = ToolSchema(name="add_items", raw_name="addItems", description="Add items.", parameters=NESTED,
                      response={"type": "object"}, kind=ToolKind.CREATE)
    lossy = OpenAIFunctionToolSchema.model_validate(tool.openai_tool()).model_dump(exclude_none=True)
    assert "items" not in lossy["function"]["parameters"]["properties"]["items"]
    env = tmp_path / "env_nested"
    env.mkdir()
    (env / "schemas.json").write_text(json.dumps([tool.model_dump(mode="json")]))
    task = make_task().model_copy(update={"env_id": "env_nested"})
    with pytest.raises(ValidationError):  # gold uses tools the env does not offer
        gust_row(task, [tool], env_dir=str(env), index=0)
    rows, quarantined = gust_to_verl([task], tmp_path)
    assert rows == [] and [q.reason for q in quarantined] == ["invalid_row"]
    gold_free = task.model_copy(update={"trace": task.trace.model_copy(update={"stages": ()})})
    row = gust_row(gold_free, [tool], env_dir=str(env), index=0)
    write_rows(tmp_path / "n.parquet", [row])
    back = read_rows(tmp_path / "n.parquet")[0]
    schema = back.reward_model.ground_truth.tools()[0]["function"]["parameters"]
    assert schema == NESTED
    assert json.dumps(NESTED["properties"]["items"]["items"]) in back.prompt[0].content


def test_quarantine_accounts_for_every_record(task, tmp_path):
    other = task.model_copy(update={"task_id": "task-2", "env_id": "missing_env"})
    rows, quarantined = gust_to_verl([task, other], TINY_ENV.parent)
    assert len(rows) + len(quarantined) == 2
    assert [q.reason for q in quarantined] == ["env_missing"] and quarantined[0].item_id == "task-2"


def test_convert_gust_dir_reads_the_gust_export(task, tmp_path):
    from data.gust import write_gust

    gust_dir = write_gust([task], tmp_path / "gust", seed=0, filters_run={"replay": True})
    out, quarantined = convert_gust_dir(gust_dir, TINY_ENV.parent, tmp_path / "train.parquet", env_dir_prefix="envs")
    rows = read_rows(out)
    assert quarantined == [] and len(rows) == 1
    assert rows[0].reward_model.ground_truth.env_dir == "envs/tiny_env"


def test_row_validation_rejects_inconsistent_rows(task):
    row = gust_row(task, load_env_schemas(TINY_ENV), env_dir="e", index=0)
    data = row.model_dump(mode="json")
    data["reward_model"]["ground_truth"]["allowed_tools"] = ["get_order"]
    with pytest.raises(ValidationError):
        VerlRow.model_validate(data)
    data = row.model_dump(mode="json")
    data["prompt"] = data["prompt"][1:]
    with pytest.raises(ValidationError):
        VerlRow.model_validate(data)
    data = row.model_dump(mode="json")
    data["reward_model"]["ground_truth"]["gold_tool_calls"] = json.dumps([[{"name": "get_order", "arguments": "x"}]])
    with pytest.raises(ValidationError):
        VerlRow.model_validate(data)



def test_env_paths_are_relative_to_one_recorded_root(task, tmp_path):
    import shutil

    from trainer.convert import env_root_of, resolve_env_dir, split_train_val

    envs = tmp_path / "run" / "envs"
    shutil.copytree(TINY_ENV, envs / "tiny_env")
    rows, _ = gust_to_verl([task, task.model_copy(update={"task_id": "task-2"})], envs)  # absolute env dirs in
    assert Path(rows[0].reward_model.ground_truth.env_dir).is_absolute()
    out = write_rows(tmp_path / "run" / "verl" / "train.parquet", rows)
    back = read_rows(out)
    assert {r.reward_model.ground_truth.env_dir for r in back} == {"tiny_env"}
    assert {r.extra_info.tools_kwargs.sgls.create_kwargs.env_dir for r in back} == {"tiny_env"}
    assert env_root_of(out) == envs.resolve()
    # the run folder moves: the recorded root is relative to the parquet, so it still resolves
    moved = tmp_path / "moved"
    shutil.move(str(tmp_path / "run"), moved)
    root = env_root_of(moved / "verl" / "train.parquet")
    assert root == (moved / "envs").resolve()
    assert (Path(resolve_env_dir("tiny_env", str(root))) / "schemas.json").is_file()
    train, val, n_train, n_val = split_train_val(moved / "verl" / "train.parquet", tmp_path / "split", seed=3)
    assert (n_train, n_val) == (1, 1) and env_root_of(train) == env_root_of(val) == root
    assert read_rows(val)[0].extra_info.split == "val"
