"""The same small build on a local Ray instance gives the same dataset as the local thread runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from gustforge.config import load_config
from gustforge.errors import RegistryError

pytestmark = [pytest.mark.slow, pytest.mark.prefect]


def _parquet(out: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((out / "gust").rglob("*.parquet"))]


def test_unknown_runner_lists_choices() -> None:
    from flows.runners import RUNNERS

    with pytest.raises(RegistryError, match="local"):
        RUNNERS.get("mpi")


def test_ray_runner_matches_local_runner(prefect_server: None, tmp_path: Path, samples_dir: Path) -> None:
    pytest.importorskip("prefect_ray")
    import ray

    from flows.build import run_build

    small = [str(samples_dir / "raw" / "openai_tools")]
    local = load_config(None, ["runner.shard_size=2"], out=tmp_path / "local", inputs=small)
    run_build(local)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        distributed = load_config(None, ["runner.kind=ray", "runner.shard_size=2", "runner.address=auto"],
                                  out=tmp_path / "ray", inputs=small)  # fmt: skip
        summary = run_build(distributed)
    finally:
        ray.shutdown()
    assert summary.gust_rows > 0
    assert _parquet(tmp_path / "ray") == _parquet(tmp_path / "local")
