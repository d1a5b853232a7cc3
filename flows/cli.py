"""`gust`: the command-line entry point. One subcommand per flow or stage; heavy imports happen per command."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from flows.prefect_env import configure_prefect_environment

__all__ = ["app", "main"]

console = Console(stderr=True)
app = typer.Typer(
    name="gust",
    help="GUST Forge: executable tool environments, long-horizon tool-use tasks and RL training data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

STAGE_NAMES = ("envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "quality", "export", "convert")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML build config.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeat).")]
BackendOpt = Annotated[str | None, typer.Option("--backend", help="LLM backend for every role: offline | openai.")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Master seed (also the envgen and tdg seeds).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Run folder (outputs, reports and the stage cache).")]


def _mount(module: str, name: str, help_text: str) -> None:
    """Add a sub-app written in its own module (env, train, toucan) if that module is installed."""
    try:
        sub = importlib.import_module(module)
    except ImportError as exc:  # the module exists in the repo; only a missing optional extra lands here
        logging.getLogger(__name__).debug("command %s unavailable: %s", name, exc)
        return
    app.add_typer(sub.app, name=name, help=help_text)


def _load_config(config: Path | None, overrides: list[str] | None, *, out: Path, backend: str | None,
                 seed: int | None, inputs: list[Path] | None = None, runner: str | None = None,
                 workers: int | None = None, address: str | None = None, teacher_url: str | None = None,
                 teacher_model: str | None = None) -> Any:  # fmt: skip
    from gustforge.config import load_config

    sets = list(overrides or [])
    if backend:
        sets += [f"llm.backend={backend}", f"envgen.backend={backend}"]
    if seed is not None:
        sets += [f"seed={seed}", f"envgen.seed={seed}", f"tdg.seed={seed}"]
    if runner:
        sets.append(f"runner.kind={runner}")
    if workers:
        sets.append(f"runner.max_workers={workers}")
    if address:
        sets.append(f"runner.address={address}")
    if teacher_url:
        sets.append(f"verify.teacher.base_url={teacher_url}")
    if teacher_model:
        sets.append(f"verify.teacher.model={teacher_model}")
    fields: dict[str, Any] = {"out": out}
    if inputs:
        fields["inputs"] = [str(p) for p in inputs]
    return load_config(config, sets, **fields)


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _print_summary(summary: Any) -> None:
    table = Table(title=f"gust build → {summary.out}")
    for column in ("stage", "inputs", "produced", "dropped (top reasons)", "seconds"):
        table.add_column(column)
    for stage, report in summary.stages.items():
        ranked = sorted(report.dropped.items(), key=lambda kv: -kv[1])
        more = f", +{len(ranked) - 3} more" if len(ranked) > 3 else ""
        reasons = ", ".join(f"{k}={v}" for k, v in ranked[:3]) + more
        seconds = summary.seconds.get(stage)
        table.add_row(stage, str(report.inputs), str(report.produced), reasons or "-",
                      f"{seconds:.1f}" if seconds is not None else "-")  # fmt: skip
    console.print(table)
    gust_dir = Path(summary.out) / summary.gust_dir if summary.gust_dir else None
    console.print(f"GUST rows: [bold]{summary.gust_rows}[/] in {gust_dir}; teacher Pass@k: {summary.teacher}")
    for role, usage in summary.llm.items():
        console.print(f"LLM {role}: {usage['requests']} requests, {usage['cache_hits']} cached, "
                      f"{usage['retries']} retries, {usage['total_tokens']} tokens")  # fmt: skip


@app.command()
def build(
    inputs: Annotated[list[Path] | None, typer.Option("--input", "-i", help="Raw toolset file/folder.")] = None,
    input_format: Annotated[str | None, typer.Option("--format", help="toucan_row | toucan_server | openai_tools | "
                                                     "mcp_tools_list | toolbench (default: detected)")] = None,
    out: OutOpt = Path("out"),
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    backend: BackendOpt = None,
    seed: SeedOpt = None,
    runner: Annotated[str | None, typer.Option("--runner", help="local | process | ray | dask")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Parallel shard tasks.")] = None,
    address: Annotated[str | None, typer.Option("--address", help="Ray/Dask cluster address.")] = None,
    teacher_url: Annotated[str | None, typer.Option("--teacher-url", help="Teacher endpoint for Pass@k.")] = None,
    teacher_model: Annotated[str | None, typer.Option("--teacher-model")] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Ignore the stage cache and recompute.")] = False,
    min_rows: Annotated[int | None, typer.Option("--min-rows", help="Exit non-zero below this many rows.")] = None,
    refresh_llm: Annotated[list[str] | None, typer.Option("--refresh-llm", help="Re-draw cached replies of an "
                           "LLM role (refactor, database, codegen, tdg_judge, task_writer; repeat).")] = None,
) -> None:
    """Build environments, tasks and the GUST dataset (default: the bundled sample, offline)."""
    from gustforge.errors import GustError

    configure_prefect_environment(out)
    if refresh:
        os.environ["PREFECT_TASKS_REFRESH_CACHE"] = "true"
    try:
        extra = [f"input_format={input_format}"] if input_format else []
        extra += [f"min_rows={min_rows}"] if min_rows is not None else []
        extra += [f"llm.refresh_roles={json.dumps(refresh_llm)}"] if refresh_llm else []
        cfg = _load_config(config, [*(overrides or []), *extra],
                           out=out, backend=backend, seed=seed, inputs=inputs, runner=runner, workers=workers,
                           address=address, teacher_url=teacher_url, teacher_model=teacher_model)  # fmt: skip
        for path in cfg.inputs:
            if not Path(path).exists():
                _fail(f"input {path} does not exist")
        from flows.build import run_build
        from flows.progress import stage_progress

        with stage_progress(console):
            summary = run_build(cfg)
    except GustError as exc:
        _fail(str(exc), 1)
    _print_summary(summary)
    if summary.problems:
        _fail("; ".join(summary.problems), 1)


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(STAGE_NAMES)}")],
    source: Annotated[Path, typer.Option("--from", help="Previous stage's run folder (raw inputs for envgen).")],
    out: OutOpt = Path("out"),
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    backend: BackendOpt = None,
    seed: SeedOpt = None,
) -> None:
    """Re-run one stage on an earlier run's outputs, inside Prefect (logged, cached)."""
    from gustforge.errors import GustError

    if name not in STAGE_NAMES:
        _fail(f"unknown stage {name!r}; valid: {', '.join(STAGE_NAMES)}")
    if not source.exists():
        _fail(f"--from {source} does not exist")
    configure_prefect_environment(out)
    try:
        cfg = _load_config(config, overrides, out=out, backend=backend, seed=seed)
        from flows.build import run_stage

        result = run_stage(name, source, cfg)
    except GustError as exc:
        _fail(str(exc), 1)
    report = result.report
    console.print(f"{name}: inputs {report.inputs}, produced {report.produced}, dropped {dict(report.dropped)}; "
                  f"report: {out}/reports/{name}.jsonl")  # fmt: skip


