"""Accounting of a stage: reports, quarantine, error budgets and the Prefect artifacts' content.

Every stage's outcome is written the same way (`OUT/reports/<stage>.jsonl`, `OUT/work/<stage>.jsonl`) and checked
against its error budget; deliberate filtering (the policy reasons) is reported but never counted as failure.
Knows no stage package: a stage's policy is passed in by the stage table (`tasks.stage_table`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data import io
from data.models import QuarantineRecord, StageReport
from gustforge.errors import BudgetExceededError
from gustforge.shards import IngestSummary, ShardResult, Usage, add_usage, merge_results, resolve_path, save_items

if TYPE_CHECKING:  # the build config composes the stage packages' configs; this module only reads it
    from gustforge.config import BuildConfig

__all__ = [
    "POLICY_REASONS",
    "QUALITY_REASONS",
    "failure_count",
    "check_budget",
    "check_ingest_budget",
    "write_stage_report",
    "write_ingest_report",
    "write_quarantine",
    "finish_stage",
    "accounting_rows",
    "stage_markdown",
    "read_llm_usage",
    "llm_usage_markdown",
]

# Drops that are deliberate filtering, not failures: reported, but outside the error budgets.
POLICY_REASONS: frozenset[str] = frozenset({
    "too_few_tools", "too_many_tools", "duplicate_of", "duplicate", "env_cap", "teacher_failed", "unsolvable",
    "mostly_echo", "weak_tests",  # envgen quality gates (issue 9)
    "too_many_required_params",  # the paper's parameter cap (envgen.max_params)
})  # fmt: skip
# The quality stage's drops are deliberate filtering too (tdg.quality.DROP_REASONS + OPTIONAL_DROP_REASONS).
QUALITY_REASONS: frozenset[str] = frozenset({
    "undetermined_pick", "noop_write", "after_terminal_state", "conflicting_stage", "leaked_steps",
    "placeholder_value", "echo_only", "single_stage",
})  # fmt: skip


def failure_count(report: StageReport, policy: Iterable[str] = POLICY_REASONS) -> int:
    """Drops that are failures (malformed input, tool/code errors, outages), not deliberate filtering."""
    allowed = set(policy)
    return sum(count for reason, count in report.dropped.items() if reason not in allowed)


def check_budget(report: StageReport, budget: float, policy: Iterable[str] = POLICY_REASONS) -> None:
    """Raise when a stage's failures exceed its error budget (a share of its inputs); filtering is not counted.

    Raises:
        BudgetExceededError: naming the stage, the share and the top failure reasons.
    """
    if report.inputs == 0:
        return
    allowed = set(policy)
    failures = failure_count(report, allowed)
    share = failures / report.inputs
    if share > budget:
        ranked = sorted(((k, v) for k, v in report.dropped.items() if k not in allowed), key=lambda kv: -kv[1])
        reasons = ", ".join(f"{k}={v}" for k, v in ranked[:5])
        raise BudgetExceededError(
            f"stage {report.stage!r} failed on {share:.0%} of {report.inputs} inputs, over its error budget "
            f"of {budget:.0%} (top reasons: {reasons}); see reports/{report.stage}.jsonl"
        )


def check_ingest_budget(ingest: IngestSummary, cfg: BuildConfig) -> None:
    """The ingest error budget: unreadable/malformed records, not the size filter or duplicates."""
    check_budget(ingest.report, cfg.budgets.ingest)


# --------------------------------------------------------------------------------------------------- reports
def write_stage_report(out: Path, merged: ShardResult) -> Path:
    """`OUT/reports/<stage>.jsonl`: one line per produced or dropped item, then the stage summary."""
    lines: list[dict[str, Any]] = [{"item_id": i, "outcome": "produced"} for i in merged.produced_ids]
    lines += [{"outcome": "dropped", **q.model_dump(mode="json")} for q in merged.quarantine]
    lines.append({"summary": merged.report.model_dump(mode="json"), "seconds": round(merged.seconds, 3),
                  "llm": merged.llm})  # fmt: skip
    return io.write_jsonl(out / "reports" / f"{merged.stage}.jsonl", lines)


def write_ingest_report(out: Path, ingest: IngestSummary) -> Path:
    """`OUT/reports/ingest.jsonl`, in the same shape as every other stage's report."""
    produced = tuple(str(t["toolset_id"]) for t in ingest.toolsets)
    merged = ShardResult(stage="ingest", shard=-1, produced_ids=produced, quarantine=ingest.quarantine,
                         report=ingest.report)  # fmt: skip
    return write_stage_report(out, merged)


