"""Prefect task of `gust eval gust`: a thin wrapper (one library call, the report as an artifact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from gusteval.report import run_gust_eval
from gusteval.runner import GustEvalConfig
from gustforge.llm import LLMSettings

__all__ = ["gust_eval_task"]


@task(name="gust-eval")
def gust_eval_task(data: str, out_dir: str, model: LLMSettings, cfg: GustEvalConfig, user_model: LLMSettings | None,
                   envs_dir: str | None) -> dict[str, Any]:  # fmt: skip
    summary = run_gust_eval(Path(data), Path(out_dir), model=model, cfg=cfg, user_model=user_model,
                            envs_dir=Path(envs_dir) if envs_dir else None)  # fmt: skip
    create_markdown_artifact(key="gust-eval", markdown=(Path(out_dir) / "report.md").read_text(encoding="utf-8"))
    counts = summary.tasks, summary.trials, summary.lost_trials
    get_run_logger().info("gust eval: %d tasks x %d trials, %d lost", *counts)
    return summary.model_dump(mode="json")
