"""A scripted OpenAI-compatible responder that answers every GUST Forge role the way its deterministic twin would.

It reads only what a real model reads — the rendered prompt (and, for the teacher, the conversation) — and
answers in the role's reply format, so a whole build can run over HTTP against `FakeOpenAIServer`:

    refactor / plan / database / codegen   the offline twin's answer, rebuilt from the schemas and collections in the prompt
    tdg_judge / task_writer         the offline twin on the tool views / trace in the prompt
    teacher                         replays the golden trace of the task it was asked (remembered from the writer)

`think=True` wraps every JSON answer in a `<think>` draft holding a *different* (wrong) JSON object first, the way
Qwen3 replies with reasoning left in the content.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from data.models import RefactoredToolset, ToolSchema
from envgen import codegen, database, planning, refactor
from envgen.entities import infer_entity, infer_kind
from envgen.refactor import finalize_tools
from tdg import infer, taskgen

__all__ = ["TwinResponder"]


def _between(text: str, start: str, end: str | None) -> str:
    tail = text.split(start, 1)[1]
    return tail.split(end, 1)[0] if end else tail


def _tools(views: list[dict[str, Any]], *, keep_responses: bool) -> tuple[ToolSchema, ...]:
    drafts = []
    for view in views:
        kind = infer_kind(view["name"])
        params = view.get("parameters") or {"type": "object", "properties": {}}
        drafts.append(ToolSchema(name=view["name"], raw_name=view["name"], description=view.get("description", ""),
                                 parameters=params, response=view.get("response") or {"type": "object"}, kind=kind,
                                 entity=infer_entity(view["name"], params, kind)))  # fmt: skip
    return finalize_tools(drafts, keep_responses=keep_responses)


class TwinResponder:
    """Callable responder for `FakeOpenAIServer`; thread-safe; counts requests per role in `calls`."""

    def __init__(self, *, think: bool = False) -> None:
        self.think = think
        self.calls: dict[str, int] = {}
        self._traces: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._roles = {
            refactor.REFACTOR_ROLE.system_prompt[:80]: ("refactor", self._refactor),
            planning.PLAN_ROLE.system_prompt[:80]: ("plan", self._plan),
            database.DATABASE_ROLE.system_prompt[:80]: ("database", self._database),
            codegen.CODEGEN_ROLE.system_prompt[:80]: ("codegen", self._codegen),
            infer._JUDGE.system_prompt[:80]: ("tdg_judge", self._judge),
            taskgen.TASK_SYSTEM_PROMPT[:80]: ("task_writer", self._writer),
        }

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        if request.get("tools"):
            self._count("teacher")
            return self._teacher(messages)
        role, answer = self._roles[str(messages[0]["content"])[:80]]
        self._count(role)
        user = next(m["content"] for m in messages if m["role"] == "user")
        text = json.dumps(answer(user))
        if self.think:
            text = f'<think>First draft: {{"draft": true}}. Let me check again.</think>\n{text}'
        return {"content": text}

    def _count(self, role: str) -> None:
        with self._lock:
            self.calls[role] = self.calls.get(role, 0) + 1

    # ------------------------------------------------------------------ envgen
    def _refactor(self, user: str) -> dict[str, Any]:
        limit = _between(user, "Maximum parameters per tool: ", "\n").strip()
        tools = json.loads(_between(user, "Input Tool Definition:\n", None))
        return refactor._offline_reply({"tools_definition": tools, "toolset_name": "",
                                        "max_params": int(limit) if limit.isdigit() else None})  # fmt: skip

    def _plan(self, user: str) -> dict[str, Any]:
        return planning._offline_reply({"tools": _between(user, "\n\nTools:\n", None)})

    def _database(self, user: str) -> dict[str, Any]:
        low, high = (int(x) for x in _between(user, "Records per collection: ", "\n").split("-"))
        views = [t["function"] for t in json.loads(_between(user, "Tools:\n", "\n\nCollections"))]
        plan = database.plan_environment(_tools(views, keep_responses=False))
        db = database._offline(plan, 0, (low, high))
        db.pop(database.ACTION_LOG, None)
        return {"collections": db}

    def _codegen(self, user: str) -> dict[str, Any]:
        views = json.loads(_between(user, "Tool schemas (each with its behaviour):\n", "\n\nInitial database"))
        tools = _tools(views, keep_responses=True)
        refactored = RefactoredToolset(toolset_id="twin", name="twin", tools=tools, name_map={})
        return {"code": codegen._offline(refactored, {}, None, ())}

    # ------------------------------------------------------------------ tdg
    def _judge(self, user: str) -> dict[str, Any]:
        tool_a = _between(user, "Tool A:\n", "\n\nTool B:")
        tool_b = _between(user, "Tool B:\n", "\n\nField matches")
        return infer._offline_judge({"tool_a": tool_a, "tool_b": tool_b})

    def _writer(self, user: str) -> dict[str, Any]:
        inputs = {
            "tool_definitions_json": _between(user, "Tool definitions:\n", "\n\nTool Dependency Graph"),
            "dependency_edges_json": _between(user, "[source, target]):\n", "\n\nValues the user"),
            "golden_trace_json": _between(user, "Input Trace: ", None),
            "seed": 0,
        }
        reply = taskgen.offline_task(inputs)
        with self._lock:
            self._traces.setdefault(reply["user_query"], json.loads(inputs["golden_trace_json"]))
        return reply

    # ------------------------------------------------------------------ teacher
    def _teacher(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        with self._lock:
            trace = self._traces.get(str(messages[last_user]["content"]))
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        if trace is None or turn >= len(trace["stages"]):  # report what the tools answered, as an agent would
            seen = [str(m.get("content") or "") for m in messages[last_user:] if m["role"] == "tool"]
            return {"content": "Done. What the tools returned: " + " ".join(seen)}
        calls = trace["stages"][turn]["calls"]
        return {"content": None, "tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls]}
