"""Conversion to the verl RL parquet: GUST task records → `VerlRow`, Toucan-format (SLCA preview) rows → `VerlRow`.

GUST rows: the system prompt lists the environment's tools in the SLCA v1 Hermes format; the gold calls are the
golden trace's stages with their arguments (one step = one agent turn, so TARA applies); the env id, env folder and
the golden final DB hash let the tool create a per-trajectory environment and the reward replay the agent's calls.
Toucan rows: the prompt is kept as is; the gold is flat names only in the SLCA previews, so it becomes one step whose
calls have empty arguments, `args_known=False` and `turn_level=False` (S_key = S_val = 1 by definition, no TARA).

Env paths. `write_rows` stores every row's `env_dir` relative to ONE environment root and records that root once,
in the parquet's schema metadata (`gust.env_root`), relative to the parquet's own folder — so a run folder
(`OUT/verl/train.parquet` beside `OUT/envs/`) can move or be mounted elsewhere. `env_root_of(parquet)` resolves it;
`trainer.launch` passes it to the agent loop (`gust.env_root`) and to the reward (`reward_kwargs.env_root`).
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from data.io import atomic_write_bytes, read_json
from data.models import QuarantineRecord, TaskRecord, ToolSchema
from data.verl_rows import VERL_SCHEMA, read_verl_rows
from gusteval.scenario import build_interaction_kwargs
from gustforge.errors import InputError
from trainer.rewards.parse import normalize_gold
from trainer.rows import (
    ChatMessage,
    CreateKwargs,
    ExtraInfo,
    GroundTruth,
    RewardModel,
    ToolKwargs,
    ToolsKwargs,
    VerlRow,
)

__all__ = [
    "hermes_system_prompt",
    "load_env_schemas",
    "gust_row",
    "gust_to_verl",
    "convert_gust_dir",
    "toucan_row",
    "toucan_to_verl",
    "write_rows",
    "read_rows",
    "env_root_of",
    "resolve_env_dir",
    "split_train_val",
    "ENV_ROOT_KEY",
]

ENV_ROOT_KEY = b"gust.env_root"

logger = logging.getLogger(__name__)
STAGE = "convert"

_PROMPT_HEAD = (
    "You have access to the following tools:\n\n\n\n# Tools\n\nYou may call one or more functions to assist with "
    "the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_PROMPT_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>\n\nUse them when appropriate to help answer the user's questions."
)


def hermes_system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The SLCA v1 Hermes system prompt (byte-identical to the released RL previews).

    Args:
        tools: OpenAI tool dicts `{"type": "function", "function": {...}}`, in catalogue order.

    Returns:
        The system message text: one JSON tool per line inside `<tools>`, then the `<tool_call>` instructions.
    """
    return _PROMPT_HEAD + "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools) + _PROMPT_TAIL


def load_env_schemas(env_dir: Path) -> list[ToolSchema]:
    """The refactored tool schemas of an environment folder (`schemas.json`)."""
    return [ToolSchema.model_validate(item) for item in read_json(Path(env_dir) / "schemas.json")]


def _history(record: TaskRecord) -> list[ChatMessage]:
    return [ChatMessage(role=m["role"], content=m["content"]) for m in record.text.dialogue_history]  # type: ignore[arg-type]


