"""Independently computed expected values for the rehearsal (`trainer.rehearse`): per-turn rewards, reward
placement and advantages of every algorithm, written as plain per-row Python loops from the papers' formulas.

Nothing here imports the code under test (`trainer.estimators`, `trainer.reward_manager`, `trainer.rewards`): the
rehearsal compares what verl's classes and our plugins produced with these values, so a bug in the vectorised
estimators, the reward layouts or the turn-reward rule shows up as a numeric mismatch (the golden vectors of issue
24). Inputs are what the agent loop recorded per trajectory: the response mask, the conversational runs (talked to
the simulated user), the executed calls per scored turn, the reward components of `trainer.compute_score`.

Formulas (see the estimators' module doc for the sources): group z-score ``(x - μ) / (σ + ε)`` over the members
where the quantity exists (SLCA, ToolPO; Bessel σ) or over all K members with absent turns as 0 (TARA, population
σ); fewer than two members or a constant group gives 0; λ is applied after normalisation; TARA's
``V_t = r_t · Σ_{k≥0} γ^k r_{t+k+1}`` and ``A_t = z(r)_t + λ·z(V)_t``; ToolPO's outcome term is verl's GRPO (a lone
member keeps ``x/(1+ε)``); conversational runs get 0 (`grpo`: verl broadcasts the outcome over the whole mask).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GoldenParams", "Trajectory", "expected_advantages", "expected_rewards", "expected_s_par",
           "expected_turn_rewards", "scored_runs_of"]  # fmt: skip


@dataclass(frozen=True)
class GoldenParams:
    lambda_tool: float = 1.0
    lambda_sum: float = 1.0
    tara_lambda: float = 0.5
    tara_gamma: float = 0.5
    toolpo_lambda: float = 1.0
    epsilon: float = 1e-6


@dataclass
class Trajectory:
    """One rehearsed trajectory as the loop recorded it."""

    uid: str
    mask: list[int]
    conversational: list[int]
    info: Mapping[str, Any]
    executed: list[list[dict[str, Any]]] = field(default_factory=list)


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of every run of 1s in a response mask (one generation each)."""
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def scored_runs_of(mask: Sequence[int], conversational: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) of the runs of ones that are not conversational."""
    return [r for j, r in enumerate(mask_runs(mask)) if j not in set(conversational)]


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _subset(gold: Mapping[str, Any], pred: Mapping[str, Any]) -> bool:
    if gold.get("name") != pred.get("name"):
        return False
    args = pred.get("arguments") if isinstance(pred.get("arguments"), dict) else {}
    return all(k in args and _canon(args[k]) == _canon(v) for k, v in (gold.get("arguments") or {}).items())


def _turn_ok(gold: Sequence[Mapping[str, Any]], pred: Sequence[Mapping[str, Any]]) -> bool:
    """Every gold call matched by a distinct executed call and no executed call left over (GUST's default "exact"
    turn rule; exhaustive search: rehearsal turns are tiny)."""

    def place(i: int, used: frozenset[int]) -> bool:
        if i == len(gold):
            return True
        return any(j not in used and _subset(gold[i], p) and place(i + 1, used | {j}) for j, p in enumerate(pred))

    return len(pred) == len(gold) and place(0, frozenset())


def expected_turn_rewards(gold_steps: Sequence[Sequence[Mapping[str, Any]]],
                          executed: Sequence[Sequence[Mapping[str, Any]]]) -> list[float]:  # fmt: skip
    """TARA r_t = 1 iff the calls EXECUTED in scored turn t are exactly gold step t, one to one (ToolVerse §3.3 with
    GUST's "exact" rule: the paper's subset rule let extra calls tie gold)."""
    return [1.0 if t < len(executed) and _turn_ok(g, executed[t]) else 0.0 for t, g in enumerate(gold_steps)]


def expected_s_par(gold_steps: Sequence[Sequence[Mapping[str, Any]]],
                   executed: Sequence[Sequence[Mapping[str, Any]]]) -> float:  # fmt: skip
    """S_par by the paper's rule: 1 iff the agent's first step (first scored turn that executed calls) holds as many
    calls as the first gold step (0 calls vs 0 when either side has none)."""
    first = next((len(turn) for turn in executed if turn), 0)
    return 1.0 if first == (len(gold_steps[0]) if gold_steps else 0) else 0.0


def _penalised(info: Mapping[str, Any]) -> bool:
    return bool(int(info.get("omission", 0))) or float(info["score"]) < 0


def expected_rewards(traj: Trajectory, layout: str, turn_rewards: Sequence[float]) -> dict[int, float]:
    """{token position: reward} the layout must produce (reference §7.2 omission override included)."""
    info, ends = traj.info, [e - 1 for _, e in scored_runs_of(traj.mask, traj.conversational)]
    if layout == "outcome":
        return {len(traj.mask) - 1: float(info["score"])} if traj.mask else {}
    if not ends:
        return {}
    pen = _penalised(info)
    summary = float(info["score"]) if pen else float(info["r_sum"])
    tool = 0.0 if pen else float(info["r_tool"])
    out: dict[int, float] = {}
    if layout in ("tara", "slca_tara"):
        n = len(ends) if layout == "tara" else len(ends) - 1
        for t in range(min(n, len(turn_rewards))):
            out[ends[t]] = 0.0 if pen else float(turn_rewards[t])
        if layout == "slca_tara":
            out[ends[-1]] = summary
        return out
    if layout == "toolpo":  # ToolPO's paper rewards
        last_tool, final = float(info["r_action"]), float(info["r_succ"])
    elif layout == "toolpo_hierr":  # the reference code's variant
        last_tool, final = tool, float(info["score"])
    elif layout == "slca":
        last_tool, final = tool, summary
    else:
        raise ValueError(f"no golden placement for layout {layout!r}")
    if len(ends) >= 2:
        out[ends[-2]] = last_tool
    out[ends[-1]] = final
    return out


def _z(values: dict[int, float], groups: Mapping[int, str], eps: float, *, population: bool = False,
       members: Sequence[int] | None = None, lone_raw: bool = False) -> dict[int, float]:  # fmt: skip
    """z-score of ``values`` per group; statistics over ``members`` (default: the keys of ``values``, i.e. present)."""
    stats_of: dict[str, list[float]] = defaultdict(list)
    for i in values if members is None else members:
        stats_of[groups[i]].append(values.get(i, 0.0))
    out = {}
    for i, x in values.items():
        xs = stats_of[groups[i]]
        if len(xs) == 1 and lone_raw:
            out[i] = x / (1.0 + eps)
            continue
        if len(xs) < 2 or max(xs) == min(xs):
            out[i] = 0.0
            continue
        mu = sum(xs) / len(xs)
        sd = math.sqrt(sum((v - mu) ** 2 for v in xs) / (len(xs) - (0 if population else 1)))
        out[i] = (x - mu) / (sd + eps)
    return out


def _tara(r: dict[int, list[float]], rows: Sequence[int], groups: Mapping[int, str], p: GoldenParams) -> dict:
    """{row: [A_t]} for the rows' turn rewards ``r`` (absent turns: 0 in the statistics, no advantage)."""
    width = max((len(v) for v in r.values()), default=0)
    out: dict[int, list[float]] = {i: [] for i in rows}
    for t in range(width):
        local = {i: r[i][t] for i in rows if t < len(r[i])}
        value = {i: r[i][t] * sum(p.tara_gamma**k * r[i][t + k + 1] for k in range(len(r[i]) - t - 1))
                 for i in rows if t < len(r[i])}  # fmt: skip
        full_r = {i: local.get(i, 0.0) for i in rows}
        full_v = {i: value.get(i, 0.0) for i in rows}
        z_r = _z(full_r, groups, p.epsilon, population=True)
        z_v = _z(full_v, groups, p.epsilon, population=True)
        for i in local:
            out[i].append(z_r[i] + p.tara_lambda * z_v[i])
    return out


