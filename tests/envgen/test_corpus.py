"""Every real Toucan MCP server is built into a tested environment or quarantined with a reason, and the built
environments do what their tools say: few log-only tools, rich records, test suites that kill seeded bugs."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import pytest

from envgen.build import build_environments
from envgen.config import EnvGenConfig
from envgen.entities import ACTION_LOG
from envgen.ingest import read_toolsets
from gustforge.accounting import POLICY_REASONS

# With the paper's filter (the default), measured: 167 of 177 toolsets built, the other 10 filtered by policy
# (mostly_echo 2, too_many_required_params 8),
# log-only 5.1 % of shipped tools, 0 % thin collections, mutation median 1.0 / min 0.82 (see the README's benchmarks).
# Since issue 21 (repairs instead of one-tool rejections, behaviour held to the description): 173 of 178 built
# (mostly_echo 3, too_many_required_params 2), log-only 7.0 %, contradictions 2 of 1,600 tools.
BUILT_FLOOR_OF_TOOLSETS = 0.95
MAX_LOG_ONLY_SHARE = 0.10  # share of shipped tools that only log and echo their call
MAX_THIN_COLLECTIONS = 0.10  # share of collections with at most one non-id field
MIN_MEDIAN_MUTATION_SCORE = 0.9
MAX_CONTRADICTION_SHARE = 0.02  # tools whose behaviour breaks what the description / name promises (issue 21)
MIN_FAMILY_SWAP_KILLS = 0.99  # family-swap mutants the suites kill (every env should kill all of them)


@pytest.mark.slow
def test_toucan_servers_end_to_end(corpora_dir: Path) -> None:
    cfg = EnvGenConfig()
    ingest = read_toolsets(corpora_dir / "toucan" / "toucan_mcp_servers.remote_valid.jsonl", cfg=cfg)
    assert ingest.report.inputs == 572 and ingest.report.balanced
    outcome = build_environments(ingest.toolsets, cfg)
    assert outcome.report.balanced and outcome.report.inputs == len(ingest.toolsets)
    built = outcome.report.produced
    assert built + len(ingest.quarantine) + len(outcome.quarantine) == 572
    assert all(q.reason and q.stage in ("ingest", "envgen") for q in (*ingest.quarantine, *outcome.quarantine))
    envs = outcome.environments
    assert all(env.test_report.passed and env.test_report.cases for env in envs)
    assert len({env.env_id for env in envs}) == built
    reasons = Counter(q.reason.split(":")[0] for q in (*ingest.quarantine, *outcome.quarantine))
    families = Counter(f for env in envs for f in env.manifest.behaviours.values())
    scores = [env.manifest.mutation_score for env in envs]
    fields = [
        len(next(iter(rows.values()))) - 1
        for env in envs
        for name, rows in env.db.items()
        if name != ACTION_LOG and rows
    ]
    print(
        f"\nbuilt {built}/572 records ({built / 572:.1%}), {built}/{len(ingest.toolsets)} toolsets; "
        f"quarantined: {dict(reasons.most_common())}; families: {dict(families.most_common())}"
    )
    # deliberate filters (the paper's parameter cap, mostly-echo toolsets) are policy, not build failures
    filtered = sum(q.reason.split(":")[0] in POLICY_REASONS for q in outcome.quarantine)
    assert built / (len(ingest.toolsets) - filtered) >= BUILT_FLOOR_OF_TOOLSETS
    assert families["log_only"] / sum(families.values()) <= MAX_LOG_ONLY_SHARE
    assert sum(f <= 1 for f in fields) / len(fields) <= MAX_THIN_COLLECTIONS
    assert all(s is not None and s >= cfg.min_mutation_score for s in scores)
    assert statistics.median(scores) >= MIN_MEDIAN_MUTATION_SCORE
    contradicted = sum(len(env.manifest.contradictions) for env in envs)
    assert contradicted / sum(families.values()) <= MAX_CONTRADICTION_SHARE
    swaps = [env.manifest.family_swap for env in envs]
    assert sum(s.get("killed", 0) for s in swaps) / sum(s.get("total", 0) for s in swaps) >= MIN_FAMILY_SWAP_KILLS
