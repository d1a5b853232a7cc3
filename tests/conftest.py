"""Shared fixtures. Tests that need the Prefect server use the session-scoped `prefect_server` fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPORA = (REPO_ROOT / ".." / "shared" / "corpora").resolve()

# Offline, quiet, isolated defaults for every test process (a developer's own Prefect profile is not touched).
os.environ.setdefault("PREFECT_HOME", str(REPO_ROOT / ".prefect" / "test-home"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)  # SQLite cannot create missing parents
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def corpora_dir() -> Path:
    """The shared public corpora (../shared/corpora beside the checkout); skips when absent."""
    if not CORPORA.is_dir():
        pytest.skip(f"shared corpora not found at {CORPORA}")
    return CORPORA


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return REPO_ROOT / "data" / "samples"
