"""Segment- and turn-aware advantage estimators for verl: ``slca``, ``tara``, ``slca_tara``, ``toolpo``.

Importing this module registers the four estimators in verl's registry (``register_adv_est``); the
``verl.plugins`` entry point (`trainer.plugin`) imports it in every process that imports verl.

What the estimators receive. verl 0.9.1 calls a registered estimator with exactly
``token_level_rewards``, ``response_mask``, ``index`` (the group uid per row) and ``config`` (the
``algorithm`` section) — never the per-sample reward components. The components therefore travel
*positionally*: `trainer.reward_manager` writes each reward at the LAST token of the span it belongs to
(see its ``LAYOUTS``) and the estimators read them back by summing ``token_level_rewards`` over the
span. A KL-in-reward penalty, if enabled, folds into the span sums the same way.

Spans. The agent's generations are the maximal runs of ``response_mask == 1``, left to right
(observations in between have mask 0). The *summary* segment is the last SCORED run, the *tool* (process)
segment is the union of all earlier scored runs; a row with one scored run has no tool segment. TARA's turn
``t`` is scored run ``t``.

Agent turns vs conversational runs (simulated-user mode). A generation answered by the simulated user (a
question or a message to the user) is not a turn of the task: the agent loop records those runs
(``extra_fields["gust_user_turns"]``, `trainer.user_agent_loop`), the reward layouts put no reward on them, and the
estimators must not count them either (otherwise TARA's turn t is the t-th generation including questions, and a
dialogue that ends on a message to the user puts R_sum in the tool segment). verl gives a registered estimator
no per-sample fields, so the record travels in a ``TurnRecord`` that the ``gust_sync`` trainer
(`trainer.v1_trainer`) reads from TransferQueue for the batch and installs with ``agent_turns(record)`` around
verl's own ``_compute_advantage``; the rehearsal does the same around its call. The estimators then segment the
*scored* runs only (``scored_runs``: the response mask with the conversational runs removed). **Conversational
runs get advantage exactly 0** (documented value): no reward channel scores a message to the user, so neither
segment's credit may leak into it; its tokens stay in the loss mask (KL and the token-mean denominator count
them) but receive no policy-gradient push. Without a record (fixed-prompt mode) every run is scored.

Normalisation. Every statistic is computed per group (rows sharing ``index``); SLCA and ToolPO use the members
where the span exists, TARA all K members of the group (App. B.4; see ``tara``). Fewer than two present
members, or a constant group, gives exactly 0 (there is no relative preference signal). ``epsilon`` is added
to the standard deviation. When the ``algorithm`` section sets ``norm_adv_by_std_in_grpo: false`` every
estimator subtracts the mean only.

* ``slca`` — SLCA-GRPO (reference code ``compute_slca_grpo_advantage``): ``x_tool = Σ_tool r``,
  ``x_sum = Σ_summary r``; group z-score with the unbiased (Bessel) std; then ``λ_tool``/``λ_sum`` are
  applied AFTER normalisation; each advantage goes only to its own tokens. Omission rows arrive with
  ``x_tool = 0`` and ``x_sum = −0.5`` (the reward manager applies the override), so the penalty lands on the
  summary tokens.
* ``tara`` — ToolVerse Turn-Aware Relative Advantage. ``r_t`` = reward of run ``t``.
  ``A_local = z_t(r)``; gated future value ``V_t = r_t · Σ_{k≥0} γ^k r_{t+k+1}`` (main-text formula of
  §3.3; App. A.1 writes ``Σ_{k≥1} γ^k r_{t+k}``, which is ``γ`` times it and gives the same z-score up to
  ``epsilon``); ``A_future = z_t(V)`` — the paper gives no formula for ``A_future``, we use the same-turn
  group z-score of ``V`` like ``A_local``; ``A_t = A_local + λ·A_future``. ``z_t`` uses the population std
  over ALL K rollouts of the group (App. B.4: ``μ_t = 1/K Σ_{i=1..K} x_{i,t}``): a rollout that has no turn ``t``
  enters turn ``t``'s statistics with ``r_t = V_t = 0`` (it did not make that turn's gold calls, the reward
  contract's reading too) and receives no advantage there (it has no such tokens). The variant that leaves such
  rollouts out of the statistics is kept as ``algorithm.gust.tara_absent_turns: exclude`` (default ``zero``).
  Distractor property (App. A.3): if ``r_t = 0`` then ``V_t = 0`` and ``A_t ≤ 0`` — this holds whenever every
  turn reward in the group is ``≥ 0`` (then ``μ_t(r) ≥ 0`` and ``V ≥ 0`` so ``μ_t(V) ≥ 0``), ``γ ≥ 0`` and
  ``λ ≥ 0``; it holds for the paper's binary rewards. It can FAIL when rewards can be negative (e.g. a
  KL-in-reward term folded into the turn sums, or negative turn penalties): then ``μ_t`` may be negative and
  ``A_local > 0`` at ``r_t = 0``.
* ``slca_tara`` — TARA over the tool segment's turns (the summary run is neither a TARA turn nor part of any
  future sum), scaled by ``λ_tool``; the summary run gets SLCA's summary advantage (``λ_sum``).
* ``toolpo`` — the reference ``toolpo_grpo``: ``A_out`` = GRPO on the outcome (the summary-span sum;
  singleton groups keep verl's ``μ=0, σ=1`` fallback), ``A_tool`` = presence-filtered z-score of the tool-span
  sum over rows that have a tool segment, times ``toolpo_lambda``; tool tokens get ``A_out + A_tool``, summary
  tokens ``A_out``.

Knobs live in ``algorithm.gust`` (``EstimatorParams``): verl's ``AlgoConfig`` dataclass has no extra fields
(``omega_conf_to_dataclass`` raises ``ConfigKeyError: Key 'gust' not in 'AlgoConfig'``), but verl 0.9.1
passes the ``algorithm`` DictConfig through to the estimator unchanged, so the sub-key arrives.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from pydantic import Field
from verl.trainer.ppo.core_algos import register_adv_est

from data.models import StrictModel
from gustforge.errors import InputError

__all__ = [
    "ESTIMATOR_NAMES",
    "EstimatorParams",
    "RunLayout",
    "TurnRecord",
    "TwoSegments",
    "two_segments",
    "agent_turns",
    "current_turn_record",
    "scored_runs",
    "compute_slca_advantage",
    "compute_slca_tara_advantage",
    "compute_tara_advantage",
    "compute_toolpo_advantage",
    "group_ids",
    "group_normalize",
    "read_params",
    "run_sums",
    "segment_runs",
    "tara_turn_advantages",
]

ESTIMATOR_NAMES: tuple[str, ...] = ("slca", "tara", "slca_tara", "toolpo")


class EstimatorParams(StrictModel):
    """The estimators' knobs, read from ``algorithm.gust`` (defaults = the papers' settings)."""

    lambda_tool: float = Field(1.0, description="SLCA λ_tool: weight of the tool-segment advantage (post-norm).")
    lambda_sum: float = Field(1.0, description="SLCA λ_sum: weight of the summary advantage (post-norm).")
    tara_lambda: float = Field(0.5, description="TARA λ: weight of A_future in A_local + λ·A_future.")
    tara_gamma: float = Field(0.5, ge=0.0, le=1.0, description="TARA γ: discount of future turn rewards.")
    toolpo_lambda: float = Field(1.0, description="ToolPO λ: weight of the normalised local tool advantage.")
    toolpo_reward: Literal["paper", "hierr"] = Field(
        "paper", description="ToolPO rewards: paper R_succ/R_action, or the reference code's HierR total/R_tool."
    )
    tara_absent_turns: Literal["zero", "exclude"] = Field(
        "zero", description="TARA: a rollout lacking turn t counts as r_t = 0 in turn t's statistics (App. B.4), "
        "or is left out of them (exclude)."
    )
    epsilon: float = Field(1e-6, gt=0.0, description="Added to the group std before dividing.")
    norm_by_std: bool = Field(True, description="Divide by std (from algorithm.norm_adv_by_std_in_grpo).")


def read_params(config: Any) -> EstimatorParams:
    """Read ``EstimatorParams`` from verl's ``algorithm`` config (DictConfig, AlgoConfig, dict or None).

    Args:
        config: What verl passes as ``config``; ``config.gust`` holds our knobs and
            ``config.norm_adv_by_std_in_grpo`` the std switch.

    Returns:
        The validated parameters (defaults where a key is absent).
    """
    if config is None:
        return EstimatorParams()
    gust = config.get("gust", None) or {}
    if isinstance(gust, DictConfig):
        gust = OmegaConf.to_container(gust, resolve=True)
    if not isinstance(gust, Mapping):
        raise InputError(f"algorithm.gust must be a mapping, got {type(gust).__name__}")
    norm = bool(config.get("norm_adv_by_std_in_grpo", True))
    return EstimatorParams.model_validate({"norm_by_std": norm, **dict(gust)})


@dataclass(frozen=True)
class RunLayout:
    """The runs of ``response_mask == 1`` of a batch.

    Attributes:
        mask: (B, T) bool, the generated tokens.
        label: (B, T) int64, 1-based run number of each generated token, 0 elsewhere (so a per-run table
            with a zero column prepended can be gathered with it directly).
        n_runs: (B,) int64, number of runs per row.
    """

    mask: torch.Tensor
    label: torch.Tensor
    n_runs: torch.Tensor

    @property
    def run_id(self) -> torch.Tensor:
        """(B, T) 0-based run index of each generated token, -1 elsewhere."""
        return self.label - 1

    @property
    def max_runs(self) -> int:
        return int(self.n_runs.max().item()) if self.n_runs.numel() else 0

    def run_present(self, n_cols: int) -> torch.Tensor:
        """(B, n_cols) bool: row i has run j."""
        cols = torch.arange(n_cols, device=self.n_runs.device)
        return cols.unsqueeze(0) < self.n_runs.unsqueeze(1)


def segment_runs(response_mask: torch.Tensor) -> RunLayout:
    """Split every row of ``response_mask`` into its maximal runs of ones.

    Args:
        response_mask: (B, T) mask, 1 (or True) on tokens the policy generated.

    Returns:
        The run layout.
    """
    if response_mask.dtype == torch.bool:
        mask = response_mask
    elif response_mask.is_floating_point():
        mask = response_mask > 0.5
    else:
        mask = response_mask != 0
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]
    run_no = starts.cumsum(dim=1)
    n_runs = run_no[:, -1].clone() if mask.shape[1] else torch.zeros(mask.shape[0], dtype=torch.long)
    label = run_no.mul_(mask)
    return RunLayout(mask=mask, label=label, n_runs=n_runs)


CONVERSATIONAL_RUNS_KEY = "gust_user_turns"  # = trainer.reward_manager.UNSCORED_RUNS_KEY (the loop's record)


@dataclass(frozen=True)
class TurnRecord:
    """Per row of a batch: the 0-based runs of ``response_mask == 1`` that talked to the simulated user.

    Built from the agent loop's record (``extra_fields["gust_user_turns"]``), row order = the batch's.
    """

    conversational: tuple[tuple[int, ...], ...]

    @classmethod
    def from_extra_fields(cls, extra_fields: Iterable[Any]) -> TurnRecord:
        """One ``TurnRecord`` from the per-sample ``extra_fields`` dicts (missing key or non-dict = no such runs)."""
        rows = []
        for extra in extra_fields:
            raw = extra.get(CONVERSATIONAL_RUNS_KEY) if isinstance(extra, Mapping) else None
            runs = json.loads(raw) if isinstance(raw, str) else list(raw or [])
            rows.append(tuple(sorted({int(r) for r in runs})))
        return cls(conversational=tuple(rows))

    @property
    def any(self) -> bool:
        return any(self.conversational)


_TURN_RECORD: ContextVar[TurnRecord | None] = ContextVar("gust_turn_record", default=None)


@contextmanager
def agent_turns(record: TurnRecord | None) -> Iterator[None]:
    """Make ``record`` the turn structure every estimator call inside the block uses (see the module doc)."""
    token = _TURN_RECORD.set(record)
    try:
        yield
    finally:
        _TURN_RECORD.reset(token)


def current_turn_record() -> TurnRecord | None:
    """The record installed by ``agent_turns`` (None outside one: every run is scored)."""
    return _TURN_RECORD.get()


def scored_runs(response_mask: torch.Tensor, record: TurnRecord | None = None) -> RunLayout:
    """The run layout of the SCORED runs: ``response_mask`` minus the conversational runs of ``record``.

    Args:
        response_mask: (B, T) generated-token mask.
        record: Conversational runs per row (default: the installed record, if any).

    Returns:
        ``segment_runs`` of the agent-turn mask (conversational tokens are outside every run: label 0).

    Raises:
        InputError: The record has a different number of rows than the batch, or names a run the row lacks
            (the record and the batch would be misaligned).
    """
    record = current_turn_record() if record is None else record
    runs = segment_runs(response_mask)
    if record is None or not record.any:
        return runs
    if len(record.conversational) != response_mask.shape[0]:
        raise InputError(f"turn record has {len(record.conversational)} rows, the batch {response_mask.shape[0]}")
    rows = [i for i, conv in enumerate(record.conversational) for _ in conv]
    cols = [r + 1 for conv in record.conversational for r in conv]
    if any(c > int(runs.n_runs[i]) for i, c in zip(rows, cols, strict=True)):
        raise InputError("turn record names a run the response mask does not have (record and batch misaligned)")
    table = torch.zeros(response_mask.shape[0], runs.max_runs + 1, dtype=torch.bool, device=response_mask.device)
    table[torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)] = True
    return segment_runs(runs.mask & ~table.gather(1, runs.label))


def run_sums(values: torch.Tensor, runs: RunLayout, n_cols: int) -> torch.Tensor:
    """Sum ``values`` over each run: (B, T) → (B, n_cols) float64; runs ≥ n_cols and mask-0 tokens dropped.

    Only the non-zero entries are visited (rewards are sparse: one value per span or turn).
    """
    rows, cols = torch.nonzero(values, as_tuple=True)
    label = runs.label[rows, cols].clamp(max=n_cols + 1)
    out = torch.zeros(values.shape[0], n_cols + 2, dtype=torch.float64, device=values.device)
    out.index_put_((rows, label), values[rows, cols].to(torch.float64), accumulate=True)
    return out[:, 1 : n_cols + 1]


def group_ids(index: Any, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map verl's per-row group uids (any hashable, e.g. uuid strings) to dense ids 0..G-1.

    Args:
        index: Array-like of length B (verl passes ``non_tensor_batch["uid"]``).
        device: Where the ids should live.

    Returns:
        (ids as a (B,) int64 tensor, G).
    """
    if index is None:
        raise InputError("group-relative estimators need index (the 'uid' column)")
    _, inverse = np.unique(np.asarray(index), return_inverse=True)
    ids = torch.as_tensor(inverse.reshape(-1), dtype=torch.long, device=device)
    return ids, int(inverse.max()) + 1 if inverse.size else 0