def gust_row(
    record: TaskRecord, schemas: Sequence[ToolSchema], *, env_dir: str, index: int, split: str = "train"
) -> VerlRow:
    """One GUST task as a verl row.

    Args:
        record: The task with its golden trace.
        schemas: The environment's tool schemas (the catalogue the agent sees).
        env_dir: The env folder as the trainer will see it (absolute, or relative to the tool's env_root).
        index: Row index (verl's `extra_info.index`).
        split: "train" or "val".

    Returns:
        The validated row.
    """
    tools = [schema.openai_tool() for schema in schemas]
    tool_json = json.dumps(tools, ensure_ascii=False)
    steps = [[{"name": c.name, "arguments": c.arguments} for c in stage.calls] for stage in record.trace.stages]
    steps = [step for step in steps if step]
    truth = GroundTruth(
        allowed_tools=tuple(t["function"]["name"] for t in tools),
        gold_tool_calls=json.dumps(steps, ensure_ascii=False),
        args_known=True,
        turn_level=True,
        tool_schemas=tool_json,
        question_content=record.text.user_query,
        subset_name="tool_call" if steps else "irrelevant",
        env_id=record.env_id,
        env_dir=env_dir,
        expected_final_db_hash=record.trace.final_db_hash,
        initial_db_hash=record.trace.initial_db_hash,
        expected_answer=tuple(str(fact) for fact in record.text.expected_answer if str(fact).strip()),
    )
    prompt = [ChatMessage(role="system", content=hermes_system_prompt(tools)), *_history(record)]
    prompt.append(ChatMessage(role="user", content=record.text.user_query))
    create = CreateKwargs(env_id=record.env_id, env_dir=env_dir, tool_schemas=tool_json)
    return VerlRow(
        prompt=tuple(prompt),
        data_source="gust",
        reward_model=RewardModel(ground_truth=truth),
        extra_info=ExtraInfo(
            index=index,
            split=split,
            task_id=record.task_id,
            tools_kwargs=ToolsKwargs(sgls=ToolKwargs(create_kwargs=create)),
            interaction_kwargs=build_interaction_kwargs(record, schemas),
        ),
    )


def gust_to_verl(
    records: Iterable[TaskRecord], envs_dir: Path, *, env_dir_prefix: str | None = None, split: str = "train"
) -> tuple[list[VerlRow], list[QuarantineRecord]]:
    """Convert GUST records; every record ends as a row or a quarantine record.

    Args:
        records: GUST tasks.
        envs_dir: Folder holding `<env_id>/schemas.json` for every environment.
        env_dir_prefix: How rows name the envs folder (default: `envs_dir` itself); use a relative prefix for
            portable parquet files and set the tool's `env_root` accordingly.
        split: "train" or "val".

    Returns:
        (rows, quarantined) with len(rows) + len(quarantined) == number of records.
    """
    prefix = str(envs_dir) if env_dir_prefix is None else env_dir_prefix
    rows: list[VerlRow] = []
    quarantined: list[QuarantineRecord] = []
    schema_cache: dict[str, list[ToolSchema]] = {}
    for record in records:
        env_path = Path(envs_dir) / record.env_id
        if record.env_id not in schema_cache:
            if not (env_path / "schemas.json").is_file():
                quarantined.append(QuarantineRecord(item_id=record.task_id, stage=STAGE, reason="env_missing",
                                                    detail=str(env_path)))
                continue
            schema_cache[record.env_id] = load_env_schemas(env_path)
        try:
            row = gust_row(record, schema_cache[record.env_id], env_dir=f"{prefix}/{record.env_id}",
                           index=len(rows), split=split)
        except ValidationError as exc:
            quarantined.append(QuarantineRecord(item_id=record.task_id, stage=STAGE, reason="invalid_row",
                                                detail=str(exc)[:500]))
            continue
        rows.append(row)
    return rows, quarantined


def convert_gust_dir(
    gust_dir: Path, envs_dir: Path, out_path: Path, *, env_dir_prefix: str | None = None, split: str = "train"
) -> tuple[Path, list[QuarantineRecord]]:
    """Read a GUST parquet folder (`data.gust.read_gust`), convert it and write the verl parquet."""
    from data.gust import read_gust

    rows, quarantined = gust_to_verl(read_gust(Path(gust_dir)), envs_dir, env_dir_prefix=env_dir_prefix, split=split)
    return write_rows(out_path, rows), quarantined


