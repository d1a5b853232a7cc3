"""Hand-built GUST task on the tiny_env fixture (tests/envgen/fixtures/tiny_env) for the trainer tests.

The golden trace is produced by really running the calls in a sandboxed session, so its DB hashes are real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.models import GoldenTrace, TaskRecord, TaskText, TraceCall, TraceStage
from envgen.runtime import Environment

TINY_ENV = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"

GOLD_STAGES: list[list[tuple[str, dict[str, Any]]]] = [
    [("get_order", {"order_id": "ORD-1001"})],
    [("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"}),
     ("cancel_order", {"order_id": "ORD-1003"})],
]


def make_task(stages: list[list[tuple[str, dict[str, Any]]]] = GOLD_STAGES, task_id: str = "task-1") -> TaskRecord:
    """Run the stages on a fresh tiny_env session and wrap them as a TaskRecord."""
    env = Environment.load(TINY_ENV)
    with env.session() as session:
        initial = session.db_hash()
        trace_stages = []
        for stage in stages:
            before = session.db_hash()
            calls = tuple(TraceCall(name=n, arguments=a, output=session.call(n, a)) for n, a in stage)
            trace_stages.append(TraceStage(calls=calls, db_hash_before=before, db_hash_after=session.db_hash()))
    trace = GoldenTrace(
        trace_id=f"trace-{task_id}", env_id=env.env_id, graph_index=0, stages=tuple(trace_stages),
        initial_db_hash=initial, final_db_hash=trace_stages[-1].db_hash_after,
    )
    return TaskRecord(
        task_id=task_id, env_id=env.env_id,
        text=TaskText(user_query="Look up order ORD-1001, move it to processing and cancel ORD-1003."),
        trace=trace, tools=tuple(env.tool_names), graph_complexity=2, seed=0,
    )


def call_block(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def observation(*texts: str) -> str:
    body = "\n".join(f"<tool_response>\n{t}\n</tool_response>" for t in texts)
    return f"\nuser\n{body}\nassistant\n"


def rollout(turns: list[list[tuple[str, dict[str, Any]]]], final: str) -> str:
    """A decoded multi-turn response (Qwen layout) making `turns` of calls, then `final`."""
    out = ""
    for turn in turns:
        out += "".join(call_block(n, a) for n, a in turn)
        out += observation(*['{"status": "success", "message": "ORD-1001 processing"}'] * len(turn))
    return out + final
