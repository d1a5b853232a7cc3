"""Prefect tasks of the Toucan pipeline: thin wrappers (load → one library call → persist → return paths).

No result caching: each flow is a single task over one input file whose outputs are the artifacts themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from data.verl_rows import read_verl_rows
from gustforge.llm import LLMSettings
from toucan.config import EvalConfig, KSweepConfig, PrepareConfig
from toucan.eval_run import run_evaluation
from toucan.export import meta_path, write_prepared
from toucan.ksweep import ksweep, write_ksweep
from toucan.prepare import prepare
from toucan.rows import iter_raw_rows

__all__ = ["toucan_prepare_task", "toucan_eval_task", "toucan_ksweep_task"]


@task(name="toucan-prepare")
def toucan_prepare_task(input_path: str, out_dir: str, cfg: PrepareConfig) -> dict[str, str]:
    prepared = prepare(iter_raw_rows(Path(input_path)), cfg)
    paths = write_prepared(prepared, Path(out_dir))
    lines = [f"- {r.phase} ({r.unit}): in {r.inputs}, out {r.outputs}, dropped {r.dropped}"
             for r in prepared.reports]  # fmt: skip
    create_markdown_artifact(key="toucan-prepare", markdown="## Toucan prepare\n\n" + "\n".join(lines))
    counts = len(prepared.test), len(prepared.rl), len(prepared.sft)
    get_run_logger().info("toucan prepare: test %d, rl %d, sft %d", *counts)
    return {name: str(path) for name, path in paths.items()}


@task(name="toucan-eval")
def toucan_eval_task(data: str, out_dir: str, model: LLMSettings, cfg: EvalConfig, judge: str,
                     judge_options: dict[str, Any], mocker: LLMSettings | None) -> dict[str, Any]:  # fmt: skip
    summary = run_evaluation(Path(data), Path(out_dir), model=model, cfg=cfg, judge=judge,
                             judge_options=judge_options, mocker=mocker)  # fmt: skip
    create_markdown_artifact(key="toucan-eval", markdown=(Path(out_dir) / "report.md").read_text(encoding="utf-8"))
    get_run_logger().info("toucan eval: %d scored, %d failed", summary.n, summary.failed)
    return summary.model_dump(mode="json")


@task(name="toucan-ksweep")
def toucan_ksweep_task(data: str, out_dir: str, cfg: KSweepConfig) -> dict[str, str]:
    results = ksweep(read_verl_rows(Path(data)), cfg)
    paths = write_ksweep(results, Path(out_dir), meta_file=meta_path(Path(data)))
    get_run_logger().info("toucan ksweep %s: %s", cfg.strategy.value, [(r.k, r.stats["skip_rate"]) for r in results])
    return {name: str(path) for name, path in paths.items()}
