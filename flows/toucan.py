"""Prefect flows of the Toucan pipeline (`gust toucan prepare | eval | ksweep`); they only compose tasks."""

from __future__ import annotations

from typing import Any

from prefect import flow

from gustforge.llm import LLMSettings
from tasks.toucan import toucan_eval_task, toucan_ksweep_task, toucan_prepare_task
from toucan.config import EvalConfig, KSweepConfig, PrepareConfig

__all__ = ["toucan_prepare_flow", "toucan_eval_flow", "toucan_ksweep_flow"]


@flow(name="toucan-prepare")
def toucan_prepare_flow(input_path: str, out_dir: str, cfg: PrepareConfig) -> dict[str, str]:
    """Phases 1-4: filter, isolate the test set, decompose, partition into SFT / RL; write every artifact."""
    return toucan_prepare_task(input_path, out_dir, cfg)


@flow(name="toucan-eval")
def toucan_eval_flow(data: str, out_dir: str, model: LLMSettings, cfg: EvalConfig, judge: str = "heuristic",
                     judge_options: dict[str, Any] | None = None,
                     mocker: LLMSettings | None = None) -> dict[str, Any]:  # fmt: skip
    """In-domain evaluation of the model behind `model` on a Toucan test parquet."""
    return toucan_eval_task(data, out_dir, model, cfg, judge, judge_options or {}, mocker)


@flow(name="toucan-ksweep")
def toucan_ksweep_flow(data: str, out_dir: str, cfg: KSweepConfig) -> dict[str, str]:
    """Candidate-set datasets for every K of `cfg.ks` with one distractor strategy."""
    return toucan_ksweep_task(data, out_dir, cfg)
