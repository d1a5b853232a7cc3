"""Scheduled builds: `serve` (a long-running local process) or a deployment on a `process` work pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from flows.build import build_flow
from gustforge.config import BuildConfig

__all__ = ["register_deployment", "serve_build", "deployment_parameters"]

_REPO_ROOT = Path(__file__).resolve().parents[1]


def deployment_parameters(cfg: BuildConfig) -> dict[str, Any]:
    return {"cfg": cfg.model_dump(mode="json")}


def serve_build(cfg: BuildConfig, *, name: str, cron: str) -> None:
    """Block and run `gust build` on the schedule from this process (Prefect `serve`)."""
    build_flow.serve(name=name, cron=cron, parameters=deployment_parameters(cfg), tags=["gust"])


def register_deployment(cfg: BuildConfig, *, name: str, cron: str, work_pool: str | None = None) -> UUID:
    """Register (do not run) a scheduled deployment of the build flow; returns its id.

    With `work_pool`, the deployment pulls this checkout as its code source, for `prefect worker start --pool`.
    Without, it is registered for a `serve` process (`gust deploy --serve`).
    """
    if work_pool is None:
        deployment = build_flow.to_deployment(name=name, cron=cron, parameters=deployment_parameters(cfg),
                                              tags=["gust"])  # fmt: skip
        return deployment.apply()
    source = build_flow.from_source(source=str(_REPO_ROOT), entrypoint="flows/build.py:build_flow")
    return source.deploy(name=name, work_pool_name=work_pool, cron=cron, parameters=deployment_parameters(cfg),
                         tags=["gust"], build=False, push=False)  # fmt: skip
