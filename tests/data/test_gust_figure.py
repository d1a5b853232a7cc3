"""The statistics figure is useful on every build: title with N, and the stage funnel when the teacher did not run."""

from __future__ import annotations

import json
from pathlib import Path

from data.gust import read_funnel, render_stats_figure
from tests.data._gust_fixtures import make_record


def _report(folder: Path, stage: str, inputs: int, produced: int, dropped: dict[str, int]) -> None:
    summary = {"stage": stage, "inputs": inputs, "produced": produced, "dropped": dropped}
    lines = [{"item_id": "x", "outcome": "produced"}, {"summary": summary, "seconds": 1.0}]
    (folder / f"{stage}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_funnel_is_read_from_the_reports_and_drawn(tmp_path: Path) -> None:
    _report(tmp_path, "ingest", 10, 6, {"malformed_json": 3, "too_few_tools": 1})
    _report(tmp_path, "envgen", 6, 5, {"tests_failed": 1})
    (tmp_path / "verify.jsonl").write_text("")  # an empty report is skipped, not a crash
    funnel = read_funnel(tmp_path)
    assert [(s.stage, s.inputs, s.produced) for s in funnel] == [("ingest", 10, 6), ("envgen", 6, 5)]
    records = [make_record(1)]
    with_funnel, without = render_stats_figure(records, funnel=funnel), render_stats_figure(records)
    assert with_funnel.startswith(b"\x89PNG") and with_funnel != without
    assert render_stats_figure([], funnel=funnel).startswith(b"\x89PNG")  # 0 rows: the funnel still says why
