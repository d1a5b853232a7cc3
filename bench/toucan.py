"""Toucan-shaped row generator and benchmarks of the Toucan pipeline.

Rows follow the HF Agent-Ark/Toucan-1.5M column layout (string columns; Qwen-Agent messages with
`function_call` and `function` roles). The same generator writes the shipped sample
(`data/samples/toucan/toucan_sample.jsonl`, with hand-made bad rows of every kind) and the 100k-row benchmark file.

Usage:
    python bench/toucan.py sample                # rewrite the shipped sample
    python bench/toucan.py prepare --rows 100000 # prepare throughput (rows/s); file generated into /tmp
    python bench/toucan.py eval --samples 64 --concurrency 8 --delay 0.05
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from data.io import atomic_write_text  # noqa: E402

__all__ = ["SERVERS", "good_row", "sample_rows", "bench_rows", "main"]

_S = "string"
SERVERS: dict[str, list[tuple[str, str, dict[str, str], list[str]]]] = {
    # server name -> [(tool, description, {param: type}, required)]
    "Weather Server": [
        ("get_current_weather", "Get the current weather for a location.", {"location": _S, "units": _S}, ["location"]),
        ("get_forecast", "Get a multi-day weather forecast.", {"location": _S, "days": "integer"}, ["location"]),
    ],
    "Advanced Calculator Server": [
        ("add", "Add two numbers.", {"a": "number", "b": "number"}, ["a", "b"]),
        ("multiply", "Multiply two numbers.", {"a": "number", "b": "number"}, ["a", "b"]),
    ],
    "Currency Exchange": [
        ("convert", "Convert an amount between currencies.", {"amount": "number", "from": _S, "to": _S},
         ["amount", "from", "to"]),
        ("list_currencies", "List the supported currency codes.", {}, []),
    ],
    "Notes MCP": [
        ("create_note", "Create a note with a title and a body.", {"title": _S, "body": _S}, ["title", "body"]),
        ("search_notes", "Full-text search over saved notes.", {"query": _S}, ["query"]),
    ],
    "Server Time": [("get_current_time", "Current time in an IANA timezone.", {"timezone": _S}, ["timezone"])],
    "Think Tool Server": [("think", "Append a thought to the reasoning log.", {"thought": _S}, ["thought"])],
}  # fmt: skip
_CITIES = ["Paris", "Boston", "Tokyo", "Nairobi", "Lima", "Oslo", "Denver", "Hanoi", "Cairo", "Perth"]
_ZONES = ["Europe/Paris", "America/New_York", "Asia/Tokyo", "Africa/Nairobi", "America/Lima"]
_TOPICS = ["budget", "travel plan", "reading list", "meeting notes", "groceries", "workout"]


def _slug(server: str, tool: str) -> str:
    return f"{server.lower().replace(' ', '-')}-{tool}"


def _schema(params: dict[str, str], required: list[str]) -> dict[str, Any]:
    props = {p: {"type": t, "description": f"The {p}."} for p, t in params.items()}
    return {"type": "object", "properties": props, "required": required}


def _tools(servers: list[str]) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": _slug(s, t), "description": d, "parameters": _schema(p, r)}}
        for s in servers
        for t, d, p, r in SERVERS[s]
    ]


def _metadata(servers: list[str], row_id: int) -> dict[str, Any]:
    entries = []
    for s in servers:
        tools = [
            {"name": t, "description": d, "input_schema": _schema(p, r), "annotations": {}} for t, d, p, r in SERVERS[s]
        ]
        entries.append(
            {
                "server_id": sorted(SERVERS).index(s),
                "server_name": s,
                "remote_server_response": {"tools": tools},
            }
        )
    return {"row_id": row_id, "mcp_servers": entries}


def _args(rng: random.Random, server: str, tool: str) -> dict[str, Any]:
    params = next(p for t, _, p, _ in SERVERS[server] if t == tool)
    values = {
        "location": rng.choice(_CITIES), "units": rng.choice(["metric", "imperial"]), "days": rng.randint(2, 7),
        "a": rng.randint(1, 99), "b": rng.randint(1, 99), "amount": rng.randint(5, 500),
        "from": rng.choice(["USD", "EUR"]), "to": rng.choice(["JPY", "GBP"]), "title": rng.choice(_TOPICS).title(),
        "body": "Remember to review this.", "query": rng.choice(_TOPICS), "timezone": rng.choice(_ZONES),
        "thought": "Break the request into steps first.",
    }  # fmt: skip
    return {p: values[p] for p in params}


def _response(tool: str, args: dict[str, Any]) -> str:
    if tool in ("add", "multiply"):
        return str(args["a"] + args["b"] if tool == "add" else args["a"] * args["b"])
    return json.dumps({"tool": tool, "ok": True, **{k: v for k, v in args.items() if k != "body"}})


def _call_msgs(rng: random.Random, calls: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Qwen-Agent layout: one assistant message per call, then one function message per call."""
    made = [(s, t, _args(rng, s, t)) for s, t in calls]
    msgs: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": "",
            "function_call": {"name": _slug(s, t), "arguments": json.dumps(a)},
        }
        for s, t, a in made
    ]
    msgs += [{"role": "function", "name": _slug(s, t), "content": _response(t, a)} for s, t, a in made]
    return msgs


