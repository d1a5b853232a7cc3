"""Issue 25: schedules that run. A real `prefect server start`, a process worker and `gust deploy --serve`, each
completing two scheduled builds in a row from a once-a-minute cron; `gust runs` lists them with their rows."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

REPO = Path(__file__).resolve().parents[2]
_WAIT_S = 900  # two builds, cold cache, on two shared cores


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("prefect-home")
    url = f"http://127.0.0.1:{_free_port()}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONPATH": str(REPO),
            "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "5", "PREFECT_WORKER_QUERY_SECONDS": "5",
            "PREFECT_RUNNER_POLL_FREQUENCY": "5", "COLUMNS": "200"}  # fmt: skip
    port = url.split(":")[-1].split("/")[0]
    log = (home / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                               port], env=env, stdout=log, stderr=log, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert server.poll() is None, (home / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        else:
            raise AssertionError("the Prefect server never answered")
        yield {**env, "PREFECT_API_URL": url}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def _gust(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=env["PREFECT_HOME"])  # fmt: skip


def _runs(env: dict[str, str], out: Path) -> list[dict]:
    listed = _gust(env, "runs", "--out", str(out), "--json", "--limit", "20")
    assert listed.returncode == 0, listed.stderr[-2000:]
    return [json.loads(line) for line in listed.stdout.splitlines()]


def _wait_for_two_builds(env: dict[str, str], out: Path, proc: subprocess.Popen[bytes]) -> list[dict]:
    deadline = time.monotonic() + _WAIT_S
    runs: list[dict] = []
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the {proc.args} process exited with {proc.returncode}"
        runs = _runs(env, out) if out.is_dir() else []
        failed = [r for r in runs if r["state"] in ("failed", "crashed", "killed")]
        assert not failed, failed
        if sum(r["state"] == "completed" for r in runs) >= 2:
            return runs
        time.sleep(10)
    raise AssertionError(f"no two completed scheduled builds within {_WAIT_S} s: {runs}")


def _assert_dataset(runs: list[dict], out: Path) -> None:
    rows = sum(len(pd.read_parquet(p)) for p in (out / "gust").rglob("*.parquet"))
    completed = [r for r in runs if r["state"] == "completed"]
    assert rows > 0 and all(r["rows"] == rows for r in completed), (rows, completed)
    assert all(r["flow_run"] and r["config"] for r in completed)
    assert json.loads((out / "config.json").read_text())["tdg"]["n_graphs"] == 2  # --set reached the deployment
    assert len((out / "verl" / "train.parquet").read_bytes()) > 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_worker_completes_two_scheduled_builds(server_env: dict[str, str], tmp_path: Path) -> None:
    created = subprocess.run([sys.executable, "-m", "prefect", "work-pool", "create", "gust-test", "--type",
                              "process"], env=server_env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert created.returncode == 0, created.stderr[-2000:]
    out = tmp_path / "scheduled"
    deployed = _gust(server_env, "deploy", "--cron", "* * * * *", "--name", "every-minute", "--pool", "gust-test",
                     "--register", "--out", str(out), "--set", "tdg.n_graphs=2")  # fmt: skip
    assert deployed.returncode == 0, deployed.stderr[-3000:]
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", "gust-test"],
                              env=server_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)  # fmt: skip
    try:
        runs = _wait_for_two_builds(server_env, out, worker)
    finally:
        _stop(worker)
    _assert_dataset(runs, out)


def test_serve_completes_two_scheduled_builds(server_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "served"
    serve = subprocess.Popen([sys.executable, "-m", "flows.cli", "deploy", "--cron", "* * * * *", "--name",
                              "served", "--serve", "--out", str(out), "--set", "tdg.n_graphs=2"],
                             env=server_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    try:
        runs = _wait_for_two_builds(server_env, out, serve)
    finally:
        _stop(serve)
    _assert_dataset(runs, out)
