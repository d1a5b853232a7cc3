"""A rich progress display for `gust build`, fed by the shard and stage log records of our Prefect tasks."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tasks.stage_table import STAGE_ORDER

__all__ = ["stage_progress", "StageTracker"]

_SHARD = re.compile(r"^(\w+) shard (\d+): (.*)$")
_START = re.compile(r"^stage start: (\w+): (\d+) items in (\d+) shards?$")
_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")  # shard lines come from tasks, stage starts from the flow


class StageTracker:
    """What this run really did per stage: wall seconds since the previous stage ended, and which stages were
    served from the cache (their shard tasks logged nothing because they did not run)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last = self.started
        self.timings: dict[str, float] = {}
        self.ran: set[str] = set()
        self.done: list[str] = []

    @property
    def cached(self) -> set[str]:
        """Stages whose work came from the stage cache (ingest: its task logged nothing before envgen ended)."""
        cached = {stage for stage in self.done if stage not in self.ran and stage != "ingest"}
        return cached | ({"ingest"} if self.done and "ingest" not in self.ran else set())

    def shard(self, stage: str) -> None:
        self.ran.add(stage)

    def finished(self, stage: str) -> None:
        now = time.monotonic()
        self.timings[stage] = now - self.last
        self.last = now
        self.done.append(stage)


class _ProgressHandler(logging.Handler):
    def __init__(self, progress: Progress, tasks: tuple[int, int], console: Console, tracker: StageTracker) -> None:
        super().__init__(level=logging.INFO)
        self.progress, self.console, self.tracker = progress, console, tracker
        self.stage_task, self.shard_task = tasks

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        start = _START.match(message)
        if start:  # the running stage is named at once, with a bar over its shards (ETA from finished shards)
            stage, items, shards = start.groups()
            self.progress.update(self.stage_task, description=f"stage [bold]{escape(stage)}[/] running")
            self.progress.reset(self.shard_task, total=int(shards) or None, visible=True,
                                description=f"  {escape(stage)}: {items} items, shards done")  # fmt: skip
            return
        if " re-runs: " in message:  # a cache hit not served (outputs changed on disk, bad replies, outage)
            self._line(message)
            return
        match = _SHARD.match(message)
        if match:
            stage, shard, report = match.groups()
            self.tracker.shard(stage)
            self._line(f"{stage} shard {shard}: {_shard_text(record) or report}")
            self.progress.update(self.stage_task, description=f"stage [bold]{escape(stage)}[/]")
            self.progress.advance(self.shard_task, 1)
        elif message.startswith("ingest read:"):
            self.tracker.ran.add("ingest")
        elif message.startswith("ingest:"):
            self.tracker.finished("ingest")
            self._line(message)
        elif message.startswith("stage done:"):
            stage = message.split(":", 1)[1].strip()
            self.tracker.finished(stage)
            marker = "" if stage in self.tracker.ran else " (cached)"
            if marker:
                self._line(f"{stage}: cached")
            done = len([s for s in self.tracker.done if s != "ingest"])
            self.progress.update(self.stage_task, completed=done, description=f"stage [bold]{escape(stage)}[/] done")

    def _line(self, text: str) -> None:
        """One unwrapped log line: time, check mark, text (no source path column)."""
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] [green]✓[/] {escape(text)}", soft_wrap=True)


def _shard_text(record: logging.LogRecord) -> str | None:
    """`40 in, 39 produced, dropped tool_error=1` from the shard record's arguments (not the dict repr)."""
    args = record.args
    if not isinstance(args, tuple) or len(args) != 5 or not isinstance(args[4], dict | str):
        return None
    dropped = args[4] if isinstance(args[4], dict) else {}
    ranked = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    return f"{args[2]} in, {args[3]} produced, dropped {', '.join(f'{k}={v}' for k, v in ranked) or 'none'}"


@contextmanager
def stage_progress(console: Console) -> Iterator[StageTracker]:
    """Show a bar over the seven stages and a line per finished shard while the build flow runs."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())  # fmt: skip
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    with Progress(*columns, console=console, transient=False) as progress:
        tracker = StageTracker()
        tasks = (progress.add_task("starting Prefect", total=len(STAGE_ORDER)),
                 progress.add_task("", total=None, visible=False))  # fmt: skip
        handler = _ProgressHandler(progress, tasks, console, tracker)
        previous_levels = [logger.level for logger in loggers]
        for logger in loggers:
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
        try:
            yield tracker
        finally:
            for logger, level in zip(loggers, previous_levels, strict=True):
                logger.removeHandler(handler)
                logger.setLevel(level)
