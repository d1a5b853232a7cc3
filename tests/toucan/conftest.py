"""Fixtures for the Toucan tests: the shipped sample and the SLCA preview files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from toucan.config import PrepareConfig
from toucan.prepare import Prepared, prepare
from toucan.rows import iter_raw_rows


@pytest.fixture(scope="session")
def toucan_sample(samples_dir: Path) -> Path:
    return samples_dir / "toucan" / "toucan_sample.jsonl"


@pytest.fixture(scope="session")
def prepared_sample(toucan_sample: Path) -> Prepared:
    return prepare(iter_raw_rows(toucan_sample), PrepareConfig())


@pytest.fixture(scope="session")
def preview_dir(corpora_dir: Path) -> Path:
    return corpora_dir / "toucan"


@pytest.fixture(scope="session")
def toucan_factory(repo_root: Path) -> ModuleType:
    """`bench/toucan.py` (the Toucan-shaped row generator), imported by path."""
    spec = importlib.util.spec_from_file_location("bench_toucan", repo_root / "bench" / "toucan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
