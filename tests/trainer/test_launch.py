"""Config composition on verl's ppo_trainer, validation with verl's classes, and `gust train --dry-run`."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from flows.cli_train import app
from gustforge.errors import ConfigError
from trainer.launch import ALGOS, DEFAULT_DATA, compose_config, launch, validate_training_config


def _gust() -> typer.Typer:
    root = typer.Typer()
    root.add_typer(app, name="train")

    @root.command()
    def version() -> None:  # a second command, as in the real `gust` app
        pass

    return root


@pytest.mark.parametrize("algo", ALGOS)
def test_dry_run_prints_and_validates_every_algo(algo: str) -> None:
    result = CliRunner().invoke(_gust(), ["train", "--algo", algo, "--dry-run", "trainer.nnodes=2"])
    assert result.exit_code == 0, result.output
    assert f"adv_estimator: {algo}" in result.output
    assert "nnodes: 2" in result.output
    assert f"config OK: algo={algo}" in result.output
    if not DEFAULT_DATA.exists():
        assert f"would be used): {DEFAULT_DATA}" in result.output


def test_slca_paper_settings() -> None:
    cfg = compose_config("slca")
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert rollout.n == 16 and actor.optim.lr == pytest.approx(1e-6)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.2, 3.0)
    assert actor.use_kl_loss and actor.kl_loss_coef == 0.001 and actor.kl_loss_type == "low_var_kl"
    assert actor.loss_agg_mode == "token-mean"
    assert (cfg.data.train_batch_size, actor.ppo_mini_batch_size, cfg.data.max_response_length) == (128, 32, 8192)
    assert cfg.reward.custom_reward_function.reward_kwargs.no_call_penalty == -0.5
    assert cfg.actor_rollout_ref.model.external_lib == "trainer.plugin"
    assert Path(rollout.agent.agent_loop_config_path).is_file()


def test_tara_paper_settings() -> None:
    cfg = compose_config("tara", data="/x/train.parquet", model="/models/qwen3-8b")
    assert cfg.algorithm.gust.tara_lambda == 0.5 and cfg.algorithm.gust.tara_gamma == 0.5
    assert not cfg.actor_rollout_ref.actor.use_kl_loss
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length, cfg.gust.max_tokens_per_turn) == (
        8192,
        24000,
        1024,
    )
    assert cfg.actor_rollout_ref.model.path == "/models/qwen3-8b"
    assert cfg.data.train_files == "/x/train.parquet"
    assert validate_training_config(cfg).missing_files == ("/x/train.parquet",)


def test_validation_uses_verl_checks() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        validate_training_config(compose_config("slca", overrides=["data.train_batch_size=3"]))
    with pytest.raises(ConfigError, match="tara_gamma"):
        validate_training_config(compose_config("tara", overrides=["algorithm.gust.tara_gamma=3.0"]))
    with pytest.raises(ConfigError, match="use_v1"):
        validate_training_config(compose_config("slca", overrides=["trainer.use_v1=false"]))


def test_unknown_algo_and_bad_override() -> None:
    with pytest.raises(ConfigError, match="valid: slca"):
        compose_config("ppo")
    with pytest.raises(ConfigError):
        compose_config("slca", overrides=["not_a_key.at_all=1"])
    result = CliRunner().invoke(_gust(), ["train", "--algo", "ppo", "--dry-run"])
    assert result.exit_code == 2 and "unknown algo" in result.output


def test_launch_refuses_missing_data_before_starting_ray() -> None:
    with pytest.raises(ConfigError, match="data files not found"):
        launch(compose_config("slca", data="/nonexistent/train.parquet"))
