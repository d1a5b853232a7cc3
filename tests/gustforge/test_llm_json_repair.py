"""JSON extraction and bounded repair of model output (gustforge.llm.json_repair)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gustforge.errors import LLMOutputError
from gustforge.llm.json_repair import extract_json_candidates, repair_json, repair_text

_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
_json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
_json_objects = st.dictionaries(st.text(), _json_values, max_size=5)


class TestRepairJson:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('{"a": 1}', {"a": 1}),
            ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
            ('Here you go:\n```\n{"a": "b"}\n```\nDone.', {"a": "b"}),
            ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
            ("{'a': 'x', 'b': True, 'c': None, 'd': False}", {"a": "x", "b": True, "c": None, "d": False}),
            ("{'msg': 'it\\'s \"quoted\"'}", {"msg": 'it\'s "quoted"'}),
            (
                '{"keep": "True, None, and \'single\' stay", "n": None}',
                {"keep": "True, None, and 'single' stay", "n": None},
            ),
            ('prose {not json} then {"a": 1}', {"a": 1}),
            ('{"s": "brace } inside"} trailing {"b": 2}', {"s": "brace } inside"}),
            ('{"text": "line one\nline two"}', {"text": "line one\nline two"}),
        ],
        ids=[
            "plain",
            "fenced",
            "fence-in-prose",
            "trailing-commas",
            "python-literals",
            "escaped-quotes",
            "literals-inside-strings",
            "skips-bad-candidate",
            "brace-in-string",
            "raw-newline",
        ],
    )
    def test_parses(self, text: str, expected: dict) -> None:
        assert repair_json(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "no json here",
            '{"a": 1',  # truncated
            '{"a": undefined_thing}',
            "[1, 2, 3]",  # not an object
            '{"a": {"b": 1}, BROKEN}',  # the inner object must not be returned for a broken outer one
        ],
    )
    def test_unrepairable_raises(self, text: str) -> None:
        with pytest.raises(LLMOutputError, match="not a JSON object"):
            repair_json(text)

    @pytest.mark.parametrize(
        "obj",
        [{"</THINK>": {}}, {"<THINK>": None}, {"a": "x </think> y", "b": "<reasoning>"}],
        ids=["closing-tag-key", "opening-tag-key", "tags-in-values"],
    )
    def test_reasoning_tags_inside_strings_are_data(self, obj: dict) -> None:
        assert repair_json(json.dumps(obj)) == obj
        assert repair_json(f"Answer:\n```json\n{json.dumps(obj, indent=2)}\n```\nthanks") == obj
        assert repair_json(f'<think>draft {{"x": 1}}</think>\n{json.dumps(obj)}') == obj

    @pytest.mark.parametrize(
        "text",
        ['<think>maybe {"edge": false}', 'maybe {"edge": false}</think>', '<think>{"edge": false}</think> no answer'],
        ids=["cut-inside-reasoning", "template-opened-reasoning", "closed-draft-only"],
    )
    def test_draft_inside_reasoning_is_never_the_answer(self, text: str) -> None:
        with pytest.raises(LLMOutputError, match="not a JSON object"):
            repair_json(text)

    def test_fence_marker_inside_string(self) -> None:
        obj = {"code": "```py\nx = 1\n```"}
        assert repair_json(f"```json\n{json.dumps(obj)}\n```") == obj

    def test_candidates_skip_failed_span_whole(self) -> None:
        assert list(extract_json_candidates('{"x": {"y": 1}, oops} {"z": 2}')) == [
            '{"x": {"y": 1}, oops}',
            '{"z": 2}',
        ]

    @settings(max_examples=80, deadline=None)
    @given(_json_objects, st.booleans())
    def test_round_trips_any_object(self, obj: dict, ascii_only: bool) -> None:
        assert repair_json(json.dumps(obj, ensure_ascii=ascii_only)) == obj

    @settings(max_examples=80, deadline=None)
    @given(_json_objects)
    def test_repair_pass_preserves_valid_json(self, obj: dict) -> None:
        # the repair rewrite must never change the meaning of JSON that was already valid
        assert json.loads(repair_text(json.dumps(obj, ensure_ascii=False)), strict=False) == obj

    @settings(max_examples=50, deadline=None)
    @given(_json_objects)
    def test_fenced_and_wrapped_in_prose(self, obj: dict) -> None:
        assert repair_json(f"Answer:\n```json\n{json.dumps(obj, indent=2)}\n```\nthanks") == obj
