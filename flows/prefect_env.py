"""Prefect process settings that must be in place before `import prefect`.

The embedded default is Prefect's ephemeral server on a local SQLite file. We only fill in what the user has not
set: a user pointing at a real server (`PREFECT_API_URL`, e.g. backed by PostgreSQL) keeps full control.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["configure_prefect_environment"]

_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # offline machines: no telemetry errors at server start
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",  # cold SQLite migration: ~25 s idle, minutes when busy
    # run logs stay at INFO for the UI; the terminal shows our progress display plus Prefect's warnings
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    "HF_HUB_OFFLINE": "1",  # the pipeline never downloads from a hub
}


def configure_prefect_environment(out_dir: Path | None = None) -> None:
    """Set offline-safe Prefect defaults; persist task results (the stage cache) under the run's output folder."""
    for key, value in _DEFAULTS.items():
        os.environ.setdefault(key, value)
    if os.environ.get("PREFECT_HOME"):  # the server cannot create a missing parent of its SQLite file
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    if out_dir is not None:
        os.environ["PREFECT_RESULTS_LOCAL_STORAGE_PATH"] = str((Path(out_dir) / ".prefect-results").resolve())
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "true")