def group_normalize(
    x: torch.Tensor,
    present: torch.Tensor,
    groups: tuple[torch.Tensor, int],
    *,
    eps: float,
    unbiased: bool,
    scale: bool = True,
    singleton_raw: bool = False,
    stats: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-(group, column) z-score of ``x`` over the present members only (or over ``stats``).

    Args:
        x: (B, C) float64 values.
        present: (B, C) bool; absent entries receive no value and (unless ``stats`` is given) do not enter
            the statistics.
        groups: ``group_ids`` output.
        eps: Added to the std.
        unbiased: Bessel-corrected std (SLCA, GRPO) or population std (TARA, App. B.4).
        scale: Divide by std + eps; otherwise subtract the mean only.
        singleton_raw: A lone present member gets ``x/(1+eps)`` (verl GRPO's μ=0, σ=1 fallback) instead of 0.
        stats: (B, C) bool, the entries that enter the statistics (default ``present``).

    Returns:
        (B, C) float64; 0 for absent entries, groups with < 2 present members and constant groups.
    """
    gid, n_groups = groups
    n_cols = x.shape[1]
    flat = (gid.unsqueeze(1) * n_cols + torch.arange(n_cols, device=x.device)).reshape(-1)
    p = (present if stats is None else stats).reshape(-1).to(x.dtype)
    receives = present.reshape(-1)
    xv = x.reshape(-1)

    def per_cell(v: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_groups * n_cols, dtype=x.dtype, device=x.device).index_add_(0, flat, v)

    count = per_cell(p)
    mean = per_cell(xv * p) / count.clamp(min=1)
    dev = (xv - mean[flat]) * p
    std = (per_cell(dev * dev) / (count - (1 if unbiased else 0)).clamp(min=1)).sqrt()
    lo = torch.full_like(count, float("inf")).scatter_reduce_(0, flat, xv.masked_fill(p == 0, float("inf")), "amin")
    hi = torch.full_like(count, -float("inf")).scatter_reduce_(0, flat, xv.masked_fill(p == 0, -float("inf")), "amax")
    varies = (count >= 2) & (hi > lo)
    z = dev / (std[flat] + eps) if scale else dev
    out = torch.where(varies[flat] & (p > 0) & receives, z, torch.zeros_like(z))
    if singleton_raw:
        lone = (count[flat] == 1) & (p > 0) & receives
        out = torch.where(lone, xv / (1.0 + eps) if scale else xv, out)
    return out.reshape(x.shape)


def _route(table: torch.Tensor, runs: RunLayout, dtype: torch.dtype) -> torch.Tensor:
    """Broadcast a per-run advantage table (B, J) to the tokens of each run; 0 outside the mask."""
    padded = F.pad(table.to(dtype), (1, 0))  # column 0 = the value of tokens outside every run
    return padded.gather(1, runs.label)


def _segment_scalars(rewards: torch.Tensor, runs: RunLayout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-run sums plus (x_tool, x_summary) per row, all float64."""
    per_run = run_sums(rewards, runs, max(runs.max_runs, 1))
    last = (runs.n_runs - 1).clamp(min=0).unsqueeze(1)
    x_sum = per_run.gather(1, last).squeeze(1) * (runs.n_runs >= 1)
    x_tool = per_run.sum(dim=1) - x_sum
    return per_run, x_tool, x_sum


@dataclass(frozen=True)
class TwoSegments:
    """The tool/summary split of a batch without per-token run labels (the SLCA and ToolPO fast path).

    Attributes:
        mask: (B, T) bool, the scored tokens (conversational runs removed).
        n_runs: (B,) int64, scored runs per row, capped at 2 (0: none, 1: summary only, 2: tool and summary).
        last_start: (B,) int64, first token of the last scored run (T for a row without runs); the summary tokens are
            ``mask[i, last_start[i]:]``, the tool tokens ``mask[i, :last_start[i]]``.
    """

    mask: torch.Tensor
    n_runs: torch.Tensor
    last_start: torch.Tensor

    @property
    def summary(self) -> torch.Tensor:
        positions = torch.arange(self.mask.shape[1], device=self.mask.device)
        return self.mask & (positions.unsqueeze(0) >= self.last_start.unsqueeze(1))

    @property
    def tool(self) -> torch.Tensor:
        return self.mask & ~self.summary


def _as_bool(response_mask: torch.Tensor) -> torch.Tensor:
    if response_mask.dtype == torch.bool:
        return response_mask
    return response_mask > 0.5 if response_mask.is_floating_point() else response_mask.bool()


def _run_starts(mask: torch.Tensor) -> torch.Tensor:
    starts = mask.clone()
    starts[:, 1:] &= ~mask[:, :-1]
    return starts


def _drop_conversational(mask: torch.Tensor, record: TurnRecord | None) -> torch.Tensor:
    """``mask`` without the record's conversational runs (row by row, only rows that have some)."""
    if record is None or not record.any:
        return mask
    if len(record.conversational) != mask.shape[0]:
        raise InputError(f"turn record has {len(record.conversational)} rows, the batch {mask.shape[0]}")
    mask = mask.clone()
    for i, conv in enumerate(record.conversational):
        if not conv:
            continue
        row = F.pad(mask[i].to(torch.int8), (1, 1))
        edges = row[1:] - row[:-1]
        starts, ends = torch.nonzero(edges == 1).flatten(), torch.nonzero(edges == -1).flatten()
        if max(conv) >= starts.numel():
            raise InputError("turn record names a run the response mask does not have (record and batch misaligned)")
        for run in conv:
            mask[i, int(starts[run]) : int(ends[run])] = False
    return mask


def two_segments(response_mask: torch.Tensor, record: TurnRecord | None = None) -> TwoSegments:
    """Split every row into tool tokens (earlier scored runs) and summary tokens (the last scored run).

    Equivalent to ``scored_runs`` + "last run vs the others", without the cumulative sum and the (B, T) int64 label
    tensor (issue 24: the int64 ``cumsum`` was the hotspot): three row reductions in numpy (several times faster than
    torch's on CPU) — the first scored token, the start of the last run (reversed arg-max over the run starts) and
    "has a token" — give the split; a row has a tool segment iff its first token lies before its last run's start.
    """
    mask = _drop_conversational(_as_bool(response_mask), current_turn_record() if record is None else record)
    on = mask.cpu().numpy()
    width = on.shape[1]
    starts = np.empty_like(on)  # run starts: on[t] and not on[t-1] (= on[t] > on[t-1] for booleans), no temporaries
    starts[:, 0] = on[:, 0]
    np.greater(on[:, 1:], on[:, :-1], out=starts[:, 1:])
    has_run = on.any(axis=1)
    last = np.where(has_run, (width - 1) - starts[:, ::-1].argmax(axis=1), width)
    first = np.where(has_run, on.argmax(axis=1), width)
    n_runs = has_run.astype(np.int64) + (first < last)  # 0, 1, or 2 = "two or more" (all the estimators ask)
    device = mask.device
    return TwoSegments(mask=mask, n_runs=torch.from_numpy(n_runs).to(device),
                       last_start=torch.from_numpy(last).to(device))


def _two_segment_advantage(rewards: torch.Tensor, seg: TwoSegments,
                           per_row: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                           ) -> torch.Tensor:  # fmt: skip
    """Sum the rewards over each row's scored tool / summary tokens, turn the sums into per-row advantages with
    ``per_row(x_tool, x_summary)`` (float64 (B,) each → (a_tool, a_summary)), and broadcast them to their tokens.

    One float32 copy of the scored mask serves both steps: per row, two dot products give the segment sums (float32
    accumulation, as verl's own tensors; a segment's sum reads only its own tokens, so changing R_sum leaves x_tool
    bit-identical), then two in-place scalings turn the same buffer into the advantages (0 outside the scored runs).
    """
    values = rewards.detach().to(torch.float32).cpu().numpy()  # no copy for float32 CPU tensors (bf16-safe)
    buffer = seg.mask.cpu().numpy().view(np.uint8).astype(np.float32)  # uint8 → float32: ~2× faster than bool
    starts = seg.last_start.tolist()
    x_tool = np.empty(len(starts), dtype=np.float64)
    x_sum = np.empty(len(starts), dtype=np.float64)
    for i, start in enumerate(starts):
        x_tool[i] = np.dot(buffer[i, :start], values[i, :start])
        x_sum[i] = np.dot(buffer[i, start:], values[i, start:])
    a_tool, a_sum = (a.to(torch.float32).cpu().numpy() for a in per_row(torch.from_numpy(x_tool),
                                                                        torch.from_numpy(x_sum)))  # fmt: skip
    for i, start in enumerate(starts):
        buffer[i, :start] *= a_tool[i]
        buffer[i, start:] *= a_sum[i]
    return torch.from_numpy(buffer).to(device=rewards.device, dtype=rewards.dtype)


def _is_summary_col(runs: RunLayout, n_cols: int) -> torch.Tensor:
    cols = torch.arange(n_cols, device=runs.n_runs.device).unsqueeze(0)
    return cols == (runs.n_runs - 1).unsqueeze(1)


def _future_matrix(n_cols: int, gamma: float, device: torch.device) -> torch.Tensor:
    """D with D[s, t] = γ^(s-t-1) for s > t, else 0, so (r @ D)[t] = Σ_{k≥0} γ^k r[t+k+1]."""
    s = torch.arange(n_cols, device=device).unsqueeze(1)
    t = torch.arange(n_cols, device=device).unsqueeze(0)
    powers = torch.pow(torch.tensor(gamma, dtype=torch.float64, device=device), (s - t - 1).clamp(min=0))
    return torch.where(s > t, powers, torch.zeros_like(powers))


def tara_turn_advantages(
    r: torch.Tensor, present: torch.Tensor, groups: tuple[torch.Tensor, int], params: EstimatorParams
) -> torch.Tensor:
    """TARA per-turn advantages ``A_local + λ·A_future`` for a (B, J) table of turn rewards.

    Args:
        r: (B, J) float64 turn rewards; absent turns must hold 0.
        present: (B, J) bool, row i has turn t.
        groups: ``group_ids`` output.
        params: λ, γ, ε and the std switch.

    Returns:
        (B, J) float64 advantages, 0 on absent turns.
    """
    r = r * present
    value = r * (r @ _future_matrix(r.shape[1], params.tara_gamma, r.device))
    stats = torch.ones_like(present) if params.tara_absent_turns == "zero" else present
    norm = {"eps": params.epsilon, "unbiased": False, "scale": params.norm_by_std, "stats": stats}
    local = group_normalize(r, present, groups, **norm)
    future = group_normalize(value, present, groups, **norm)
    return local + params.tara_lambda * future


@register_adv_est("slca")
def compute_slca_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SLCA-GRPO: separate group z-scores for the tool and summary segments (see module doc).

    Args:
        token_level_rewards: (B, T) rewards laid out by the ``slca`` layout of `trainer.reward_manager`.
        response_mask: (B, T) generated-token mask.
        index: (B,) group uids.
        config: verl's ``algorithm`` section (``gust`` knobs, ``norm_adv_by_std_in_grpo``).
        **kwargs: Ignored extras verl may pass (e.g. ``reward_baselines``).

    Returns:
        (advantages, returns), both (B, T); returns = advantages.
    """
    params = read_params(config)
    seg = two_segments(response_mask)
    groups = group_ids(index, torch.device("cpu"))
    norm = {"eps": params.epsilon, "unbiased": True, "scale": params.norm_by_std}
    has_tool, has_run = (seg.n_runs >= 2).cpu().unsqueeze(1), (seg.n_runs >= 1).cpu().unsqueeze(1)

    def per_row(x_tool: torch.Tensor, x_sum: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a_tool = group_normalize(x_tool.unsqueeze(1), has_tool, groups, **norm).squeeze(1)
        a_sum = group_normalize(x_sum.unsqueeze(1), has_run, groups, **norm).squeeze(1)
        return params.lambda_tool * a_tool, params.lambda_sum * a_sum

    adv = _two_segment_advantage(token_level_rewards, seg, per_row)
    return adv, adv


@register_adv_est("tara")
def compute_tara_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TARA: turn t's ``A_local + λ·A_future`` on turn t's tokens (see module doc).

    Args:
        token_level_rewards: (B, T) rewards laid out by the ``tara`` layout (r_t at run t's last token).
        response_mask: (B, T) generated-token mask.
        index: (B,) group uids.
        config: verl's ``algorithm`` section.
        **kwargs: Ignored extras.

    Returns:
        (advantages, returns), both (B, T).
    """
    params = read_params(config)
    runs = scored_runs(response_mask)
    n_cols = max(runs.max_runs, 1)
    r = run_sums(token_level_rewards, runs, n_cols)
    groups = group_ids(index, token_level_rewards.device)
    table = tara_turn_advantages(r, runs.run_present(n_cols), groups, params)
    adv = _route(table, runs, token_level_rewards.dtype)
    return adv, adv


@register_adv_est("slca_tara")
def compute_slca_tara_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TARA on the tool segment's turns, SLCA's summary advantage on the summary segment.

    Args:
        token_level_rewards: (B, T) rewards laid out by the ``slca_tara`` layout.
        response_mask: (B, T) generated-token mask.
        index: (B,) group uids.
        config: verl's ``algorithm`` section.
        **kwargs: Ignored extras.

    Returns:
        (advantages, returns), both (B, T).
    """
    params = read_params(config)
    runs = scored_runs(response_mask)
    n_cols = max(runs.max_runs, 1)
    per_run, _, x_sum = _segment_scalars(token_level_rewards, runs)
    groups = group_ids(index, token_level_rewards.device)
    is_sum = _is_summary_col(runs, n_cols)
    tool_turn = runs.run_present(n_cols) & ~is_sum
    a_tool = tara_turn_advantages(per_run * tool_turn, tool_turn, groups, params)
    norm = {"eps": params.epsilon, "unbiased": True, "scale": params.norm_by_std}
    a_sum = group_normalize(x_sum.unsqueeze(1), (runs.n_runs >= 1).unsqueeze(1), groups, **norm)
    table = torch.where(is_sum, params.lambda_sum * a_sum, params.lambda_tool * a_tool)
    adv = _route(table, runs, token_level_rewards.dtype)
    return adv, adv


@register_adv_est("toolpo")
def compute_toolpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ToolPO: outcome advantage everywhere plus the local tool advantage on tool tokens.

    Args:
        token_level_rewards: (B, T) rewards laid out by the ``toolpo`` layout (outcome on the summary span,
            tool reward on the tool span).
        response_mask: (B, T) generated-token mask.
        index: (B,) group uids.
        config: verl's ``algorithm`` section.
        **kwargs: Ignored extras.

    Returns:
        (advantages, returns), both (B, T).
    """
    params = read_params(config)
    seg = two_segments(response_mask)
    groups = group_ids(index, torch.device("cpu"))
    norm = {"eps": params.epsilon, "unbiased": True, "scale": params.norm_by_std}
    has_tool, has_run = (seg.n_runs >= 2).cpu().unsqueeze(1), (seg.n_runs >= 1).cpu().unsqueeze(1)

    def per_row(x_tool: torch.Tensor, x_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a_out = group_normalize(x_out.unsqueeze(1), has_run, groups, singleton_raw=True, **norm).squeeze(1)
        a_tool = group_normalize(x_tool.unsqueeze(1), has_tool, groups, **norm).squeeze(1)
        return a_out + params.toolpo_lambda * a_tool, a_out

    adv = _two_segment_advantage(token_level_rewards, seg, per_row)
    return adv, adv
