"""Toucan-1.5M-format parquet inputs: streamed, every row accounted for, same toolsets as the JSON form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.models import SourceFormat
from envgen.ingest import read_toolsets
from envgen.parquet_input import iter_parquet_rows

_COLUMNS = ("uuid", "subset_name", "messages", "question", "available_tools", "target_tools",
            "question_quality_assessment", "response_quality_assessment", "metadata")  # fmt: skip


def _toucan_rows(corpora: Path, n: int) -> list[dict[str, Any]]:
    """Rows in the upstream Toucan-1.5M layout (string columns; servers in `metadata.mcp_servers`)."""
    lines = (corpora / "toucan" / "toucan_mcp_servers.remote_valid.jsonl").read_text().splitlines()[:n]
    rows = []
    for index, line in enumerate(lines):
        server = json.loads(line)
        meta_server = {"server_name": server["server_name"], "overview": server.get("overview", ""),
                       "remote_server_response": {"tools": server["tools"]}}  # fmt: skip
        tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}
                 for t in server["tools"]]  # fmt: skip
        rows.append({
            "uuid": f"row-{index}", "subset_name": "single-turn-original",
            "messages": json.dumps([{"role": "user", "content": "hi"}]), "question": "hi",
            "available_tools": json.dumps(tools), "target_tools": server["tools"][0]["name"],
            "question_quality_assessment": "{}", "response_quality_assessment": "{}",
            "metadata": json.dumps({"mcp_servers": [meta_server]}),
        })  # fmt: skip
    return rows


def _write(path: Path, rows: list[dict[str, Any]], row_group: int = 3) -> Path:
    table = pa.table({c: pa.array([r[c] for r in rows], type=pa.string()) for c in _COLUMNS})
    pq.write_table(table, path, row_group_size=row_group)
    return path


def test_parquet_rows_stream_in_batches(corpora_dir: Path, tmp_path: Path) -> None:
    path = _write(tmp_path / "train.parquet", _toucan_rows(corpora_dir, 7))
    rows = list(iter_parquet_rows(path, batch_rows=2))
    assert [r[0] for r in rows] == [f"row:{i}" for i in range(7)]
    assert all(error is None and isinstance(value["metadata"], str) for _, _, value, error in rows)


def test_toucan_parquet_is_accepted_as_input(corpora_dir: Path, tmp_path: Path) -> None:
    rows = _toucan_rows(corpora_dir, 12)
    from_parquet = read_toolsets(_write(tmp_path / "toucan.parquet", rows))
    jsonl = tmp_path / "toucan.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_jsonl = read_toolsets(jsonl)
    assert from_parquet.report.inputs == from_jsonl.report.inputs == 12
    assert [t.toolset_id for t in from_parquet.toolsets] == [t.toolset_id for t in from_jsonl.toolsets]
    assert from_parquet.toolsets and all(t.provenance.source_format is SourceFormat.TOUCAN_ROW
                                         for t in from_parquet.toolsets)  # fmt: skip
    assert from_parquet.report.balanced


def test_unreadable_parquet_is_quarantined_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "broken.parquet"
    bad.write_bytes(b"PAR1 not really")
    result = read_toolsets(bad)
    assert result.report.inputs == 1 and not result.toolsets
    assert result.quarantine[0].reason == "unreadable_file" and "parquet" in result.quarantine[0].detail
