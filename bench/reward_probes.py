"""Reward-hacking probes over a build's rows: per probe and per algorithm signal, gold minus probe.

For every GUST task of a build (its `gust/` records and `envs/`, or the rows of a verl parquet passed instead), gold and
five hacking policies — idle, call_everything (gold + one call of every other allowed tool), repeated (every gold
call twice), wrong_argument (one value changed), reordered (stages reversed) — are executed on the task's
environment and scored by the training reward (`trainer.rewards.probes`). Signals: score (= grpo's outcome), tara
(mean per-turn reward), slca (r_tool + r_sum), slca_tara, toolpo (r_action + r_succ). Gold must be strictly above
every probe on score and tara (the quality stage drops a task otherwise).

`--turn-rule subset` scores with the paper's dict-subset turn rule instead of GUST's exact one (it lets
call_everything and repeated tie gold on TARA's turn reward).

Run from the repository root: `.venv/bin/python bench/reward_probes.py OUT [--limit 60] [--turn-rule subset]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer.rewards.probes import (  # noqa: E402
    ENFORCED_SIGNALS,
    ProbeTask,
    margin_summary,
    probe_task_from_row,
    probe_tasks,
    probe_tasks_from_records,
)
from trainer.rewards.score import RewardConfig  # noqa: E402


def load_tasks(out: Path) -> list[ProbeTask]:
    """The build's GUST tasks: its records and envs, or the rows of a verl parquet (`out` a `.parquet` file)."""
    if out.suffix == ".parquet":
        verl = out
        from data.verl_rows import read_verl_rows
        from gusteval.runner import verl_env_root

        root = verl_env_root(verl, verl.parent)
        return [probe_task_from_row(row, root) for row in read_verl_rows(verl) if row["data_source"] == "gust"]
    from data.gust import read_gust
    from tdg.quality import load_env_schemas

    envs = {p.name: p for p in (out / "envs").iterdir() if (p / "schemas.json").is_file()}
    schemas = {env: list(load_env_schemas(path)[0].values()) for env, path in envs.items()}
    return probe_tasks_from_records(read_gust(out / "gust"), schemas, envs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a `gust build` run folder, or a verl parquet of GUST rows")
    parser.add_argument("--limit", type=int, default=0, help="first N tasks (0: all)")
    parser.add_argument("--turn-rule", default="exact", help="TARA turn rule: exact (default) | subset (paper)")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = parser.parse_args()
    tasks = load_tasks(args.out)
    tasks = tasks[: args.limit] if args.limit else tasks
    start = time.perf_counter()
    results = probe_tasks(tasks, RewardConfig(state_mode="rollout", turn_rule=args.turn_rule))
    elapsed = time.perf_counter() - start
    summary = margin_summary(results)
    signals = sorted({s for margins in summary.values() for s in margins})
    print(
        f"{len(results)} tasks probed in {elapsed:.1f}s (turn rule {args.turn_rule}); cell = min / mean margin, "
        "share of tasks where gold is strictly above"
    )
    print("probe".ljust(16) + "".join(s.rjust(26) for s in signals))
    for probe, margins in summary.items():
        cells = [f"{margins[s]['min']:+.3f} / {margins[s]['mean']:+.3f} {margins[s]['below']:5.0%}" for s in signals]
        print(probe.ljust(16) + "".join(c.rjust(26) for c in cells))
    tied = {t: r.ties() for t, r in results.items() if r.ties()}
    print(f"tasks where a probe ties or beats gold on {'/'.join(ENFORCED_SIGNALS)}: {len(tied)} of {len(results)}")
    for task_id, probes in sorted(tied.items())[:10]:
        print(f"  {task_id}: {', '.join(probes)}")
    if args.json:
        args.json.write_text(json.dumps({"tasks": len(results), "turn_rule": args.turn_rule, "summary": summary,
                                         "tied": tied}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
