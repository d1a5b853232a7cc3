"""The evaluation entry point: load the test parquet, run the loop against the endpoint, write the report."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from data.io import atomic_write_text, write_json
from gustforge.llm import LLMClient, LLMSettings
from toucan.config import EvalConfig
from toucan.evaluate import evaluate_samples, load_eval_samples
from toucan.metrics import EvalSummary, aggregate, write_eval_report
from toucan.responder import make_responder
from trainer.rewards.score import RewardConfig, Scorer

__all__ = ["SAMPLES_FILE", "run_evaluation", "write_no_metrics_report"]

SAMPLES_FILE = "samples.jsonl"


def run_evaluation(
    data: Path,
    out_dir: Path,
    *,
    model: LLMSettings,
    cfg: EvalConfig,
    judge: str = "heuristic",
    judge_options: Mapping[str, Any] | None = None,
    mocker: LLMSettings | None = None,
) -> EvalSummary:
    """Evaluate a model on a Toucan test parquet.

    Args:
        data: Test parquet (`toucan prepare` output) with its optional `.meta.jsonl` sidecar.
        out_dir: Output folder: `samples.jsonl` (per-sample, resumable), `results.json`, `report.md`,
            `metrics.png`.
        model: Settings of the evaluated model's endpoint (`backend="openai"`; `max_concurrency`, `cache_path`).
        cfg: Loop, responder and bootstrap settings.
        judge: Summary judge backend of `trainer.rewards.judge.JUDGES` ("heuristic" offline proxy, or "llm").
        judge_options: Judge backend options (llm: base_url, model, ...).
        mocker: Endpoint of the SGLS mocker for `responder=llm` (None: deterministic template).

    Returns:
        The aggregate summary (also written to `out_dir`).
    """
    out_dir = Path(out_dir)
    samples = load_eval_samples(data, limit=cfg.limit)
    scorer = Scorer(RewardConfig(judge=judge, judge_options=dict(judge_options or {}), state_mode="off"))
    with ExitStack() as stack:
        client = stack.enter_context(LLMClient(model))
        mock_client = stack.enter_context(LLMClient(mocker)) if mocker is not None else None
        responder = make_responder(cfg.responder, mock_client)
        run = evaluate_samples(
            samples, client, responder=responder, scorer=scorer, cfg=cfg, results_path=out_dir / SAMPLES_FILE
        )
        results, failed = client.run_sync(run)
    if not results:  # nothing scored: no metrics at all (a 0.0000 mean over n = 0 would read as a real result)
        summary = EvalSummary(model=model.model or "(endpoint default)", n=0, failed=failed, judge=judge,
                              responder=cfg.responder.value, confidence=cfg.confidence, metrics={})  # fmt: skip
        write_no_metrics_report(summary, out_dir, total=len(samples))
        return summary
    summary = aggregate(
        results, model=model.model or "(endpoint default)", responder=cfg.responder.value, failed=failed,
        bootstrap_samples=cfg.bootstrap_samples, confidence=cfg.confidence, seed=cfg.seed,
    )  # fmt: skip
    write_eval_report(summary, out_dir)
    return summary


def write_no_metrics_report(summary: EvalSummary, out_dir: Path, *, total: int) -> None:
    """`results.json` (n = 0, no metrics) and a `report.md` that says why; a stale `metrics.png` is removed."""
    out_dir = Path(out_dir)
    write_json(out_dir / "results.json", summary)
    why = (f"all {summary.failed} failed (endpoint errors; rerun to retry them)" if summary.failed
           else "the test set is empty")  # fmt: skip
    atomic_write_text(out_dir / "report.md", f"# Toucan evaluation: {summary.model}\n\nNo sample was scored out of "
                      f"{total}: {why}. No metrics are reported for n = 0.\n")  # fmt: skip
    (out_dir / "metrics.png").unlink(missing_ok=True)
