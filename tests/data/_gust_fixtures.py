"""Hand-built TaskRecords for the GUST export and publish tests (no environment needed)."""

from __future__ import annotations

from data.models import GoldenTrace, TaskRecord, TaskText, TraceCall, TraceStage
from gustforge.hashing import content_hash


def make_record(i: int, *, env_id: str = "env_a", pass_at_k: float | None = None) -> TaskRecord:
    """A two-stage task whose outputs hold heterogeneous nested values (ints, floats, lists, nulls, {})."""
    lookup = TraceCall(
        name="get_user",
        arguments={"user_id": f"u{i}"},
        output={"status": "success", "message": "ok", "user": {"id": f"u{i}", "tags": ["a", i], "score": 0.5 + i}},
        context_args=("user_id",),
    )
    update = TraceCall(
        name="add_balance",
        arguments={"account_id": f"acc-{i}", "amount": i * 5, "meta": {}},
        output={"status": "success", "message": "done", "balance": None, "history": [{"x": 1}, {"y": "z"}]},
        dependency_args={"account_id": "get_user.user.account_id"},
        context_args=("amount",),
    )
    trace = GoldenTrace(
        trace_id=f"tr{i}",
        env_id=env_id,
        graph_index=i % 3,
        stages=(
            TraceStage(calls=(lookup,), db_hash_before="h0", db_hash_after="h0"),
            TraceStage(calls=(update,), db_hash_before="h0", db_hash_after=f"h{i}"),
        ),
        edges_used=(("get_user", "add_balance"),),
        initial_db_hash="h0",
        final_db_hash=f"h{i}",
    )
    text = TaskText(
        user_query=f"Give user u{i} {i * 5} credits — ünïcode ok",
        dialogue_history=({"role": "user", "content": "hi"}, {"role": "assistant", "content": "How can I help?"}),
        reasoning_chain=("look up the user", "add the balance"),
    )
    return TaskRecord(
        task_id=content_hash([trace.model_dump(mode="json"), text.model_dump(mode="json")])[:16],
        env_id=env_id,
        text=text,
        trace=trace,
        tools=("get_user", "add_balance", "list_users"),
        graph_complexity=3,
        replay_ok=True,
        solvable=True,
        teacher_status="passed" if pass_at_k is not None else "not_run",
        pass_at_k=pass_at_k,
        seed=7 + i,
        provenance={"toolset_id": "ts1", "schemas_sha256": "abc"},
    )
