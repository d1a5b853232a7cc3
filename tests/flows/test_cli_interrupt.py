"""Ctrl-C and SIGTERM on a real `gust build` subprocess: exit within 10 s with one line, no traceback, no server
left behind; the rerun resumes from the stage cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.interrupt import EXIT_INTERRUPTED, INTERRUPTED_LINE

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    return {**env, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect"), "COLUMNS": "200"}


def _start(tmp_path: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "flows.cli", "build", "--out", str(out)], cwd=tmp_path,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def _wait_for_work(out: Path, proc: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if (out / "work" / "envgen.jsonl").is_file():  # the first stage is done: the flow is mid-run
            return
        time.sleep(0.2)
    raise AssertionError("the build never got going")


def _servers_of(home: Path) -> list[int]:
    """Pids of live Prefect API servers started for this PREFECT_HOME."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                b"create_app" in (proc / "cmdline").read_bytes()
                and str(home).encode() in (proc / "environ").read_bytes()
            ):
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_build_stops_fast_and_resumes(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    proc = _start(tmp_path, out)
    _wait_for_work(out, proc)
    sent = time.monotonic()
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    else:
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-2000:]
    assert elapsed < 10, elapsed
    assert stderr.count(INTERRUPTED_LINE) == 1 and stderr.rstrip().endswith(INTERRUPTED_LINE), stderr[-2000:]
    assert "Traceback" not in stderr
    time.sleep(0.5)
    assert _servers_of(tmp_path / "prefect") == []

    rerun = _start(tmp_path, out)
    stdout, stderr = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, stderr[-3000:]
    envgen = next(line for line in stdout.splitlines() if line.startswith("envgen\t"))
    assert envgen.endswith(" (cached)"), stdout  # real seconds of this run, and the marker
    assert (out / "gust" / "README.md").is_file()
