"""Parsing and repair of Toucan rows (HF layout, SFT preview, RL preview)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toucan.models import DropReason, RowRejected, SourceShape
from toucan.rows import RawRow, iter_raw_rows, parse_row, quality_score

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather-server-get_weather",
            "description": "Weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _row(messages: object, **extra: object) -> RawRow:
    record = {"uuid": "u1", "subset_name": "single-turn-original", "available_tools": json.dumps(TOOLS)}
    record["messages"] = messages if isinstance(messages, str) else json.dumps(messages)
    return RawRow(0, {**record, **extra})


def _msgs(arguments: object, name: str = "weather-server-get_weather") -> list[dict[str, object]]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Checking."},
        {"role": "assistant", "content": "", "function_call": {"name": name, "arguments": arguments}},
        {"role": "function", "name": name, "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]


class TestParseToucanRow:
    def test_structure(self) -> None:
        d = parse_row(_row(_msgs('{"city": "Paris"}')))
        assert d.shape is SourceShape.TOUCAN
        assert len(d.turns) == 1
        step = d.turns[0].steps[0]
        assert step.preamble == "Checking."
        assert step.calls[0].arguments == {"city": "Paris"}
        assert step.responses == ("sunny",)
        assert d.turns[0].answer == "It is sunny."
        assert d.repairs == ()  # function_call arguments are strings by definition

    def test_parallel_calls_form_one_step(self) -> None:
        call = {"name": "weather-server-get_weather", "arguments": '{"city": "A"}'}
        messages = [
            {"role": "user", "content": "Two cities"},
            {"role": "assistant", "content": "", "function_call": call},
            {"role": "assistant", "content": "", "function_call": {**call, "arguments": '{"city": "B"}'}},
            {"role": "function", "content": "a"},
            {"role": "function", "content": "b"},
            {"role": "assistant", "content": "done"},
        ]
        d = parse_row(_row(messages))
        assert len(d.turns[0].steps) == 1
        assert [c.arguments for c in d.turns[0].steps[0].calls] == [{"city": "A"}, {"city": "B"}]

    def test_python_repr_arguments_are_repaired(self) -> None:
        d = parse_row(_row(_msgs("{'city': 'Paris'}")))
        assert d.turns[0].steps[0].calls[0].arguments == {"city": "Paris"}
        assert "arguments:python_repr" in d.repairs

    def test_double_encoded_messages_are_repaired(self) -> None:
        d = parse_row(_row(json.dumps(json.dumps(_msgs("{}")))))
        assert "messages:double_encoded" in d.repairs

    def test_tools_rebuilt_from_metadata(self) -> None:
        meta = {
            "mcp_servers": [
                {
                    "server_name": "Weather Server",
                    "remote_server_response": {
                        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]
                    },
                }
            ]
        }
        raw = RawRow(0, {"uuid": "u", "messages": json.dumps(_msgs("{}")), "metadata": str(meta)})
        d = parse_row(raw)
        assert [t.name for t in d.tools] == ["weather-server-get_weather"]
        assert {"tools:from_metadata", "metadata:python_repr"} <= set(d.repairs)

    def test_bare_call_name_resolved_by_suffix(self) -> None:
        d = parse_row(_row(_msgs('{"city": "x"}', name="get_weather")))
        assert d.turns[0].steps[0].calls[0].name == "weather-server-get_weather"
        assert "call:name_resolved" in d.repairs

    @pytest.mark.parametrize(
        ("row", "reason"),
        [
            (RawRow(3, None, "line is not JSON"), DropReason.UNPARSEABLE_ROW),
            (_row('[{"role": "user"'), DropReason.BROKEN_JSON),
            (_row([]), DropReason.EMPTY_DIALOGUE),
            (_row(_msgs("[1, 2]")), DropReason.BAD_ARGUMENTS),
            (_row(_msgs("{not json")), DropReason.BAD_ARGUMENTS),
            (_row(_msgs("{}"), available_tools=None), DropReason.MISSING_TOOLS),
            (_row(_msgs("{}")[:3]), DropReason.INCOMPLETE_DIALOGUE),
            (_row([{"role": "robot", "content": "?"}]), DropReason.UNPARSEABLE_ROW),
        ],
    )
    def test_unusable_rows_raise_with_reason(self, row: RawRow, reason: DropReason) -> None:
        with pytest.raises(RowRejected) as info:
            parse_row(row)
        assert info.value.reason is reason

    def test_missing_uuid_comes_from_content_hash(self) -> None:
        a = parse_row(_row(_msgs("{}"), uuid=""))
        b = parse_row(_row(_msgs("{}"), uuid=None))
        assert a.uuid == b.uuid == f"hash-{a.dialogue_hash}"


class TestPreviews:
    def test_sft_preview_rows_parse(self, preview_dir: Path) -> None:
        dialogues = [parse_row(r) for r in iter_raw_rows(preview_dir / "toucan_toolcall_sft.preview.jsonl")]
        assert all(d.shape is SourceShape.SFT_PREVIEW for d in dialogues)
        first = dialogues[0]
        assert len(first.turns[0].steps[0].calls) == 2  # two consecutive tool_call messages = parallel
        assert first.turns[0].steps[0].calls[0].arguments == {"location": "42.3601,-71.0589"}
        assert "tool_call:python_repr" in first.repairs and "arguments:string" in first.repairs

    def test_rl_preview_rows_parse(self, preview_dir: Path) -> None:
        dialogues = [parse_row(r) for r in iter_raw_rows(preview_dir / "toucan_toolcall_rl.preview.jsonl")]
        assert all(d.shape is SourceShape.RL_PREVIEW for d in dialogues)
        multi = dialogues[1]  # a decomposed 2nd turn: history has a think call and its observation
        assert len(multi.turns) == 2
        history_call = multi.turns[0].steps[0].calls[0]
        assert history_call.name == "think-tool-server-think" and "thought" in (history_call.arguments or {})
        assert multi.turns[0].steps[0].responses and multi.turns[0].answer
        flat = dialogues[3].turns[-1].steps[0].calls
        assert len(flat) == 5 and all(c.arguments is None for c in flat)  # names only: arguments unknown


def test_quality_score_reads_nested_and_overall() -> None:
    assessment = {"completeness": {"score": 4}, "conciseness": {"score": 2}}
    assert quality_score(assessment, "completeness") == 4.0
    assert quality_score(assessment, "overall_score") == 3.0
    assert quality_score({"overall_score": 3.5}, "overall_score") == 3.5
    assert quality_score(None, "completeness") is None
