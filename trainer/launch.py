"""Compose, validate and launch a verl PPO run from the Hydra configs in ``trainer/configs``.

``compose_config(algo, ...)`` composes ``trainer/configs/<algo>.yaml`` on verl's packaged ``ppo_trainer``
defaults (Hydra compose API, the same files ``python -m verl.trainer.main_ppo --config-path=trainer/configs
--config-name=<algo>`` reads). ``validate_training_config`` checks it with verl's own config classes
(``AlgoConfig`` through ``omega_conf_to_dataclass``, verl's ``validate_config``, which also builds the
``ActorConfig``) plus our ``EstimatorParams``; it runs on a CPU-only machine. ``launch`` does what
``verl.trainer.main_ppo.main`` does after Hydra (device fix-up, validation, ``run_ppo`` with the V1
TaskRunner): our estimators reach the TaskRunner and worker processes through the ``verl.plugins`` entry point
and ``actor_rollout_ref.model.external_lib: trainer.plugin``.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

import data as data_pkg
import trainer.estimators  # noqa: F401  (registers the estimators in this process)
from gustforge.errors import ConfigError
from trainer.estimators import read_params
from trainer.reward_manager import layout_for_config

__all__ = [
    "ALGOS",
    "CONFIG_DIR",
    "DEFAULT_DATA",
    "PLACEHOLDER_MODEL",
    "ValidationReport",
    "compose_config",
    "launch",
    "validate_training_config",
]

logger = logging.getLogger(__name__)

ALGOS: tuple[str, ...] = ("slca", "tara", "slca_tara", "toolpo", "grpo")
CONFIG_DIR = Path(__file__).resolve().parent / "configs"
DEFAULT_DATA = Path(data_pkg.__file__).resolve().parent / "samples" / "verl" / "train.parquet"
# An HF hub id, never downloaded by compose/validate; replace it with a local model dir for real runs.
PLACEHOLDER_MODEL = "Qwen/Qwen2.5-7B-Instruct"
_BUILTIN_ESTIMATORS = ("gae", "grpo")  # verl special-cases these before its registry


@dataclass(frozen=True)
class ValidationReport:
    """What ``validate_training_config`` checked.

    Attributes:
        algo: ``algorithm.adv_estimator``.
        reward_layout: How rewards are laid out on tokens for it (`trainer.reward_manager`).
        missing_files: Data files the config names that do not exist here (fine for a dry run).
        verl_messages: What verl's ``validate_config`` printed.
    """

    algo: str
    reward_layout: str
    missing_files: tuple[str, ...]
    verl_messages: str


def _wiring_overrides(data: str | Path | None, model: str | None) -> list[str]:
    train = Path(data) if data is not None else DEFAULT_DATA
    overrides = [
        f"data.train_files={train}",
        f"data.val_files={train}",
        f"actor_rollout_ref.model.path={model or PLACEHOLDER_MODEL}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONFIG_DIR / 'gust_agent_loops.yaml'}",
    ]
    tools = CONFIG_DIR / "tools.yaml"
    if tools.is_file():
        overrides.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}")
    return overrides


def compose_config(
    algo: str,
    data: str | Path | None = None,
    model: str | None = None,
    overrides: Sequence[str] = (),
) -> DictConfig:
    """Compose the training config of ``algo`` (Hydra overrides win over everything).

    Args:
        algo: One of ``ALGOS``.
        data: Training parquet (verl RL rows); ``DEFAULT_DATA`` (the bundled sample) when None. It is also
            used as the validation file unless an override sets ``data.val_files``.
        model: HF model dir or hub id; ``PLACEHOLDER_MODEL`` when None.
        overrides: Extra Hydra overrides (``key=value``, ``+key=value``).

    Returns:
        The composed (unresolved) config.

    Raises:
        ConfigError: Unknown algo or a bad override.
    """
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {algo!r}; valid: {', '.join(ALGOS)}")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        try:
            return compose(config_name=algo, overrides=[*_wiring_overrides(data, model), *overrides])
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(f"cannot compose {algo!r}: {exc}") from exc


def _algorithm_without_gust(cfg: DictConfig) -> DictConfig:
    algorithm = OmegaConf.to_container(cfg.algorithm, resolve=True)
    if not isinstance(algorithm, dict):
        raise ConfigError("the algorithm section must be a mapping")
    algorithm.pop("gust", None)  # our knobs: validated by EstimatorParams, unknown to AlgoConfig
    return OmegaConf.create(algorithm)


def _missing_files(cfg: DictConfig) -> tuple[str, ...]:
    names = [cfg.data.train_files, cfg.data.val_files]
    flat = [str(n) for item in names for n in (item if OmegaConf.is_list(item) else [item])]
    return tuple(sorted({n for n in flat if not Path(n).expanduser().exists()}))


def validate_training_config(cfg: DictConfig) -> ValidationReport:
    """Validate a composed config with verl's own checks (CPU-only) and ours.

    Args:
        cfg: A config from ``compose_config`` (or any verl ppo_trainer config).

    Returns:
        What was checked and which data files are missing.

    Raises:
        ConfigError: Any check fails.
    """
    algo = str(cfg.algorithm.adv_estimator)
    try:
        if not isinstance(omega_conf_to_dataclass(_algorithm_without_gust(cfg)), AlgoConfig):
            raise ConfigError("algorithm does not build verl's AlgoConfig")
        read_params(cfg.algorithm)
        if algo not in _BUILTIN_ESTIMATORS:
            get_adv_estimator_fn(algo)
        layout = layout_for_config(cfg)
        if layout != "outcome" and not cfg.trainer.use_v1:
            raise ConfigError(f"{algo!r} lays rewards out per segment, which needs trainer.use_v1=true")
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):  # verl's validate_config reports with print()
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except ConfigError:
        raise
    except (AssertionError, ValueError, TypeError, KeyError, OmegaConfBaseException) as exc:
        # verl validates with assert; ValueError also covers pydantic's ValidationError
        raise ConfigError(f"invalid {algo!r} config: {type(exc).__name__}: {exc}") from exc
    logger.debug("verl validate_config: %s", captured.getvalue().strip())
    return ValidationReport(algo, layout, _missing_files(cfg), captured.getvalue().strip())


def launch(cfg: DictConfig) -> None:
    """Validate ``cfg`` and run verl's PPO trainer (needs GPUs, Ray, vLLM; blocks until training ends).

    Args:
        cfg: A config from ``compose_config``.

    Raises:
        ConfigError: Validation fails or a data file is missing.
    """
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    report = validate_training_config(cfg)
    if report.missing_files:
        raise ConfigError(f"data files not found: {', '.join(report.missing_files)}")
    logger.info("launching verl PPO: algo=%s layout=%s", report.algo, report.reward_layout)
    run_ppo(cfg, task_runner_class=TaskRunnerV1)
