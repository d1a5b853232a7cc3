"""LLM throughput benchmark: does each role keep the endpoint busy?

A local OpenAI-compatible endpoint (the test suite's `FakeOpenAIServer` answering like each role's twin) adds a
fixed latency to every request. The pipeline's own stage functions then run on real Toucan toolsets — envgen
(refactor + database + codegen), tdg (LLM judge), tasks (writer), verify (teacher) — and, per role, the endpoint
reports requests, peak and mean requests in flight, and wall time against the ideal
`requests × latency / max_concurrency`. Targets: peak ≥ 0.9 × max_concurrency and wall ≤ 1.5 × ideal. For envgen,
`offline_wall_s` is the same toolsets built offline in the same process: the sandbox/CPU floor the LLM path adds to.
For the teacher, `critical_path_s` is its longest conversation (sequential turns) × latency: a lower bound on wall.

Run: `.venv/bin/python bench/llm_throughput.py [--latency 1.0] [--concurrency 16] [--toolsets 48] [--envs 12]`;
prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
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


def _measure(server: FakeOpenAIServer, concurrency: int, latency: float,
             work: Callable[[], ShardResult]) -> tuple[ShardResult, dict[str, Any]]:  # fmt: skip
    server.reset()
    start = time.monotonic()
    result = work()
    wall = time.monotonic() - start
    spans = list(server.spans)
    requests = len(spans)
    busy = sum(end - begin for begin, end in spans)
    ideal = requests * latency / concurrency
    figures = {
        "items_in": result.report.inputs, "produced": result.report.produced, "dropped": result.report.dropped,
        "requests": requests, "peak_in_flight": server.max_in_flight,
        "mean_in_flight": round(busy / wall, 2) if wall else 0.0,
        "wall_s": round(wall, 2), "ideal_s": round(ideal, 2),
        "wall_over_ideal": round(wall / ideal, 2) if ideal else None,
        "peak_ok": server.max_in_flight >= 0.9 * concurrency,
        "wall_ok": bool(ideal) and wall <= 1.5 * ideal,
    }  # fmt: skip
    return result, figures


def run(latency: float, concurrency: int, toolsets: int, envs: int) -> dict[str, Any]:
    """Run the four LLM stages once against a fixed-latency endpoint and return the per-role figures."""
    report: dict[str, Any] = {"latency_s": latency, "max_concurrency": concurrency, "roles": {}}
    with FakeOpenAIServer(TwinResponder(), delay_s=latency) as server, tempfile.TemporaryDirectory() as tmp:
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
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=1.0, help="Seconds the endpoint adds to every request.")
    parser.add_argument("--concurrency", type=int, default=16, help="llm.max_concurrency.")
    parser.add_argument("--toolsets", type=int, default=48, help="Real Toucan toolsets for envgen.")
    parser.add_argument("--envs", type=int, default=12, help="Environments carried on to judge, writer, teacher.")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.latency, args.concurrency, args.toolsets, args.envs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
