"""Task runners by name: `--runner local|process|ray|dask` (Ray and Dask through prefect-ray / prefect-dask)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gustforge.config import RunnerConfig
from gustforge.errors import ConfigError
from gustforge.registry import Registry

__all__ = ["RUNNERS", "make_task_runner"]

RUNNERS: Registry[Callable[[RunnerConfig], Any]] = Registry("task runner")


@RUNNERS.register("local")
def _local(cfg: RunnerConfig) -> Any:
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=cfg.max_workers)


@RUNNERS.register("process")
def _process(cfg: RunnerConfig) -> Any:
    from prefect.task_runners import ProcessPoolTaskRunner

    return ProcessPoolTaskRunner(max_workers=cfg.max_workers)


@RUNNERS.register("ray")
def _ray(cfg: RunnerConfig) -> Any:
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as exc:
        raise ConfigError("--runner ray needs the ray extra: pip install 'gustforge[ray]'") from exc
    init_kwargs: dict[str, Any] = {"include_dashboard": False}
    if cfg.address is None:
        init_kwargs["num_cpus"] = cfg.max_workers
    return RayTaskRunner(address=cfg.address, init_kwargs=init_kwargs)


@RUNNERS.register("dask")
def _dask(cfg: RunnerConfig) -> Any:
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise ConfigError("--runner dask needs the dask extra: pip install 'gustforge[dask]'") from exc
    if cfg.address:
        return DaskTaskRunner(address=cfg.address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": cfg.max_workers, "threads_per_worker": 1})


def make_task_runner(cfg: RunnerConfig) -> Any:
    return RUNNERS.get(cfg.kind)(cfg)
