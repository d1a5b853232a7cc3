"""`gust cache`: the LLM response cache of multi-node builds.

Each node of a multi-node build keeps its own SQLite cache on local disk (`GUST_LLM_CACHE_PATH`), since SQLite must
not be written over a network filesystem; `gust cache merge` folds those files into the run's shared cache after the
build, so the next build (on any node) is answered from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
console = Console()


@app.command()
def merge(
    target: Annotated[Path, typer.Argument(help="Cache to merge into (e.g. OUT/cache/llm.sqlite); created if absent.")],
    sources: Annotated[list[Path], typer.Argument(help="Per-node cache files to copy from.")],
) -> None:
    """Copy every entry of SOURCES into TARGET (a key TARGET already holds takes the source's reply)."""
    from gustforge.errors import InputError
    from gustforge.llm.cache import cache_entries, merge_caches

    if any(source.resolve() == target.resolve() for source in sources):
        console.print(f"[bold red]error:[/] {target} is both the target and a source")
        raise typer.Exit(2)
    try:
        copied = merge_caches(target, sources)
    except InputError as exc:
        console.print(f"[bold red]error:[/] {exc} (nothing was merged)")
        raise typer.Exit(2) from exc
    console.print(f"merged {copied} entries from {len(sources)} file(s) into {target} "
                  f"({cache_entries(target)} entries now)")  # fmt: skip


@app.command()
def info(path: Annotated[Path, typer.Argument(help="A cache file.")]) -> None:
    """Print how many replies PATH holds."""
    from gustforge.errors import InputError
    from gustforge.llm.cache import cache_entries

    try:
        console.print(f"{path}: {cache_entries(path)} entries")
    except InputError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from exc
