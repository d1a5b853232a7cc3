"""`gust eval gust`: pass^k on GUST tasks with a simulated user (mounted under `gust eval` by flows/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.prefect_env import configure_prefect_environment

__all__ = ["gust"]


def gust(
    data: Annotated[Path, typer.Option("--data", help="GUST export (OUT/gust or a shard) or verl parquet (OUT/verl).")],
    endpoint: Annotated[str, typer.Option("--endpoint", help="The agent's OpenAI-compatible base URL (…/v1).")],
    model: Annotated[str | None, typer.Option("--model", help="Served model name (default: first listed).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("out/gust-eval"),
    user: Annotated[str, typer.Option("--user", help="Simulated user: offline | llm.")] = "offline",
    user_endpoint: Annotated[str | None, typer.Option(help="The LLM user's base URL (--user llm).")] = None,
    user_model: Annotated[str | None, typer.Option(help="The LLM user's model.")] = None,
    trials: Annotated[int, typer.Option("--trials", "-k", help="Trials per task: pass^1 … pass^k.")] = 4,
    envs: Annotated[Path | None, typer.Option(help="Environments folder (default: OUT/envs beside OUT/gust).")] = None,
    max_turns: Annotated[int, typer.Option(help="Agent generations per trial.")] = 30,
    temperature: Annotated[float, typer.Option(help="Agent sampling temperature.")] = 0.0,
    concurrency: Annotated[int, typer.Option(help="Trials (sandbox workers) in flight.")] = 4,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N tasks.")] = None,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
) -> None:
    """Run the agent on each task's environment with a simulated user, k seeded trials; report pass^k."""
    from gusteval.runner import GustEvalConfig
    from gusteval.user_sim import USER_SIMULATORS
    from gustforge.errors import GustError
    from gustforge.llm import LLMSettings

    if not data.exists():
        raise _fail(f"evaluation data not found: {data}")
    if user not in USER_SIMULATORS:
        raise _fail(f"--user must be one of {USER_SIMULATORS.names()}")
    if user == "llm" and not user_endpoint:
        raise _fail("--user llm needs --user-endpoint")
    out.mkdir(parents=True, exist_ok=True)
    settings = LLMSettings(backend="openai", base_url=endpoint, model=model, max_concurrency=concurrency,
                           temperature=temperature, cache_path=out / "llm-cache.sqlite")  # fmt: skip
    user_settings = None
    if user == "llm":
        user_settings = LLMSettings(backend="openai", base_url=user_endpoint, model=user_model,
                                    max_concurrency=concurrency, cache_path=out / "user-cache.sqlite")  # fmt: skip
    cfg = GustEvalConfig(trials=trials, max_turns=max_turns, temperature=temperature, user=user,
                         concurrency=concurrency, limit=limit, seed=seed)  # fmt: skip
    configure_prefect_environment(out)
    from flows.gust_eval import gust_eval_flow

    try:
        summary = gust_eval_flow(str(data.resolve()), str(out.resolve()), settings, cfg, user_settings,
                                 str(envs.resolve()) if envs else None)  # fmt: skip
    except GustError as exc:
        raise _fail(str(exc)) from exc
    typer.echo((out / "report.md").read_text(encoding="utf-8"))
    if summary["lost_trials"] or summary["incomplete_tasks"] or not summary["tasks"]:
        typer.echo(f"{summary['lost_trials']} trials lost, {summary['incomplete_tasks']} tasks incomplete; "
                   "rerun to retry them", err=True)  # fmt: skip
        raise typer.Exit(1)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)
