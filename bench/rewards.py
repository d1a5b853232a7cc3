"""Reward and SGLS benchmarks (CPU).

1. Reward throughput (trajectories/s) on GUST rollouts with state replay (`state_mode="replay"`): one `Scorer`
   whose session pool reuses a sandbox session per environment (reset between trajectories; what `compute_score`
   does since it caches its scorer) vs the straightforward per-row path (a new scorer, env load and sandbox worker
   per trajectory). Outputs are asserted equal.
2. SGLS env-backed `execute` latency p50/p95 (stage-1 validation + sandboxed call on the trajectory's session).

Run from the repository root: `.venv/bin/python bench/rewards.py [--prompts 16] [--group 8] [--calls 200]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.trainer.gust_task import GOLD_STAGES, TINY_ENV, make_task, rollout  # noqa: E402
from trainer.convert import gust_row, load_env_schemas  # noqa: E402
from trainer.rewards.score import RewardConfig, Scorer  # noqa: E402

ALT_CALLS = [("get_order", {"order_id": "ORD-1002"}), ("list_orders", {"status": "pending"}),
             ("cancel_order", {"order_id": "ORD-1002"}), ("update_order_status", {"order_id": "ORD-1003",
                                                                                  "new_status": "shipped"})]


def _trajectories(prompts: int, group: int, seed: int) -> list[tuple[str, dict, dict]]:
    rng = random.Random(seed)
    gt = gust_row(make_task(), load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=0)
    truth = gt.reward_model.ground_truth.model_dump(mode="json")
    items = []
    for _ in range(prompts * group):
        turns = [list(stage) for stage in GOLD_STAGES]
        if rng.random() < 0.5:
            turns[rng.randrange(len(turns))][0] = rng.choice(ALT_CALLS)
        if rng.random() < 0.2:
            turns = turns[:1]
        final = "Done: order ORD-1001 processing, ORD-1003 cancelled." if rng.random() < 0.8 else "ok"
        solution = rollout(turns, final) if rng.random() < 0.9 else "I will not call any tool for this."
        items.append((solution, truth, {}))
    return items


def bench_rewards(prompts: int, group: int, seed: int) -> dict[str, float]:
    items = _trajectories(prompts, group, seed)
    config = RewardConfig(state_mode="replay")

    def fresh(solution: str, gt: dict, info: dict) -> dict:
        scorer = Scorer(config)
        try:
            return scorer.score(solution, gt, info)
        finally:
            scorer.close()

    t0 = time.perf_counter()
    baseline = [fresh(s, gt, info) for s, gt, info in items]
    t1 = time.perf_counter()
    pooled = Scorer(config)
    try:
        batched = pooled.score_batch(items)
    finally:
        pooled.close()
    t2 = time.perf_counter()
    assert batched == baseline, "batched and per-row rewards differ"
    n = len(items)
    return {"trajectories": n, "baseline_traj_per_s": n / (t1 - t0), "batched_traj_per_s": n / (t2 - t1),
            "speedup": (t1 - t0) / (t2 - t1), "mean_score": statistics.fmean(r["score"] for r in batched),
            "state_match_rate": statistics.fmean(r["state_match"] for r in batched)}


def bench_sgls(calls: int, seed: int) -> dict[str, float]:
    from trainer.sgls import SGLSTool

    rng = random.Random(seed)
    tools = json.dumps([s.openai_tool() for s in load_env_schemas(TINY_ENV)])
    pool = [("get_order", {"order_id": "ORD-1001"}), ("list_orders", {"customer_id": "C-1"}),
            ("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"}),
            ("get_order", {"order_id": 42}), ("cancel_order", {"order_id": "ORD-1002"})]
    tool = SGLSTool({"backend": "env"})

    async def run() -> list[float]:
        iid, _ = await tool.create(create_kwargs={"env_dir": str(TINY_ENV), "tool_schemas": tools})
        latencies = []
        try:
            for _ in range(calls):
                name, args = rng.choice(pool)
                start = time.perf_counter()
                await tool.execute(iid, args, original_tool_name=name)
                latencies.append(time.perf_counter() - start)
        finally:
            await tool.release(iid)
        return latencies

    t0 = time.perf_counter()
    lat = sorted(asyncio.run(run()))
    total = time.perf_counter() - t0
    q = statistics.quantiles(lat, n=100)
    return {"calls": calls, "p50_ms": 1000 * statistics.median(lat), "p95_ms": 1000 * q[94],
            "max_ms": 1000 * lat[-1], "create_and_calls_s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rewards = bench_rewards(args.prompts, args.group, args.seed)
    print("rewards:", json.dumps({k: round(v, 3) for k, v in rewards.items()}))
    sgls = bench_sgls(args.calls, args.seed)
    print("sgls env:", json.dumps({k: round(v, 3) for k, v in sgls.items()}))


if __name__ == "__main__":
    main()
