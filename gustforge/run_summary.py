"""`OUT/run_summary.json`: what a whole build produced, dropped, spent, and why it must exit non-zero."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from data import io
from data.models import StageReport, StrictModel
from gustforge.errors import UNAVAILABLE_REASON
from gustforge.shards import IngestSummary, ShardResult, Usage, sum_usage

if TYPE_CHECKING:  # the build config composes the stage packages' configs; this module only reads it
    from gustforge.config import BuildConfig

__all__ = ["RunSummary", "build_problems", "stage_reports", "teacher_line", "write_run_summary"]


class RunSummary(StrictModel):
    out: str
    stages: dict[str, StageReport]
    seconds: dict[str, float]
    gust_rows: int
    gust_dir: str | None
    teacher: str = Field(description="'ran' (some teacher call answered) or 'not run'.")
    teacher_attempted: int | None = Field(
        default=None, description="Tasks the teacher answered (solved or not); None when verify did not run."
    )
    teacher_solved: int | None = Field(default=None, description="Of those, tasks it solved (0 included).")
    llm: Usage = Field(default_factory=dict, description="LLM requests/tokens/retries/cache hits per role, this run.")
    llm_outputs: Usage = Field(
        default_factory=dict, description="LLM usage that produced the outputs (cached shards keep their first cost)."
    )
    problems: tuple[str, ...] = Field(default=(), description="Why the build must exit non-zero; empty = success.")


def build_problems(stages: Mapping[str, StageReport], gust_rows: int, cfg: BuildConfig, *,
                   check_rows: bool = True) -> list[str]:  # fmt: skip
    """Reasons a finished build failed: too few rows (when export ran), items lost to an unreachable endpoint or
    the token budget."""
    problems: list[str] = []
    unavailable = {stage: r.dropped.get(UNAVAILABLE_REASON, 0) for stage, r in stages.items()}
    lost = {stage: n for stage, n in unavailable.items() if n}
    if lost:
        where = ", ".join(f"{stage}={n}" for stage, n in lost.items())
        problems.append(f"{sum(lost.values())} item(s) lost to an unreachable LLM endpoint or the token budget "
                        f"(llm_unavailable: {where}); rerun the same command to resume")  # fmt: skip
    if check_rows and gust_rows < cfg.min_rows:
        dropped = Counter[str]()
        for report in stages.values():
            dropped.update(report.dropped)
        top = ", ".join(f"{k}={v}" for k, v in dropped.most_common(5)) or "no input items"
        problems.append(f"the build produced {gust_rows} GUST row(s), fewer than min_rows={cfg.min_rows} "
                        f"(top drop reasons: {top})")  # fmt: skip
    return problems


def _teacher_counts(merged: Sequence[ShardResult]) -> tuple[int, int] | None:
    """(answered, solved) by the teacher in this run's verify stage; failures are its `teacher_failed` drops."""
    verify = next((m for m in merged if m.stage == "verify"), None)
    if verify is None:
        return None
    solved = sum(1 for item in verify.items for record in item.get("records", [])
                 if record.get("teacher_status") == "passed")  # fmt: skip
    return solved + verify.report.dropped.get("teacher_failed", 0), solved


def teacher_line(summary: RunSummary) -> str:
    """`not run`, or `ran: S of N tasks solved` (zero included)."""
    if summary.teacher_attempted is None or summary.teacher_solved is None:
        return summary.teacher
    if summary.teacher_attempted == 0:
        return "not run"
    return f"ran: {summary.teacher_solved} of {summary.teacher_attempted} tasks solved"


def _saved_report(out: Path, stage: str) -> StageReport | None:
    path = out / "reports" / f"{stage}.jsonl"
    if not path.is_file():
        return None
    summaries = [line["summary"] for line in io.read_jsonl(path) if "summary" in line]
    return StageReport.model_validate(summaries[-1]) if summaries else None


def stage_reports(out: Path, ingest: IngestSummary | None, merged: Sequence[ShardResult],
                  order: Sequence[str]) -> dict[str, StageReport]:  # fmt: skip
    """Every stage's report in pipeline order: this run's, else the one saved in `OUT/reports/` by an earlier
    run (`gust stage` runs only part of the pipeline)."""
    ran = {m.stage: m.report for m in merged}
    if ingest is not None:
        ran["ingest"] = ingest.report
    reports: dict[str, StageReport] = {}
    for stage in ("ingest", *order):
        report = ran.get(stage) or _saved_report(out, stage)
        if report is not None:
            reports[stage] = report
    return reports


def write_run_summary(out: Path, ingest: IngestSummary | None, merged: Sequence[ShardResult], cfg: BuildConfig,
                      order: Sequence[str]) -> RunSummary:  # fmt: skip
    """`OUT/run_summary.json`: counts per stage and outcome, stage wall times, LLM usage, where the dataset is,
    and the problems that make the build exit non-zero; `config.json`, the effective config."""
    from gustforge.llm import shared_usage

    stages = stage_reports(out, ingest, merged, order)
    export = next((m for m in merged if m.stage == "export"), None)
    export_item = export.items[0] if export and export.items else {}
    rows = int(export_item.get("rows", 0))
    counts = _teacher_counts(merged)
    ran = bool(counts[0]) if counts is not None else bool(export_item.get("teacher_ran"))
    summary = RunSummary(
        out=str(out),
        stages=stages,
        seconds={m.stage: round(m.seconds, 3) for m in merged},
        gust_rows=rows,
        gust_dir=export_item.get("gust_dir"),
        teacher="ran" if ran else "not run",
        teacher_attempted=counts[0] if counts is not None else None,
        teacher_solved=counts[1] if counts is not None else None,
        llm={role: stats.as_dict() for role, stats in shared_usage().items()},
        llm_outputs=sum_usage(m.llm for m in merged),
        problems=tuple(build_problems(stages, rows, cfg, check_rows=export is not None)),
    )
    io.write_json(out / "run_summary.json", summary)
    io.write_json(out / "config.json", cfg)  # the effective config, saved with every run
    return summary
