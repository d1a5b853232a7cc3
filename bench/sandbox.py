"""Sandbox benchmark on the tiny orders env: what each isolation layer costs, and the figures with every layer on.

Figures (seconds, reported as ms): worker start to first reply, session start (fresh and pooled worker), tool call
latency through the worker and through a validated session, `run_tests`, `db_hash`. The layer table compares, in
this same process, a worker with only the static policy (no kernel walls, seccomp, parent-side limits, privilege
drop or audit hook) against adding each wall in turn, and all of them together (the default). A fresh environment's
worker is `session_start_pooled_new_env_fresh_fork` (what builds, replay and training use).

Run: `.venv/bin/python bench/sandbox.py [--calls 500] [--starts 10]`; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]  # bench/envgen.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envgen.runtime import Environment  # noqa: E402
from gustforge.sandbox import SandboxPool, SandboxWorker  # noqa: E402
from gustforge.sandbox.walls import kernel_walls  # noqa: E402
from gustforge.sandbox.worker import SandboxLayers  # noqa: E402

__all__ = ["main"]

TINY = Path(__file__).resolve().parents[1] / "tests" / "envgen" / "fixtures" / "tiny_env"


_OFF = {"kernel_walls": False, "worker_seccomp": False, "parent_limits": False, "drop_privileges": False,
        "audit_hook": False}  # fmt: skip
_LAYERS: dict[str, SandboxLayers] = {
    "static_policy_only": SandboxLayers(**_OFF),
    "+audit_hook": SandboxLayers(**{**_OFF, "audit_hook": True}),
    "+drop_privileges": SandboxLayers(**{**_OFF, "drop_privileges": True}),
    "+worker_seccomp": SandboxLayers(**{**_OFF, "worker_seccomp": True}),
    "+parent_limits": SandboxLayers(**{**_OFF, "parent_limits": True}),
    "+kernel_walls": SandboxLayers(**{**_OFF, "kernel_walls": True}),
    "all_walls": SandboxLayers(),
}


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


def _layer_costs(env: Environment, starts: int, calls: int) -> dict[str, Any]:
    costs: dict[str, Any] = {}
    args = {"order_id": "ORD-1001"}
    for name, layers in _LAYERS.items():

        def start_worker(layers: SandboxLayers = layers) -> None:
            with SandboxWorker(validation=False, layers=layers) as worker:
                worker.ping()

        start = _summary(_timed(start_worker, starts))
        with SandboxWorker(validation=False, layers=layers) as worker:
            worker.load(env.tools_source, env.initial_db)
            call = _summary(_timed(lambda worker=worker: worker.call("get_order", args), calls))
            isolation = worker.isolation
        costs[name] = {"start": start, "call": call, "isolation": isolation}
    base = costs["static_policy_only"]
    for entry in costs.values():
        entry["start_ratio"] = round(entry["start"]["p50_ms"] / base["start"]["p50_ms"], 2)
        entry["call_ratio"] = round(entry["call"]["p50_ms"] / base["call"]["p50_ms"], 2)
    return costs


def main(argv: list[str] | None = None) -> dict[str, object]:
    """Measure and print the figures; returns them too."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=10)
    opts = parser.parse_args(argv)
    env = Environment.load(TINY)

    def start_worker(validation: bool) -> None:
        with SandboxWorker(validation=validation) as worker:
            worker.ping()

    results: dict[str, object] = {"kernel_walls": kernel_walls().reason}
    results["worker_start_to_first_reply"] = _summary(_timed(lambda: start_worker(False), opts.starts))
    results["test_worker_start_to_first_reply"] = _summary(_timed(lambda: start_worker(True), opts.starts))
    results["session_start_fresh_worker"] = _summary(_timed(lambda: env.session().close(), opts.starts))
    with SandboxWorker() as worker:
        results["isolation"] = worker.isolation
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
        results["session_start_pooled_same_env"] = _summary(_timed(lambda: env.session(pool=pool).close(), opts.starts))
        others = iter([Environment.from_parts(f"e{i}", env.schemas, {**env.initial_db, "n": i}, env.tools_source)
                       for i in range(opts.starts)])  # fmt: skip
        results["session_start_pooled_new_env_fresh_fork"] = _summary(
            _timed(lambda: next(others).session(pool=pool).close(), opts.starts)
        )
    results["layers"] = _layer_costs(env, opts.starts, opts.calls)
    sys.stdout.write(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
