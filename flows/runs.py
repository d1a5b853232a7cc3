"""Recent builds of a run folder: its own history (`OUT/runs.jsonl`, `OUT/manifest.json`) joined with the Prefect
server's flow runs when one is configured, so a scheduled build that failed — even before it wrote anything — is
visible without opening Prefect (`gust runs`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gustforge.config import BuildConfig
from gustforge.manifest import RunManifest, config_digest, process_alive, read_history, read_manifest

__all__ = ["BuildRun", "recent_runs", "started_text"]

_FLOWS = ("gust-build", "gust-stage")
BuildRun = dict[str, Any]


def _local_row(manifest: RunManifest) -> BuildRun:
    state = manifest.state
    if state == "running" and process_alive(manifest.pid, manifest.host) is False:
        state = "killed"  # the process died without closing its record (SIGKILL, power loss)
    note = manifest.error or "; ".join(manifest.problems)
    if manifest.stale:
        note = (note + "; " if note else "") + f"stale: {', '.join(manifest.stale)}"
    return {"started": manifest.started_at, "state": state, "command": manifest.command,
            "config": manifest.config_digest, "rows": manifest.gust_rows, "flow_run": manifest.flow_run_id,
            "note": note}  # fmt: skip


def _local_runs(out: Path) -> list[BuildRun]:
    runs = {m.run_id: m for m in read_history(out)}
    current = read_manifest(out)
    if current is not None and current.run_id not in runs:
        runs[current.run_id] = current
    return [_local_row(m) for m in runs.values()]


def _digest(parameters: dict[str, Any]) -> str | None:
    try:
        return config_digest(BuildConfig.model_validate(parameters["cfg"]))
    except (KeyError, ValidationError):
        return None


def _prefect_runs(out: Path, limit: int) -> list[BuildRun]:
    """Flow runs of the build and stage flows whose config writes into `out`, newest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    started = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(not_any_=[StateType.SCHEDULED])))
    with get_client(sync_client=True) as client:  # a schedule keeps an hour of future runs: not builds yet
        flow_runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=list(_FLOWS))),
                                          flow_run_filter=started, sort=FlowRunSort.START_TIME_DESC,
                                          limit=limit * 5)  # fmt: skip
    rows = []
    for run in flow_runs:
        cfg = run.parameters.get("cfg") or {}
        if not isinstance(cfg, dict) or Path(str(cfg.get("out", ""))).resolve() != out.resolve():
            continue
        state = run.state
        if state is None:
            continue
        started = run.start_time or run.expected_start_time
        rows.append({"started": started.timestamp() if started else None, "state": state.name.lower(),
                     "command": "build" if run.name and "stage" not in run.name else "stage",
                     "config": _digest(run.parameters), "rows": None, "flow_run": str(run.id),
                     "note": (state.message or "") if state.is_failed() or state.is_crashed() else ""})  # fmt: skip
    return rows


def recent_runs(out: Path, *, limit: int = 10, use_prefect: bool = False) -> list[BuildRun]:
    """The folder's builds, newest first: local records, with the Prefect server's state where one knows the run
    (its state wins: `crashed`, `cancelled`), and server-only runs (failed before recording anything)."""
    local = _local_runs(out)
    by_flow_run = {row["flow_run"]: row for row in local if row["flow_run"]}
    merged = list(local)
    if use_prefect:
        for row in _prefect_runs(out, limit):
            mine = by_flow_run.get(row["flow_run"])
            if mine is None:
                merged.append(row)
            elif row["state"] not in ("running", "completed") or mine["state"] == "killed":
                mine["state"] = row["state"]
                mine["note"] = mine["note"] or row["note"]
    merged.sort(key=lambda row: row["started"] or 0.0, reverse=True)
    return merged[:limit]


def started_text(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"
