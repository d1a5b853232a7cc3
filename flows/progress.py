"""A rich progress display for `gust build`, fed by the shard and stage log records of our Prefect tasks."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

__all__ = ["stage_progress"]

_STAGES = ("envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "export", "convert")
_SHARD = re.compile(r"^(\w+) shard (\d+): (.*)$")
_TASK_LOGGER = "prefect.task_runs"


class _ProgressHandler(logging.Handler):
    def __init__(self, progress: Progress, stage_task: int, console: Console) -> None:
        super().__init__(level=logging.INFO)
        self.progress, self.stage_task, self.console = progress, stage_task, console
        self.done: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        match = _SHARD.match(message)
        if match:
            stage, shard, report = match.groups()
            self.console.log(f"[green]✓[/] {stage} shard {shard}: {report}")
            if stage not in self.done:
                self.progress.update(self.stage_task, description=f"stage [bold]{stage}[/]")
        elif message.startswith("ingest:"):
            self.console.log(f"[green]✓[/] {message}")
        elif message.startswith("stage done:"):
            stage = message.split(":", 1)[1].strip()
            self.done.add(stage)
            self.progress.update(self.stage_task, completed=len(self.done), description=f"stage [bold]{stage}[/] done")


@contextmanager
def stage_progress(console: Console) -> Iterator[None]:
    """Show a bar over the seven stages and a line per finished shard while the build flow runs."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    logger = logging.getLogger(_TASK_LOGGER)
    with Progress(*columns, console=console, transient=False) as progress:
        handler = _ProgressHandler(progress, progress.add_task("starting Prefect", total=len(_STAGES)), console)
        previous_level = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(previous_level)
