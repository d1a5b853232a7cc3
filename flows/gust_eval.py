"""Prefect flow of `gust eval gust`; it only composes the task."""

from __future__ import annotations

from typing import Any

from prefect import flow

from gusteval.runner import GustEvalConfig
from gustforge.llm import LLMSettings
from tasks.gust_eval import gust_eval_task

__all__ = ["gust_eval_flow"]


@flow(name="gust-eval")
def gust_eval_flow(data: str, out_dir: str, model: LLMSettings, cfg: GustEvalConfig,
                   user_model: LLMSettings | None = None, envs_dir: str | None = None) -> dict[str, Any]:  # fmt: skip
    """pass^k of the model behind `model` on GUST tasks with a simulated user."""
    return gust_eval_task(data, out_dir, model, cfg, user_model, envs_dir)
