"""Prefect process settings that must be in place before `import prefect`.

The embedded default is Prefect's ephemeral server on a local SQLite file. We only fill in what the user has not
set: a user pointing at a real server (`PREFECT_API_URL`, e.g. backed by PostgreSQL) keeps full control.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gustforge.errors import GustError

__all__ = [
    "configure_prefect_environment",
    "prefect_defaults",
    "quiet_expected_failures",
    "LocalServer",
    "local_server",
    "is_ephemeral",
    "configured_api_url",
]

_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # offline machines: no telemetry errors at server start
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",  # cold SQLite migration: ~25 s idle, minutes when busy
    # run logs stay at INFO for the UI; the terminal shows our progress display plus Prefect's warnings
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    "HF_HUB_OFFLINE": "1",  # the pipeline never downloads from a hub
}


def prefect_defaults() -> dict[str, str]:
    """The offline-safe defaults a flow-run process needs (for a worker's job environment), this process's
    own values where set."""
    return {key: os.environ.get(key, value) for key, value in
            {**_DEFAULTS, "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true"}.items()}  # fmt: skip


def configure_prefect_environment(out_dir: Path | None = None) -> None:
    """Set offline-safe Prefect defaults; persist task results (the stage cache) under the run's output folder."""
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
    if os.environ.get("PREFECT_HOME"):  # the server cannot create a missing parent of its SQLite file
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    if out_dir is not None:
        os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = str((Path(out_dir) / ".prefect-results").resolve())
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "true")


class _ExpectedFailureFilter(logging.Filter):
    """Drops Prefect's traceback log of a run that failed with a `GustError`: the CLI prints that error as one
    line (with its reasons), and the run's state keeps the message for the UI."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, GustError)


def quiet_expected_failures() -> None:
    """Install `_ExpectedFailureFilter` on Prefect's flow- and task-run loggers (idempotent)."""
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ExpectedFailureFilter) for f in logger.filters):
            logger.addFilter(_ExpectedFailureFilter())


def configured_api_url() -> str | None:
    """The Prefect API URL set by the environment, a profile or a test harness; None = ephemeral mode."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def is_ephemeral() -> bool:
    """True when no Prefect server is configured: flows would run on a throw-away server of this process."""
    return not configured_api_url()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GustError(f"the local Prefect server exited with code {process.returncode} (log: {_server_log()})")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise GustError(f"the local Prefect server did not answer within {timeout:.0f} s (log: {_server_log()})")


def _server_log() -> Path:
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home / "gust-server.log"


def _drain_prefect_workers(timeout: float = 3.0) -> None:
    """Send the flow's last events and logs while the server still answers (else Prefect warns at exit)."""
    if "prefect" not in sys.modules:
        return
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.WARNING))  # "Still processing items" is progress, not a problem
    try:
        for worker in (APILogWorker, EventsWorker):
            try:
                worker.drain_all(timeout=timeout, at_exit=False)
            except Exception:  # best effort: a lost event never fails a finished run
                continue
    finally:
        logging.disable(previous)


# Runs first in the server's process: ask the kernel to SIGKILL it when its parent (the gust command) dies, even
# of SIGKILL, then become the server (the death signal survives exec). Linux only; elsewhere it only execs.
# The signal follows the thread that started the process, so `LocalServer.start` runs on the command's main thread.
_LAUNCHER = """
import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
except (AttributeError, OSError):
    pass
if os.getppid() != parent:  # the parent died before the death signal was armed
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


class LocalServer:
    """Prefect's own API app (the one the ephemeral mode runs) on 127.0.0.1, in a session of its own.

    Unlike the ephemeral server it does not share the terminal's process group, so Ctrl-C interrupts the flow and
    not the server it reports to; `stop` ends it after the flow, and the kernel kills it if the command dies
    without stopping it (SIGKILL, OOM killer). Not started when `PREFECT_API_URL` is set.
    """

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.url: str | None = None

    def start(self) -> None:
        if configured_api_url():
            return
        port = _free_port()
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
        command = [sys.executable, "-c", _LAUNCHER, str(os.getpid()),
                   "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"]  # fmt: skip
        with _server_log().open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}/api"
        try:
            _wait_healthy(self.url, self.process, float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
        except BaseException:
            self.stop()
            raise
        os.environ["PREFECT_API_URL"] = self.url

    def kill(self) -> None:
        """SIGKILL the server's session at once (an interrupted exit that cannot wait for `stop`)."""
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        try:
            _drain_prefect_workers()
        finally:  # an interrupt while draining must not leave the server running (`kill` still sees it)
            if os.environ.get("PREFECT_API_URL") == self.url:
                del os.environ["PREFECT_API_URL"]
            _end_session(process)
            self.process = None


def _end_session(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's whole session (it was started as its own group leader), SIGKILL after 4 s."""
    for sig, wait in ((signal.SIGTERM, 4.0), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            process.poll()
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def local_server() -> Iterator[LocalServer]:
    """A `LocalServer` for the duration of one CLI command (call `configure_prefect_environment` first)."""
    server = LocalServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
