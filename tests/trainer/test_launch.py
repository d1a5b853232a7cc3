"""Config composition on verl's ppo_trainer, validation with verl's classes, and `gust train --dry-run`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gustforge.errors import ConfigError
from tests.trainer.train_cli import gust_with_train
from trainer.launch import ALGOS, DEFAULT_DATA, compose_config, launch, validate_training_config


@pytest.mark.parametrize("algo", ALGOS)
def test_dry_run_prints_and_validates_every_algo(algo: str, tmp_path: Path) -> None:
    args = ["train", "--algo", algo, "--dry-run", "--run-dir", str(tmp_path), "trainer.nnodes=2"]
    result = CliRunner().invoke(gust_with_train(), args)
    assert result.exit_code == 0, result.output
    assert f"adv_estimator: {algo}" in result.output
    assert "nnodes: 2" in result.output
    assert f"config OK: algo={algo}" in result.output
    assert "OFFLINE HEURISTIC judge" in result.output  # the proxy judge is never silent
    assert f"validation data: {tmp_path / 'data' / 'val.parquet'}" in result.output
    if not DEFAULT_DATA.exists():
        assert f"would be used): {DEFAULT_DATA}" in result.output


def test_validation_is_a_held_out_split_never_the_training_rows(tmp_path: Path) -> None:
    from trainer.convert import env_root_of, read_rows

    cfg = compose_config("slca", run_dir=tmp_path, val_fraction=0.3, split_seed=1)
    train, val = read_rows(Path(cfg.data.train_files)), read_rows(Path(cfg.data.val_files))
    ids = lambda rows: {r.extra_info.task_id for r in rows}  # noqa: E731
    assert ids(train).isdisjoint(ids(val)) and len(train) + len(val) == len(read_rows(DEFAULT_DATA))
    assert {r.extra_info.split for r in val} == {"val"}
    # the env root recorded once in the bundled parquet survives the split and reaches the loop and the reward
    root = env_root_of(DEFAULT_DATA)
    assert env_root_of(Path(cfg.data.val_files)) == root and cfg.gust.env_root == str(root)
    assert cfg.reward.custom_reward_function.reward_kwargs.env_root == str(root)
    same = compose_config("slca", run_dir=tmp_path / "again", val_fraction=0.3, split_seed=1)
    assert ids(read_rows(Path(same.data.val_files))) == ids(val)  # seeded
    with pytest.raises(ConfigError, match="validation must"):
        compose_config("slca", val_data=DEFAULT_DATA)
    with pytest.raises(ConfigError, match="held out"):
        validate_training_config(compose_config("slca", run_dir=tmp_path / "x",
                                                overrides=[f"data.val_files={DEFAULT_DATA}",
                                                           f"data.train_files={DEFAULT_DATA}"]))


def test_judge_flags_wire_the_llm_judge_and_launch_refuses_the_silent_proxy(tmp_path: Path) -> None:
    from trainer.launch import judge_of

    cfg = compose_config("slca", run_dir=tmp_path, judge_url="http://127.0.0.1:9/v1", judge_model="judge-7b")
    kwargs = cfg.reward.custom_reward_function.reward_kwargs
    assert (judge_of(cfg), kwargs.judge_base_url, kwargs.judge_model) == ("llm", "http://127.0.0.1:9/v1", "judge-7b")
    with pytest.raises(ConfigError, match="go together"):
        compose_config("slca", run_dir=tmp_path / "h", judge_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="--heuristic-judge"):
        launch(compose_config("slca", run_dir=tmp_path / "p"))


@pytest.mark.parametrize("algo", ["tara", "slca_tara"])
def test_turn_level_algos_refuse_rows_without_turn_gold(algo: str, tmp_path: Path, corpora_dir: Path) -> None:
    import json

    from trainer.convert import toucan_to_verl, write_rows

    previews = [json.loads(line) for line in (corpora_dir / "toucan" / "toucan_toolcall_rl.preview.jsonl").open()]
    rows, _ = toucan_to_verl(previews)
    data = write_rows(tmp_path / "toucan.parquet", rows)
    with pytest.raises(ConfigError, match="turn-level gold"):
        validate_training_config(compose_config(algo, data=data, run_dir=tmp_path / "run"))
    validate_training_config(compose_config("slca", data=data, run_dir=tmp_path / "run2"))  # fine for slca


def test_tara_executes_multi_call_turns() -> None:
    cfg = compose_config("tara", data="/x/train.parquet")
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    assert multi_turn.max_parallel_calls >= 2 and multi_turn.max_tool_response_length >= 2048
    assert multi_turn.format == "gust_hermes" and cfg.trainer.v1.trainer_mode == "gust_sync"


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
    assert cfg.trainer.total_epochs == 1 and (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (4, 8)  # Table 6
    _long_context_defaults(cfg, 24576 + 8192)


def _long_context_defaults(cfg, trajectory_tokens: int) -> None:
    """Dynamic batch sizing with a per-GPU token budget that holds one full trajectory, for all three passes."""
    actor, rollout, ref = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    assert actor.use_dynamic_bsz and rollout.log_prob_use_dynamic_bsz and ref.log_prob_use_dynamic_bsz
    for budget in (actor.ppo_max_token_len_per_gpu, rollout.log_prob_max_token_len_per_gpu,
                   ref.log_prob_max_token_len_per_gpu):  # fmt: skip
        assert trajectory_tokens <= budget <= 65536


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
    _long_context_defaults(cfg, 8192 + 24000)
    assert "/x/train.parquet" in validate_training_config(cfg).missing_files


def test_validation_uses_verl_checks() -> None:
    with pytest.raises(ConfigError, match="divisible by minimal possible batch size"):  # verl's own check
        validate_training_config(compose_config("slca", overrides=[
            "data.train_batch_size=3", "actor_rollout_ref.actor.use_dynamic_bsz=false"]))  # fmt: skip
    with pytest.raises(ConfigError, match="must be divisible by actor_rollout_ref.actor.ppo_mini_batch_size"):
        validate_training_config(compose_config("slca", overrides=["data.train_batch_size=3"]))  # verl skips it
    with pytest.raises(ConfigError, match="tara_gamma"):
        validate_training_config(compose_config("tara", overrides=["algorithm.gust.tara_gamma=3.0"]))
    with pytest.raises(ConfigError, match="use_v1"):
        validate_training_config(compose_config("slca", overrides=["trainer.use_v1=false"]))


def test_unknown_algo_and_bad_override() -> None:
    with pytest.raises(ConfigError, match="valid: slca"):
        compose_config("ppo")
    with pytest.raises(ConfigError):
        compose_config("slca", overrides=["not_a_key.at_all=1"])
    result = CliRunner().invoke(gust_with_train(), ["train", "--algo", "ppo", "--dry-run"])
    assert result.exit_code == 2 and "unknown algo" in result.output


def test_launch_refuses_missing_data_before_starting_ray() -> None:
    with pytest.raises(ConfigError, match="data files not found"):
        launch(compose_config("slca", data="/nonexistent/train.parquet"), allow_heuristic_judge=True)


def test_rows_longer_than_the_turn_caps_are_refused_with_the_override_to_use(tmp_path: Path) -> None:
    from trainer.convert import read_rows

    longest = max(len(r.reward_model.ground_truth.gold_steps()) for r in read_rows(DEFAULT_DATA))
    assert longest >= 2
    capped = f"actor_rollout_ref.rollout.multi_turn.max_user_turns={longest - 1}"
    with pytest.raises(ConfigError, match=f"max_user_turns={longest - 1}: the rollout would end") as refused:
        validate_training_config(compose_config("slca", overrides=[capped], run_dir=tmp_path / "a"))
    assert f"multi_turn.max_user_turns={longest}" in str(refused.value)  # the override that fits
    assistant = f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={longest}"  # no room for the final reply
    with pytest.raises(ConfigError, match="max_assistant_turns"):
        validate_training_config(compose_config("slca", overrides=[assistant], run_dir=tmp_path / "b"))
    fits = [f"actor_rollout_ref.rollout.multi_turn.max_user_turns={longest}",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={longest + 1}"]  # fmt: skip
    validate_training_config(compose_config("slca", overrides=fits, run_dir=tmp_path / "c"))


def test_launch_refuses_data_smaller_than_a_batch_naming_the_fix(tmp_path: Path) -> None:
    from trainer.convert import read_rows
    from trainer.launch import check_batch

    cfg = compose_config("slca", run_dir=tmp_path)
    rows = len(read_rows(Path(cfg.data.train_files)))
    assert rows < int(cfg.data.train_batch_size)
    with pytest.raises(ConfigError, match=f"has {rows} rows but data.train_batch_size=") as refused:
        launch(cfg, allow_heuristic_judge=True)  # before Ray starts
    assert f"data.train_batch_size={rows} actor_rollout_ref.actor.ppo_mini_batch_size={rows}" in str(refused.value)
    check_batch(compose_config("slca", run_dir=tmp_path / "fits", overrides=[
        f"data.train_batch_size={rows}", f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}"]))  # fmt: skip


def test_user_sim_rows_with_more_facts_than_the_user_cap_are_refused(tmp_path: Path) -> None:
    from trainer.user_agent_loop import user_sim_overrides

    mode = user_sim_overrides("offline")
    validate_training_config(compose_config("tara", overrides=mode, run_dir=tmp_path / "a"))
    with pytest.raises(ConfigError, match=r"gust.max_user_messages=1: an agent asking one value") as refused:
        validate_training_config(compose_config("tara", overrides=[*mode, "++gust.max_user_messages=1"],
                                                run_dir=tmp_path / "b"))  # fmt: skip
    assert "append ++gust.max_user_messages=" in str(refused.value)


def test_data_paths_are_absolute_and_the_held_out_split_is_by_environment(tmp_path: Path, monkeypatch) -> None:
    from tests.trainer.gust_task import TINY_ENV, make_task
    from trainer.convert import env_key, gust_row, load_env_schemas, read_rows, split_train_val, write_rows

    monkeypatch.chdir(tmp_path)
    base = gust_row(make_task(), load_env_schemas(TINY_ENV), env_dir=str(TINY_ENV), index=0)
    rows = []
    for i in range(12):  # 4 environments x 3 tasks
        gt = base.reward_model.ground_truth.model_copy(update={"env_id": f"env-{i % 4}"})
        rm = base.reward_model.model_copy(update={"ground_truth": gt})
        rows.append(base.model_copy(update={"reward_model": rm,
                                            "extra_info": base.extra_info.model_copy(update={"task_id": f"t{i}"})}))
    write_rows(tmp_path / "all.parquet", rows)
    train, val, n_train, n_val = split_train_val(Path("all.parquet"), Path("split"), val_fraction=0.25, seed=1)
    envs = lambda p: {env_key(r) for r in read_rows(p)}  # noqa: E731
    assert envs(val) and envs(train) and envs(val).isdisjoint(envs(train)) and n_train + n_val == 12
    cfg = compose_config("slca", data="all.parquet", run_dir="run")  # relative on the command line
    assert Path(cfg.data.train_files).is_absolute() and Path(cfg.data.val_files).is_absolute()
    assert Path(cfg.gust.env_root).is_absolute()
