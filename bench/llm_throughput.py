"""LLM throughput benchmark: does each role keep the endpoint busy?

A local OpenAI-compatible endpoint (the test suite's `FakeOpenAIServer` answering like each role's twin) adds a
fixed latency to every request. The pipeline's own stage functions then run on real Toucan toolsets — envgen
(refactor + database + codegen), tdg (LLM judge), tasks (writer), verify (teacher) — and, per role, the endpoint
reports requests, peak and mean requests in flight, and wall time against the ideal
`requests × latency / max_concurrency`. Targets: peak ≥ 0.9 × max_concurrency and wall ≤ 1.5 × ideal. For envgen,
`offline_wall_s` is the same toolsets built offline in the same process: the sandbox/CPU floor the LLM path adds to.
For the teacher, `critical_path_s` is its longest conversation (sequential turns) × latency: a lower bound on wall.
The endpoint runs in a process of its own (`--endpoint thread`: in this one, sharing its interpreter lock); every
figure carries the 1-minute load average, since the machine may be shared.

Run: `.venv/bin/python bench/llm_throughput.py [--latency 1.0] [--concurrency 16] [--toolsets 48] [--envs 12]
[--endpoint process|thread] [--envgen-only]`;
prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envgen.stage import ingest_inputs, run_envgen  # noqa: E402
from gustforge.config import BuildConfig, load_config  # noqa: E402
from gustforge.llm import close_shared_clients  # noqa: E402
from gustforge.shards import ShardResult  # noqa: E402
from tdg.stage import run_reconstruct, run_sample, run_tasks, run_tdg, run_verify  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.twin_responder import TwinResponder  # noqa: E402

__all__ = ["main", "run"]

SERVERS = ROOT / ".." / "shared" / "corpora" / "toucan" / "toucan_mcp_servers.remote_valid.jsonl"


class _EndpointProcess:
    """The fake endpoint in a process of its own, as a real endpoint would be: its HTTP handling and twin answers
    do not take the measured process's interpreter lock (it still shares this machine's cores)."""

    def __init__(self, latency: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._proc = context.Process(target=_serve_endpoint, args=(child, latency), daemon=True)
        self._proc.start()
        self.base_url: str = self._conn.recv()

    def _ask(self, op: str) -> Any:
        self._conn.send(op)
        return self._conn.recv()

    def reset(self) -> None:
        self._ask("reset")

    @property
    def spans(self) -> list[tuple[float, float]]:  # CLOCK_MONOTONIC is system-wide: comparable across processes
        return self._ask("spans")

    @property
    def max_in_flight(self) -> int:
        return self._ask("max_in_flight")

    @property
    def cpu_s(self) -> float:
        """CPU seconds the endpoint process has used so far."""
        return self._ask("cpu_s")

    def __enter__(self) -> _EndpointProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._ask("stop")
        self._proc.join(10)


def _serve_endpoint(conn: Any, latency: float) -> None:
    with FakeOpenAIServer(TwinResponder(), delay_s=latency) as server:
        conn.send(server.base_url)
        while (op := conn.recv()) != "stop":
            answers = {"reset": lambda: server.reset(), "spans": lambda: list(server.spans),
                       "max_in_flight": lambda: server.max_in_flight,
                       "cpu_s": lambda: time.process_time()}  # fmt: skip
            conn.send(answers[op]())
        conn.send(None)


Endpoint = FakeOpenAIServer | _EndpointProcess


def _measure(server: Endpoint, concurrency: int, latency: float,
             work: Callable[[], ShardResult]) -> tuple[ShardResult, dict[str, Any]]:  # fmt: skip
    server.reset()
    endpoint_cpu = getattr(server, "cpu_s", None)
    start = time.monotonic()
    result = work()
    wall = time.monotonic() - start
    spans = list(server.spans)
    peak = server.max_in_flight
    requests = len(spans)
    busy = sum(end - begin for begin, end in spans)
    ideal = requests * latency / concurrency
    figures = {
        "items_in": result.report.inputs, "produced": result.report.produced, "dropped": result.report.dropped,
        "requests": requests, "peak_in_flight": peak,
        "mean_in_flight": round(busy / wall, 2) if wall else 0.0,
        "wall_s": round(wall, 2), "ideal_s": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 2) if ideal else None,
        "peak_ok": peak >= 0.9 * concurrency,
        "wall_ok": bool(ideal) and wall <= 1.5 * ideal,
        "load_average_1m": round(os.getloadavg()[0], 2),  # the machine is shared: read wall times beside it
    }  # fmt: skip
    if endpoint_cpu is not None:  # the endpoint's own CPU (twin answers, HTTP) competes for this machine's cores
        figures["endpoint_cpu_s"] = round(server.cpu_s - endpoint_cpu, 2)
    return result, figures


def run(
    latency: float, concurrency: int, toolsets: int, envs: int, *, endpoint: str = "process", envgen_only: bool = False
) -> dict[str, Any]:
    """Run the four LLM stages once against a fixed-latency endpoint and return the per-role figures.

    `endpoint`: "process" runs the endpoint in a process of its own (default), "thread" in this process.
    """
    report: dict[str, Any] = {"latency_s": latency, "max_concurrency": concurrency, "endpoint": endpoint,
                              "load_average_1m": round(os.getloadavg()[0], 2), "roles": {}}  # fmt: skip
    serve = _EndpointProcess(latency) if endpoint == "process" else FakeOpenAIServer(TwinResponder(), delay_s=latency)
    with serve as server, tempfile.TemporaryDirectory() as tmp:
        cfg: BuildConfig = load_config(None, [
            "llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model",
            f"llm.max_concurrency={concurrency}", "verify.teacher.k=1", "tdg.n_graphs=1",
        ], out=Path(tmp))  # fmt: skip
        ingest = ingest_inputs([SERVERS], cfg)
        items = list(ingest.toolsets[:toolsets])
        envgen, report["roles"]["envgen"] = _measure(server, concurrency, latency,
                                                      lambda: run_envgen(items, cfg, cfg.out))  # fmt: skip
        offline = cfg.model_copy(update={"envgen": cfg.envgen.model_copy(update={"backend": "offline"}),
                                         "out": cfg.out / "offline"})  # fmt: skip
        start = time.monotonic()
        run_envgen(items, offline, offline.out)  # same toolsets, no LLM: the CPU floor on this machine
        report["roles"]["envgen"]["offline_wall_s"] = round(time.monotonic() - start, 2)
        if envgen_only:
            close_shared_clients()
            return report
        built = list(envgen.items[:envs])
        tdg, report["roles"]["judge"] = _measure(server, concurrency, latency,
                                                  lambda: run_tdg(built, cfg, cfg.out))  # fmt: skip
        sampled = run_sample(list(tdg.items), cfg, cfg.out)
        traced = run_reconstruct(list(sampled.items), cfg, cfg.out)
        traces = list(traced.items)
        tasks, report["roles"]["writer"] = _measure(server, concurrency, latency,
                                                     lambda: run_tasks(traces, cfg, cfg.out))  # fmt: skip
        written = list(tasks.items)
        _, report["roles"]["teacher"] = _measure(server, concurrency, latency,
                                                 lambda: run_verify(written, cfg, cfg.out))  # fmt: skip
        # one conversation's turns are sequential: the twin teacher answers one turn per golden stage plus a final
        # reply, so no schedule ends before the longest conversation (reported beside the target, not instead of it)
        turns = max((len(r["trace"]["stages"]) + 1 for item in written for r in item["records"]), default=0)
        report["roles"]["teacher"]["critical_path_s"] = round(turns * latency, 2)
        close_shared_clients()
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=1.0, help="Seconds the endpoint adds to every request.")
    parser.add_argument("--concurrency", type=int, default=16, help="llm.max_concurrency.")
    parser.add_argument("--toolsets", type=int, default=48, help="Real Toucan toolsets for envgen.")
    parser.add_argument("--envs", type=int, default=12, help="Environments carried on to judge, writer, teacher.")
    parser.add_argument(
        "--endpoint",
        choices=("process", "thread"),
        default="process",
        help="Run the fake endpoint in its own process (like a real one) or in a thread of this one.",
    )
    parser.add_argument("--envgen-only", action="store_true", help="Measure envgen only (skip judge/writer/teacher).")
    args = parser.parse_args(argv)
    figures = run(args.latency, args.concurrency, args.toolsets, args.envs, endpoint=args.endpoint,
                  envgen_only=args.envgen_only)  # fmt: skip
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
