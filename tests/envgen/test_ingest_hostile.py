"""envgen.ingest on hostile input: limits from config become reasons, encodings are read, nothing raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgen.config import EnvGenConfig
from envgen.ingest import decode_bytes, json_depth, read_toolsets


def _tools(params: dict | None = None, n: int = 5) -> list[dict]:
    params = params or {"type": "object", "properties": {"q": {"type": "string"}}}
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "description": "d", "parameters": params}}
        for i in range(n)
    ]


def _nested(depth: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(depth):
        node = {"type": "object", "properties": {"x": node}}
    return node


def _reasons(result) -> list[str]:
    return sorted(q.reason for q in result.quarantine)


def test_deep_schema_is_quarantined_and_the_rest_survives(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text(json.dumps(_tools(_nested(200))))
    (tmp_path / "ok.json").write_text(json.dumps(_tools()))
    result = read_toolsets(tmp_path)
    assert _reasons(result) == ["record_too_deep"] and len(result.toolsets) == 1 and result.report.balanced


def test_schema_depth_limit_is_config(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text(json.dumps(_tools(_nested(10))))
    assert _reasons(read_toolsets(tmp_path)) == []
    cfg = EnvGenConfig.model_validate({"limits": {"max_schema_depth": 8}})
    assert _reasons(read_toolsets(tmp_path, cfg=cfg)) == ["schema_too_deep"]


def test_nesting_past_the_json_parser_is_a_reason(tmp_path: Path) -> None:
    (tmp_path / "abyss.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n" + json.dumps({"tools": _tools()}) + "\n")
    result = read_toolsets(tmp_path)
    assert _reasons(result) == ["record_too_deep"] and len(result.toolsets) == 1


def test_exponential_refs_are_too_large(tmp_path: Path) -> None:
    defs = {
        f"d{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}, "b": {"$ref": f"#/$defs/d{i + 1}"}},
        }
        for i in range(30)
    }
    defs["d30"] = {"type": "string"}
    params = {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    (tmp_path / "bomb.json").write_text(json.dumps(_tools(params)))
    assert _reasons(read_toolsets(tmp_path)) == ["schema_too_large"]


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32", "cp1252"])
def test_common_encodings_are_read(tmp_path: Path, encoding: str) -> None:
    tools = _tools()
    tools[0]["function"]["description"] = "Café – “quoted”"
    (tmp_path / "enc.json").write_text(json.dumps(tools, ensure_ascii=False), encoding=encoding)
    (tmp_path / "enc.jsonl").write_text(json.dumps({"tools": tools}, ensure_ascii=False) + "\n", encoding=encoding)
    result = read_toolsets(tmp_path, cfg=EnvGenConfig())
    assert [r.split(":")[0] for r in _reasons(result)] == ["duplicate_of"]  # the .json and .jsonl hold one toolset
    assert result.toolsets[0].tools[0].description == "Café – “quoted”"


def test_lone_surrogates_and_long_names_are_reasons(tmp_path: Path) -> None:
    surrogate = _tools()
    surrogate[0]["function"]["description"] = "\ud800"
    (tmp_path / "a.json").write_text(json.dumps(surrogate))  # json.dumps escapes it: valid JSON, invalid text
    long_name = _tools()
    long_name[0]["function"]["name"] = "x" * 5000
    (tmp_path / "b.json").write_text(json.dumps(long_name))
    assert _reasons(read_toolsets(tmp_path)) == ["invalid_unicode", "tool_name_too_long"]


def test_size_limits_are_reasons(tmp_path: Path) -> None:
    (tmp_path / "big.jsonl").write_text(json.dumps({"tools": _tools()}) + "\n")
    cfg = EnvGenConfig.model_validate({"limits": {"max_record_chars": 50}})
    assert _reasons(read_toolsets(tmp_path, cfg=cfg)) == ["record_too_large"]
    cfg = EnvGenConfig.model_validate({"limits": {"max_file_bytes": 10}})
    assert _reasons(read_toolsets(tmp_path, cfg=cfg)) == ["file_too_large"]
    cfg = EnvGenConfig.model_validate({"limits": {"max_tools_per_record": 2}})
    assert _reasons(read_toolsets(tmp_path, cfg=cfg)) == ["too_many_tools"]


def test_helpers() -> None:
    assert decode_bytes("é".encode("cp1252")) == "é" and decode_bytes(b"\xef\xbb\xbf{}") == "{}"
    assert json_depth(1) == 0 and json_depth([{"a": []}]) == 3


def test_every_file_is_accounted_for(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    (tmp_path / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "loop").symlink_to(tmp_path)  # a folder link back up is not walked forever
    (tmp_path / "ok.json").write_text(json.dumps(_tools()))
    result = read_toolsets(tmp_path)
    by_file = {q.item_id.split("#")[0]: q.reason for q in result.quarantine}
    assert by_file == {"empty.jsonl": "empty_file", "blank.jsonl": "empty_file", "binary.json": "malformed_json",
                       "dangling.json": "unreadable_file"}  # fmt: skip
    assert len(result.toolsets) == 1 and result.report.balanced
