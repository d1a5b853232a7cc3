"""The `verl.plugins` entry point registers our estimators in a fresh interpreter (verl swallows plugin errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from verl.trainer.ppo.core_algos import get_adv_estimator_fn

import trainer.estimators as estimators

_PROBE = (
    "import json, sys, verl\n"
    "from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R\n"
    "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY as T\n"
    "names = ['slca', 'tara', 'slca_tara', 'toolpo']\n"
    "found = {n: getattr(R.get(n), '__module__', None) for n in names}\n"
    "found['trainer:gust_sync'] = getattr(T.get('gust_sync'), '__module__', None)\n"
    "print(json.dumps(found))\n"
)


def _probe(policy: str) -> dict[str, str | None]:
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": policy}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_verl_registers_all_four_via_entry_point() -> None:
    found = _probe("gustforge")  # only our entry point: proves the registration comes from it
    assert found == {**{name: "trainer.estimators" for name in estimators.ESTIMATOR_NAMES},
                     "trainer:gust_sync": "trainer.v1_trainer"}  # the TaskRunner finds our V1 trainer too


def test_disabled_plugins_register_nothing() -> None:
    assert set(_probe("none").values()) == {None}


def test_registry_lookup_returns_our_functions() -> None:
    assert get_adv_estimator_fn("slca") is estimators.compute_slca_advantage
    assert get_adv_estimator_fn("tara") is estimators.compute_tara_advantage
    assert get_adv_estimator_fn("slca_tara") is estimators.compute_slca_tara_advantage
    assert get_adv_estimator_fn("toolpo") is estimators.compute_toolpo_advantage


def test_true_reward_metrics_from_extra_fields() -> None:
    from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls

    from trainer.v1_trainer import GustTrainerSync, reward_component_metrics

    assert get_trainer_cls("gust_sync") is GustTrainerSync and issubclass(GustTrainerSync, PPOTrainerSync)
    fields = [{"reward_extra_info": {"score": 0.9, "r_tool": 0.9, "r_sum": 0.0, "error_type": "none"}},
              {"reward_extra_info": {"score": 1.25, "r_tool": 0.75, "r_sum": 0.5, "error_type": "internal_error"}},
              {"no": "reward"}]
    metrics = reward_component_metrics(fields)
    assert metrics["gust/score/mean"] == 1.075 and metrics["gust/r_sum/mean"] == 0.25
    assert metrics["gust/internal_error/rate"] == 0.5 and "gust/r_succ/mean" not in metrics
    assert reward_component_metrics([]) == {}
