"""`gust eval gust` outputs: `results.json`, `report.md` and `pass_k.png`, and the entry point `run_gust_eval`."""

from __future__ import annotations

import io
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from data.io import atomic_write_bytes, atomic_write_text, write_json
from gusteval.metrics import PROCESS_METRICS, GustEvalSummary, aggregate_trials
from gusteval.runner import GustEvalConfig, evaluate_tasks, load_eval_tasks
from gustforge.llm import LLMClient, LLMSettings

__all__ = ["render_markdown", "render_figure", "write_report", "run_gust_eval"]


def render_markdown(summary: GustEvalSummary) -> str:
    """The report: pass^k table, process metrics, failures by reason, per-environment pass^k."""
    level = f"{summary.confidence:.0%} CI"
    n = summary.trials
    lines = [
        f"# GUST evaluation: `{summary.model}`",
        "",
        f"Tasks: {summary.tasks} complete × {n} trials; {summary.incomplete_tasks} incomplete; "
        f"{summary.lost_trials} trials lost this run. Simulated user: `{summary.user}`"
        + (" (offline deterministic rules)" if summary.user == "offline" else "")
        + ". Success = final DB hash equal to the golden final DB hash.",
        "",
        f"| k | pass^k | {level} |" + (" pass^k (state-changing tasks) |" if summary.pass_k_state_changing else ""),
        "|---:|---:|---:|" + ("---:|" if summary.pass_k_state_changing else ""),
    ]
    for k, m in summary.pass_k.items():
        extra = summary.pass_k_state_changing.get(k)
        lines.append(f"| {k} | {m.mean:.4f} | [{m.low:.4f}, {m.high:.4f}] |"
                     + (f" {extra.mean:.4f} |" if extra is not None else ""))  # fmt: skip
    if summary.state_trivial_tasks:
        lines += ["", f"{summary.state_trivial_tasks} task(s) leave the DB unchanged in the gold: an agent that does "
                      "nothing also matches their final state."]  # fmt: skip
    lines += ["", f"| Metric (per trial) | Mean | {level} |", "|---|---:|---:|"]
    for key, label in PROCESS_METRICS.items():
        m = summary.metrics[key]
        lines.append(f"| {label} | {m.mean:.4f} | [{m.low:.4f}, {m.high:.4f}] |")
    lines += ["", "| Failure reason | Trials |", "|---|---:|"]
    lines += [f"| {reason} | {count} |" for reason, count in summary.failures.items()] or ["| (none) | 0 |"]
    lines += ["", "| End of conversation | Trials |", "|---|---:|"]
    lines += [f"| {reason} | {count} |" for reason, count in summary.end_reasons.items()]
    if summary.by_env:
        lines += ["", f"| Environment | Tasks | pass^1 | pass^{n} |", "|---|---:|---:|---:|"]
        for env, row in summary.by_env.items():
            lines.append(f"| {env} | {int(row['tasks'])} | {row['pass^1']:.4f} | {row[f'pass^{n}']:.4f} |")
    return "\n".join(lines) + "\n"


def render_figure(summary: GustEvalSummary) -> bytes:
    """pass^k against k with bootstrap intervals, and failures by reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    ks = list(summary.pass_k)
    means = [summary.pass_k[k].mean for k in ks]
    errors = [[m - summary.pass_k[k].low for k, m in zip(ks, means, strict=True)],
              [summary.pass_k[k].high - m for k, m in zip(ks, means, strict=True)]]  # fmt: skip
    left.errorbar(ks, means, yerr=errors, marker="o", capsize=4, color="#4c72b0")
    left.set_xticks(ks)
    left.set_ylim(-0.02, 1.05)
    left.set_xlabel("k")
    left.set_ylabel("pass^k")
    left.set_title(f"pass^k ({summary.tasks} tasks, {summary.confidence:.0%} bootstrap CI)")
    reasons = summary.failures or {"none": 0}
    right.barh(list(reasons), list(reasons.values()), color="#c44e52")
    right.set_title("failed trials by reason")
    fig.suptitle(f"GUST: {summary.model} (user: {summary.user})")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_report(summary: GustEvalSummary, out_dir: Path) -> dict[str, Path]:
    """Write `results.json`, `report.md` and `pass_k.png` into `out_dir`."""
    out_dir = Path(out_dir)
    return {
        "results": write_json(out_dir / "results.json", summary),
        "report": atomic_write_text(out_dir / "report.md", render_markdown(summary)),
        "figure": atomic_write_bytes(out_dir / "pass_k.png", render_figure(summary)),
    }


def run_gust_eval(
    data: Path,
    out_dir: Path,
    *,
    model: LLMSettings,
    cfg: GustEvalConfig,
    user_model: LLMSettings | None = None,
    envs_dir: Path | None = None,
) -> GustEvalSummary:
    """Evaluate the model behind `model` on GUST tasks with a simulated user; write the report.

    Args:
        data: GUST export folder / shard, or a verl parquet from `gust build`.
        out_dir: Output folder (`trials.jsonl` resumable, `failures.jsonl`, `results.json`, `report.md`,
            `pass_k.png`).
        model: The agent's endpoint (`backend="openai"`; `cache_path` makes reruns free).
        cfg: Trials, loop limits, user kind, bootstrap.
        user_model: The LLM user's endpoint (`cfg.user == "llm"`).
        envs_dir: Environments folder (see `load_eval_tasks`).

    Returns:
        The summary (also written to `out_dir`).
    """
    from gustforge.errors import ConfigError

    if cfg.user == "llm" and user_model is None:
        raise ConfigError("--user llm needs --user-endpoint")
    tasks = load_eval_tasks(data, envs_dir=envs_dir, limit=cfg.limit)
    with ExitStack() as stack:
        client = stack.enter_context(LLMClient(model))
        user_client = stack.enter_context(LLMClient(user_model)) if cfg.user == "llm" and user_model else None
        results, lost = client.run_sync(evaluate_tasks(tasks, client, cfg, out_dir, user_client=user_client))
    served = Counter(r.model for r in results if r.model).most_common(1)
    summary = aggregate_trials(
        results, trials=cfg.trials, model=model.model or (served[0][0] if served else "(endpoint default)"),
        user=cfg.user,
        expected_tasks=len(tasks), lost=len(lost), bootstrap_samples=cfg.bootstrap_samples,
        confidence=cfg.confidence, seed=cfg.seed,
    )  # fmt: skip
    write_report(summary, out_dir)
    return summary
