"""Ctrl-C, SIGTERM and SIGKILL on a real `gust build` subprocess: one line, no traceback, no server or other
process of the build left behind; the rerun resumes from the stage cache. How fast the exit is depends on the
machine's load and is measured in `bench/signals.py`, never asserted here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from flows.interrupt import EXIT_INTERRUPTED, INTERRUPTED_LINE

pytestmark = [pytest.mark.slow, pytest.mark.prefect]

REPO = Path(__file__).resolve().parents[2]


_MARKER = "GUST_TEST_BUILD_MARKER"  # inherited by every process the build starts


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    return {**env, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect"), "COLUMNS": "200",
            _MARKER: str(tmp_path)}  # fmt: skip


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
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    else:
        proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)  # a hang fails here; the exit time is measured in bench/
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-2000:]
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


def _processes_with(marker: str) -> list[str]:
    """Command lines of live processes whose environment carries `marker` (every process a build started)."""
    needle = f"{_MARKER}={marker}".encode() + b"\0"
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes() + b"\0":
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            continue
    return found


def test_sigkilled_build_leaves_nothing_alive_and_resumes(tmp_path: Path) -> None:
    marker = str(tmp_path / uuid.uuid4().hex)
    env = {**_env(tmp_path), _MARKER: marker}
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "build", "--out", str(out)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_work(out, proc)
    assert any("create_app" in line for line in _processes_with(marker)), "no embedded server to outlive the build"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10  # the bar: nothing of the build alive 10 s after kill -9
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_with(marker) == []
    assert (out / "manifest.json").is_file()  # the killed run's record says `running`; `gust runs` says killed
    rerun = subprocess.run([sys.executable, "-m", "flows.cli", "build", "--out", str(out)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    envgen = next(line for line in rerun.stdout.splitlines() if line.startswith("envgen\t"))
    assert envgen.endswith(" (cached)"), rerun.stdout
    listed = subprocess.run([sys.executable, "-m", "flows.cli", "runs", "--out", str(out), "--json"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    states = [json.loads(line)["state"] for line in listed.stdout.splitlines()]
    assert states == ["completed", "killed"], listed.stdout + listed.stderr
