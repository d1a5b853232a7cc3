"""SGLS tool: stage-1 validation texts, env backend state per instance, llm backend over a local fake endpoint."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.fakes.openai_server import FakeOpenAIServer
from tests.trainer.gust_task import TINY_ENV
from trainer.convert import load_env_schemas
from trainer.sgls import (
    SGLS_BACKENDS,
    SGLSTool,
    extract_tool_response,
    render_mock_prompt,
    tool_index,
    truncate_observation,
    validate_call,
)

TOOLS = json.dumps([s.openai_tool() for s in load_env_schemas(TINY_ENV)])
ENV_KWARGS = {"env_id": "tiny_env", "env_dir": str(TINY_ENV), "tool_schemas": TOOLS}
NESTED_TOOL = {"type": "function", "function": {"name": "add", "description": "d", "parameters": {
    "type": "object", "required": ["rows"],
    "properties": {"rows": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                   "mode": {"type": "string", "enum": ["x", "y"]}}}}}


def test_stage1_texts():
    tools = tool_index(TOOLS)
    assert validate_call(tools, "nope", {}) == "Tool 'nope' not found in the current available tools set."
    assert validate_call(tools, "update_order_status", {}) == \
        "Tool 'update_order_status' missing required parameters: ['order_id', 'new_status']"
    assert validate_call(tools, "get_order", {"order_id": 5}) == \
        "Tool 'get_order' invalid parameter 'order_id': 5 is not of type 'string'"
    assert validate_call(tools, "update_order_status", {"order_id": "O", "new_status": "lost"}).startswith(
        "Tool 'update_order_status' invalid parameter 'new_status': 'lost' is not one of")
    assert validate_call(tools, "get_order", {"order_id": "ORD-1"}) is None


def test_stage1_checks_nested_items_from_the_original_schema():
    tools = tool_index([NESTED_TOOL])
    assert validate_call(tools, "add", {"rows": [{"n": "1"}]}) == \
        "Tool 'add' invalid parameter 'rows.0.n': '1' is not of type 'integer'"
    assert validate_call(tools, "add", {"rows": [{"n": 1}], "mode": "x"}) is None
    broken = tool_index([{"type": "function", "function": {"name": "b", "parameters": {"type": "strng"}}}])
    assert validate_call(broken, "b", {}) is None  # malformed raw schema: the backend decides


@pytest.mark.parametrize(("side", "expected"), [("middle", "abcd...(truncated)...wxyz"),
                                                ("left", "(truncated)...stuvwxyz"),
                                                ("right", "abcdefgh...(truncated)")])
def test_truncation(side, expected):
    assert truncate_observation("abcdefghijklmnopqrstuvwxyz", 8, side) == expected
    assert truncate_observation("short", 8, side) == "short"


def test_tag_extraction():
    assert extract_tool_response('noise <tool_response>{"a": 1}</tool_response> tail') == ('{"a": 1}', True)
    assert extract_tool_response("<tool_response><tool_response>x</tool_response>") == ("x", True)
    assert extract_tool_response('<tool_call>{"r": 2}</tool_call>') == ('{"r": 2}', False)
    assert extract_tool_response("<tool_response>unterminated") == ("unterminated", False)
    assert extract_tool_response("bare") == ("bare", False)


def _run(coro):
    return asyncio.run(coro)


def test_env_backend_is_stateful_per_instance_and_isolated():
    tool = SGLSTool({"backend": "env", "max_observation_chars": 4096})

    async def scenario():
        a, _ = await tool.create(create_kwargs=ENV_KWARGS)
        b, _ = await tool.create(create_kwargs=ENV_KWARGS)
        start = tool.db_hash(a)
        upd, reward, info = await tool.execute(a, {"order_id": "ORD-1001", "new_status": "processing"},
                                               original_tool_name="update_order_status")
        seen_a, _, _ = await tool.execute(a, {"order_id": "ORD-1001"}, original_tool_name="get_order")
        seen_b, _, _ = await tool.execute(b, {"order_id": "ORD-1001"}, original_tool_name="get_order")
        bad, _, bad_info = await tool.execute(a, {"order_id": 7}, original_tool_name="get_order")
        hashes = (start, tool.db_hash(a), tool.db_hash(b))
        await tool.release(a)
        await tool.release(b)
        return upd, reward, info, seen_a, seen_b, bad, bad_info, hashes

    upd, reward, info, seen_a, seen_b, bad, bad_info, (start, ha, hb) = _run(scenario())
    assert json.loads(upd.text)["status"] == "success" and reward == 0.0
    assert info["backend"] == "env" and info["stage"] == "backend" and not info["error"]
    assert json.loads(seen_a.text)["order"]["status"] == "processing"
    assert json.loads(seen_b.text)["order"]["status"] == "pending"
    assert bad.text == "Tool 'get_order' invalid parameter 'order_id': 7 is not of type 'string'"
    assert bad_info["stage"] == "validation" and bad_info["error"]
    assert ha != start and hb == start
    assert tool._instances == {}


def test_env_backend_requires_an_env():
    tool = SGLSTool({"backend": "env"})
    with pytest.raises(Exception, match="env_dir"):
        _run(tool.create(create_kwargs={"tool_schemas": TOOLS}))


def test_llm_backend_over_fake_endpoint_with_format_retry():
    tagged = '<tool_response>{"order": {"id": "ORD-9", "status": "pending"}}</tool_response>'
    replies = iter(["Sure! here it is", tagged])

    with FakeOpenAIServer(lambda req: {"content": next(replies)}) as server:
        tool = SGLSTool({"backend": "hybrid", "max_observation_chars": 30,
                         "llm": {"base_url": server.base_url, "model": "mock", "api_key_env": "GUST_TEST_NO_KEY",
                                 "format_retries": 1}})

        async def scenario():
            iid, _ = await tool.create(create_kwargs={"tool_schemas": TOOLS})
            out = await tool.execute(iid, {"order_id": "ORD-9"}, original_tool_name="get_order")
            missing = await tool.execute(iid, {}, original_tool_name="get_order")
            await tool.release(iid)
            return out, missing

        (resp, _, info), (missing, _, _) = _run(scenario())
        requests = list(server.requests)
    assert info["backend"] == "llm" and len(requests) == 2
    full = '{"order": {"id": "ORD-9", "status": "pending"}}'
    assert resp.text == full[:15] + "...(truncated)..." + full[-15:]
    prompt = requests[0]["messages"][0]["content"]
    assert '"name": "get_order", "parameters": {"order_id": "ORD-9"}, "depend_on": []' in prompt
    assert '"description": "Get one order by its id."' in prompt
    assert requests[0]["temperature"] == 0.6 and requests[1].get("seed") == 1
    # stage-1 texts are observations too, so they are truncated like any other
    assert missing.text == truncate_observation("Tool 'get_order' missing required parameters: ['order_id']", 30)


def test_llm_backend_transport_failure_becomes_observation():
    from tests.fakes.openai_server import FakeHTTPError

    def refuse(req):
        raise FakeHTTPError(400, "model overloaded")

    with FakeOpenAIServer(refuse) as server:
        tool = SGLSTool({"backend": "llm", "llm": {"base_url": server.base_url, "model": "m",
                                                   "api_key_env": "GUST_TEST_NO_KEY"}})

        async def scenario():
            iid, _ = await tool.create(create_kwargs={"tool_schemas": TOOLS})
            return await tool.execute(iid, {"order_id": "X"}, original_tool_name="get_order")

        resp, _, info = _run(scenario())
    assert resp.text.startswith("Error when executing tool:") and info["error"]


def test_registry_and_prompt():
    assert SGLS_BACKENDS.names() == ["env", "hybrid", "llm"]
    with pytest.raises(Exception, match="unknown sgls backend"):
        SGLSTool({"backend": "magic"})
    prompt = render_mock_prompt(NESTED_TOOL, "add", {"rows": []})
    assert "Tool Definition:" in prompt and '"items"' in prompt and "<tool_response>" in prompt
