"""Shared helpers of the envgen tests: the bundled sample toolsets, refactored."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from data.models import RefactoredToolset, Toolset
from envgen.config import EnvGenConfig
from envgen.ingest import read_toolsets
from envgen.refactor import refactor_toolset

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples" / "raw"


@lru_cache(maxsize=1)
def sample_toolsets() -> tuple[Toolset, ...]:
    return read_toolsets(SAMPLES).toolsets


def sample(name: str) -> Toolset:
    return next(t for t in sample_toolsets() if t.name == name)


def refactored(name: str) -> RefactoredToolset:
    return refactor_toolset(sample(name), EnvGenConfig())
