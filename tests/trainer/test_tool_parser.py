"""The `gust_hermes` rollout parser: found through verl's ToolParser registry and in exact agreement with the reward's
block parser (what the rollout executes is what HierR counts)."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer
from verl.experimental.agent_loop.tool_parser import ToolParser

from trainer.rehearse import build_tiny_model
from trainer.rewards.parse import extract_tool_calls, strip_think
from trainer.tool_parser import PARSER_NAME, GustHermesToolParser, parse_generation

TOOLS = ["get_order", "cancel_order"]
_pieces = st.lists(st.sampled_from([
    '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "A"}}\n</tool_call>',
    '<tool_call>[{"name": "get_order", "arguments": {}}, {"name": "cancel_order", "parameters": {"x": 1}}]</tool_call>',
    '<tool_call>{"name": "cancel_order"}</tool_call>', '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "get_order", "arguments": "{}"}</tool_call>', "<tool_call>{broken</tool_call>",
    "<tool_call>", "</tool_call>", "<think>", "</think>", "text ", "\n", '{"name": "get_order"}',
]), max_size=12).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=_pieces, restrict=st.booleans())
def test_parser_agrees_with_the_reward(text: str, restrict: bool) -> None:
    allowed = TOOLS if restrict else None
    _, calls = parse_generation(text, allowed)
    parsed = extract_tool_calls(strip_think(text), allowed)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [(c.name, c.arguments) for c in parsed.calls]
    assert all(isinstance(json.loads(c.arguments), dict) for c in calls)


def test_registered_in_verls_registry_and_decodes_token_ids(tmp_path) -> None:
    text = ('<tool_call>[{"name": "get_order", "arguments": {"order_id": "A"}}, '
            '{"name": "cancel_order", "parameters": {"order_id": "B"}}]</tool_call>')  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path, [text] * 3, vocab_size=300))
    parser = ToolParser.get_tool_parser(PARSER_NAME, tokenizer)
    assert isinstance(parser, GustHermesToolParser)
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    _, calls = asyncio.run(parser.extract_tool_calls(ids))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_order", {"order_id": "A"}),
                                                                  ("cancel_order", {"order_id": "B"})]
    _, stock = asyncio.run(ToolParser.get_tool_parser("hermes", tokenizer).extract_tool_calls(ids))
    assert stock == []  # what verl's default parser executes of the same block: nothing
    parser.allowed_tools = frozenset({"get_order"})  # the agent loop sets the row's names
    assert asyncio.run(parser.extract_tool_calls(ids))[1] == []  # an unknown name invalidates the block, as in HierR
