"""The `gust train` sub-app mounted as in the real `gust` CLI, for CliRunner tests."""

from __future__ import annotations

import typer

from flows.cli_train import app


def gust_with_train() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(app, name="train")

    @root.command()
    def version() -> None:  # a second command, as in the real `gust` app
        pass

    return root
