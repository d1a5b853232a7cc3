"""A seeded hostile workload for the reward: decoded responses, ground truths and agent-loop records that a real
rollout (or a broken converter) can produce, including what verl's stock parser would record.

`hostile_workload(n, seed)` yields `(solution_str, ground_truth, extra_info)` triples. Used by the compute_score
fuzz tests (and reusable by benches): the reward must never raise and always return the same key set.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from tests.trainer.gust_task import GOLD_STAGES

TOOLS = ["get_order", "list_orders", "update_order_status", "cancel_order"]
_TOOL_SCHEMAS = json.dumps([{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                            for n in TOOLS])  # fmt: skip
_WEIRD_VALUES: list[Any] = [
    "ORD-1001", "", " ", "ü∂ß漢字", "\x00", "\\u0000", 0, -1, 1e308, 3.5, True, False, None, [], {}, [1, [2, [3]]],
    {"a": {"b": {"c": None}}}, "NaN", "processing", "x" * 300,
]  # fmt: skip
_WEIRD_ARGUMENTS: list[Any] = ["a string", '{"order_id": "ORD-1001"}', "[1, 2]", [1, 2], 42, 3.14, None, True, ""]


def _args(rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return rng.choice(_WEIRD_ARGUMENTS)
    keys = rng.sample(["order_id", "status", "new_status", "customer_id", "limit", "ÿ", ""], rng.randint(0, 3))
    return {k: rng.choice(_WEIRD_VALUES) for k in keys}


def _call_obj(rng: random.Random) -> Any:
    name = rng.choice([*TOOLS, "unknown_tool", "", None, 7, "get_order\n"])
    key = rng.choice(["arguments", "arguments", "parameters", "args"])
    obj: Any = {"name": name, key: _args(rng)}
    if rng.random() < 0.1:
        obj = rng.choice([[obj, obj], "just a string", 5, None, [], {"arguments": {}}])
    return obj


def _block(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.55:
        body = json.dumps(_call_obj(rng), ensure_ascii=rng.random() < 0.5)
    elif roll < 0.7:
        body = json.dumps([_call_obj(rng) for _ in range(rng.randint(0, 3))])
    elif roll < 0.8:
        body = json.dumps(_call_obj(rng))[: rng.randint(0, 30)]  # truncated JSON
    elif roll < 0.85:
        body = '{"name": "get_order", "arguments": {"order_id": NaN, "x": Infinity}}'
    else:
        body = rng.choice(["", "   ", "<tool_call>", "}{", "null", "[[[]]]", "\n\n", "\"\\ud800\""])
    tags = rng.random()
    if tags < 0.8:
        return f"<tool_call>\n{body}\n</tool_call>"
    if tags < 0.9:
        return f"<tool_call>{body}"  # unclosed
    return f"{body}</tool_call>"  # unopened


def _observation(rng: random.Random) -> str:
    payload = rng.choice(['{"status": "success"}', '{"order": {"status": "processing"}}', "", "<tool_call>x",
                          "Error executing tool", "ü" * rng.randint(0, 50)])  # fmt: skip
    return f"\nuser\n<tool_response>\n{payload}\n</tool_response>\nassistant\n"


def _solution(rng: random.Random) -> str:
    parts: list[str] = []
    for _ in range(rng.randint(0, 5)):
        turn = "".join(_block(rng) for _ in range(rng.randint(0, 3)))
        if rng.random() < 0.2:
            turn = f"<think>{turn}</think>" if rng.random() < 0.5 else f"<think>{turn}"
        if rng.random() < 0.3:
            turn += rng.choice(["Let me check.", "ok", "", "<tool_response>spoofed</tool_response>", "assistant"])
        parts.append(turn + (_observation(rng) if rng.random() < 0.8 else ""))
    parts.append(rng.choice(["", "Done.", "Order ORD-1001 is processing and ORD-1003 is cancelled.", "x" * 2000,
                             "</tool_call></tool_response>", "\x00\x01"]))  # fmt: skip
    return "".join(parts)


def _ground_truth(rng: random.Random) -> Any:
    roll = rng.random()
    gold = [[{"name": n, "arguments": a} for n, a in stage] for stage in GOLD_STAGES]
    base: dict[str, Any] = {
        "allowed_tools": list(TOOLS), "gold_tool_calls": json.dumps(gold), "args_known": True, "turn_level": True,
        "tool_schemas": _TOOL_SCHEMAS, "question_content": "Handle the orders.", "subset_name": "tool_call",
        "env_id": "", "env_dir": "", "expected_final_db_hash": "", "initial_db_hash": "",
    }  # fmt: skip
    if roll < 0.35:
        return base
    if roll < 0.5:  # Toucan preview: flat names, no turn-level gold
        return {**base, "gold_tool_calls": ["get_order", "cancel_order"], "turn_level": False, "args_known": False}
    if roll < 0.6:  # irrelevant row
        return {**base, "gold_tool_calls": "[]", "subset_name": "irrelevant"}
    if roll < 0.7:  # pandas-loaded parquet: numpy columns
        return {**base, "allowed_tools": np.array(TOOLS, dtype=object),
                "gold_tool_calls": np.array([np.array(s, dtype=object) for s in gold], dtype=object)}
    if roll < 0.75:  # an environment that is not there (state replay on)
        return {**base, "env_dir": "/nonexistent/env", "expected_final_db_hash": "abc", "env_id": "missing"}
    return rng.choice([None, "x", 5, [], {}, {"allowed_tools": []}, {"allowed_tools": "get_order"},
                       {"allowed_tools": [1, 2]}, {**base, "gold_tool_calls": "{broken"},
                       {**base, "gold_tool_calls": [[{"name": 5}], "x", None]}, {**base, "question_content": None}])


def _recorded(rng: random.Random) -> Any:
    turns = [[{"name": rng.choice([*TOOLS, "", None]), "arguments": _args(rng)} for _ in range(rng.randint(0, 3))]
             for _ in range(rng.randint(0, 4))]  # fmt: skip
    roll = rng.random()
    if roll < 0.6:
        return json.dumps(turns)
    if roll < 0.7:
        return turns
    return rng.choice(["", "{not json", "null", "5", '"str"', '[1, "a", null]', '[[1, 2], {"a": 1}]', 7, None])


def hostile_workload(n: int, seed: int = 0) -> Iterator[tuple[str, Any, Any]]:
    """`n` hostile (solution_str, ground_truth, extra_info) triples, deterministic for a seed."""
    rng = random.Random(seed)
    for _ in range(n):
        extra: Any = {}
        roll = rng.random()
        if roll < 0.6:
            extra = {"gust_turn_calls": _recorded(rng), "gust_final_db_hash": rng.choice(["", "abc", None])}
        elif roll < 0.65:
            extra = rng.choice([None, "x", [], 5])
        yield _solution(rng), _ground_truth(rng), extra
