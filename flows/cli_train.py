"""`gust train`: compose, validate and (unless --dry-run / --rehearse) launch a verl training run.

One callback, no subcommands, so the lead can mount it with ``app.add_typer(cli_train.app, name="train")`` and
``gust train --algo slca --dry-run [key=value ...]`` works. torch/verl are imported lazily (only `trainer/`
imports them), so ``gust --help`` stays fast.

``--rehearse`` runs the CPU pre-flight of `trainer.rehearse` (verl's real classes in verl's order, a scripted
policy, a tiny random model) and exits non-zero when an invariant fails.

``--user-sim`` switches to simulated-user mode (issue 13): the agent-loop registry file
``trainer/configs/gust_user_agent_loops.yaml`` (a reply without a tool call goes to the row's simulated user,
``--user-simulator offline|llm``), refused on data whose rows carry no ``interaction_kwargs``. With ``--rehearse``
it also rehearses the user loop (offline user) and its checks count toward the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["app"]

app = typer.Typer(
    help="Train with verl: slca | tara | slca_tara | toolpo | grpo (Hydra configs in trainer/configs).",
    add_completion=False,
)


@app.callback(invoke_without_command=True)
def train(
    algo: Annotated[str, typer.Option("--algo", help="slca | tara | slca_tara | toolpo | grpo")],
    data: Annotated[Path | None, typer.Option("--data", help="verl RL parquet (default: bundled sample)")] = None,
    model: Annotated[str | None, typer.Option("--model", help="HF model dir or hub id (default: placeholder)")] = None,
    val_data: Annotated[Path | None, typer.Option(
        "--val-data", help="Validation parquet (default: test.parquet beside --data — the build's held-out "
        "environments — else a seeded held-out split of --data)")] = None,
    run_dir: Annotated[Path | None, typer.Option(
        "--run-dir", help="Folder for the held-out split and the rehearsal report (default: out/train/<algo>)")] = None,
    val_fraction: Annotated[float, typer.Option("--val-fraction", help="Held-out share of --data")] = 0.05,
    split_seed: Annotated[int, typer.Option("--split-seed", help="Seed of the held-out split")] = 0,
    judge_url: Annotated[str | None, typer.Option(
        "--judge-url", help="OpenAI-compatible endpoint of the summary judge (with --judge-model)")] = None,
    judge_model: Annotated[str | None, typer.Option("--judge-model", help="Summary judge model name")] = None,
    heuristic_judge: Annotated[bool, typer.Option(
        "--heuristic-judge", help="Train with the offline heuristic summary judge (a proxy; warns)")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print and validate the config; do not train.")] = False,
    rehearse: Annotated[bool, typer.Option(
        "--rehearse", help="CPU pre-flight through verl's classes with a scripted policy and a tiny model")] = False,
    user_sim: Annotated[bool, typer.Option(
        "--user-sim", help="Simulated-user mode: replies without a tool call go to the row's simulated user")] = False,
    user_simulator: Annotated[str, typer.Option(
        "--user-simulator", help="offline | llm (endpoint: user_llm in gust_user_agent_loops.yaml)")] = "offline",
    rehearse_rows: Annotated[int | None, typer.Option(
        "--rehearse-rows", help=f"Rows of --data the rehearsal uses (default: the first {DEFAULT_REHEARSE_ROWS}; "
        "0 = all)")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="Hydra overrides, e.g. trainer.nnodes=1")] = None,
) -> None:
    """Compose trainer/configs/<algo>.yaml on verl's ppo_trainer, validate it, then launch (or print / rehearse)."""
    from omegaconf import OmegaConf

    from gustforge.errors import ConfigError
    from trainer.launch import HEURISTIC_JUDGE_WARNING, compose_config, judge_of, launch, validate_training_config

    for flag, path in (("--data", data), ("--val-data", val_data)):
        if path is not None and not path.is_file():
            typer.echo(f"error: {flag} {path} does not exist (build one with `gust build`: out/verl/train.parquet)",
                       err=True)  # fmt: skip
            raise typer.Exit(code=2)
    folder = run_dir if run_dir is not None else Path("out") / "train" / algo
    beside = data.parent / "test.parquet" if data is not None else None
    if val_data is None and beside is not None and beside.is_file() and data != beside:
        val_data = beside  # `gust build` writes the held-out environments there
        typer.echo(f"validation: {val_data} (held-out environments)", err=True)
    if rehearse:
        if user_sim and user_simulator != "offline":
            typer.echo(f"note: the rehearsal plays the user with the offline simulator (not {user_simulator})",
                       err=True)  # fmt: skip
        _rehearse(algo, data, folder, rehearse_rows, overrides or [], user_sim)
        return
    try:
        mode: list[str] = []
        if user_sim:
            from gusteval.user_sim import USER_SIMULATORS

            if user_simulator not in USER_SIMULATORS:
                raise ConfigError(f"--user-simulator must be one of {USER_SIMULATORS.names()}")
            from trainer.user_agent_loop import user_sim_overrides

            mode = user_sim_overrides(user_simulator)
        cfg = compose_config(algo, data=data, model=model, overrides=[*mode, *(overrides or [])], val_data=val_data,
                             run_dir=folder / "data", val_fraction=val_fraction, split_seed=split_seed,
                             judge_url=judge_url, judge_model=judge_model)  # fmt: skip
        if user_sim:
            _require_user_scenarios(cfg)
        if judge_of(cfg) == "heuristic":
            typer.echo(f"WARNING: {HEURISTIC_JUDGE_WARNING}", err=True)
        if not dry_run:
            launch(cfg, allow_heuristic_judge=heuristic_judge)
            return
        report = validate_training_config(cfg)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    typer.echo(OmegaConf.to_yaml(cfg))
    for missing in report.missing_files:
        typer.echo(f"note: data file not found (would be used): {missing}", err=True)
    typer.echo(f"validation data: {cfg.data.val_files}", err=True)
    typer.echo(f"config OK: algo={report.algo} reward_layout={report.reward_layout} (validated with verl)", err=True)


