"""Shared fixtures. Tests that need the Prefect server use the session-scoped `prefect_server` fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPORA = (REPO_ROOT / ".." / "shared" / "corpora").resolve()

# Offline, quiet, isolated defaults for every test process (a developer's own Prefect profile is not touched).
os.environ.setdefault("PREFECT_HOME", str(REPO_ROOT / ".prefect" / "test-home"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)  # SQLite cannot create missing parents
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Property tests: CI replays a fixed derivation of examples (a red CI names a bug every rerun reproduces);
# `GUST_HYPOTHESIS=explore` draws fresh random examples (2,000 where a test sets no count) to hunt for new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=2000, print_blob=True)
settings.load_profile(os.environ.get("GUST_HYPOTHESIS", "ci"))


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