def write_quarantine(out: Path) -> Path:
    """`OUT/quarantine.jsonl`: one line per rejected toolset (provenance, stage, reason), from the ingest and
    envgen reports of this run folder."""
    records: list[QuarantineRecord] = []
    for stage in ("ingest", "envgen"):
        path = out / "reports" / f"{stage}.jsonl"
        if path.is_file():
            records += [QuarantineRecord.model_validate({k: v for k, v in line.items() if k != "outcome"})
                        for line in io.read_jsonl(path) if line.get("outcome") == "dropped"]  # fmt: skip
    return io.write_jsonl(out / "quarantine.jsonl", records)


def finish_stage(stage: str, results: Sequence[ShardResult], out: Path, budget: float,
                 policy: Iterable[str]) -> ShardResult:  # fmt: skip
    """Merge shard results, write `reports/<stage>.jsonl` and `work/<stage>.jsonl`, enforce the error budget
    (failures are the drops whose reason is outside the stage's `policy`)."""
    merged = merge_results(stage, results)
    write_stage_report(out, merged)
    save_items(out, merged)
    if stage == "envgen":
        write_quarantine(out)
    check_budget(merged.report, budget, policy)
    return merged


# --------------------------------------------------------------------------------------------------- artifacts
def read_llm_usage(out: Path) -> Usage:
    """LLM usage per role summed over the stage reports of a run folder (`reports/<stage>.jsonl`).

    For the dataset card: call it while exporting (every earlier stage has written its report by then).
    """
    total: Usage = {}
    for path in sorted((Path(out) / "reports").glob("*.jsonl")):
        for line in io.read_jsonl(path):
            if "summary" in line and isinstance(line.get("llm"), dict):
                total = add_usage(total, line["llm"])
    return total


def llm_usage_markdown(usage: Usage) -> str:
    """A markdown table of LLM usage per role (for the dataset card and stage artifacts); "" when none."""
    if not usage:
        return ""
    columns = ("requests", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens")
    lines = ["| role | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for role, counts in sorted(usage.items()):
        lines.append(f"| {role} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |")
    return "\n".join(lines)


def accounting_rows(merged: ShardResult) -> list[dict[str, Any]]:
    """Rows of the stage's accounting table artifact: produced, then dropped by reason."""
    rows: list[dict[str, Any]] = [{"outcome": "produced", "reason": "", "count": merged.report.produced}]
    rows += [{"outcome": "dropped", "reason": k, "count": v} for k, v in merged.report.dropped.items()]
    return rows


def stage_markdown(merged: ShardResult, out: Path) -> str:
    """The stage's markdown artifact: counts and links to its outputs (and the dataset card and figure)."""
    report = merged.report
    lines = [f"## {report.stage}", "", f"inputs {report.inputs} · produced {report.produced} · "
             f"dropped {sum(report.dropped.values())} · {merged.seconds:.1f} s", "",
             f"- accounting: `{out / 'reports' / (report.stage + '.jsonl')}`",
             f"- outputs: `{out / 'work' / (report.stage + '.jsonl')}`"]  # fmt: skip
    if merged.llm:
        lines += ["", "LLM usage:", "", llm_usage_markdown(merged.llm)]
    for item in merged.items:
        if "gust_dir" in item:
            gust = resolve_path(out, item["gust_dir"])
            lines += [f"- dataset: `{gust}` ({item['rows']} rows)", f"- card: `{gust / 'README.md'}`",
                      f"- statistics figure: `{gust / 'stats.png'}`"]  # fmt: skip
        if "verl_parquet" in item:
            lines.append(f"- verl RL parquet: `{resolve_path(out, item['verl_parquet'])}` ({item['rows']} rows)")
        if "verl_test_parquet" in item:
            lines.append(
                f"- verl validation parquet (held-out environments): "
                f"`{resolve_path(out, item['verl_test_parquet'])}` ({item['test_rows']} rows)"
            )
    return "\n".join(lines)