def _require_user_scenarios(cfg: object) -> None:
    from omegaconf import OmegaConf

    from trainer.user_agent_loop import require_user_scenarios

    train = cfg.data.train_files  # type: ignore[attr-defined]
    for path in train if OmegaConf.is_list(train) else [train]:
        if Path(str(path)).is_file():
            with_user, total = require_user_scenarios(str(path))
            typer.echo(f"simulated-user mode: {with_user}/{total} rows of {path} carry a user scenario", err=True)


DEFAULT_REHEARSE_ROWS = 32  # a real build has hundreds of rows: all of them take tens of minutes on a CPU


def rehearsal_rows(requested: int | None, available: int) -> tuple[int | None, str]:
    """(rows the rehearsal takes, None = all) and the line that says so: a capped default, never a silent one."""
    if requested == 0 or (requested is None and available <= DEFAULT_REHEARSE_ROWS):
        return None, f"rehearsing all {available} rows"
    rows = min(requested or DEFAULT_REHEARSE_ROWS, available)
    more = "" if requested else " (the default cap; --rehearse-rows N to change, 0 for all)"
    return rows, f"rehearsing the first {rows} of {available} rows{more}"


def _rehearse(algo: str, data: Path | None, folder: Path, rows: int | None, overrides: list[str],
              user_sim: bool) -> None:  # fmt: skip
    from gustforge.errors import GustError
    from trainer.rehearse import format_report, rehearse

    if data is not None and data.is_file():
        import pyarrow.parquet as pq

        rows, line = rehearsal_rows(rows, pq.ParquetFile(data).metadata.num_rows)
        typer.echo(line, err=True)

    try:
        report = rehearse(algo, data=data, out_dir=folder / "rehearsal", max_rows=rows, overrides=overrides,
                          user_sim=user_sim)
    except GustError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    typer.echo(format_report(report))
    typer.echo(f"report: {report['report_path']}", err=True)
    if not report["passed"]:
        raise typer.Exit(code=1)
