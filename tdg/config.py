"""Configuration of the TDG stage: graph inference, Dynamic Unlocking Sampling and reconstruction."""

from __future__ import annotations

from pydantic import Field

from data.models import StrictModel

__all__ = ["TDGConfig"]


class TDGConfig(StrictModel):
    """One frozen config for graphs → DAGs → skeletons → golden traces (ToolVerse §3.2, §4.2)."""

    inferer: str = Field(
        default="deterministic", description="Edge inferer: 'deterministic' (evidence rules), 'llm' (judge), "
        "'calibrated' (the earlier similarity model) or 'name_match' (naive baseline)."
    )
    n_graphs: int = Field(
        default=3, ge=1, le=16, description="Most distinct dependency graphs per environment (paper: 3); fewer when "
        "the environment has fewer flows that differ by `max_flow_overlap`."
    )
    max_providers: int = Field(default=2, ge=1, description="Most providers kept per (tool, argument) in a graph.")
    max_edges_per_tool: float = Field(
        default=1.5, gt=0, description="Density cap: most edges of an environment's graph per tool."
    )
    max_flow_overlap: float = Field(
        default=0.7, ge=0.0, le=1.0, description="Most Jaccard overlap between the edge sets of two graphs (logical "
        "flows) of one environment; a flow closer to one kept before is skipped."
    )
    linked_stages: bool = Field(
        default=True, description="DUS: after the first stage sample only unlocked tools while there are any "
        "(False: the paper's k = min(|Q|, N) from the whole ready queue, roots included)."
    )
    goal_first: bool = Field(
        default=True, description="DUS draws a goal tool and exactly the providers it needs (`tdg.dus."
        "sample_goal_skeleton`); False: the ready-queue DUS of the paper (`linked_stages` applies)."
    )
    max_parallel: int = Field(default=3, ge=1, description="N in k = min(|Q|, N): most tools per DUS stage.")
    max_stages: int = Field(default=6, ge=1, description="Most stages in one skeleton.")
    target_coverage: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Stop sampling an environment once this share of its tools is covered."
    )
    max_skeletons: int = Field(
        default=32, ge=1, description="Most skeletons per environment (paper: 5 per graph x 3 graphs; extra ones "
        "make up for drops: goal-first reconstruction keeps only traces whose values really flow, about half)."
    )
    min_skeletons: int = Field(
        default=24, ge=1, description="Keep sampling distinct skeletons up to this many even after the target is met."
    )
    patience: int = Field(
        default=16, ge=1, description="Stop after this many consecutive skeletons that add no newly covered tool."
    )
    max_unlinked_traces: int | None = Field(
        default=1, ge=0, description="Most golden traces per environment in which no value flows from one call into "
        "another (independent calls), kept only where no linked trace exists; the rest are dropped as "
        "`single_stage`. null keeps all."
    )
    state_variants: int = Field(
        default=6, ge=1, description="Most golden traces per skeleton whose linked trace changes state: the write "
        "flow is reconstructed again against other records (other seeds) while the environment has fewer than "
        "`variant_budget` state-changing traces. 1: one trace per skeleton."
    )
    variant_budget: int = Field(
        default=12, ge=1, description="State-changing traces worth making per environment: `verify.max_tasks_per_env` "
        "(10) and a fifth, since about one trace in ten is dropped after reconstruction (writer, solvability, "
        "quality); the surplus ends as `env_cap`. Set it with the cap (a TDG key, so editing the verify config "
        "never re-runs reconstruction)."
    )
    seed: int = Field(default=0, description="Base seed; every random choice derives from it.")
