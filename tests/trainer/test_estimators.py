"""Estimators: SLCA golden vectors (reference §7.4), presence filtering, λ after normalisation, TARA, ToolPO."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from pydantic import ValidationError
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from trainer.estimators import (
    EstimatorParams,
    compute_slca_advantage,
    compute_slca_tara_advantage,
    compute_tara_advantage,
    compute_toolpo_advantage,
    read_params,
    segment_runs,
)

GOLDEN_MASKS = ["111001100111", "110001110000", "111100000000", "110011111000"]
EPS = 1e-6


def _mask(rows: list[str]) -> torch.Tensor:
    return torch.tensor([[int(c) for c in r] for r in rows], dtype=torch.int64)


def _runs(row: str) -> list[tuple[int, int]]:
    out, start = [], None
    for i, c in enumerate(row + "0"):
        if c == "1" and start is None:
            start = i
        if c == "0" and start is not None:
            out.append((start, i))
            start = None
    return out


def _place(rows: list[str], per_row: list[list[float]]) -> torch.Tensor:
    """Reward r_j at the last token of run j (test-side placement, independent of trainer.reward_manager)."""
    out = torch.zeros(len(rows), len(rows[0]))
    for i, (row, values) in enumerate(zip(rows, per_row, strict=True)):
        for (_, end), value in zip(_runs(row), values, strict=False):
            out[i, end - 1] = value
    return out


def _place_segments(rows: list[str], tool: list[float | None], summary: list[float]) -> torch.Tensor:
    """R_tool at the end of the last tool run, R_sum at the end of the summary run."""
    out = torch.zeros(len(rows), len(rows[0]))
    for i, row in enumerate(rows):
        runs = _runs(row)
        out[i, runs[-1][1] - 1] = summary[i]
        if len(runs) > 1 and tool[i] is not None:
            out[i, runs[-2][1] - 1] = tool[i]
    return out


def _cfg(**gust: float) -> object:
    return OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gust": gust})


def _zscore(values: list[float]) -> list[float]:
    mu = sum(values) / len(values)
    sd = math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))
    return [(v - mu) / (sd + EPS) for v in values]


def _golden_rewards() -> torch.Tensor:
    # row 2 is the omission row: one run, x_sum = score = -0.5; rows 0,1,3: (R_tool, R_sum)
    return _place_segments(GOLDEN_MASKS, [0.90, 0.55, None, 0.70], [0.75, 0.50, -0.5, 1.0])


class TestSegmentRuns:
    def test_run_ids_and_counts(self) -> None:
        runs = segment_runs(_mask(["0011100", "1111111", "0000000", "1010101"]))
        assert runs.n_runs.tolist() == [1, 1, 0, 4]
        assert runs.run_id[0].tolist() == [-1, -1, 0, 0, 0, -1, -1]
        assert runs.run_id[3].tolist() == [0, -1, 1, -1, 2, -1, 3]
        assert runs.run_id[2].tolist() == [-1] * 7


class TestSlca:
    def test_golden_vectors_to_1e6(self) -> None:
        adv, ret = compute_slca_advantage(_golden_rewards(), _mask(GOLDEN_MASKS), np.array(["g"] * 4), _cfg())
        a_tool = [0.0] * 4
        for i, z in zip([0, 1, 3], _zscore([0.90, 0.55, 0.70]), strict=True):
            a_tool[i] = z
        a_sum = _zscore([0.75, 0.50, -0.5, 1.0])
        for i, row in enumerate(GOLDEN_MASKS):
            runs = _runs(row)
            for j, (s, e) in enumerate(runs):
                want = a_sum[i] if j == len(runs) - 1 else a_tool[i]
                assert adv[i, s:e].tolist() == pytest.approx([want] * (e - s), abs=1e-6)
        assert torch.equal(adv, ret)
        # the reference document's rounded numbers
        assert [adv[0, 0].item(), adv[1, 0].item(), adv[3, 0].item()] == pytest.approx(
            [1.0441, -0.9492, -0.0949], abs=1e-4
        )
        assert [adv[0, 11].item(), adv[1, 7].item(), adv[2, 0].item(), adv[3, 8].item()] == pytest.approx(
            [0.4753, 0.0951, -1.4259, 0.8555], abs=1e-4
        )

    def test_tokens_outside_mask_are_exactly_zero(self) -> None:
        mask = _mask(GOLDEN_MASKS)
        adv, _ = compute_slca_advantage(_golden_rewards(), mask, np.array(["g"] * 4), _cfg())
        assert torch.all(adv[mask == 0] == 0)

    def test_lambdas_applied_after_normalisation(self) -> None:
        rewards, mask, idx = _golden_rewards(), _mask(GOLDEN_MASKS), np.array(["g"] * 4)
        base, _ = compute_slca_advantage(rewards, mask, idx, _cfg())
        scaled, _ = compute_slca_advantage(rewards, mask, idx, _cfg(lambda_tool=2.0, lambda_sum=3.0))
        runs = segment_runs(mask)
        summary = runs.run_id == (runs.n_runs - 1).unsqueeze(1)
        tool = runs.mask & ~summary
        assert torch.allclose(scaled[tool], 2.0 * base[tool], atol=1e-6)
        assert torch.allclose(scaled[summary], 3.0 * base[summary], atol=1e-6)
        ref, _ = compute_slca_advantage(rewards, mask, idx, _cfg(lambda_tool=0.5, lambda_sum=2.0))
        assert [ref[0, 0].item(), ref[0, 11].item(), ref[2, 0].item()] == pytest.approx(
            [0.522, 0.9506, -2.8518], abs=1e-4
        )
        silent, _ = compute_slca_advantage(rewards, mask, idx, _cfg(lambda_tool=0.0))
        assert torch.all(silent[tool] == 0) and torch.any(silent[summary] != 0)

    def test_presence_filtering_summary_only_group(self) -> None:
        rows = ["111000", "110000", "111100"]  # one run each: no tool segment anywhere
        rewards = _place(rows, [[0.2], [0.9], [0.5]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["g"] * 3), _cfg())
        assert adv[0, 0].item() == pytest.approx(_zscore([0.2, 0.9, 0.5])[0], abs=1e-6)

    def test_lone_tool_segment_in_group_gets_zero(self) -> None:
        rows = ["110110", "111000", "111100", "100000"]  # only row 0 has a tool segment
        rewards = _place(rows, [[0.9, 0.1], [0.3], [0.6], [0.2]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["g"] * 4), _cfg())
        assert adv[0, 0].item() == 0.0 and adv[0, 1].item() == 0.0
        assert adv[0, 4].item() != 0.0

    def test_single_member_groups_are_zero(self) -> None:
        rows = ["110110", "110110"]
        rewards = _place(rows, [[0.9, 0.1], [0.3, 0.8]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["a", "b"]), _cfg())
        assert torch.all(adv == 0)

    def test_two_member_group_gives_plus_minus_one_over_sqrt2(self) -> None:
        rows = ["110110", "110110"]
        rewards = _place(rows, [[0.9, 0.1], [0.3, 0.8]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["u-1", "u-1"]), _cfg())
        s = 1 / math.sqrt(2)
        assert adv[0].tolist() == pytest.approx([s, s, 0, -s, -s, 0], abs=1e-5)
        assert adv[1].tolist() == pytest.approx([-s, -s, 0, s, s, 0], abs=1e-5)

    def test_groups_are_independent_and_zero_variance_is_exact_zero(self) -> None:
        rows = ["110110"] * 4
        rewards = _place(rows, [[0.1, 0.1], [0.1, 0.1], [0.9, 0.2], [0.3, 0.7]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["a", "a", "b", "b"]), _cfg())
        assert torch.all(adv[:2] == 0)
        assert adv[2, 0].item() == pytest.approx(1 / math.sqrt(2), abs=1e-5)

    def test_mean_only_when_norm_by_std_off(self) -> None:
        rows = ["110110"] * 3
        rewards = _place(rows, [[0.9, 0.1], [0.3, 0.4], [0.0, 0.7]])
        cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["g"] * 3), cfg)
        assert adv[:, 0].tolist() == pytest.approx([0.5, -0.1, -0.4], abs=1e-6)
        assert adv[:, 3].tolist() == pytest.approx([-0.3, 0.0, 0.3], abs=1e-6)

    def test_span_sums_fold_rewards_spread_over_tokens(self) -> None:
        rows = ["110110"] * 2
        rewards = torch.tensor([[0.0, 0.9, 0.0, 0.0, 0.1, 0.0], [-0.1, 0.9, 0.0, 0.0, 0.1, 0.0]])
        adv, _ = compute_slca_advantage(rewards, _mask(rows), np.array(["g", "g"]), _cfg())
        s = 1 / math.sqrt(2)
        assert adv[:, 0].tolist() == pytest.approx([s, -s], abs=1e-4)  # σ = 0.07: ε matters at 1e-5
        assert torch.all(adv[:, 3:5] == 0)


def _tara_reference(turns: list[list[float]], gamma: float, lam: float, absent: str = "zero") -> list[list[float]]:
    """Per-turn loops over the paper's formulas (population std over all K rollouts — App. B.4 — with a missing
    turn counted as r = V = 0, or absent turns excluded; zero on zero variance)."""

    def z(values: list[float]) -> list[float]:
        mu = sum(values) / len(values)
        sd = math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))
        return [0.0 if sd == 0 else (v - mu) / (sd + EPS) for v in values]

    value = [[r[t] * sum(gamma**k * r[t + k + 1] for k in range(len(r) - t - 1)) for t in range(len(r))] for r in turns]
    out = [[0.0] * len(r) for r in turns]
    for t in range(max(len(r) for r in turns)):
        members = [i for i, r in enumerate(turns) if len(r) > t or absent == "zero"]
        local = z([turns[i][t] if len(turns[i]) > t else 0.0 for i in members])
        future = z([value[i][t] if len(turns[i]) > t else 0.0 for i in members])
        for i, a, f in zip(members, local, future, strict=True):
            if len(turns[i]) > t:
                out[i][t] = a + lam * f
    return out


def _turn_rows(turns: list[list[float]], width: int = 3) -> list[str]:
    longest = max(len(r) for r in turns)
    return [("1" * (width - 1) + "0") * len(r) + "0" * width * (longest - len(r)) for r in turns]


def _per_turn(adv: torch.Tensor, rows: list[str]) -> list[list[float]]:
    return [[adv[i, s].item() for s, _ in _runs(row)] for i, row in enumerate(rows)]


class TestTara:
    def test_hand_computed_ragged_group(self) -> None:
        turns = [[1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 1.0]]
        rows = _turn_rows(turns)
        adv, _ = compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 3), _cfg())
        got = _per_turn(adv, rows)
        s2 = math.sqrt(2)
        # turn 0: r=[1,1,0] → A_local = [1/√2, 1/√2, -√2]; V=[1.5,0.5,0] → A_future = [1.3363,-0.2673,-1.0690]
        assert got[0][0] == pytest.approx(1 / s2 + 0.5 * 1.3363062, abs=1e-5)
        assert got[2][0] == pytest.approx(-s2 + 0.5 * -1.0690450, abs=1e-5)
        # turn 1: r=[1,0,1] and V=[1,0,0]
        assert got[1][1] == pytest.approx(-s2 + 0.5 * (-1 / s2), abs=1e-5)
        # turn 2 exists for rows 0,1 only (both r=1); App. B.4 averages over all K=3 rollouts, so row 2 enters
        # turn 2's statistics as r=0: A_local = [1/√2, 1/√2, ·], V = [0, 0, ·] → A_future = 0
        assert got[0][2] == pytest.approx(1 / s2, abs=1e-5) and got[1][2] == pytest.approx(1 / s2, abs=1e-5)
        assert got == [pytest.approx(r, abs=1e-6) for r in _tara_reference(turns, 0.5, 0.5)]

    def test_exclude_variant_leaves_missing_turns_out(self) -> None:
        turns = [[1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 1.0]]
        rows = _turn_rows(turns)
        cfg = _cfg(tara_absent_turns="exclude")
        got = _per_turn(compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 3), cfg)[0], rows)
        # turn 2 exists for rows 0,1 only (both r=1): zero variance → 0, row 2 not counted as a 0
        assert got[0][2] == 0.0 and got[1][2] == 0.0
        assert got == [pytest.approx(r, abs=1e-6) for r in _tara_reference(turns, 0.5, 0.5, absent="exclude")]

    def test_turn_t_advantage_only_on_turn_t_tokens(self) -> None:
        turns = [[1.0, 0.0], [0.0, 1.0]]
        rows = _turn_rows(turns)
        adv, _ = compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 2), _cfg())
        for i, row in enumerate(rows):
            for s, e in _runs(row):
                assert torch.all(adv[i, s:e] == adv[i, s])
            assert torch.all(adv[i][_mask(rows)[i] == 0] == 0)

    def test_zero_variance_turns_give_zero(self) -> None:
        turns = [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
        rows = _turn_rows(turns)
        adv, _ = compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 3), _cfg())
        assert torch.all(adv == 0)

    def test_gamma_and_lambda_from_config(self) -> None:
        turns = [[1.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
        rows = _turn_rows(turns)
        cfg = _cfg(tara_lambda=0.3, tara_gamma=0.9)
        adv, _ = compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 4), cfg)
        want = _tara_reference(turns, 0.9, 0.3)
        assert _per_turn(adv, rows) == [pytest.approx(r, abs=1e-6) for r in want]

    @settings(max_examples=60, deadline=None)
    @given(
        turns=st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=5), min_size=2, max_size=6),
        gamma=st.floats(0.0, 1.0),
        lam=st.floats(0.0, 5.0),
    )
    def test_distractor_property_binary_rewards(self, turns: list[list[float]], gamma: float, lam: float) -> None:
        """A_t ≤ 0 whenever r_t = 0, for non-negative rewards, γ ≥ 0, λ ≥ 0 (App. A.3)."""
        rows = _turn_rows(turns)
        adv, _ = compute_tara_advantage(
            _place(rows, turns), _mask(rows), np.array(["g"] * len(turns)), _cfg(tara_lambda=lam, tara_gamma=gamma)
        )
        got = _per_turn(adv, rows)
        for r_row, a_row in zip(turns, got, strict=True):
            for r, a in zip(r_row, a_row, strict=True):
                if r == 0.0:
                    assert a <= 0.0

    def test_distractor_property_fails_with_negative_rewards(self) -> None:
        """With a negative turn reward in the group (e.g. KL folded in), μ_t < 0 and a distractor gets A > 0."""
        turns = [[0.0], [-1.0]]
        rows = _turn_rows(turns)
        adv, _ = compute_tara_advantage(_place(rows, turns), _mask(rows), np.array(["g"] * 2), _cfg())
        assert adv[0, 0].item() > 0


class TestSlcaTara:
    def test_tara_on_tool_turns_slca_on_summary(self) -> None:
        tool_turns = [[1.0, 1.0], [1.0, 0.0], [0.0]]
        summaries = [0.75, 0.25, 0.5]
        rows = _turn_rows([t + [0.0] for t in tool_turns])
        rewards = _place(rows, [t + [s] for t, s in zip(tool_turns, summaries, strict=True)])
        cfg = _cfg(lambda_tool=2.0, lambda_sum=0.5)
        adv, _ = compute_slca_tara_advantage(rewards, _mask(rows), np.array(["g"] * 3), cfg)
        got = _per_turn(adv, rows)
        tara = _tara_reference(tool_turns, 0.5, 0.5)
        for i in range(3):
            assert got[i][:-1] == pytest.approx([2.0 * a for a in tara[i]], abs=1e-6)
            assert got[i][-1] == pytest.approx(0.5 * _zscore(summaries)[i], abs=1e-6)


class TestToolpo:
    def test_outcome_matches_verl_grpo_and_tool_part_is_presence_filtered(self) -> None:
        rows = ["110110", "110110", "111000", "110110"]
        tool, outcome = [0.9, 0.2, None, 0.6], [1.5, 0.4, -0.5, 1.0]
        rewards = _place(rows, [[0.0, o] if t is None else [t, o] for t, o in zip(tool, outcome, strict=True)])
        rewards[2] = 0.0
        rewards[2, 2] = -0.5
        idx = np.array(["g"] * 4, dtype=object)
        adv, _ = compute_toolpo_advantage(rewards, _mask(rows), idx, _cfg(toolpo_lambda=0.5))
        scalar = torch.zeros(4, 6)
        scalar[:, 0] = torch.tensor(outcome)
        grpo, _ = compute_grpo_outcome_advantage(scalar, torch.ones(4, 6), idx)
        a_tool = dict(zip([0, 1, 3], _zscore([0.9, 0.2, 0.6]), strict=True))
        for i, row in enumerate(rows):
            runs = _runs(row)
            assert adv[i, runs[-1][0]].item() == pytest.approx(grpo[i, 0].item(), abs=1e-5)
            if len(runs) > 1:
                assert adv[i, 0].item() == pytest.approx(grpo[i, 0].item() + 0.5 * a_tool[i], abs=1e-5)

    def test_singleton_group_keeps_verl_fallback(self) -> None:
        rows = ["110110"]
        rewards = _place(rows, [[0.3, 0.8]])
        adv, _ = compute_toolpo_advantage(rewards, _mask(rows), np.array(["solo"]), _cfg())
        assert adv[0, 3].item() == pytest.approx(0.8 / (1 + EPS), abs=1e-6)
        assert adv[0, 0].item() == pytest.approx(0.8 / (1 + EPS), abs=1e-6)


class TestParams:
    def test_defaults_and_sources(self) -> None:
        assert read_params(None) == EstimatorParams()
        params = read_params(OmegaConf.create({"norm_adv_by_std_in_grpo": False, "gust": {"tara_gamma": 0.9}}))
        assert params.tara_gamma == 0.9 and params.norm_by_std is False and params.tara_lambda == 0.5

    def test_invalid_knob_raises(self) -> None:
        with pytest.raises(ValidationError):
            read_params(OmegaConf.create({"gust": {"tara_gamma": 2.0}}))
        with pytest.raises(ValidationError):
            read_params(OmegaConf.create({"gust": {"lamda_tool": 1.0}}))


class TestAgentTurns:
    """Simulated-user mode: runs that talked to the user are not turns (`TurnRecord`, module doc of the estimators)."""

    # four equally perfect rollouts: 3 tool turns + report; rows 1-3 ask the user 1, 2 and 1 questions first/between
    MASKS = ["110110110110000000000000", "110110110110110000000000", "110110110110110110000000",
             "110110110110110000000000"]  # fmt: skip
    CONV = ((), (0,), (0, 2), (3,))

    def _rewards(self, per_scored_run: list[float]) -> torch.Tensor:
        """Turn rewards at the end of each SCORED run (test-side placement, independent of the layouts)."""
        out = torch.zeros(len(self.MASKS), len(self.MASKS[0]))
        for i, (row, conv) in enumerate(zip(self.MASKS, self.CONV, strict=True)):
            scored = [r for j, r in enumerate(_runs(row)) if j not in conv]
            for (_, end), value in zip(scored, per_scored_run, strict=True):
                out[i, end - 1] = value
        return out

    @pytest.mark.parametrize("fn", [compute_tara_advantage, compute_slca_tara_advantage, compute_slca_advantage,
                                    compute_toolpo_advantage])  # fmt: skip
    def test_equally_good_rollouts_with_different_user_turns_get_equal_advantages(self, fn) -> None:
        from trainer.estimators import TurnRecord, agent_turns

        rewards = self._rewards([1.0, 1.0, 1.0, 0.75])
        index = np.array(["g"] * 4, dtype=object)
        with agent_turns(TurnRecord(conversational=self.CONV)):
            adv, _ = fn(rewards, _mask(self.MASKS), index, _cfg())
        assert torch.equal(adv, torch.zeros_like(adv))
        without, _ = fn(rewards, _mask(self.MASKS), index, _cfg())  # the old behaviour: every generation a turn
        if fn in (compute_tara_advantage, compute_slca_tara_advantage):
            assert without.abs().max() > 0.5

    def test_conversational_runs_get_exactly_zero_and_summary_is_last_scored_run(self) -> None:
        from trainer.estimators import TurnRecord, agent_turns

        masks = ["1100110011000", "1100110011000"]  # row 0: the LAST run talked to the user (cap after a reply)
        rewards = torch.zeros(2, 13)
        rewards[0, 1], rewards[0, 5] = 0.8, 0.5  # r_tool at run 0, r_sum at run 1 (the last scored run)
        rewards[1, 5], rewards[1, 9] = 0.4, 0.25
        with agent_turns(TurnRecord(conversational=((2,), ()))):
            adv, _ = compute_slca_advantage(rewards, _mask(masks), np.array(["g", "g"], dtype=object), _cfg())
        assert torch.all(adv[0, 8:10] == 0)  # the message to the user
        s = 1 / math.sqrt(2) / (1 + EPS * math.sqrt(2))  # z of a two-member group: ±(1/√2)/(σ+ε), σ=|d|/√2
        assert adv[0, 4].item() == pytest.approx(s, rel=1e-5) and adv[1, 8].item() == pytest.approx(-s, rel=1e-5)
        assert adv[0, 0].item() == pytest.approx(s, rel=1e-5) and adv[1, 4].item() == pytest.approx(-s, rel=1e-5)

    def test_misaligned_record_is_refused(self) -> None:
        from gustforge.errors import InputError
        from trainer.estimators import TurnRecord, agent_turns

        with agent_turns(TurnRecord(conversational=((5,),))), pytest.raises(InputError):
            compute_slca_advantage(torch.zeros(1, 4), _mask(["1101"]), np.array(["g"], dtype=object), _cfg())
        with agent_turns(TurnRecord(conversational=((0,), ()))), pytest.raises(InputError):
            compute_slca_advantage(torch.zeros(1, 4), _mask(["1101"]), np.array(["g"], dtype=object), _cfg())

    def test_record_from_extra_fields(self) -> None:
        from trainer.estimators import TurnRecord

        record = TurnRecord.from_extra_fields([{"gust_user_turns": "[2, 0]"}, {}, None, {"gust_user_turns": [1]}])
        assert record.conversational == ((0, 2), (), (), (1,))
