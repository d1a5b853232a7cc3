"""Configuration of the TDG stage: graph inference, Dynamic Unlocking Sampling and reconstruction."""

from __future__ import annotations

from pydantic import Field

from data.models import StrictModel

__all__ = ["TDGConfig"]


class TDGConfig(StrictModel):
    """One frozen config for graphs → DAGs → skeletons → golden traces (ToolVerse §3.2, §4.2)."""

    inferer: str = Field(default="deterministic", description="Edge inferer: 'deterministic' or 'llm' (judge).")
    n_graphs: int = Field(default=3, ge=1, le=16, description="Distinct dependency graphs per environment (paper: 3).")
    max_parallel: int = Field(default=3, ge=1, description="N in k = min(|Q|, N): most tools per DUS stage.")
    max_stages: int = Field(default=6, ge=1, description="Most stages in one skeleton.")
    target_coverage: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Stop sampling an environment once this share of its tools is covered."
    )
    max_skeletons: int = Field(
        default=20, ge=1, description="Most skeletons per environment (paper: 5 per graph x 3 graphs; extra ones "
        "make up for drops so that verify can keep up to 10)."
    )
    min_skeletons: int = Field(
        default=12, ge=1, description="Keep sampling distinct skeletons up to this many even after the target is met."
    )
    patience: int = Field(
        default=10, ge=1, description="Stop after this many consecutive skeletons that add no newly covered tool."
    )
    max_unlinked_traces: int | None = Field(
        default=2, ge=0, description="Most golden traces per environment in which no value flows from one call into "
        "another (independent calls); the rest are dropped as `single_stage`. null keeps all."
    )
    seed: int = Field(default=0, description="Base seed; every random choice derives from it.")
