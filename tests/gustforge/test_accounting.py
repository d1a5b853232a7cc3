"""Accounting: error budgets count failures, not filtering, and name the reasons; reports list every item."""

from pathlib import Path

import pytest

from data.models import QuarantineRecord, StageReport
from gustforge.accounting import check_budget, write_stage_report
from gustforge.errors import BudgetExceededError, GustError
from gustforge.shards import ShardResult


def test_budget_fails_with_reasons() -> None:
    report = StageReport(stage="envgen", inputs=10, produced=4, dropped={"tests_failed": 5, "bad_schema": 1})
    check_budget(report, 0.6)
    with pytest.raises(GustError, match=r"envgen.*60%.*tests_failed=5"):
        check_budget(report, 0.5)


def test_stage_report_file_lists_every_item(tmp_path: Path) -> None:
    quarantine = (QuarantineRecord(item_id="x", stage="tdg", reason="SchemaError", detail="bad"),)
    report = StageReport(stage="tdg", inputs=2, produced=1, dropped={"SchemaError": 1})
    merged = ShardResult(stage="tdg", shard=-1, produced_ids=("e1",), quarantine=quarantine, report=report)
    path = write_stage_report(tmp_path, merged)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and '"e1"' in lines[0] and '"SchemaError"' in lines[1] and '"summary"' in lines[2]


def test_budget_counts_failures_not_filtering_and_names_reasons() -> None:
    filtered = StageReport(stage="ingest", inputs=10, produced=2, dropped={"too_few_tools": 7, "malformed_json": 1})
    check_budget(filtered, 0.1)  # 1 failure in 10: the size filter is policy
    lost = StageReport(stage="tasks", inputs=4, produced=1, dropped={"llm_unavailable": 3})
    with pytest.raises(BudgetExceededError, match="llm_unavailable=3"):
        check_budget(lost, 0.5)
