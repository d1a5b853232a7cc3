"""`gust deploy` registers a scheduled deployment of the build flow; checked through the Prefect API."""

from __future__ import annotations

from pathlib import Path

import pytest

from gustforge.config import load_config

pytestmark = [pytest.mark.prefect, pytest.mark.slow]


def test_registered_deployment_has_schedule_and_parameters(prefect_server: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from flows.deploy import register_deployment

    cfg = load_config(None, ["tdg.n_graphs=2"], out=tmp_path / "nightly")
    deployment_id = register_deployment(cfg, name="nightly-test", cron="0 3 * * *")
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("gust-build/nightly-test")
        assert deployment.id == deployment_id
        assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]
        assert deployment.parameters["cfg"]["tdg"]["n_graphs"] == 2
        run = client.create_flow_run_from_deployment(deployment.id)
        assert run.state is not None and run.state.is_scheduled()


def test_cli_register_mode(prefect_server: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from typer.testing import CliRunner

    from flows.cli import app

    result = CliRunner().invoke(app, ["deploy", "--cron", "*/30 * * * *", "--name", "half-hourly", "--register",
                                      "--out", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("gust-build/half-hourly")
    assert deployment.schedules[0].schedule.cron == "*/30 * * * *"
