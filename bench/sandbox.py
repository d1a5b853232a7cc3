"""Sandbox benchmark on the tiny orders env: what each isolation layer costs, and the figures with every layer on.

Figures (seconds, reported as ms): worker start to first reply, session start (fresh and pooled worker), tool call
latency through the worker and through a validated session, `run_tests`, `db_hash`. The layer table compares, in
this same process, a worker with only the static policy (no namespaces, no privilege drop, no audit hook) against
adding each second-layer wall in turn, and all of them together (the default).

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
from gustforge.sandbox.worker import CHILD_SCRIPT, namespace_prefix  # noqa: E402

__all__ = ["main"]

TINY = Path(__file__).resolve().parents[1] / "tests" / "envgen" / "fixtures" / "tiny_env"


class _LayeredWorker(SandboxWorker):
    """A worker with chosen second-layer walls (bench only; the project always runs every wall)."""

    def __init__(self, *, namespaces: bool, drop_privileges: bool, audit_hook: bool) -> None:
        self._layers = {"drop_privileges": drop_privileges, "audit_hook": audit_hook}
        self._namespaces = namespaces
        super().__init__(validation=False)

    def _settings(self) -> dict[str, Any]:
        return {**super()._settings(), "layers": self._layers}

    def _command(self) -> list[str]:
        prefix = namespace_prefix()[0] if self._namespaces else ()
        return [*prefix, sys.executable, "-s", "-P", "-B", str(CHILD_SCRIPT), json.dumps(self._settings())]


_LAYERS: dict[str, dict[str, bool]] = {
    "static_policy_only": {"namespaces": False, "drop_privileges": False, "audit_hook": False},
    "+audit_hook": {"namespaces": False, "drop_privileges": False, "audit_hook": True},
    "+drop_privileges": {"namespaces": False, "drop_privileges": True, "audit_hook": False},
    "+namespaces": {"namespaces": True, "drop_privileges": False, "audit_hook": False},
    "all_layers": {"namespaces": True, "drop_privileges": True, "audit_hook": True},
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

        def start_worker(layers: dict[str, bool] = layers) -> None:
            with _LayeredWorker(**layers) as worker:
                worker.ping()

        start = _summary(_timed(start_worker, starts))
        with _LayeredWorker(**layers) as worker:
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

    results: dict[str, object] = {"namespaces": namespace_prefix()[1]}
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
