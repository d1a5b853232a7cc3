"""Benchmark: vectorised estimators (trainer.estimators) vs a straightforward per-row Python baseline.

Batch B = 2048 (128 prompts × G = 16), response length T = 8192, multi-turn masks (1–7 generations with
observations in between), rewards laid out by `trainer.reward_manager`. The baseline walks every row's mask in
Python (like the reference `_extract_segments_from_mask_1d`), computes group statistics with dicts and writes
each run's advantage with a slice. It is timed on a subset of --baseline-rows rows (whole groups) and
extrapolated linearly to B (it is O(B·T)); outputs are asserted equal on that subset.

Run: .venv/bin/python bench/estimators.py [--rows 2048] [--tokens 8192] [--baseline-rows 256]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch

from trainer.estimators import (
    EstimatorParams,
    compute_slca_advantage,
    compute_slca_tara_advantage,
    compute_tara_advantage,
    compute_toolpo_advantage,
)
from trainer.reward_manager import layout_for_estimator, place_rewards

GROUP = 16
PARAMS = EstimatorParams()


def make_batch(rows: int, tokens: int, seed: int) -> tuple[torch.Tensor, np.ndarray, list[dict]]:
    rng = np.random.default_rng(seed)
    mask = np.zeros((rows, tokens), dtype=np.int64)
    infos = []
    for i in range(rows):
        pos, turns = 0, int(rng.integers(1, 8))
        for _ in range(turns):
            gen = int(rng.integers(50, 1200))
            mask[i, pos : pos + gen] = 1
            pos += gen + int(rng.integers(30, 600))
            if pos >= tokens:
                break
        omission = bool(rng.random() < 0.05)
        r_tool, r_sum = (0.0, -0.5) if omission else (float(rng.random()), float(rng.integers(0, 5)) / 4)
        infos.append(
            {
                "score": -0.5 if omission else r_tool + r_sum,
                "r_tool": r_tool,
                "r_sum": r_sum,
                "omission": int(omission),
                "turn_rewards": json.dumps([float(rng.integers(0, 2)) for _ in range(6)]),
            }
        )
    uids = np.array([f"uid-{i // GROUP}" for i in range(rows)], dtype=object)
    return torch.from_numpy(mask[:, :tokens]), uids, infos


# ------------------------------------------------------------------ per-row Python baseline
def py_runs(row: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for t, v in enumerate(row):
        if v and start is None:
            start = t
        elif not v and start is not None:
            runs.append((start, t))
            start = None
    if start is not None:
        runs.append((start, len(row)))
    return runs


def py_group_norm(values: dict[int, float], uids: np.ndarray, unbiased: bool, raw_single: bool = False) -> dict:
    groups: dict[str, list[int]] = defaultdict(list)
    for i in values:
        groups[uids[i]].append(i)
    out = {}
    for members in groups.values():
        xs = [values[i] for i in members]
        if len(xs) == 1:
            out[members[0]] = xs[0] / (1 + PARAMS.epsilon) if raw_single else 0.0
            continue
        mu = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - (1 if unbiased else 0)))
        for i, x in zip(members, xs, strict=True):
            out[i] = 0.0 if max(xs) == min(xs) else (x - mu) / (sd + PARAMS.epsilon)
    return out


def py_tara(turns: dict[int, list[float]], uids: np.ndarray) -> dict[int, list[float]]:
    g, lam = PARAMS.tara_gamma, PARAMS.tara_lambda
    value = {i: [r[t] * sum(g**k * r[t + k + 1] for k in range(len(r) - t - 1)) for t in range(len(r))]
             for i, r in turns.items()}  # fmt: skip
    out = {i: [0.0] * len(r) for i, r in turns.items()}
    for t in range(max((len(r) for r in turns.values()), default=0)):
        # App. B.4: turn t's statistics run over all K rollouts; one without turn t counts as r = V = 0
        local = py_group_norm({i: r[t] if len(r) > t else 0.0 for i, r in turns.items()}, uids, unbiased=False)
        future = py_group_norm({i: value[i][t] if len(r) > t else 0.0 for i, r in turns.items()}, uids,
                               unbiased=False)  # fmt: skip
        for i in (i for i, r in turns.items() if len(r) > t):
            out[i][t] = local[i] + lam * future[i]
    return out


def py_estimator(name: str, rewards: torch.Tensor, mask: torch.Tensor, uids: np.ndarray) -> torch.Tensor:
    runs = {i: py_runs(mask[i].tolist()) for i in range(mask.shape[0])}
    sums = {i: [float(rewards[i, s:e].sum()) for s, e in rs] for i, rs in runs.items()}
    table: dict[int, list[float]] = {}
    if name in ("slca", "toolpo"):
        x_sum = {i: s[-1] for i, s in sums.items() if s}
        x_tool = {i: sum(s[:-1]) for i, s in sums.items() if len(s) > 1}
        a_sum = py_group_norm(x_sum, uids, unbiased=True, raw_single=name == "toolpo")
        a_tool = py_group_norm(x_tool, uids, unbiased=True)
        for i, s in sums.items():
            if name == "slca":
                tool_adv, sum_adv = PARAMS.lambda_tool * a_tool.get(i, 0.0), PARAMS.lambda_sum * a_sum[i]
            else:
                tool_adv, sum_adv = a_sum[i] + PARAMS.toolpo_lambda * a_tool.get(i, 0.0), a_sum[i]
            table[i] = [tool_adv] * (len(s) - 1) + [sum_adv] * bool(s)
    elif name == "tara":
        table = py_tara(sums, uids)
    else:  # slca_tara
        tara = py_tara({i: s[:-1] for i, s in sums.items() if s}, uids)
        a_sum = py_group_norm({i: s[-1] for i, s in sums.items() if s}, uids, unbiased=True)
        table = {i: [PARAMS.lambda_tool * a for a in tara.get(i, [])] + [PARAMS.lambda_sum * a_sum[i]] * bool(s)
                 for i, s in sums.items()}  # fmt: skip
    adv = torch.zeros(mask.shape, dtype=torch.float32)
    for i, rs in runs.items():
        for (s, e), a in zip(rs, table[i], strict=True):
            adv[i, s:e] = a
    return adv


ESTIMATORS: dict[str, Callable] = {
    "slca": compute_slca_advantage,
    "tara": compute_tara_advantage,
    "slca_tara": compute_slca_tara_advantage,
    "toolpo": compute_toolpo_advantage,
}


def timed(fn: Callable[[], torch.Tensor], repeat: int) -> tuple[float, torch.Tensor]:
    out = fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return (time.perf_counter() - start) / repeat, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--baseline-rows", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no OpenMP spin on a shared box)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mask, uids, infos = make_batch(args.rows, args.tokens, seed=0)
    sub = args.baseline_rows
    print(
        f"B={args.rows} T={args.tokens} threads={torch.get_num_threads()}; baseline on {sub} rows x{args.rows // sub}"
    )
    for name, fn in ESTIMATORS.items():
        layout = layout_for_estimator(name)
        rewards = torch.stack([place_rewards(mask[i], info, layout=layout) for i, info in enumerate(infos)])
        ours_s, ours = timed(lambda: fn(rewards, mask, uids, None)[0], args.repeat)  # noqa: B023
        base_s, base = timed(lambda: py_estimator(name, rewards[:sub], mask[:sub], uids[:sub]), 1)  # noqa: B023
        sub_ours = fn(rewards[:sub], mask[:sub], uids[:sub], None)[0]
        assert torch.allclose(sub_ours, base, atol=1e-5), f"{name}: outputs differ"
        base_full = base_s * args.rows / sub
        print(f"{name:10s} vectorised {ours_s * 1e3:8.1f} ms | python baseline {base_s:6.2f} s on {sub} rows "
              f"→ {base_full:7.2f} s extrapolated | speed-up x{base_full / ours_s:,.0f} | outputs equal")  # fmt: skip


if __name__ == "__main__":
    main()
