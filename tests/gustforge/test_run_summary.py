"""The run summary names why a build must exit non-zero."""

from typing import Any

from data.models import StageReport
from gustforge.config import BuildConfig
from gustforge.run_summary import build_problems


def test_build_problems_name_lost_items_and_missing_rows() -> None:
    stages = {"envgen": StageReport(stage="envgen", inputs=3, produced=0, dropped={"llm_unavailable": 3})}
    problems = build_problems(stages, 0, BuildConfig())
    assert len(problems) == 2 and "rerun" in problems[0] and "min_rows=1" in problems[1]
    ok = {"envgen": StageReport(stage="envgen", inputs=3, produced=3)}
    assert build_problems(ok, 5, BuildConfig()) == []


def _verify(passed: int, not_run: int, failed: int) -> Any:
    from gustforge.shards import ShardResult

    records = [{"teacher_status": "passed"}] * passed + [{"teacher_status": "not_run"}] * not_run
    dropped = {"teacher_failed": failed} if failed else {}
    report = StageReport(stage="verify", inputs=passed + not_run + failed, produced=passed + not_run, dropped=dropped)
    return ShardResult(stage="verify", shard=-1, items=({"records": records},), report=report)


def test_teacher_status_says_not_run_or_ran_with_solved_counts_zero_included(tmp_path) -> None:
    from gustforge.run_summary import teacher_line, write_run_summary

    cfg = BuildConfig(out=tmp_path, min_rows=0)
    order = ("verify",)
    assert teacher_line(write_run_summary(tmp_path, None, [_verify(0, 5, 0)], cfg, order)) == "not run"
    none_solved = write_run_summary(tmp_path, None, [_verify(0, 0, 4)], cfg, order)
    assert none_solved.teacher == "ran" and teacher_line(none_solved) == "ran: 0 of 4 tasks solved"
    some = write_run_summary(tmp_path, None, [_verify(3, 0, 2)], cfg, order)
    assert (some.teacher_attempted, some.teacher_solved) == (5, 3)