def _plain(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def toucan_row(row: Mapping[str, Any], index: int, split: str = "train") -> VerlRow:
    """One Toucan-format RL row (SLCA preview layout) as a verl row.

    Gold calls given as names become `{"name", "arguments": {}}` with `args_known=False`; gold given as nested
    calls with arguments (the SLCA v2 converter) is kept with `args_known=True`. Steps are not agent turns here.

    Args:
        row: `{prompt, data_source, reward_model: {ground_truth: {...}}, extra_info, tools?}`.
        index: Row index.
        split: "train" or "val".

    Returns:
        The validated row.
    """
    gt = row["reward_model"]["ground_truth"]
    steps = normalize_gold(gt.get("gold_tool_calls"))
    gold = [[{"name": c.name, "arguments": c.arguments} for c in step] for step in steps]
    tool_json = gt["tool_schemas"] if isinstance(gt["tool_schemas"], str) else json.dumps(gt["tool_schemas"])
    truth = GroundTruth(
        allowed_tools=tuple(_plain(gt["allowed_tools"])),
        gold_tool_calls=json.dumps(gold, ensure_ascii=False),
        args_known=any(c["arguments"] for step in gold for c in step),
        turn_level=False,
        tool_schemas=tool_json,
        question_content=str(gt.get("question_content") or ""),
        subset_name="tool_call" if gold else "irrelevant",
    )
    extra = row.get("extra_info") or {}
    return VerlRow(
        prompt=tuple(ChatMessage(role=m["role"], content=m["content"]) for m in _plain(row["prompt"])),
        data_source="toucan_toolcall",
        reward_model=RewardModel(ground_truth=truth),
        extra_info=ExtraInfo(
            index=index,
            split=split,
            task_id=str(extra.get("task_id", f"toucan-{index}")),
            original_turn_index=int(extra.get("original_turn_index", 0)),
            tools_kwargs=ToolsKwargs(sgls=ToolKwargs(create_kwargs=CreateKwargs(tool_schemas=tool_json))),
        ),
    )


def toucan_to_verl(
    rows: Iterable[Mapping[str, Any]], split: str = "train"
) -> tuple[list[VerlRow], list[QuarantineRecord]]:
    """Convert Toucan-format rows; invalid ones are quarantined with the validation message."""
    out: list[VerlRow] = []
    quarantined: list[QuarantineRecord] = []
    for position, row in enumerate(rows):
        try:
            out.append(toucan_row(row, index=len(out), split=split))
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            quarantined.append(QuarantineRecord(item_id=f"toucan-{position}", stage=STAGE, reason="invalid_row",
                                                detail=f"{type(exc).__name__}: {exc}"[:500]))
    return out, quarantined


def _env_dir(row: VerlRow) -> str:
    return row.reward_model.ground_truth.env_dir


def _with_env_dir(row: VerlRow, env_dir: str) -> VerlRow:
    data = row.model_dump(mode="json")
    data["reward_model"]["ground_truth"]["env_dir"] = env_dir
    create = data["extra_info"]["tools_kwargs"]["sgls"]["create_kwargs"]
    if create.get("env_dir"):
        create["env_dir"] = env_dir
    return VerlRow.model_validate(data)


def _common_root(rows: Sequence[VerlRow]) -> Path | None:
    parents = {Path(_env_dir(row)).parent for row in rows if _env_dir(row) and Path(_env_dir(row)).is_absolute()}
    return parents.pop() if len(parents) == 1 else None


def _relativize(rows: Sequence[VerlRow], root: Path) -> list[VerlRow]:
    out = []
    for row in rows:
        env_dir = _env_dir(row)
        if env_dir and Path(env_dir).is_absolute():
            try:
                relative = Path(env_dir).resolve().relative_to(root.resolve())
            except ValueError as exc:
                raise InputError(f"env_dir {env_dir} is not under the environment root {root}") from exc
            row = _with_env_dir(row, PurePosixPath(*relative.parts).as_posix())
        out.append(row)
    return out


def write_rows(path: Path, rows: Sequence[VerlRow], *, env_root: Path | None = None) -> Path:
    """Re-validate and write rows as the verl RL parquet, env paths relative to one recorded root.

    Args:
        path: Target `.parquet` file.
        rows: The rows.
        env_root: The folder holding the environments. Absolute `env_dir` values are made relative to it and
            relative ones are taken as relative to it. Default: the common parent of the absolute `env_dir`
            values (the envs folder `gust_to_verl` was given); without one, nothing is recorded and relative
            values stay relative to the working directory, as before.

    Returns:
        The written path.
    """
    path = Path(path)
    rows = [VerlRow.model_validate(row.model_dump()) for row in rows]
    root = Path(env_root) if env_root is not None else _common_root(rows)
    schema = VERL_SCHEMA
    if root is not None:
        rows = _relativize(rows, root)
        relative = os.path.relpath(root.resolve(), path.resolve().parent)
        schema = VERL_SCHEMA.with_metadata({ENV_ROOT_KEY: PurePosixPath(*Path(relative).parts).as_posix().encode()})
    dumped = [row.model_dump(mode="json") for row in rows]
    table = pa.Table.from_pylist(dumped, schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return atomic_write_bytes(path, buffer.getvalue())


def resolve_env_dir(env_dir: str, env_root: str | Path | None) -> str:
    """A row's ``env_dir`` as a path the tool can open: relative values are resolved against ``env_root``."""
    if not env_dir or env_root in (None, "") or Path(env_dir).is_absolute():
        return env_dir
    return str(Path(str(env_root)) / env_dir)


def env_root_of(path: Path) -> Path | None:
    """The environment root recorded in a verl parquet, as an absolute path (None when none is recorded)."""
    metadata = pq.read_schema(Path(path)).metadata or {}
    value = metadata.get(ENV_ROOT_KEY)
    if value is None:
        return None
    return (Path(path).resolve().parent / value.decode()).resolve()


def split_train_val(
    path: Path, out_dir: Path, *, val_fraction: float = 0.05, seed: int = 0
) -> tuple[Path, Path, int, int]:
    """A seeded held-out split of a verl parquet BY ENVIRONMENT: `out_dir/train.parquet` and `out_dir/val.parquet`.

    Whole environments (``env_id``, else the offered tool set: rows of one environment share tools, data and often
    paraphrased tasks) are held out, in seeded order, until about ``val_fraction`` of the rows are validation rows,
    so validation measures unseen environments, not paraphrases of training tasks. With a single environment the
    split falls back to rows (logged). The validation rows are never training rows; each side gets at least one row.

    Args:
        path: The verl parquet to split.
        out_dir: Where to write the two files (their env root is re-recorded relative to this folder).
        val_fraction: Share of rows held out (rounded, at least 1).
        seed: Shuffle seed.

    Returns:
        (train path, val path, train rows, val rows).

    Raises:
        InputError: Fewer than 2 rows, or a fraction outside (0, 1).
    """
    if not 0.0 < val_fraction < 1.0:
        raise InputError(f"val_fraction must be in (0, 1), got {val_fraction}")
    rows = read_rows(path)
    if len(rows) < 2:
        raise InputError(f"{path} has {len(rows)} row(s): a held-out validation split needs at least 2 (or --val-data)")
    n_val = min(max(1, round(len(rows) * val_fraction)), len(rows) - 1)
    val_ids = _held_out_envs(rows, n_val, seed)
    root = env_root_of(path)
    if root is None and any(_env_dir(r) and not Path(_env_dir(r)).is_absolute() for r in rows):
        root = Path.cwd()  # legacy files: relative env dirs meant the working directory
    val = [_with_split(rows[i], "val") for i in sorted(val_ids)]
    train = [rows[i] for i in range(len(rows)) if i not in val_ids]
    out_dir = Path(out_dir)
    return (write_rows(out_dir / "train.parquet", train, env_root=root),
            write_rows(out_dir / "val.parquet", val, env_root=root), len(train), len(val))  # fmt: skip


def env_key(row: VerlRow) -> str:
    """The environment a row belongs to: its ``env_id``, else its offered tool set (Toucan rows)."""
    gt = row.reward_model.ground_truth
    return gt.env_id or "tools:" + ",".join(sorted(gt.allowed_tools))


def _held_out_envs(rows: list[VerlRow], n_val: int, seed: int) -> set[int]:
    """Row indices of the held-out environments (≈ ``n_val`` rows, ≥ 1 environment on each side)."""
    by_env: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_env.setdefault(env_key(row), []).append(i)
    if len(by_env) < 2:
        logger.warning("held-out split by row: all %d rows share one environment", len(rows))
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        return set(order[:n_val])
    envs = sorted(by_env)
    random.Random(seed).shuffle(envs)
    held: set[int] = set()
    for env in envs[:-1]:  # the last environment always stays in training
        if len(held) >= n_val:
            break
        held |= set(by_env[env])
    return held


def _with_split(row: VerlRow, split: str) -> VerlRow:
    data = row.model_dump(mode="json")
    data["extra_info"]["split"] = split
    return VerlRow.model_validate(data)


def read_rows(path: Path) -> list[VerlRow]:
    """Read and validate a verl RL parquet written by `write_rows`."""
    return [VerlRow.model_validate(row) for row in read_verl_rows(Path(path))]
