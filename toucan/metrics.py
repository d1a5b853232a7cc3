"""Aggregate evaluation metrics with seeded bootstrap confidence intervals; JSON, markdown and a bar chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import Field

from data.io import atomic_write_bytes, atomic_write_text, write_json
from data.models import StrictModel
from toucan.evaluate import SampleResult

__all__ = ["METRICS", "MetricCI", "EvalSummary", "bootstrap_ci", "aggregate", "write_eval_report"]

# result field -> label (SLCA Table 15 order); tool_turns is a count, the rest lie in [0, 1]
METRICS: dict[str, str] = {
    "name_f1": "Name F1",
    "arg_match": "ArgMatch",
    "process": "Process",
    "parallel": "Parallel",
    "success": "Success@0.9",
    "summary": "Summary",
    "no_call": "No-call rate",
    "tool_turns": "Avg tool turns",
}


class MetricCI(StrictModel):
    mean: float
    low: float
    high: float


class EvalSummary(StrictModel):
    """Aggregate of one evaluation run."""

    model: str
    n: int
    failed: int = 0
    judge: str = Field(description="Summary backend: 'heuristic' is an offline proxy, not the paper's LLM judge.")
    responder: str
    confidence: float
    metrics: dict[str, MetricCI]
    by_kind: dict[str, dict[str, float]] = Field(default_factory=dict, description="kind -> metric -> mean")


def bootstrap_ci(values: Sequence[float], *, samples: int, confidence: float, seed: int) -> MetricCI:
    """Mean and percentile-bootstrap interval.

    Args:
        values: Per-sample values.
        samples: Bootstrap resamples.
        confidence: Interval level, e.g. 0.95.
        seed: RNG seed (same inputs and seed → same interval).

    Returns:
        The mean and the interval bounds (all equal to the mean for fewer than two values).
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return MetricCI(mean=0.0, low=0.0, high=0.0)
    mean = float(data.mean())
    if data.size < 2:
        return MetricCI(mean=mean, low=mean, high=mean)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(samples, data.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return MetricCI(mean=mean, low=float(low), high=float(high))


def aggregate(
    results: Sequence[SampleResult],
    *,
    model: str,
    responder: str,
    failed: int = 0,
    bootstrap_samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> EvalSummary:
    """Aggregate per-sample results into an `EvalSummary` (CIs seeded per metric)."""
    metrics = {
        key: bootstrap_ci(
            [float(getattr(r, key)) for r in results], samples=bootstrap_samples, confidence=confidence, seed=seed + i
        )
        for i, key in enumerate(METRICS)
    }
    kinds = sorted({r.kind for r in results if r.kind})
    by_kind = {
        kind: {key: float(np.mean([float(getattr(r, key)) for r in results if r.kind == kind])) for key in METRICS}
        for kind in kinds
    }
    judges = sorted({r.judge for r in results if r.judge != "none"}) or ["none"]
    return EvalSummary(
        model=model, n=len(results), failed=failed, judge="+".join(judges), responder=responder,
        confidence=confidence, metrics=metrics, by_kind=by_kind,
    )  # fmt: skip


def _markdown(summary: EvalSummary) -> str:
    level = f"{summary.confidence:.0%} CI"
    lines = [
        f"# Toucan in-domain evaluation: `{summary.model}`",
        "",
        f"Samples: {summary.n} scored, {summary.failed} failed. Tool observations: `{summary.responder}`. "
        f"Summary judge: `{summary.judge}`"
        + (" (offline heuristic proxy, not an LLM judge)" if "heuristic" in summary.judge else "")
        + ".",
        "",
        f"| Metric | Mean | {level} |",
        "|---|---:|---:|",
    ]
    for key, label in METRICS.items():
        m = summary.metrics[key]
        lines.append(f"| {label} | {m.mean:.4f} | [{m.low:.4f}, {m.high:.4f}] |")
    if summary.by_kind:
        kinds = sorted(summary.by_kind)
        lines += ["", "| Metric | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
        for key, label in METRICS.items():
            lines.append(f"| {label} | " + " | ".join(f"{summary.by_kind[k][key]:.4f}" for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def _chart(summary: EvalSummary) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in METRICS if k != "tool_turns"]
    means = [summary.metrics[k].mean for k in keys]
    errors = [
        [m - summary.metrics[k].low for k, m in zip(keys, means, strict=True)],
        [summary.metrics[k].high - m for k, m in zip(keys, means, strict=True)],
    ]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([METRICS[k] for k in keys], means, yerr=errors, capsize=4, color="#4c72b0")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Toucan-Test: {summary.model} (n={summary.n}, {summary.confidence:.0%} bootstrap CI)")
    ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_eval_report(summary: EvalSummary, out_dir: Path) -> dict[str, Path]:
    """Write `results.json`, `report.md` and `metrics.png` into `out_dir`."""
    out_dir = Path(out_dir)
    return {
        "results": write_json(out_dir / "results.json", summary),
        "report": atomic_write_text(out_dir / "report.md", _markdown(summary)),
        "chart": atomic_write_bytes(out_dir / "metrics.png", _chart(summary)),
    }
