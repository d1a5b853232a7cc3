"""Compose, validate and launch a verl PPO run from the Hydra configs in ``trainer/configs``.

``compose_config(algo, ...)`` composes ``trainer/configs/<algo>.yaml`` on verl's packaged ``ppo_trainer``
defaults (Hydra compose API, the same files ``python -m verl.trainer.main_ppo --config-path=trainer/configs
--config-name=<algo>`` reads). ``validate_training_config`` checks it with verl's own config classes
(``AlgoConfig`` through ``omega_conf_to_dataclass``, verl's ``validate_config``, which also builds the
``ActorConfig``) plus our ``EstimatorParams``; it runs on a CPU-only machine. ``launch`` does what
``verl.trainer.main_ppo.main`` does after Hydra (device fix-up, validation, ``run_ppo`` with the V1
TaskRunner): our estimators reach the TaskRunner and worker processes through the ``verl.plugins`` entry point
and ``actor_rollout_ref.model.external_lib: trainer.plugin``.

What composition fills in (so nothing silent reaches a GPU run):
* validation data: ``val_data`` when given, else a seeded held-out split of the training file written to
  ``run_dir`` (`trainer.convert.split_train_val`) — validation never runs on training rows;
* the environment root recorded in the training parquet → ``gust.env_root`` (agent loop) and
  ``reward_kwargs.env_root`` (reward);
* ``judge_url`` + ``judge_model`` → the LLM judge (``reward_kwargs.judge=llm``). Without them the summary reward is
  the offline heuristic proxy: ``launch`` refuses that unless ``allow_heuristic_judge`` and then warns.
``validate_training_config`` also refuses ``tara`` / ``slca_tara`` on rows without turn-level gold (their
advantages would be all zero on the tool tokens) and gold steps with more calls than ``max_parallel_calls``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
import trainer.tool_parser  # noqa: F401  (registers the gust_hermes parser in this process)
import trainer.v1_trainer  # noqa: F401  (registers the gust_sync trainer in this process)
from gustforge.errors import ConfigError, GustError
from trainer.convert import env_root_of, read_rows, resolve_env_dir, split_train_val
from trainer.estimators import read_params
from trainer.reward_manager import layout_for_config

__all__ = [
    "ALGOS",
    "CONFIG_DIR",
    "DEFAULT_DATA",
    "PLACEHOLDER_MODEL",
    "DataPlan",
    "HEURISTIC_JUDGE_WARNING",
    "ValidationReport",
    "check_batch",
    "endpoint_problems",
    "check_data",
    "TURN_LEVEL_ALGOS",
    "compose_config",
    "plan_data",
    "judge_of",
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
TURN_LEVEL_ALGOS = ("tara", "slca_tara")  # their tool-side credit comes only from turn-level gold
_REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs"
HEURISTIC_JUDGE_WARNING = (
    "the summary reward R_sum uses the OFFLINE HEURISTIC judge (a grounding/length proxy, not an LLM judgement: "
    "it can rate parroted JSON above a correct concise answer); pass --judge-url URL --judge-model M for the "
    "SLCA-GRPO judge protocol"
)


@dataclass(frozen=True)
class DataPlan:
    """The data files a run uses.

    Attributes:
        train: Training parquet.
        val: Validation parquet (never the training rows).
        held_out: True when ``val`` is a held-out split of the given training file.
        env_root: Environment root recorded in the training parquet (None: relative to the working directory).
        train_rows: Rows in ``train`` (None when the file does not exist here).
        val_rows: Rows in ``val`` (None when the file does not exist here).
    """

    train: Path
    val: Path
    held_out: bool
    env_root: Path | None
    train_rows: int | None = None
    val_rows: int | None = None


def plan_data(
    data: str | Path | None,
    val_data: str | Path | None = None,
    *,
    run_dir: str | Path | None = None,
    val_fraction: float = 0.05,
    split_seed: int = 0,
) -> DataPlan:
    """Decide (and write, for a held-out split) the training and validation files.

    Args:
        data: Training parquet; the bundled sample when None.
        val_data: Validation parquet; when None a seeded held-out split of ``data`` is written to ``run_dir``.
        run_dir: Folder for the split files (a temporary folder when None).
        val_fraction: Held-out share (at least one row).
        split_seed: Split seed.

    Returns:
        The plan. A training file that does not exist here is planned but not split (dry runs on other machines).

    Raises:
        ConfigError: The split is impossible (fewer than 2 rows) or validation equals training.
    """
    train = Path(data) if data is not None else DEFAULT_DATA
    if val_data is not None:
        val = Path(val_data)
        if train.exists() and val.exists() and train.resolve() == val.resolve():
            raise ConfigError("--val-data is the training file: validation must not run on training rows")
        root = env_root_of(train) if train.is_file() else None
        return DataPlan(train, val, False, root)
    out = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="gust-train-"))
    if not train.is_file():
        return DataPlan(train, out / "val.parquet", True, None)
    try:
        train_path, val_path, n_train, n_val = split_train_val(train, out, val_fraction=val_fraction, seed=split_seed)
    except GustError as exc:
        raise ConfigError(str(exc)) from exc
    return DataPlan(train_path, val_path, True, env_root_of(train_path), n_train, n_val)


def judge_of(cfg: DictConfig) -> str:
    """The summary judge backend a composed config uses ("heuristic" or "llm")."""
    return str(OmegaConf.select(cfg, f"{_REWARD_KWARGS}.judge", default="heuristic"))


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


def _absolute(path: str | Path) -> Path:
    """An absolute path (multi-node workers resolve a relative path against their own working directory)."""
    return Path(path).expanduser().absolute()


def _model_path(model: str | None) -> str:
    """A local model folder made absolute; an HF hub id left as it is."""
    if model is None:
        return PLACEHOLDER_MODEL
    return str(_absolute(model)) if Path(model).expanduser().exists() else model


def _wiring_overrides(plan: DataPlan, model: str | None, judge_url: str | None, judge_model: str | None) -> list[str]:
    overrides = [
        f"data.train_files={_absolute(plan.train)}",
        f"data.val_files={_absolute(plan.val)}",
        f"actor_rollout_ref.model.path={_model_path(model)}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONFIG_DIR / 'gust_agent_loops.yaml'}",
    ]
    tools = CONFIG_DIR / "tools.yaml"
    if tools.is_file():
        overrides.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}")
    if plan.env_root is not None:
        root = _absolute(plan.env_root)
        overrides += [f"gust.env_root={root}", f"{_REWARD_KWARGS}.env_root={root}"]
    if (judge_url is None) != (judge_model is None):
        raise ConfigError("--judge-url and --judge-model go together (the LLM judge needs both)")
    if judge_url is not None:
        overrides += [f"{_REWARD_KWARGS}.judge=llm", f"{_REWARD_KWARGS}.judge_base_url={judge_url}",
                      f"{_REWARD_KWARGS}.judge_model={judge_model}"]  # fmt: skip
    return overrides


def compose_config(
    algo: str,
    data: str | Path | None = None,
    model: str | None = None,
    overrides: Sequence[str] = (),
    *,
    val_data: str | Path | None = None,
    run_dir: str | Path | None = None,
    val_fraction: float = 0.05,
    split_seed: int = 0,
    judge_url: str | None = None,
    judge_model: str | None = None,
    plan: DataPlan | None = None,
) -> DictConfig:
    """Compose the training config of ``algo`` (Hydra overrides win over everything).

    Args:
        algo: One of ``ALGOS``.
        data: Training parquet (verl RL rows); ``DEFAULT_DATA`` (the bundled sample) when None.
        model: HF model dir or hub id; ``PLACEHOLDER_MODEL`` when None.
        overrides: Extra Hydra overrides (``key=value``, ``+key=value``).
        val_data: Validation parquet; a seeded held-out split of ``data`` (see `plan_data`) when None.
        run_dir: Where the held-out split is written (a temporary folder when None).
        val_fraction: Held-out share.
        split_seed: Split seed.
        judge_url: OpenAI-compatible endpoint of the summary judge (with ``judge_model``).
        judge_model: The judge model name.
        plan: A ready data plan (skips `plan_data`).

    Returns:
        The composed (unresolved) config.

    Raises:
        ConfigError: Unknown algo, a bad override, an impossible split or a half-given judge.
    """
    if algo not in ALGOS:
        raise ConfigError(f"unknown algo {algo!r}; valid: {', '.join(ALGOS)}")
    if plan is None:
        plan = plan_data(data, val_data, run_dir=run_dir, val_fraction=val_fraction, split_seed=split_seed)
    wiring = _wiring_overrides(plan, model, judge_url, judge_model)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        try:
            return compose(config_name=algo, overrides=[*wiring, *overrides])
        except (HydraException, OmegaConfBaseException) as exc:
            raise ConfigError(f"cannot compose {algo!r}: {exc}") from exc


def _algorithm_without_gust(cfg: DictConfig) -> DictConfig:
    algorithm = OmegaConf.to_container(cfg.algorithm, resolve=True)
    if not isinstance(algorithm, dict):
        raise ConfigError("the algorithm section must be a mapping")
    algorithm.pop("gust", None)  # our knobs: validated by EstimatorParams, unknown to AlgoConfig
    return OmegaConf.create(algorithm)


def _files(item: object) -> list[str]:
    return [str(n) for n in (item if OmegaConf.is_list(item) else [item])]


def _missing_files(cfg: DictConfig) -> tuple[str, ...]:
    flat = _files(cfg.data.train_files) + _files(cfg.data.val_files)
    return tuple(sorted({n for n in flat if not Path(n).expanduser().exists()}))


def check_data(cfg: DictConfig) -> None:
    """Data-dependent refusals for the files of ``cfg`` that exist here.

    Raises:
        ConfigError: validation shares files with training; ``tara``/``slca_tara`` on rows without turn-level
            gold; a row's environment folder is missing; a gold step with more calls than
            ``multi_turn.max_parallel_calls``; a gold with more steps than ``multi_turn.max_user_turns`` (or
            steps + 1 > ``max_assistant_turns``).
    """
    train, val = _files(cfg.data.train_files), _files(cfg.data.val_files)
    shared = {str(Path(p).resolve()) for p in train} & {str(Path(p).resolve()) for p in val}
    if shared:
        raise ConfigError(f"data.val_files repeats training files {sorted(shared)}: validation must be held out")
    algo = str(cfg.algorithm.adv_estimator)
    max_calls = int(cfg.actor_rollout_ref.rollout.multi_turn.max_parallel_calls or 0)
    for path in (p for p in train if Path(p).is_file()):
        rows = read_rows(Path(path))
        flat = [r.reward_model.ground_truth for r in rows]
        no_turns = sum(1 for gt in flat if not gt.turn_level)
        if algo in TURN_LEVEL_ALGOS and no_turns:
            raise ConfigError(
                f"{algo!r} needs turn-level gold (GUST rows), but {no_turns} of {len(rows)} rows in {path} have "
                "none (e.g. Toucan rows): their turn rewards, hence every tool-token advantage, would be 0; "
                "use slca, toolpo or grpo for them"
            )
        root = OmegaConf.select(cfg, "gust.env_root", default=None)
        missing_envs = sorted({gt.env_dir for gt in flat if gt.env_dir and not (
            Path(resolve_env_dir(gt.env_dir, root)) / "schemas.json").is_file()})  # fmt: skip
        if missing_envs:
            raise ConfigError(
                f"{len(missing_envs)} environment folder(s) of {path} not found (env root {root or 'cwd'}): "
                f"{missing_envs[:3]}; every trajectory of those rows would fail"
            )
        widest = max((len(step) for gt in flat for step in gt.gold_steps()), default=0)
        if max_calls and widest > max_calls:
            raise ConfigError(
                f"a gold step of {path} has {widest} calls but multi_turn.max_parallel_calls={max_calls}: "
                "the rollout could never execute it"
            )
        _check_turn_caps(cfg, path, [len(gt.gold_steps()) for gt in flat])
        if OmegaConf.select(cfg, "gust.user_simulator", default=None):
            _check_user_cap(cfg, path, [_facts(r.extra_info.interaction_kwargs) for r in rows])


def _facts(kwargs: Any) -> int:
    """Facts the simulated user holds for a row (each may cost one question): 0 without a scenario."""
    from gusteval.scenario import scenario_from_kwargs

    if kwargs is None:
        return 0
    try:
        return len(scenario_from_kwargs(kwargs.model_dump() if hasattr(kwargs, "model_dump") else kwargs).facts)
    except GustError:
        return 0


def _check_user_cap(cfg: DictConfig, path: str, facts_per_row: Sequence[int]) -> None:
    """Simulated-user mode: refuse rows whose user holds more facts than it may answer messages
    (``gust.max_user_messages``; the tool-round cap ``multi_turn.max_user_turns`` is checked separately)."""
    from trainer.user_agent_loop import DEFAULT_MAX_USER_MESSAGES

    cap = int(OmegaConf.select(cfg, "gust.max_user_messages", default=None) or DEFAULT_MAX_USER_MESSAGES)
    over = sum(n > cap for n in facts_per_row)
    if over:
        raise ConfigError(
            f"{over} of {len(facts_per_row)} rows of {path} have a simulated user holding up to "
            f"{max(facts_per_row)} facts but gust.max_user_messages={cap}: an agent asking one value per message "
            f"could not finish; append ++gust.max_user_messages={max(facts_per_row)} (or drop those rows)"
        )


def _check_mini_batch(cfg: DictConfig) -> None:
    """verl asserts that the batch is divisible by the PPO mini-batch only without dynamic batch sizing; with it (our
    long-context default) a mismatch would surface at the first update. Refuse it here in both cases."""
    batch = int(cfg.data.train_batch_size)
    mini = int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size)
    if mini <= 0 or batch % mini:
        raise ConfigError(f"data.train_batch_size={batch} must be divisible by actor_rollout_ref.actor."
                          f"ppo_mini_batch_size={mini} (prompts per PPO mini-batch)")


def check_batch(cfg: DictConfig) -> None:
    """Refuse training data smaller than one batch (at launch; ``--dry-run`` and ``--rehearse`` report it): verl's
    dataloader drops the incomplete last batch, so an epoch has no step and the trainer divides by zero after
    start-up.

    Raises:
        ConfigError: Fewer training rows than ``data.train_batch_size``; the message names the override that fits.
    """
    batch = int(cfg.data.train_batch_size)
    present = [p for p in _files(cfg.data.train_files) if Path(p).is_file()]
    rows = sum(len(read_rows(Path(p))) for p in present)
    if present and rows < batch:
        mini = int(OmegaConf.select(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", default=batch) or batch)
        raise ConfigError(
            f"the training data has {rows} rows but data.train_batch_size={batch}: verl drops the incomplete "
            f"batch, so no step would run (division by zero after start-up); build more rows, or append "
            f"data.train_batch_size={rows} actor_rollout_ref.actor.ppo_mini_batch_size={min(mini, rows)} "
            "(the mini-batch must not exceed the batch)"
        )


def _check_turn_caps(cfg: DictConfig, path: str, steps_per_row: Sequence[int]) -> None:
    """Refuse rows whose gold needs more turns than the rollout allows: verl ends the episode when a cap is reached,
    so the last gold call is generated but never executed while the reward still counts it."""
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    caps = (("max_user_turns", 0), ("max_assistant_turns", 1))  # a tool turn per gold step; + the final reply
    for key, extra in caps:
        cap = int(multi_turn.get(key) or 0)
        needed = [steps + extra for steps in steps_per_row]
        over = sum(n > cap for n in needed)
        if cap and over:
            raise ConfigError(
                f"{over} of {len(needed)} rows of {path} need up to {max(needed)} "
                f"{'tool-response' if extra == 0 else 'assistant'} turns but multi_turn.{key}={cap}: the rollout "
                f"would end before their last gold call; append actor_rollout_ref.rollout.multi_turn.{key}="
                f"{max(needed)} (or drop those rows)"
            )


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
        from verl.experimental.agent_loop.tool_parser import ToolParser

        parser = str(cfg.actor_rollout_ref.rollout.multi_turn.format)
        if parser not in ToolParser._registry:
            raise ConfigError(f"multi_turn.format {parser!r} is not a registered verl tool parser")
        check_data(cfg)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):  # verl's validate_config reports with print()
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        _check_mini_batch(cfg)  # after verl's: its own message wins where it checks
    except ConfigError:
        raise
    except (AssertionError, ValueError, TypeError, KeyError, OmegaConfBaseException, GustError) as exc:
        # verl validates with assert; ValueError also covers pydantic's ValidationError
        raise ConfigError(f"invalid {algo!r} config: {type(exc).__name__}: {exc}") from exc
    logger.debug("verl validate_config: %s", captured.getvalue().strip())
    return ValidationReport(algo, layout, _missing_files(cfg), captured.getvalue().strip())


def endpoint_problems(cfg: DictConfig) -> list[str]:
    """Pre-flight of the services a launch calls from every rollout: the LLM judge (``judge=llm``) and the LLM
    simulated user (``gust.user_simulator=llm``) must answer ``GET /models`` and serve their model, else whole groups
    would fail seconds into the first step (one line per problem, with the fix)."""
    from gustforge.preflight import check_endpoint

    problems = []
    if judge_of(cfg) == "llm":
        kwargs = OmegaConf.select(cfg, _REWARD_KWARGS)
        problem = check_endpoint(str(kwargs.judge_base_url), kwargs.get("judge_model"), role="LLM judge")
        problems += [problem.line()] if problem else []
    if str(OmegaConf.select(cfg, "gust.user_simulator", default="") or "") == "llm":
        user = OmegaConf.select(cfg, "gust.user_llm", default=None) or {}
        if not user.get("base_url"):
            problems.append("simulated user is 'llm' but gust.user_llm.base_url is not set — append "
                            "++gust.user_llm.base_url=URL ++gust.user_llm.model=M (or use the offline user)")
        else:
            problem = check_endpoint(str(user["base_url"]), user.get("model"), role="LLM simulated user")
            problems += [problem.line()] if problem else []
    return problems


def launch(cfg: DictConfig, *, allow_heuristic_judge: bool = False) -> None:
    """Validate ``cfg`` and run verl's PPO trainer (needs GPUs, Ray, vLLM; blocks until training ends).

    Args:
        cfg: A config from ``compose_config``.
        allow_heuristic_judge: Accept the offline heuristic summary judge (a warning is logged).

    Raises:
        ConfigError: Validation fails, a data file is missing, the heuristic judge was not explicitly allowed, or
            nnodes × n_gpus_per_node is more GPUs than this machine / the Ray cluster has.
    """
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    if judge_of(cfg) == "heuristic":
        if not allow_heuristic_judge:
            raise ConfigError(HEURISTIC_JUDGE_WARNING + ", or --heuristic-judge to train on the proxy anyway")
        logger.warning("%s", HEURISTIC_JUDGE_WARNING)
    auto_set_device(cfg)
    report = validate_training_config(cfg)
    if report.missing_files:
        raise ConfigError(f"data files not found: {', '.join(report.missing_files)}")
    check_batch(cfg)
    problems = endpoint_problems(cfg)
    if problems:
        raise ConfigError("pre-flight failed:\n  " + "\n  ".join(problems))
    from trainer.resources import check_gpus

    check_gpus(cfg)  # before Ray starts: a short machine is refused, never a silent wait for GPUs
    logger.info("launching verl PPO: algo=%s layout=%s", report.algo, report.reward_layout)
    run_ppo(cfg, task_runner_class=TaskRunnerV1)
