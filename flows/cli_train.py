"""`gust train`: compose, validate and (unless --dry-run) launch a verl training run.

One callback, no subcommands, so the lead can mount it with ``app.add_typer(cli_train.app, name="train")`` and
``gust train --algo slca --dry-run [key=value ...]`` works. torch/verl are imported lazily (only `trainer/`
imports them), so ``gust --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(
    help="Train with verl: slca | tara | slca_tara | toolpo | grpo (Hydra configs in trainer/configs).",
    add_completion=False,
)


@app.callback(invoke_without_command=True)
def train(
    algo: Annotated[str, typer.Option("--algo", help="slca | tara | slca_tara | toolpo | grpo")],
    data: Annotated[Path | None, typer.Option("--data", help="verl RL parquet (default: bundled sample)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="HF model dir or hub id (default: placeholder)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print and validate the config; do not train.")] = False,
    overrides: Annotated[list[str] | None, typer.Argument(help="Hydra overrides, e.g. trainer.nnodes=1")] = None,
) -> None:
    """Compose trainer/configs/<algo>.yaml on verl's ppo_trainer, validate it, then launch (or print it)."""
    from omegaconf import OmegaConf

    from gustforge.errors import ConfigError
    from trainer.launch import compose_config, launch, validate_training_config

    if data is not None and not data.is_file():
        typer.echo(f"error: --data {data} does not exist (build one with `gust build`: out/verl/train.parquet)",
                   err=True)  # fmt: skip
        raise typer.Exit(code=2)
    try:
        cfg = compose_config(algo, data=data, model=model, overrides=overrides or [])
        if not dry_run:
            launch(cfg)
            return
        report = validate_training_config(cfg)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    typer.echo(OmegaConf.to_yaml(cfg))
    for missing in report.missing_files:
        typer.echo(f"note: data file not found (would be used): {missing}", err=True)
    typer.echo(f"config OK: algo={report.algo} reward_layout={report.reward_layout} (validated with verl)", err=True)