@app.command()
def deploy(
    cron: Annotated[str, typer.Option("--cron", help='Schedule, e.g. "0 3 * * *".')],
    name: Annotated[str, typer.Option("--name", help="Deployment name.")] = "nightly",
    config: ConfigOpt = None,
    out: OutOpt = Path("out"),
    pool: Annotated[str | None, typer.Option("--pool", help="Work pool (process type) for `deploy` mode.")] = None,
    serve: Annotated[bool, typer.Option("--serve/--register", help="Serve (long-running) or only register.")] = True,
) -> None:
    """Schedule `gust build`: serve it from this process, or register a deployment on a work pool."""
    configure_prefect_environment(out)
    from flows.deploy import register_deployment, serve_build

    cfg = _load_config(config, None, out=out, backend=None, seed=None)
    if serve and pool is None:
        console.print(f"serving deployment gust-build/{name} on cron {cron!r} (Ctrl-C / SIGTERM to stop)")
        serve_build(cfg, name=name, cron=cron)
        return
    deployment_id = register_deployment(cfg, name=name, cron=cron, work_pool=pool)
    console.print(f"registered deployment gust-build/{name} ({deployment_id}) on cron {cron!r}"
                  + (f"; start a worker: prefect worker start --pool {pool}" if pool else ""))  # fmt: skip


@app.command()
def export(
    source: Annotated[Path, typer.Option("--from", help="A GUST folder (OUT/gust).")] = Path("out/gust"),
    hub: Annotated[str | None, typer.Option("--hub", help="Hub dataset repo ORG/NAME.")] = None,
    private: Annotated[bool, typer.Option("--private")] = False,
    dry_run: Annotated[Path | None, typer.Option("--dry-run", help="Write the upload folder here; no upload.")] = None,
) -> None:
    """Publish a GUST folder to the Hugging Face Hub (token from HF_TOKEN), or write the exact folder (--dry-run)."""
    from data.hub import publish
    from gustforge.errors import GustError

    if not (source / "README.md").is_file():
        _fail(f"{source} is not a GUST folder (no README.md card); run `gust build` first")
    if hub is None and dry_run is None:
        _fail("give --hub ORG/NAME, or --dry-run DIR to only write the upload folder")
    try:
        result = publish(source, hub or "local/dry-run", private=private, dry_run_dir=dry_run)
    except GustError as exc:
        _fail(str(exc), 1)
    console.print(json.dumps(result.model_dump(mode="json"), indent=2))


from flows.cli_quality import quality  # noqa: E402

app.command(help="Measure an OUT folder's tasks: reports/quality.json, card table, figure panel.")(quality)
_mount("flows.cli_env", "env", "Run or serve (MCP) a built environment.")
_mount("flows.cli_toucan", "toucan", "Toucan SFT/RL preparation, evaluation and the tool-space K-sweep.")
eval_app = typer.Typer(help="Evaluate a served model (alias of the evaluators' own commands).", no_args_is_help=True)
app.add_typer(eval_app, name="eval")
try:
    from flows.cli_toucan import evaluate as _toucan_evaluate

    eval_app.command("toucan", help="Alias of `gust toucan eval`.")(_toucan_evaluate)
except ImportError:  # pragma: no cover - the toucan package ships with the core install
    pass
from flows.cli_eval import gust as _gust_evaluate  # noqa: E402

eval_app.command("gust", help="pass^k on GUST tasks with a simulated user (final-state equivalence).")(_gust_evaluate)
_mount("flows.cli_train", "train", "Launch RL training on verl (slca | tara | slca_tara | toolpo | grpo).")


def main() -> None:
    app(prog_name="gust")


if __name__ == "__main__":
    sys.exit(main())
