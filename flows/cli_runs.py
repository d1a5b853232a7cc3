"""`gust runs [--out OUT]`: recent builds of a run folder with their state, config digest and row count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["runs"]


def runs(
    out: Annotated[Path, typer.Option("--out", "-o", help="Run folder (the --out of gust build / deploy).")] = Path(
        "out"
    ),
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many runs.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per run.")] = False,
) -> None:
    """Recent builds into OUT (newest first): state, config digest, GUST rows, Prefect flow run, why it failed.

    Reads OUT/runs.jsonl and OUT/manifest.json; with PREFECT_API_URL set, also the server's flow runs of builds
    into OUT, so a scheduled build that failed before writing anything shows too."""
    from flows.prefect_env import configure_prefect_environment, is_ephemeral
    from flows.runs import recent_runs, started_text

    if not out.is_dir():
        typer.echo(f"error: {out} is not a run folder", err=True)
        raise typer.Exit(2)
    configure_prefect_environment()
    rows = recent_runs(out, limit=limit, use_prefect=not is_ephemeral())
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row, sort_keys=True))
        return
    if not rows:
        typer.echo(f"no builds recorded in {out}", err=True)
        return
    typer.echo("\t".join(("started", "state", "command", "config", "rows", "flow_run", "note")))
    for row in rows:
        cells = (started_text(row["started"]), row["state"], row["command"], row["config"] or "-",
                 "-" if row["rows"] is None else str(row["rows"]), row["flow_run"] or "-",
                 " ".join((row["note"] or "").split())[:300])  # fmt: skip
        typer.echo("\t".join(cells))
