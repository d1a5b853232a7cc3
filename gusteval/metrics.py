"""pass^k (τ²-bench's definition) and the process metrics of `gust eval gust`, with seeded bootstrap CIs.

pass^k of a task with n trials of which c succeeded is C(c, k) / C(n, k): the probability that k trials drawn
without replacement from its n all succeed (with n = k it is 1 exactly when every trial succeeded). The reported
pass^k is its mean over tasks; the interval resamples tasks. Only tasks with all n trials count; tasks with lost
trials are reported as incomplete.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from math import comb

import numpy as np
from pydantic import Field

from data.models import StrictModel
from gusteval.runner import TrialResult
from toucan.metrics import MetricCI, bootstrap_ci

__all__ = ["PROCESS_METRICS", "GustEvalSummary", "pass_hat_k", "task_pass_hat_k", "aggregate_trials"]

PROCESS_METRICS: dict[str, str] = {
    "success": "Trial success (final DB = gold, answer stated)",
    "answer_match": "Answer facts stated",
    "name_f1": "Call F1 (names)",
    "arg_match": "Argument match",
    "generations": "Agent turns",
    "user_turns": "User turns",
    "tool_calls": "Tool calls",
    "tool_errors": "Tool errors",
    "prompt_tokens": "Prompt tokens",
    "completion_tokens": "Completion tokens",
}


class GustEvalSummary(StrictModel):
    """Aggregate of one `gust eval gust` run."""

    model: str
    user: str
    trials: int = Field(description="n: trials per task.")
    tasks: int = Field(description="Tasks with all n trials (the pass^k population).")
    incomplete_tasks: int = 0
    lost_trials: int = Field(default=0, description="Trials lost to the endpoint or the sandbox in this run.")
    state_trivial_tasks: int = Field(default=0, description="Tasks whose gold leaves the DB unchanged.")
    confidence: float
    pass_k: dict[int, MetricCI] = Field(description="k -> pass^k over all complete tasks.")
    pass_k_state_changing: dict[int, MetricCI] = Field(default_factory=dict)
    metrics: dict[str, MetricCI]
    failures: dict[str, int] = Field(default_factory=dict, description="failure reason -> trials")
    end_reasons: dict[str, int] = Field(default_factory=dict)
    user_reasons: dict[str, int] = Field(default_factory=dict, description="Simulator reply kinds.")
    by_env: dict[str, dict[str, float]] = Field(default_factory=dict)


def pass_hat_k(successes: int, n: int, k: int) -> float:
    """C(c, k) / C(n, k) for one task (0 when k > n)."""
    if k > n or n <= 0:
        return 0.0
    return comb(successes, k) / comb(n, k)


def task_pass_hat_k(results: Sequence[TrialResult], n: int) -> dict[str, dict[int, float]]:
    """task_id -> {k: pass^k} for the tasks with exactly n recorded trials."""
    by_task: dict[str, list[TrialResult]] = defaultdict(list)
    for r in results:
        by_task[r.task_id].append(r)
    return {
        task: {k: pass_hat_k(sum(r.success for r in trials), n, k) for k in range(1, n + 1)}
        for task, trials in by_task.items()
        if len({r.trial for r in trials}) == n
    }


def aggregate_trials(
    results: Sequence[TrialResult],
    *,
    trials: int,
    model: str,
    user: str,
    expected_tasks: int,
    lost: int = 0,
    bootstrap_samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> GustEvalSummary:
    """Aggregate trial results into the summary (intervals seeded per metric)."""
    per_task = task_pass_hat_k(results, trials)
    complete = [r for r in results if r.task_id in per_task]
    changing = {r.task_id for r in complete if r.state_changing}

    def ci(values: Sequence[float], offset: int) -> MetricCI:
        return bootstrap_ci(values, samples=bootstrap_samples, confidence=confidence, seed=seed + offset)

    pass_k = {k: ci([v[k] for v in per_task.values()], k) for k in range(1, trials + 1)}
    pass_changing = {k: ci([v[k] for t, v in per_task.items() if t in changing], 100 + k)
                     for k in range(1, trials + 1)} if changing else {}  # fmt: skip
    metrics = {key: ci([float(getattr(r, key)) for r in complete], 200 + i)
               for i, key in enumerate(PROCESS_METRICS)}  # fmt: skip
    by_env: dict[str, dict[str, float]] = {}
    for env in sorted({r.env_id for r in complete}):
        tasks = [t for t in per_task if any(r.task_id == t and r.env_id == env for r in complete)]
        by_env[env] = {"tasks": float(len(tasks)), "pass^1": float(np.mean([per_task[t][1] for t in tasks])),
                       f"pass^{trials}": float(np.mean([per_task[t][trials] for t in tasks]))}  # fmt: skip
    return GustEvalSummary(
        model=model, user=user, trials=trials, tasks=len(per_task),
        incomplete_tasks=expected_tasks - len(per_task), lost_trials=lost,
        state_trivial_tasks=len(per_task) - len(changing), confidence=confidence, pass_k=pass_k,
        pass_k_state_changing=pass_changing, metrics=metrics,
        failures=dict(sorted(Counter(r.failure for r in complete if r.failure).items())),
        end_reasons=dict(sorted(Counter(r.end_reason for r in complete).items())),
        user_reasons=dict(sorted(Counter(x for r in complete for x in r.user_reasons).items())),
        by_env=by_env,
    )  # fmt: skip
