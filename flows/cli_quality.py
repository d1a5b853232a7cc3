"""`gust quality OUT`: measure a built run folder's tasks (tdg.quality) and record the result.

Writes `OUT/reports/quality.json`, the quality table of the dataset card and the quality panel of the statistics
figure, and prints every metric against its target. Measures only: the build's `quality` stage is what drops tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["quality"]

console = Console()


def quality(
    out: Annotated[Path, typer.Argument(help="A `gust build` run folder (holding gust/ and envs/).")],
    overrides: Annotated[list[str] | None, typer.Option("--set", help="quality.KEY=VALUE (repeat).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a target is missed.")] = False,
) -> None:
    """Measure OUT's tasks: reports/quality.json, the card's quality table and the figure's quality panel."""
    from data.gust import read_gust, update_quality
    from data.io import write_json
    from gustforge.config import load_config
    from gustforge.errors import GustError
    from tdg.quality import assess, load_env_schemas

    gust_dir, envs_dir = out / "gust", out / "envs"
    if not gust_dir.is_dir() or not envs_dir.is_dir():
        console.print(f"[bold red]error:[/] {out} has no gust/ and envs/ folders; run `gust build --out {out}` first")
        raise typer.Exit(2)
    try:
        cfg = load_config(None, overrides, out=out).quality
        records = read_gust(gust_dir)
    except GustError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    schemas, mutation = {}, {}
    for env_dir in sorted(p for p in envs_dir.iterdir() if (p / "schemas.json").is_file()):
        schemas[env_dir.name], score = load_env_schemas(env_dir)
        if score is not None:
            mutation[env_dir.name] = score
    outcome = assess(records, schemas, cfg, drop=False, mutation_scores=mutation)
    report = _with_world(outcome.quality, out, records)
    if cfg.enabled and cfg.reward_probes:
        from trainer.rewards.probes import margin_summary, probe_records

        probed = probe_records(records, schemas, {env: envs_dir / env for env in schemas})
        report = report.model_copy(update={"probes": margin_summary(probed)})
    from envgen.fidelity import run_fidelity  # behaviour/description contradictions, family-swap kills (issue 21)

    report = report.model_copy(update={"dataset": {**report.dataset, **run_fidelity(envs_dir)}})
    previous = out / "reports" / "quality.json"
    if previous.is_file():  # keep what the build's quality stage measured before its drops
        earlier = json.loads(previous.read_text(encoding="utf-8"))
        report = report.model_copy(update={"candidates": earlier.get("candidates"),
                                           "dropped": earlier.get("dropped") or {}})  # fmt: skip
    write_json(previous, report)
    update_quality(gust_dir, records, report.model_dump(mode="json"))
    _print(report.dataset, report.targets, report.embedder, previous)
    _print_probes(report.probes)
    if strict and not all(row["met"] for row in report.targets):
        raise typer.Exit(1)


def _with_world(report, out: Path, records):  # noqa: ANN001, ANN202 (QualityReport, TaskRecords)
    """The report plus `envgen.valuestats` (does the world fit its domain?) in its dataset metrics and targets."""
    from envgen.valuestats import WORLD_TARGETS, world_metrics
    from tdg.quality import target_rows

    world = world_metrics(out, records)
    dataset = {**report.dataset, **world}
    return report.model_copy(update={"dataset": dataset, "targets": report.targets + target_rows(world, WORLD_TARGETS)})


def _print(dataset: dict, targets: list[dict], embedder: str, path: Path) -> None:
    table = Table(title=f"gust quality → {path}")
    for column in ("metric", "value", "target", "met"):
        table.add_column(column)
    shown = {row["metric"] for row in targets}
    for row in targets:
        table.add_row(row["metric"], str(row["value"]), row["target"], "yes" if row["met"] else "[red]NO[/]")
    for key, value in dataset.items():
        if key not in shown and isinstance(value, int | float):
            table.add_row(key, str(value), "", "")
    console.print(table)
    console.print(f"near-duplicates: {embedder}; stages per task: {dataset['stages_distribution']}; "
                  f"calls per task: {dataset['calls_distribution']}")  # fmt: skip


def _print_probes(probes: dict) -> None:
    """Gold minus probe per signal: the smallest margin and the share of tasks where gold is strictly above (the
    mean is in quality.json)."""
    if not probes:
        return
    signals = sorted({signal for margins in probes.values() for signal in margins})
    table = Table(title="reward probes: min(gold − probe), share of tasks where gold is strictly above")
    table.add_column("probe")
    for signal in signals:
        table.add_column(signal)
    for probe, margins in probes.items():
        cells = [f"{m['min']:+.2f} {m['below']:.0%}" if (m := margins.get(sig)) else ""
                 for sig in signals]  # fmt: skip
        table.add_row(probe, *cells)
    console.print(table)
