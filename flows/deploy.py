"""Scheduled builds: `serve` (a long-running local process) or a deployment on a `process` work pool.

Both reference the build flow by its module path (`flows.build.build_flow`) in the installed package, never by a
script path: running `flows/build.py` as a script puts `flows/` first on `sys.path`, where `flows/toucan.py`
shadows the `toucan` package (the quality stage then fails with `'toucan' is not a package`), and Prefect's
parameter model of a script-loaded flow cannot resolve `BuildConfig` (`Build_FlowModel is not fully defined`).
Paths in the config are made absolute (a worker runs in another folder), the stage cache goes to
`OUT/.prefect-results` as for `gust build`, and a deployment runs one build at a time (concurrency limit 1: a run
that fires while the previous one still builds waits for it instead of being refused by the run-folder lock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from prefect.deployments.runner import EntrypointType

from flows.build import build_flow
from gustforge.config import BuildConfig

__all__ = ["register_deployment", "serve_build", "deployment_parameters", "deployment_env"]

_CONCURRENCY = 1


def _absolute(cfg: BuildConfig) -> BuildConfig:
    return cfg.model_copy(update={"out": cfg.out.resolve(), "inputs": tuple(Path(p).resolve() for p in cfg.inputs)})


def deployment_parameters(cfg: BuildConfig) -> dict[str, Any]:
    return {"cfg": _absolute(cfg).model_dump(mode="json")}


def deployment_env(cfg: BuildConfig) -> dict[str, str]:
    """Environment of a worker's flow-run process: the stage cache under the run folder, offline defaults."""
    from flows.prefect_env import prefect_defaults

    return {**prefect_defaults(), "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(cfg.out.resolve() / ".prefect-results")}


def serve_build(cfg: BuildConfig, *, name: str, cron: str) -> None:
    """Block and run `gust build` on the schedule from this process (Prefect `serve`)."""
    build_flow.serve(name=name, cron=cron, parameters=deployment_parameters(cfg), tags=["gust"],
                     entrypoint_type=EntrypointType.MODULE_PATH, global_limit=_CONCURRENCY)  # fmt: skip


def register_deployment(cfg: BuildConfig, *, name: str, cron: str, work_pool: str | None = None) -> UUID:
    """Register (do not run) a scheduled deployment of the build flow; returns its id.

    With `work_pool`, a `prefect worker start --pool` process runs it (the package must be importable there).
    Without, it is registered for a `serve` process (`gust deploy --serve`).
    """
    common: dict[str, Any] = {"name": name, "cron": cron, "parameters": deployment_parameters(cfg), "tags": ["gust"],
                              "entrypoint_type": EntrypointType.MODULE_PATH, "concurrency_limit": _CONCURRENCY}
    if work_pool is None:
        return build_flow.to_deployment(**common).apply()
    return build_flow.deploy(**common, work_pool_name=work_pool, build=False, push=False, print_next_steps=False,
                             job_variables={"env": deployment_env(cfg)})  # fmt: skip
