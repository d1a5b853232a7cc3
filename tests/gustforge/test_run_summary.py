"""The run summary names why a build must exit non-zero."""

from data.models import StageReport
from gustforge.config import BuildConfig
from gustforge.run_summary import build_problems


def test_build_problems_name_lost_items_and_missing_rows() -> None:
    stages = {"envgen": StageReport(stage="envgen", inputs=3, produced=0, dropped={"llm_unavailable": 3})}
    problems = build_problems(stages, 0, BuildConfig())
    assert len(problems) == 2 and "rerun" in problems[0] and "min_rows=1" in problems[1]
    ok = {"envgen": StageReport(stage="envgen", inputs=3, produced=3)}
    assert build_problems(ok, 5, BuildConfig()) == []
