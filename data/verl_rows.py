"""The verl RL parquet on disk: one explicit pyarrow schema for every row (GUST and Toucan), atomic writes.

Rows come in as plain dicts (`trainer.rows.VerlRow.model_dump()`); validation lives with the model in `trainer/`.
Variable-shape values (arguments, tool schemas) are JSON strings, so pandas, pyarrow and HF `datasets` (which verl's
`RLHFDataset` uses) read the same structs back.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.io import atomic_write_bytes

__all__ = ["VERL_SCHEMA", "write_verl_rows", "read_verl_rows"]

_CREATE_KWARGS = pa.struct([("env_id", pa.string()), ("env_dir", pa.string()), ("tool_schemas", pa.string())])

VERL_SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("data_source", pa.string()),
        ("agent_name", pa.string()),
        (
            "reward_model",
            pa.struct(
                [
                    ("style", pa.string()),
                    (
                        "ground_truth",
                        pa.struct(
                            [
                                ("allowed_tools", pa.list_(pa.string())),
                                ("gold_tool_calls", pa.string()),
                                ("args_known", pa.bool_()),
                                ("turn_level", pa.bool_()),
                                ("tool_schemas", pa.string()),
                                ("question_content", pa.string()),
                                ("subset_name", pa.string()),
                                ("env_id", pa.string()),
                                ("env_dir", pa.string()),
                                ("expected_final_db_hash", pa.string()),
                                ("initial_db_hash", pa.string()),
                                ("expected_answer", pa.list_(pa.string())),
                            ]
                        ),
                    ),
                ]
            ),
        ),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("task_id", pa.string()),
                    ("need_tools_kwargs", pa.bool_()),
                    ("original_turn_index", pa.int64()),
                    ("tools_kwargs", pa.struct([("sgls", pa.struct([("create_kwargs", _CREATE_KWARGS)]))])),
                    ("interaction_kwargs", pa.struct([("name", pa.string()), ("scenario", pa.string())])),
                ]
            ),
        ),
    ]
)


def write_verl_rows(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write rows with `VERL_SCHEMA` as one zstd parquet file, atomically (bytes are deterministic).

    Args:
        path: Target `.parquet` file.
        rows: Row dicts matching the schema (extra keys are an error).

    Returns:
        The written path.
    """
    rows = list(rows)
    for row in rows:
        extra = set(row) - set(VERL_SCHEMA.names)
        if extra:
            raise ValueError(f"row has columns outside VERL_SCHEMA: {sorted(extra)}")
    table = pa.Table.from_pylist(rows, schema=VERL_SCHEMA)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return atomic_write_bytes(Path(path), buffer.getvalue())


def read_verl_rows(path: Path) -> list[dict[str, Any]]:
    """Read a verl RL parquet back as row dicts."""
    return pq.read_table(Path(path)).to_pylist()
