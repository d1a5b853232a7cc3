"""The rehearsal checks numbers: every bug of issue 24's list, injected one at a time into the real code, makes
`gust train --rehearse` fail (report not passed, or the run raising, as it would crash a GPU launch at step 1).

Each mutant is applied with monkeypatch to the module verl's classes call at run time (the estimator registry, the
reward layout registry, the reward's scorer, the rollout parser, the launch's data check, the ``gust_sync`` hooks);
the rehearsal then runs in-process on one bundled row (one group of scripted trajectories through verl's
AgentLoopWorker, RewardLoopWorker, the V1 TransferQueue put and the ``gust_sync`` trainer hooks). ``KILLED_BY`` names
the check expected to catch each mutant, so a mutant that fails for an unrelated reason does not count. The control
(no mutant) must pass on the same setup.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

Mutant = Callable[[pytest.MonkeyPatch], None]


def _presence_filter_off(mp: pytest.MonkeyPatch) -> None:
    import trainer.estimators as est

    real = est.group_normalize

    def mutant(x: Any, present: Any, groups: Any, **kw: Any) -> Any:
        kw.pop("stats", None)
        return real(x, torch.ones_like(present), groups, **kw)

    mp.setattr(est, "group_normalize", mutant)


def _population_std(mp: pytest.MonkeyPatch) -> None:
    import trainer.estimators as est

    real = est.group_normalize
    mp.setattr(est, "group_normalize", lambda x, present, groups, **kw: real(x, present, groups,
                                                                             **{**kw, "unbiased": False}))  # fmt: skip


def _lambda_before_normalisation(mp: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    import trainer.estimators as est

    def mutant(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None, **_: Any) -> Any:
        p = est.read_params(config)
        runs = est.scored_runs(response_mask)
        _, x_tool, x_sum = est._segment_scalars(token_level_rewards, runs)
        groups = est.group_ids(index, token_level_rewards.device)
        norm = {"eps": p.epsilon, "unbiased": True, "scale": p.norm_by_std}
        a_tool = est.group_normalize((p.lambda_tool * x_tool).unsqueeze(1), (runs.n_runs >= 2).unsqueeze(1),
                                     groups, **norm)  # fmt: skip
        a_sum = est.group_normalize((p.lambda_sum * x_sum).unsqueeze(1), (runs.n_runs >= 1).unsqueeze(1),
                                    groups, **norm)  # fmt: skip
        table = torch.where(est._is_summary_col(runs, max(runs.max_runs, 1)), a_sum, a_tool)
        adv = est._route(table, runs, token_level_rewards.dtype)
        return adv, adv

    mp.setitem(ADV_ESTIMATOR_REGISTRY, "slca", mutant)


def _tara_future_gate_off(mp: pytest.MonkeyPatch) -> None:
    import trainer.estimators as est

    def mutant(r: Any, present: Any, groups: Any, params: Any) -> Any:
        r = r * present
        value = r @ est._future_matrix(r.shape[1], params.tara_gamma, r.device)  # no r_t gate
        norm = {"eps": params.epsilon, "unbiased": False, "scale": params.norm_by_std,
                "stats": torch.ones_like(present)}  # fmt: skip
        return est.group_normalize(r, present, groups, **norm) + params.tara_lambda * est.group_normalize(
            value, present, groups, **norm)

    mp.setattr(est, "tara_turn_advantages", mutant)


def _reward_one_turn_late(mp: pytest.MonkeyPatch) -> None:
    from trainer.reward_manager import LAYOUTS

    def late(ends: Any, length: int, rewards: Any) -> dict[int, float]:
        n = min(len(rewards.turn_rewards), len(ends) - 1)
        return {ends[t + 1]: rewards.turn_value(t) for t in range(n)}

    mp.setitem(LAYOUTS._items, "tara", late)


def _rewards_from_text(mp: pytest.MonkeyPatch) -> None:
    from trainer.rewards import score

    mp.setattr(score._Prep, "scored", lambda self: (self.parsed, self.first_step))


def _s_par_first_block(mp: pytest.MonkeyPatch) -> None:
    from trainer.rewards import score

    real = score.hierr_score
    mp.setattr(score, "hierr_score", lambda parsed, gold, weights, first_step=None: real(parsed, gold, weights))


def _turn_cap_off_by_one(mp: pytest.MonkeyPatch) -> None:
    import trainer.launch as launch

    def mutant(cfg: Any, path: str, steps_per_row: Any) -> None:  # forgets the final reply's generation
        cap = int(cfg.actor_rollout_ref.rollout.multi_turn.get("max_assistant_turns") or 0)
        user = int(cfg.actor_rollout_ref.rollout.multi_turn.get("max_user_turns") or 0)
        if (cap and max(steps_per_row) > cap) or (user and max(steps_per_row) > user):
            raise launch.ConfigError("too long")

    mp.setattr(launch, "_check_turn_caps", mutant)


def _think_calls_executed(mp: pytest.MonkeyPatch) -> None:
    import trainer.tool_parser as parser

    mp.setattr(parser, "strip_think", lambda text: text)


def _metrics_over_padding(mp: pytest.MonkeyPatch) -> None:
    import trainer.v1_trainer as v1

    mp.setattr(v1, "gust_step_metrics", lambda tags, fields: {**v1.reward_component_metrics(fields),
                                                               **v1.user_metrics(fields)})  # fmt: skip


def _wrong_tq_field(mp: pytest.MonkeyPatch) -> None:
    import trainer.v1_trainer as v1

    mp.setattr(v1, "EXTRA_FIELDS", "extra_field")  # a field no sample holds: TransferQueue returns without it


def _row_extra_info_field(mp: pytest.MonkeyPatch) -> None:
    import trainer.v1_trainer as v1

    mp.setattr(v1, "EXTRA_FIELDS", "extra_info")  # the ROW's extra_info (verl stores the row kwargs too): no crash,
    # but no reward components and no turn record either


# name: (algo, mutant, the check that must fail — or "raises")
MUTANTS: dict[str, tuple[str, Mutant, str]] = {
    "presence_filter_off": ("slca", _presence_filter_off, "golden_advantages"),
    "lambda_before_normalisation": ("slca", _lambda_before_normalisation, "golden_advantages"),
    "population_std": ("slca", _population_std, "golden_advantages"),
    "tara_future_gate_off": ("tara", _tara_future_gate_off, "golden_advantages"),
    "reward_one_turn_late": ("tara", _reward_one_turn_late, "golden_reward_placement"),
    "rewards_from_text_not_executed_calls": ("slca", _rewards_from_text, "reward_scores_the_executed_calls"),
    "s_par_back_to_first_block": ("slca", _s_par_first_block, "golden_s_par"),
    "turn_cap_off_by_one": ("slca", _turn_cap_off_by_one, "turn_caps_fit_gold"),
    "calls_inside_think_executed": ("slca", _think_calls_executed, "rollout_parses_what_reward_reads"),
    "gust_sync_metrics_over_padding": ("slca", _metrics_over_padding, "gust_sync_metrics"),
    "gust_sync_wrong_tq_field": ("slca", _wrong_tq_field, "raises"),
    "gust_sync_reads_the_rows_extra_info": ("slca", _row_extra_info_field, "gust_sync_metrics"),
}


def _rehearse(algo: str, out: Path) -> dict[str, Any]:
    from trainer.rehearse import rehearse

    return rehearse(algo, out_dir=out, max_rows=1, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["slca", "tara"])
def test_control_without_mutant_passes(algo: str, tmp_path: Path) -> None:
    report = _rehearse(algo, tmp_path)
    assert report["passed"], [c for c in report["checks"] if not c["passed"]]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_rehearsal_kills_the_mutant(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    algo, apply, killer = MUTANTS[name]
    apply(monkeypatch)
    if killer == "raises":
        with pytest.raises(KeyError):
            _rehearse(algo, tmp_path)
        return
    report = _rehearse(algo, tmp_path)
    failed = {c["name"] for c in report["checks"] if not c["passed"]}
    assert not report["passed"] and killer in failed, (failed, report["checks"])
