"""Sandbox latency benchmark on the tiny orders env: worker start, per-call latency, pool reuse, run_tests.

Run: `.venv/bin/python bench/sandbox.py [--calls 500] [--starts 10]`; prints one JSON object (seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from envgen.runtime import Environment
from gustforge.sandbox import SandboxPool, SandboxWorker

__all__ = ["main"]

TINY = Path(__file__).resolve().parents[1] / "tests" / "envgen" / "fixtures" / "tiny_env"


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 3),
        "p95_ms": round(1000 * ordered[int(0.95 * (len(ordered) - 1))], 3),
        "max_ms": round(1000 * ordered[-1], 3),
    }


def _timed(fn: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main(argv: list[str] | None = None) -> dict[str, object]:
    """Measure and print the figures; returns them too."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=10)
    opts = parser.parse_args(argv)
    env = Environment.load(TINY)

    def start_worker() -> None:
        with SandboxWorker() as worker:
            worker.ping()

    results: dict[str, object] = {"worker_start_to_first_reply": _summary(_timed(start_worker, opts.starts))}
    results["session_start_fresh_worker"] = _summary(_timed(lambda: env.session().close(), opts.starts))
    with SandboxWorker() as worker:
        worker.load(env.tools_source, env.initial_db)
        args = {"order_id": "ORD-1001"}
        results["worker_call_get_order"] = _summary(_timed(lambda: worker.call("get_order", args), opts.calls))
        results["worker_ping"] = _summary(_timed(worker.ping, opts.calls))
        specs = env.tool_specs()
        results["run_tests_tiny_env"] = _summary(
            _timed(lambda: worker.run_tests(env.tests_source or "", specs), max(3, opts.starts // 2))
        )
    with env.session() as session:
        results["session_call_validated"] = _summary(
            _timed(lambda: session.call("list_orders", {"customer_id": "C-1"}), opts.calls)
        )
        results["session_db_hash"] = _summary(_timed(session.db_hash, opts.calls))
    with SandboxPool(size=1) as pool:
        pool.warm()
        results["session_start_pooled_worker"] = _summary(_timed(lambda: env.session(pool=pool).close(), opts.starts))
    sys.stdout.write(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