def expected_advantages(trajs: Sequence[Trajectory], algo: str, rewards: Sequence[Mapping[int, float]],
                        p: GoldenParams) -> list[list[float]]:  # fmt: skip
    """Per-token advantages of every trajectory (length of its mask) for ``algo`` from the placed ``rewards``."""
    groups = {i: t.uid for i, t in enumerate(trajs)}
    runs = [scored_runs_of(t.mask, t.conversational) for t in trajs]
    sums = [[sum(rw.get(k, 0.0) for k in range(s, e)) for s, e in rr] for rw, rr in zip(rewards, runs, strict=True)]
    out = [[0.0] * len(t.mask) for t in trajs]
    rows = range(len(trajs))
    if algo == "grpo":
        score = {i: sum(rewards[i].values()) for i in rows}
        adv = _z(score, groups, p.epsilon, lone_raw=True)
        return [[adv[i] if m else 0.0 for m in t.mask] for i, t in enumerate(trajs)]
    x_sum = {i: sums[i][-1] for i in rows if sums[i]}
    x_tool = {i: sum(sums[i][:-1]) for i in rows if len(sums[i]) >= 2}
    per_run: list[list[float]] = [[0.0] * len(rr) for rr in runs]
    if algo in ("slca", "slca_tara"):
        a_sum = _z(x_sum, groups, p.epsilon)
        for i in x_sum:
            per_run[i][-1] = p.lambda_sum * a_sum[i]
        if algo == "slca":
            a_tool = _z(x_tool, groups, p.epsilon)
            for i in x_tool:
                per_run[i][:-1] = [p.lambda_tool * a_tool[i]] * (len(runs[i]) - 1)
        else:
            tara = _tara({i: sums[i][:-1] for i in rows}, list(rows), groups, p)
            for i in rows:
                per_run[i][: len(tara[i])] = [p.lambda_tool * a for a in tara[i]]
    elif algo == "tara":
        tara = _tara({i: sums[i] for i in rows}, list(rows), groups, p)
        per_run = [list(tara[i]) for i in rows]
    elif algo == "toolpo":
        a_out = _z(x_sum, groups, p.epsilon, lone_raw=True)
        a_tool = _z(x_tool, groups, p.epsilon)
        for i in x_sum:
            per_run[i] = [a_out[i] + p.toolpo_lambda * a_tool.get(i, 0.0)] * (len(runs[i]) - 1) + [a_out[i]]
    else:
        raise ValueError(f"no golden estimator for {algo!r}")
    for i, rr in enumerate(runs):
        for (s, e), a in zip(rr, per_run[i], strict=True):
            out[i][s:e] = [a] * (e - s)
    return out
