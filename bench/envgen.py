"""envgen benchmark: build every Toucan MCP server of the shared corpus offline (ingest -> refactor -> DB -> code ->
tests -> sandbox run -> repair), and report throughput, the built share and the quarantine reasons.

Run: `.venv/bin/python bench/envgen.py [--limit N] [--workers W] [--out bench_envgen.json]`; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.io import write_json  # noqa: E402
from envgen.build import build_environments  # noqa: E402
from envgen.config import EnvGenConfig  # noqa: E402
from envgen.ingest import read_toolsets  # noqa: E402

__all__ = ["main", "run"]

SERVERS = (
    Path(__file__).resolve().parents[1]
    / ".."
    / "shared"
    / "corpora"
    / "toucan"
    / "toucan_mcp_servers.remote_valid.jsonl"
)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(path: Path, *, limit: int | None, workers: int) -> dict[str, Any]:
    """Ingest and build the corpus; return the figures."""
    cfg = EnvGenConfig(sandbox_workers=workers)
    start = time.perf_counter()
    ingest = read_toolsets(path, cfg=cfg)
    toolsets = ingest.toolsets[:limit] if limit else ingest.toolsets
    ingest_s = time.perf_counter() - start
    start = time.perf_counter()
    outcome = build_environments(toolsets, cfg)
    build_s = time.perf_counter() - start
    sandbox = [e.manifest.timings.get("sandbox_s", 0.0) for e in outcome.environments]
    reasons = Counter(q.reason.split(":")[0] for q in (*ingest.quarantine, *outcome.quarantine))
    return {
        "records": ingest.report.inputs,
        "toolsets_after_ingest": len(ingest.toolsets),
        "toolsets_built_attempted": len(toolsets),
        "environments": outcome.report.produced,
        "built_pct_of_records": round(100 * outcome.report.produced / max(1, ingest.report.inputs), 1),
        "built_pct_of_toolsets": round(100 * outcome.report.produced / max(1, len(toolsets)), 1),
        "repaired": sum(1 for r in outcome.results if r.artifacts is not None and r.attempts > 1),
        "quarantined_by_reason": dict(reasons.most_common()),
        "ingest_s": round(ingest_s, 2),
        "build_s": round(build_s, 2),
        "toolsets_per_s": round(len(toolsets) / max(build_s, 1e-9), 2),
        "sandbox_validation_s_p50": round(_quantile(sandbox, 0.5), 3),
        "sandbox_validation_s_p95": round(_quantile(sandbox, 0.95), 3),
        "sandbox_validation_s_mean": round(statistics.fmean(sandbox), 3) if sandbox else 0.0,
        "workers": workers,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--path", type=Path, default=SERVERS)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    figures = run(args.path, limit=args.limit, workers=args.workers)
    if args.out:
        write_json(args.out, figures)
    sys.stdout.write(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
