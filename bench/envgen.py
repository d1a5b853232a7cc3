"""envgen benchmark: build every Toucan MCP server of the shared corpus offline with the default config (the paper's
filter: 5-20 tools, <= 4 parameters) through ingest -> refactor -> DB -> code -> tests -> mutation score -> repair,
and report: behaviour-family mix, log-only share, mutation-score distribution (and kill rate per operator), record
richness (non-id fields per collection), throughput, the built share and the quarantine reasons.

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
from envgen.build import build_environments, family_map  # noqa: E402
from envgen.config import EnvGenConfig  # noqa: E402
from envgen.entities import ACTION_LOG  # noqa: E402
from envgen.ingest import read_toolsets  # noqa: E402
from envgen.refactor import refactor_toolset  # noqa: E402
from gustforge.errors import GustError  # noqa: E402

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


def _distribution(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": round(min(values), 3), "p10": round(_quantile(values, 0.1), 3),
            "median": round(statistics.median(values), 3), "mean": round(statistics.fmean(values), 3),
            "max": round(max(values), 3)}  # fmt: skip


def _behaviours(toolsets: list[Any], cfg: EnvGenConfig) -> dict[str, Any]:
    """Family mix over every tool that passes refactoring (before any quarantine of the build)."""
    mix: Counter[str] = Counter()
    for toolset in toolsets:
        try:
            mix.update(family_map(refactor_toolset(toolset, cfg)).values())
        except GustError:
            continue
    total = sum(mix.values())
    return {"tools": total, "mix": dict(mix.most_common()),
            "log_only_share": round(mix["log_only"] / max(1, total), 4)}  # fmt: skip


def _richness(envs: list[Any]) -> dict[str, Any]:
    counts = [
        sum(1 for field in next(iter(rows.values())) if field != _id_field(rows))
        for env in envs for name, rows in env.db.items()
        if name != ACTION_LOG and isinstance(rows, dict) and rows
    ]  # fmt: skip
    return {"collections": len(counts), "non_id_fields": _distribution([float(c) for c in counts]),
            "share_with_at_most_1_non_id_field": round(sum(c <= 1 for c in counts) / max(1, len(counts)), 4),
            }  # fmt: skip


def _id_field(rows: dict[str, Any]) -> str:
    key, record = next(iter(rows.items()))
    return next((f for f, v in record.items() if str(v) == key), "")


def _mutation(envs: list[Any], floor: float) -> dict[str, Any]:
    scores = [e.manifest.mutation_score for e in envs if e.manifest.mutation_score is not None]
    per_op: dict[str, list[int]] = {}
    for env in envs:
        for mutant in env.test_report.mutation.mutants if env.test_report.mutation else ():
            per_op.setdefault(mutant.operator, [0, 0])
            per_op[mutant.operator][0] += mutant.killed
            per_op[mutant.operator][1] += 1
    return {"scores": _distribution(scores), "floor": floor, "shipped_below_floor": sum(s < floor for s in scores),
            "unscored": len(envs) - len(scores),
            "kill_rate_per_operator": {op: round(k / t, 4) for op, (k, t) in sorted(per_op.items())}}  # fmt: skip


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
    envs = outcome.environments
    sandbox = [e.manifest.timings.get("sandbox_s", 0.0) for e in envs]
    shipped_tools = [f for e in envs for f in e.manifest.behaviours.values()]
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
        "behaviours_all_refactored": _behaviours(list(toolsets), cfg),
        "behaviours_shipped": dict(Counter(shipped_tools).most_common()),
        "log_only_share_shipped_tools": round(shipped_tools.count("log_only") / max(1, len(shipped_tools)), 4),
        "mutation": _mutation(envs, cfg.min_mutation_score),
        "rejected_calls": dict(sum((Counter(e.test_report.rejected_calls) for e in envs), Counter())),
        "record_richness": _richness(envs),
        "mutation_s_mean": round(statistics.fmean([e.manifest.timings.get("mutation_s", 0.0) for e in envs]), 3)
        if envs
        else 0.0,
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
