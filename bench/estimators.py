"""Benchmark: vectorised estimators (trainer.estimators) vs the reference SLCA code and a per-row Python baseline.

Part 1 (the issue-24 target): `compute_slca_advantage` vs `reference_slca_grpo_advantage`, a transcription of the
reference code's `compute_slca_grpo_advantage` (SLCA-GRPO repo, reference spec §7.1-§7.2: per-row run extraction with
`_extract_segments_from_mask_1d`, boolean process/summary masks, the reward components as (B,) tensors, KL folding,
`GroupNormPresent` with a loop over uids, λ after normalisation), on the same batch, timed INTERLEAVED (reference,
ours, reference, ours, ...; medians reported) so load on a shared machine hits both alike; outputs asserted equal.

Batch B = 2048 (128 prompts × G = 16), response length T = 8192, multi-turn masks (1–7 generations with
observations in between), rewards laid out by `trainer.reward_manager`. The baseline walks every row's mask in
Python (like the reference `_extract_segments_from_mask_1d`), computes group statistics with dicts and writes
each run's advantage with a slice. It is timed on a subset of --baseline-rows rows (whole groups) and
extrapolated linearly to B (it is O(B·T)); outputs are asserted equal on that subset.

Run: .venv/bin/python bench/estimators.py [--rows 2048] [--tokens 8192] [--baseline-rows 256] [--rounds 5]
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


# ------------------------------------------------------------------ transcription of the reference SLCA code
def _extract_segments_from_mask_1d(mask_1d: torch.Tensor) -> list[tuple[int, int]]:
    """Maximal runs of True as half-open [s, e) (reference §7.2)."""
    padded = torch.cat([torch.zeros(1, dtype=torch.int8), mask_1d.to(torch.int8), torch.zeros(1, dtype=torch.int8)])
    diff = padded[1:] - padded[:-1]
    starts = torch.nonzero(diff == 1).flatten().tolist()
    ends = torch.nonzero(diff == -1).flatten().tolist()
    return list(zip(starts, ends, strict=True))


def _group_norm_present(x: torch.Tensor, index: np.ndarray, present: torch.Tensor, norm_by_std: bool,
                        eps: float = 1e-6) -> torch.Tensor:  # fmt: skip
    out = torch.zeros_like(x)
    members: dict = defaultdict(list)
    for i in range(x.shape[0]):
        if bool(present[i]):
            members[index[i]].append(i)
    for idx in members.values():
        if len(idx) <= 1:
            continue
        ids = torch.tensor(idx)
        xs = x[ids]
        mu = xs.mean()
        out[ids] = (xs - mu) / (xs.std() + eps) if norm_by_std else xs - mu
    return out


def reference_slca_grpo_advantage(token_level_rewards: torch.Tensor, token_level_scores: torch.Tensor,
                                  response_mask: torch.Tensor, index: np.ndarray, reward_components: dict,
                                  norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """The reference estimator (spec §7.2), transcribed: per-row loops, as the repository computes it."""
    bsz = response_mask.shape[0]
    m = response_mask > 0.5
    proc_mask, sum_mask = torch.zeros_like(m), torch.zeros_like(m)
    proc_present, sum_present = torch.zeros(bsz, dtype=torch.bool), torch.zeros(bsz, dtype=torch.bool)
    for i in range(bsz):
        runs = _extract_segments_from_mask_1d(m[i])
        if not runs:
            continue
        s, e = runs[-1]
        sum_mask[i, s:e] = True
        sum_present[i] = True
        for s, e in runs[:-1]:
            proc_mask[i, s:e] = True
            proc_present[i] = True
    rc = reward_components
    penalty = (rc["should_no_call"] > 0.5) | (rc["score_total"] < 0)
    x_proc = torch.where(penalty, torch.zeros_like(rc["process_score"]), rc["process_score"])
    x_sum = torch.where(penalty, rc["score_total"], rc["summary_score"])
    kl = token_level_rewards - token_level_scores
    x_proc = x_proc + (kl * proc_mask).sum(-1)
    x_sum = x_sum + (kl * sum_mask).sum(-1)
    a_proc = _group_norm_present(x_proc, index, proc_present, norm_adv_by_std_in_grpo) * rc["w_process"]
    a_sum = _group_norm_present(x_sum, index, sum_present, norm_adv_by_std_in_grpo) * rc["w_respq"]
    adv = (proc_mask * a_proc.unsqueeze(-1) + sum_mask * a_sum.unsqueeze(-1)) * response_mask
    return adv, adv


def reward_components(infos: list[dict]) -> dict:
    """The reference's (B,) float32 component vectors (§7.1) from the reward dicts."""
    vec = lambda key: torch.tensor([float(info[key]) for info in infos], dtype=torch.float32)  # noqa: E731
    return {"process_score": vec("r_tool"), "summary_score": vec("r_sum"), "score_total": vec("score"),
            "should_no_call": vec("omission"), "w_process": 1.0, "w_respq": 1.0}  # fmt: skip


def interleaved(fns: dict[str, Callable[[], torch.Tensor]], rounds: int) -> tuple[dict[str, float], dict]:
    """Median seconds per function, timed alternately round after round (one warm-up call each)."""
    outs = {name: fn() for name, fn in fns.items()}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}, outs


def bench_reference(mask: torch.Tensor, uids: np.ndarray, infos: list[dict], rounds: int) -> dict:
    """SLCA: ours vs the transcribed reference on the full batch, interleaved; outputs must be equal."""
    rewards = torch.stack([place_rewards(mask[i], info, layout="slca") for i, info in enumerate(infos)])
    rc = reward_components(infos)
    med, outs = interleaved({
        "reference": lambda: reference_slca_grpo_advantage(torch.zeros_like(rewards, dtype=torch.float32),
                                                           torch.zeros_like(rewards, dtype=torch.float32),
                                                           mask, uids, rc)[0],
        "ours": lambda: compute_slca_advantage(rewards, mask, uids, None)[0],
    }, rounds)  # fmt: skip
    assert torch.allclose(outs["ours"], outs["reference"].to(outs["ours"].dtype), atol=1e-5), "SLCA outputs differ"
    diff = float((outs["ours"] - outs["reference"]).abs().max())
    return {"reference_ms": med["reference"] * 1e3, "ours_ms": med["ours"] * 1e3,
            "speedup": med["reference"] / med["ours"], "max_abs_diff": diff}


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
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the reference comparison")
    parser.add_argument("--reference-only", action="store_true", help="only the SLCA vs reference comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mask, uids, infos = make_batch(args.rows, args.tokens, seed=0)
    ref = bench_reference(mask, uids, infos, args.rounds)
    print(f"slca vs reference code (B={args.rows} T={args.tokens}, {args.rounds} interleaved rounds, medians): "
          f"reference {ref['reference_ms']:.1f} ms | ours {ref['ours_ms']:.1f} ms | speed-up x{ref['speedup']:.1f} | "
          f"outputs equal (max |diff| {ref['max_abs_diff']:.2e})")  # fmt: skip
    if args.reference_only:
        return
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
