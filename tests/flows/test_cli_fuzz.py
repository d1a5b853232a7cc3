"""Hostile input through the real CLI: `gust stage envgen` on ≥ 500 generated tool lists never crashes, accounts for
every input and executes nothing from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from envgen.ingest import read_toolsets
from tests.envgen._hostile import hostile_line, with_sentinel

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = 500
FILES = 5


def _generate(folder: Path, sentinel: Path) -> int:
    lines: list[str] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate], derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(hostile_line())
    def collect(line: str) -> None:
        lines.append(with_sentinel(line, str(sentinel)))

    collect()
    for index in range(FILES):
        (folder / f"hostile-{index}.jsonl").write_text("\n".join(lines[index::FILES]) + "\n", encoding="utf-8")
    return len(lines)


def _report(out: Path, stage: str) -> dict:
    rows = [json.loads(line) for line in (out / "reports" / f"{stage}.jsonl").read_text().splitlines()]
    return next(r for r in rows if r.get("kind", "report") == "report" and "inputs" in r)


def test_hostile_tool_lists_through_ingest(tmp_path: Path) -> None:
    """The fast half (every run): the same 500 lists through the ingest library, every line accounted for."""
    lines = _generate(tmp_path, tmp_path / "PWNED")
    result = read_toolsets(tmp_path)
    assert result.report.inputs == lines and result.report.balanced
    assert len(result.toolsets) + len(result.quarantine) == lines
    assert all(q.reason and " " not in q.reason for q in result.quarantine)  # a reason code, not a message


@pytest.mark.slow
@pytest.mark.prefect
def test_hostile_tool_lists_through_stage_envgen(tmp_path: Path) -> None:
    raw, out, sentinel = tmp_path / "raw", tmp_path / "out", tmp_path / "PWNED"
    raw.mkdir()
    lines = _generate(raw, sentinel)
    assert lines >= EXAMPLES
    env = {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect")}
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "stage", "envgen", "--only", "--from", str(raw), "--out", str(out),
                           "--set", "budgets.envgen=1.0"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    ingest = read_toolsets(raw)  # the library's own count, for comparison with what the CLI recorded
    assert ingest.report.inputs == lines and ingest.report.balanced
    quarantined = [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines() if x.strip()]
    envs = [p for p in (out / "envs").iterdir() if not p.name.startswith(".")] if (out / "envs").is_dir() else []
    # every line is a built environment or a quarantine record (ingest or envgen stage)
    assert len(envs) + len(quarantined) == lines, (len(envs), len(quarantined))
    assert not sentinel.exists(), "an injection string was executed"
    assert "quarantined at ingest" in proc.stdout