def _turn(rng: random.Random, servers: list[str], question: str) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for step in range(rng.choice([1, 1, 2])):
        width = rng.choice([1, 1, 2]) if step == 0 else 1  # some parallel first steps
        calls = [(s, rng.choice(SERVERS[s])[0]) for s in (rng.choice(servers) for _ in range(width))]
        msgs.append({"role": "assistant", "content": f"Let me check that (step {step + 1})."})
        msgs += _call_msgs(rng, calls)
    msgs.append({"role": "assistant", "content": "Here is what I found: the results above answer your request."})
    return msgs


def _assessments(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    dims = ["tool_selection_difficulty", "tool_selection_uniqueness", "question_quality", "scenario_realism"]
    q = {d: {"reasoning": "ok", "score": rng.randint(3, 5)} for d in dims}
    q["overall_score"] = round(sum(v["score"] for v in q.values()) / len(dims), 2)  # type: ignore[index]
    r: dict[str, Any] = {d: {"reasoning": "ok", "score": rng.randint(3, 5)} for d in ("completeness", "conciseness")}
    r.update(overall_score=(r["completeness"]["score"] + r["conciseness"]["score"]) / 2, order_correctness=True)
    return q, r


def good_row(rng: random.Random, i: int, *, turns: int = 1, subset: str | None = None) -> dict[str, Any]:
    """One valid Toucan row (HF columns, JSON-string values).

    Args:
        rng: Randomness.
        i: Row number (uuid suffix).
        turns: User turns (>1 gives a multi-turn dialogue).
        subset: `subset_name`; derived from `turns` when None.

    Returns:
        The row dict.
    """
    servers = rng.sample(sorted(SERVERS), rng.choice([1, 2]))
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": "You are a helpful assistant. Today is 2025-06-01."})
    for t in range(turns):
        topic = rng.choice(_TOPICS + _CITIES)
        messages += _turn(rng, servers, f"Request {t + 1} of row {i}: help me with {topic} using {servers[0]}.")
    q, r = _assessments(rng)
    targets = ", ".join(f"{s}::{SERVERS[s][0][0]}" for s in servers)
    return {
        "uuid": f"toucan-{i:06d}",
        "subset_name": subset or ("multi-turn" if turns > 1 else rng.choice(["single-turn-original", "single-turn-diversify"])),  # noqa: E501
        "messages": json.dumps(messages),
        "question": next(m["content"] for m in messages if m["role"] == "user"),
        "available_tools": json.dumps(_tools(servers)),
        "target_tools": targets,
        "question_quality_assessment": json.dumps(q),
        "response_quality_assessment": json.dumps(r),
        "metadata": json.dumps(_metadata(servers, i)),
    }  # fmt: skip


def _edit_messages(row: dict[str, Any], edit: Any) -> dict[str, Any]:
    messages = json.loads(row["messages"])
    edit(messages)
    return {**row, "messages": json.dumps(messages)}


def _first_call(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in messages if m.get("function_call"))["function_call"]


def _bad_rows(rng: random.Random, start: int) -> list[dict[str, Any] | str]:
    """One row per kind of bad or repairable input (the comment names the expected outcome)."""
    g = lambda k, **kw: good_row(rng, start + k, **kw)  # noqa: E731
    quality_q, quality_r = g(5), g(6)
    q = json.loads(quality_q["question_quality_assessment"])
    q["overall_score"] = 2.0
    r = json.loads(quality_r["response_quality_assessment"])
    r["completeness"]["score"] = 1
    dup, double, from_meta = g(16), g(14), g(15)

    def to_repr(m: list[dict[str, Any]]) -> None:
        call = _first_call(m)
        call.update(arguments=str(json.loads(call["arguments"])))

    def orphan(m: list[dict[str, Any]]) -> None:
        m.insert(next(i for i, x in enumerate(m) if x["role"] == "user") + 1, {"role": "function", "content": "?"})

    return [
        '{"uuid": "broken-line", "messages": [',  # unparseable_row
        {**g(1), "messages": '[{"role": "user", "content": "hi"'},  # broken_json
        {k: v for k, v in g(2).items() if k not in ("available_tools", "metadata")},  # missing_tools
        {**g(3), "messages": "[]"},  # empty_dialogue
        _edit_messages(g(4), lambda m: _first_call(m).update(name="ghost-server-do_magic")),  # unknown_tool
        {**quality_q, "question_quality_assessment": json.dumps(q)},  # low_question_quality
        {**quality_r, "response_quality_assessment": json.dumps(r)},  # low_response_quality
        g(7, subset="irrelevant"),  # irrelevant_subset
        _edit_messages(g(8), lambda m: _first_call(m).update(arguments="[1, 2]")),  # bad_arguments
        _edit_messages(g(9), lambda m: m[-1].update(content="Done ✿FUNCTION✿ leaked")),  # nonstandard_tool_tokens
        _edit_messages(g(10), lambda m: _first_call(m).update(arguments="{}")),  # arguments_schema_mismatch
        _edit_messages(g(11), lambda m: m.pop()),  # incomplete_dialogue (no final reply)
        _edit_messages(g(12), orphan),  # incomplete_dialogue (response without a call)
        # repairable rows (kept, counted as repaired):
        _edit_messages(g(13), to_repr),  # arguments as a Python repr
        {**double, "messages": json.dumps(double["messages"])},  # messages encoded twice
        {
            **{k: v for k, v in from_meta.items() if k != "available_tools"},
            "metadata": str(json.loads(from_meta["metadata"])),
        },
        dup,
        {**dup},  # duplicate_dialogue
        _edit_messages(g(17), lambda m: _first_call(m).update(name=_first_call(m)["name"].split("-")[-1])),
        {**g(18), "uuid": ""},  # uuid from hash
    ]


def sample_rows(seed: int = 7) -> list[dict[str, Any] | str]:
    """The shipped sample: 44 valid rows (single-turn, parallel, multi-turn) plus 20 bad or repairable rows."""
    rng = random.Random(seed)
    rows: list[dict[str, Any] | str] = [good_row(rng, i) for i in range(26)]
    rows += [good_row(rng, 100 + i, turns=rng.choice([2, 2, 3])) for i in range(18)]
    rows += _bad_rows(rng, 200)
    rng.shuffle(rows)
    return rows


def bench_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` rows: 70% single-turn, 25% multi-turn, 5% irrelevant."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        x = rng.random()
        turns = 1 if x < 0.75 else rng.choice([2, 3])
        rows.append(good_row(rng, i, turns=turns, subset="irrelevant" if x > 0.95 else None))
    return rows


def _write_lines(path: Path, rows: list[dict[str, Any] | str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    return atomic_write_text(path, "".join(line + "\n" for line in lines))


SAMPLE_PATH = REPO / "data" / "samples" / "toucan" / "toucan_sample.jsonl"


def bench_prepare(n_rows: int, workdir: Path) -> dict[str, Any]:
    """Prepare throughput on a generated `n_rows` Toucan-shaped JSONL (written into `workdir`)."""
    from toucan.config import PrepareConfig
    from toucan.export import write_prepared
    from toucan.prepare import prepare
    from toucan.rows import iter_raw_rows

    source = workdir / f"toucan_{n_rows}.jsonl"
    t0 = time.perf_counter()
    _write_lines(source, list(bench_rows(n_rows)))
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepared = prepare(iter_raw_rows(source), PrepareConfig())
    prepare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_prepared(prepared, workdir / "out")
    write_s = time.perf_counter() - t0
    return {
        "rows": n_rows, "file_mb": round(source.stat().st_size / 2**20, 1), "generate_s": round(generate_s, 1),
        "phases_1_4_s": round(prepare_s, 1), "write_s": round(write_s, 1),
        "rows_per_s": round(n_rows / prepare_s), "rows_per_s_incl_write": round(n_rows / (prepare_s + write_s)),
        "test": len(prepared.test), "rl": len(prepared.rl), "sft": len(prepared.sft),
        "balanced": all(r.balanced for r in prepared.reports),
    }  # fmt: skip


def bench_eval(n_samples: int, concurrency: int, delay_s: float, workdir: Path) -> dict[str, Any]:
    """Evaluator throughput against the local fake endpoint: every sample makes one call, then answers."""
    from gustforge.llm import LLMSettings
    from tests.fakes.openai_server import FakeOpenAIServer
    from toucan.config import EvalConfig, PrepareConfig
    from toucan.eval_run import run_evaluation
    from toucan.export import write_prepared
    from toucan.prepare import prepare
    from toucan.rows import RawRow

    rows = [RawRow(i, r) for i, r in enumerate(bench_rows(max(400, n_samples * 4), seed=1))]
    prepared = prepare(rows, PrepareConfig(reference_pool_size=1, test_single_turn=n_samples, test_multi_turn=0))
    data = write_prepared(prepared, workdir / "prep")["test"]

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        if messages[-1]["content"].startswith("<tool_response>"):
            return {"content": "Done: the results are in."}
        tool = json.loads(messages[0]["content"].split("<tools>\n")[1].splitlines()[0])["function"]
        args = {k: "x" for k in tool["parameters"].get("required", [])}
        return {"content": "<tool_call>\n" + json.dumps({"name": tool["name"], "arguments": args}) + "\n</tool_call>"}

    with FakeOpenAIServer(respond, delay_s=delay_s) as server:
        settings = LLMSettings(backend="openai", base_url=server.base_url, model="fake", max_concurrency=concurrency)
        t0 = time.perf_counter()
        summary = run_evaluation(data, workdir / f"eval-c{concurrency}", model=settings, cfg=EvalConfig())
        wall = time.perf_counter() - t0
        return {
            "samples": summary.n, "concurrency": concurrency, "server_delay_s": delay_s,
            "requests": len(server.requests), "max_in_flight": server.max_in_flight, "wall_s": round(wall, 2),
            "samples_per_s": round(summary.n / wall, 1), "requests_per_s": round(len(server.requests) / wall, 1),
        }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sample", help="rewrite the shipped sample")
    prep = sub.add_parser("prepare", help="prepare throughput")
    prep.add_argument("--rows", type=int, default=100_000)
    ev = sub.add_parser("eval", help="evaluator throughput against the fake endpoint")
    ev.add_argument("--samples", type=int, default=64)
    ev.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ev.add_argument("--delay", type=float, default=0.05)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.cmd == "sample":
        _write_lines(SAMPLE_PATH, sample_rows())
        return 0
    with tempfile.TemporaryDirectory(prefix="toucan-bench-", dir="/tmp") as tmp:
        if args.cmd == "prepare":
            results: Any = bench_prepare(args.rows, Path(tmp))
        else:
            results = [bench_eval(args.samples, c, args.delay, Path(tmp)) for c in args.concurrency]
    sys.stdout.write(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
