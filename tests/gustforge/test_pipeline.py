from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from data.models import QuarantineRecord, StageReport
from gustforge import pipeline
from gustforge.config import load_config
from gustforge.errors import GustError


@given(n=st.integers(0, 500), size=st.integers(1, 100), cap=st.integers(1, 12))
def test_shards_keep_every_item_in_order(n: int, size: int, cap: int) -> None:
    items = [{"i": i} for i in range(n)]
    shards = pipeline.shard_items(items, shard_size=size, max_shards=cap)
    assert [x for shard in shards for x in shard] == items
    assert len(shards) <= cap
    assert all(shards)


def test_merge_sums_reports_and_keeps_order() -> None:
    def result(shard: int, produced: int, dropped: dict[str, int]) -> pipeline.ShardResult:
        report = StageReport(stage="tdg", inputs=produced + sum(dropped.values()), produced=produced, dropped=dropped)
        return pipeline.ShardResult(
            stage="tdg", shard=shard, items=tuple({"s": shard, "k": k} for k in range(produced)), report=report
        )

    merged = pipeline.merge_results("tdg", [result(0, 2, {"a": 1}), result(1, 1, {"a": 2, "b": 1})])
    assert merged.report == StageReport(stage="tdg", inputs=7, produced=3, dropped={"a": 3, "b": 1})
    assert [i["s"] for i in merged.items] == [0, 0, 1]


def test_budget_fails_with_reasons() -> None:
    report = StageReport(stage="envgen", inputs=10, produced=4, dropped={"tests_failed": 5, "bad_schema": 1})
    pipeline.check_budget(report, 0.6)
    with pytest.raises(GustError, match=r"envgen.*60%.*tests_failed=5"):
        pipeline.check_budget(report, 0.5)


def test_editing_one_stage_config_keeps_upstream_keys() -> None:
    base = load_config(None, [])
    edited = load_config(None, ["verify.max_tasks_per_env=3"])
    keys = {s: (pipeline.stage_config_key(s, base), pipeline.stage_config_key(s, edited)) for s in pipeline.STAGE_ORDER}
    unchanged = [s for s, (a, b) in keys.items() if a == b]
    assert unchanged == ["envgen", "tdg", "sample", "reconstruct", "tasks", "quality", "export", "convert"]
    tdg_edit = load_config(None, ["tdg.max_stages=3"])
    assert pipeline.stage_config_key("envgen", tdg_edit) == pipeline.stage_config_key("envgen", base)
    assert pipeline.stage_config_key("sample", tdg_edit) != pipeline.stage_config_key("sample", base)


def test_stage_report_file_lists_every_item(tmp_path: Path) -> None:
    quarantine = (QuarantineRecord(item_id="x", stage="tdg", reason="SchemaError", detail="bad"),)
    report = StageReport(stage="tdg", inputs=2, produced=1, dropped={"SchemaError": 1})
    merged = pipeline.ShardResult(stage="tdg", shard=-1, produced_ids=("e1",), quarantine=quarantine, report=report)
    path = pipeline.write_stage_report(tmp_path, merged)
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and '"e1"' in lines[0] and '"SchemaError"' in lines[1] and '"summary"' in lines[2]


def test_inputs_digest_changes_with_content(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_text("[]")
    before = pipeline.inputs_digest([tmp_path])
    f.write_text("[ ]")
    assert pipeline.inputs_digest([tmp_path]) != before


def test_budget_counts_failures_not_filtering_and_names_reasons() -> None:
    from data.models import StageReport
    from gustforge.errors import BudgetExceededError

    filtered = StageReport(stage="ingest", inputs=10, produced=2, dropped={"too_few_tools": 7, "malformed_json": 1})
    pipeline.check_budget(filtered, 0.1)  # 1 failure in 10: the size filter is policy
    lost = StageReport(stage="tasks", inputs=4, produced=1, dropped={"llm_unavailable": 3})
    with pytest.raises(BudgetExceededError, match="llm_unavailable=3"):
        pipeline.check_budget(lost, 0.5)


def test_build_problems_name_lost_items_and_missing_rows() -> None:
    from data.models import StageReport
    from gustforge.config import BuildConfig

    stages = {"envgen": StageReport(stage="envgen", inputs=3, produced=0, dropped={"llm_unavailable": 3})}
    problems = pipeline.build_problems(stages, 0, BuildConfig())
    assert len(problems) == 2 and "rerun" in problems[0] and "min_rows=1" in problems[1]
    ok = {"envgen": StageReport(stage="envgen", inputs=3, produced=3)}
    assert pipeline.build_problems(ok, 5, BuildConfig()) == []
