"""Hermes trajectory parsing: blocks, think stripping, agent turns, observations, final reply, gold shapes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainer.rewards.parse import (
    Call,
    extract_tool_calls,
    final_response,
    normalize_gold,
    parse_calls_lenient,
    split_agent_turns,
    strip_think,
    tool_responses,
)

CALL_A = '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>'
CALL_B = '<tool_call>\n{"name": "b", "arguments": {"y": "z"}}\n</tool_call>'
OBS = "\nuser\n<tool_response>\n{}\n</tool_response>\nassistant\n"


def test_valid_blocks_and_counts():
    parsed = extract_tool_calls(CALL_A + "\n" + CALL_B, ["a", "b"])
    assert (parsed.open_n, parsed.close_n, parsed.valid_n, parsed.error_type) == (2, 2, 2, "none")
    assert parsed.calls == (Call("a", {"x": 1}), Call("b", {"y": "z"}))


def test_list_block_is_one_parallel_block():
    text = '<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"y": 1}}]</tool_call>'
    parsed = extract_tool_calls(text, ["a", "b"])
    assert parsed.blocks == ((Call("a", {}), Call("b", {"y": 1})),)


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ('<tool_call>{"name": "zzz", "arguments": {}}</tool_call>', "tool_not_found"),
        ('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>', "json_error"),
        ("<tool_call>not json</tool_call>", "json_error"),
        ("<tool_call>  </tool_call>", "json_error"),
        ('<tool_call>[{"name": "a", "arguments": {}}, 3]</tool_call>', "json_error"),
    ],
)
def test_invalid_block_discards_its_calls(block, error):
    parsed = extract_tool_calls(block + CALL_B, ["a", "b"])
    assert parsed.error_type == error
    assert parsed.calls == (Call("b", {"y": "z"}),)
    assert parsed.valid_n == 1 and parsed.denom == 2


def test_unclosed_tag_is_partial():
    parsed = extract_tool_calls(CALL_A + "<tool_call>{", ["a"])
    assert (parsed.open_n, parsed.close_n, parsed.valid_n, parsed.error_type) == (2, 1, 1, "partial")


def test_no_tags():
    parsed = extract_tool_calls("just text", ["a"])
    assert parsed.error_type == "no_tool_call" and parsed.denom == 0


def test_think_is_stripped():
    assert strip_think("<think>" + CALL_A + "</think>ok<thinking>x</thinking>") == "ok"


def test_split_agent_turns_qwen_decoding():
    sol = "I call." + CALL_A + OBS + CALL_B + OBS + "Final answer."
    turns = split_agent_turns(sol)
    assert turns == ["I call." + CALL_A, CALL_B, "Final answer."]


def test_split_agent_turns_parallel_observation_is_one_gap():
    obs2 = "\nuser\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>\nassistant\n"
    turns = split_agent_turns(CALL_A + CALL_B + obs2 + "done")
    assert turns == [CALL_A + CALL_B, "done"]


def test_split_agent_turns_ends_after_observation():
    assert split_agent_turns(CALL_A + OBS) == [CALL_A]
    assert split_agent_turns("") == [""]


def test_lenient_parse_accepts_string_arguments_and_unknown_names():
    text = '<tool_call>{"name": "q", "arguments": "{\\"k\\": 2}"}</tool_call><tool_call>bad</tool_call>'
    assert parse_calls_lenient(text) == [Call("q", {"k": 2})]


def test_tool_responses_and_final_response():
    sol = CALL_A + "\nuser\n<tool_response>\n  r1 \n</tool_response>\nassistant\nThe answer is 3."
    assert tool_responses(sol) == ["r1"]
    assert final_response(sol) == "assistant\nThe answer is 3."
    assert final_response(CALL_A) == ""
    assert final_response("plain reply") == "plain reply"
    assert final_response(CALL_A + " trailing words") == "trailing words"


def test_normalize_gold_shapes():
    nested = [[{"name": "a", "arguments": {"x": 1}}], [{"name": "b", "arguments": "{\"y\": 2}"}]]
    assert normalize_gold(json.dumps(nested)) == [[Call("a", {"x": 1})], [Call("b", {"y": 2})]]
    assert normalize_gold(["a", "a", "b"]) == [[Call("a", {}), Call("a", {}), Call("b", {})]]
    assert normalize_gold(np.array(["a", "b"], dtype=object)) == [[Call("a", {}), Call("b", {})]]
    assert normalize_gold([]) == [] and normalize_gold(None) == [] and normalize_gold("") == []
    assert normalize_gold([{"name": "a", "arguments": {"x": 1}}]) == [[Call("a", {"x": 1})]]
