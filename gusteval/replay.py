"""A scripted agent that replays GUST gold traces, served as a local OpenAI-compatible endpoint.

It stands in for a model (it says so: its model name is `gold-replay` / `gold-replay-skip`) to check the evaluator and
the simulated user end to end. Per conversation it finds the task from the system prompt and the user's opening
message, then
  1. asks the user for each stated value, one question per turn, and takes the values from the user's answers (a
     value the user did not give is sent as "UNKNOWN", so a simulator that withholds facts makes the task fail);
  2. emits the gold calls stage by stage (one `<tool_call>` block per call);
  3. reports that it is done.
With `skip_step=True` it leaves out the last stage that changes the DB (tasks without one are replayed in full and
listed by `skipped_tasks`).

Run: `python -m gusteval.replay --data OUT/gust [--skip-step] [--port 8011]` (prints the base URL, serves until
interrupted).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from data.models import TaskRecord
from gusteval.runner import EvalTask, load_eval_tasks
from gusteval.scenario import Fact
from tdg.taskgen import format_value, stated_arguments

__all__ = ["GoldReplayPolicy", "ReplayServer", "main"]

UNKNOWN = "UNKNOWN"


def _said(fact: Fact, texts: Sequence[str]) -> bool:
    return any(format_value(fact.value) in t or (not isinstance(fact.value, str) and str(fact.value) in t)
               for t in texts)  # fmt: skip


class GoldReplayPolicy:
    """messages → the replay agent's next message (stateless: the turn is read off the conversation)."""

    def __init__(self, tasks: Sequence[EvalTask], stages: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], *,
                 skip_step: bool = False, skipped: Sequence[str] = ()) -> None:  # fmt: skip
        self.skip_step = skip_step
        self._stages = {k: [list(s) for s in v] for k, v in stages.items()}
        self._skipped = sorted(skipped)
        self._by_opening: dict[tuple[str, str], list[EvalTask]] = {}
        for task in tasks:
            self._by_opening.setdefault((task.system_prompt, task.scenario.opening()), []).append(task)

    @classmethod
    def from_records(cls, tasks: Sequence[EvalTask], records: Mapping[str, TaskRecord], *,
                     skip_step: bool = False) -> GoldReplayPolicy:  # fmt: skip
        """From GUST records (under `skip_step` the last DB-changing stage of each task is left out)."""
        stages, skipped = {}, []
        for task_id, record in records.items():
            kept = list(record.trace.stages)
            changing = [i for i, s in enumerate(kept) if s.db_hash_before != s.db_hash_after]
            if skip_step and changing:
                kept.pop(changing[-1])
                skipped.append(task_id)
            stages[task_id] = [[{"name": c.name, "arguments": dict(c.arguments), "stated": sorted(stated_arguments(c))}
                                for c in s.calls] for s in kept if s.calls]  # fmt: skip
        return cls(tasks, stages, skip_step=skip_step, skipped=skipped)

    @classmethod
    def from_tasks(cls, tasks: Sequence[EvalTask]) -> GoldReplayPolicy:
        """From tasks alone (verl rows): an argument is stated when the user holds a fact with its key and value."""
        stages = {}
        for task in tasks:
            facts = {(f.key, json.dumps(f.value, sort_keys=True)) for f in task.scenario.facts}
            stages[task.task_id] = [[{"name": c.name, "arguments": dict(c.arguments),
                                      "stated": sorted(k for k, v in c.arguments.items()
                                                       if (k, json.dumps(v, sort_keys=True)) in facts)}
                                     for c in step] for step in task.gold]  # fmt: skip
        return cls(tasks, stages)

    @property
    def model_name(self) -> str:
        return "gold-replay-skip" if self.skip_step else "gold-replay"

    def stages(self, task_id: str) -> list[list[dict[str, Any]]]:
        """The stages this policy emits for a task."""
        return self._stages[task_id]

    def skipped_tasks(self) -> list[str]:
        """Tasks in which `skip_step` left a stage out."""
        return list(self._skipped)

    def respond(self, messages: Sequence[Mapping[str, Any]]) -> str:
        system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
        candidates = self._by_opening.get((system, users[0] if users else ""), [])
        if not candidates:
            return "I'm sorry, I cannot help with this request."
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        names = list(dict.fromkeys(f.name for t in candidates for f in t.scenario.facts))  # tasks may share a goal
        if turn < len(names):
            return f"Could you tell me the {names[turn]}?"
        answers = users[1 : 1 + len(names)]  # the user's replies to the questions (not tool observations)
        answered = [t for t in candidates if all(_said(f, answers) for f in t.scenario.facts)] or candidates
        task = max(answered, key=lambda t: len(t.scenario.facts))  # the most specific task the answers fit
        heard = [f for f in task.scenario.facts if _said(f, answers)]
        stages = self.stages(task.task_id)
        step = turn - len(names)
        if step >= len(stages):
            found = f" What I found: {'; '.join(task.expected_answer)}." if task.expected_answer else ""
            return "All done: I completed every step of your request." + found
        blocks = []
        for call in stages[step]:
            args = {k: (v if k not in call["stated"] or any(f.key == k and f.value == v for f in heard) else UNKNOWN)
                    for k, v in call["arguments"].items()}  # fmt: skip
            blocks.append("<tool_call>\n" + json.dumps({"name": call["name"], "arguments": args}) + "\n</tool_call>")
        return "\n".join(blocks)


class ReplayServer:
    """`POST /v1/chat/completions` and `GET /v1/models` on 127.0.0.1 answering with a `GoldReplayPolicy`."""

    def __init__(self, policy: GoldReplayPolicy, *, port: int = 0) -> None:
        self.policy = policy
        self.port_requested = port
        self.requests = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def _completion(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.requests += 1
        content = self.policy.respond(body.get("messages") or [])
        prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or [])
        completion = len(content.split())
        return {
            "id": f"chatcmpl-replay-{self.requests}", "object": "chat.completion", "created": int(time.time()),
            "model": self.policy.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }  # fmt: skip

    def start(self) -> ReplayServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                return

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.policy.model_name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802 - stdlib naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(200, server._completion(body))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port_requested), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def load_policy(data: Path, *, envs_dir: Path | None = None, skip_step: bool = False) -> GoldReplayPolicy:
    """The replay policy for a GUST export (folder or shard)."""
    from data.gust import read_gust

    tasks = load_eval_tasks(data, envs_dir=envs_dir)
    records = {r.task_id: r for r in read_gust(Path(data) if Path(data).is_dir() else Path(data).parent.parent)}
    return GoldReplayPolicy.from_records(tasks, records, skip_step=skip_step)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a gold-replay agent as an OpenAI-compatible endpoint.")
    parser.add_argument("--data", type=Path, required=True, help="GUST export folder (OUT/gust).")
    parser.add_argument("--envs", type=Path, default=None, help="Environments folder (default OUT/envs).")
    parser.add_argument("--skip-step", action="store_true", help="Leave out the last DB-changing stage.")
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args(argv)
    with ReplayServer(load_policy(args.data, envs_dir=args.envs, skip_step=args.skip_step), port=args.port) as srv:
        print(srv.base_url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
