"""`trainer.golden` (the rehearsal's independent expected values) against the reference spec's golden vectors (§7.4),
and its treatment of conversational runs (a message to the simulated user gets 0, the scored runs are unchanged)."""

from __future__ import annotations

import pytest

from trainer.golden import GoldenParams, Trajectory, expected_advantages, expected_rewards, expected_turn_rewards

MASKS = ["111001100111", "110001110000", "111100000000", "110011111000"]
INFOS = [{"score": 1.65, "r_tool": 0.90, "r_sum": 0.75, "omission": 0}, {"score": 1.05, "r_tool": 0.55, "r_sum": 0.50,
         "omission": 0}, {"score": -0.5, "r_tool": 0.0, "r_sum": 0.0, "omission": 1},
         {"score": 1.70, "r_tool": 0.70, "r_sum": 1.0, "omission": 0}]  # fmt: skip
A_PROC = [1.0441, -0.9492, 0.0, -0.0949]  # reference spec §7.4 (stats over r0, r1, r3)
A_SUM = [0.4753, 0.0951, -1.4259, 0.8555]


def _trajs(masks: list[str], conv: list[list[int]]) -> list[Trajectory]:
    return [Trajectory(uid="g", mask=[int(c) for c in m], conversational=c, info=i)
            for m, c, i in zip(masks, conv, INFOS, strict=True)]  # fmt: skip


@pytest.mark.parametrize(("lam_tool", "lam_sum"), [(1.0, 1.0), (0.5, 2.0)])
def test_slca_matches_the_reference_golden_vectors(lam_tool: float, lam_sum: float) -> None:
    trajs = _trajs(MASKS, [[]] * 4)
    rewards = [expected_rewards(t, "slca", []) for t in trajs]
    adv = expected_advantages(trajs, "slca", rewards, GoldenParams(lambda_tool=lam_tool, lambda_sum=lam_sum))
    for row, mask, a_proc, a_sum in zip(adv, MASKS, A_PROC, A_SUM, strict=True):
        last = mask.rindex("0", 0, mask.rindex("1")) + 1 if "0" in mask[: mask.rindex("1")] else 0
        for k, bit in enumerate(mask):
            want = 0.0 if bit == "0" else (lam_sum * a_sum if k >= last else lam_tool * a_proc)
            assert row[k] == pytest.approx(want, abs=1e-4)


def test_a_message_to_the_user_gets_zero_and_changes_nothing_else() -> None:
    from trainer.golden import scored_runs_of

    conv = [[1], [], [], [0]]  # a question to the user inserted as run 1 of row 0 and run 0 of row 3
    asked = ["111011001100111", "110001110000000", "111100000000000", "110110011111000"]
    plain, chatty = _trajs(MASKS, [[]] * 4), _trajs(asked, conv)
    for algo, layout in (("slca", "slca"), ("toolpo", "toolpo_hierr")):
        want = expected_advantages(plain, algo, [expected_rewards(t, layout, []) for t in plain], GoldenParams())
        got = expected_advantages(chatty, algo, [expected_rewards(t, layout, []) for t in chatty], GoldenParams())
        for w, g, p, c in zip(want, got, plain, chatty, strict=True):
            per_run = lambda adv, t: [adv[s] for s, _ in scored_runs_of(t.mask, t.conversational)]  # noqa: E731
            assert per_run(g, c) == pytest.approx(per_run(w, p), abs=1e-12)  # same value per scored run
        assert got[0][4:6] == [0.0, 0.0] and got[3][0:2] == [0.0, 0.0]  # the messages to the user
        assert any(v != 0 for v in want[0])  # the comparison is not between zeros


def test_turn_rewards_are_gold_step_subset_of_executed_calls() -> None:
    gold = [[{"name": "a", "arguments": {"x": 1}}], [{"name": "b", "arguments": {}}, {"name": "c", "arguments": {}}]]
    assert expected_turn_rewards(gold, [[{"name": "a", "arguments": {"x": 1, "y": 2}}],
                                        [{"name": "c", "arguments": {}}, {"name": "b", "arguments": {}}]]) == [1.0, 1.0]
    assert expected_turn_rewards(gold, [[{"name": "a", "arguments": {"x": 2}}], [{"name": "b", "arguments": {}}]]) \
        == [0.0, 0.0]  # fmt: skip
