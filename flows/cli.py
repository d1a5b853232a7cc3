"""`gust`: the command-line entry point. One subcommand per flow or stage; heavy imports happen per command.

Output contract: results (summaries, tables, JSON) go to stdout; progress, warnings and errors go to stderr.
Nothing hard-wraps when piped. Exit codes: 0 ok, 1 the run failed (reason printed), 2 bad usage or a failed
pre-flight check, 130 interrupted (rerun the same command to resume from the stage cache).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from flows.prefect_env import configure_prefect_environment

__all__ = ["app", "main"]

err = Console(stderr=True, soft_wrap=True, highlight=False)
out_console = Console(soft_wrap=True, highlight=False)
app = typer.Typer(
    name="gust",
    help="GUST Forge: executable tool environments, long-horizon tool-use tasks and RL training data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)

STAGE_NAMES = ("envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "quality", "export", "convert")
# the file a stage's --from folder must hold (the previous stage's outputs); envgen reads raw inputs
_STAGE_INPUT = {"tdg": "work/envgen.jsonl or envs/", "sample": "work/tdg.jsonl", "reconstruct": "work/sample.jsonl",
                "tasks": "work/reconstruct.jsonl", "verify": "work/tasks.jsonl", "quality": "work/verify.jsonl",
                "export": "work/quality.jsonl",
                "convert": "work/export.jsonl"}  # fmt: skip

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML or TOML build config.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config key: section.key=value (repeat).")]
BackendOpt = Annotated[str | None, typer.Option("--backend", help="LLM backend for every role: offline | openai.")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Master seed (also the envgen and tdg seeds).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Run folder (outputs, reports and the stage cache).")]


def _version() -> str:
    try:
        return version("gustforge")
    except PackageNotFoundError:  # a checkout on PYTHONPATH without an install
        return "0+unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gust {_version()}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    show_version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_show_version, is_eager=True)
    ] = False,  # fmt: skip
) -> None:
    """GUST Forge: executable tool environments, long-horizon tool-use tasks and RL training data."""
    if ctx.invoked_subcommand == "train":
        from gustforge.preflight import check_extras

        _stop_on(check_extras(["train"], purpose="gust train"))


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
    err.print(f"[bold red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _stop_on(problems: list[Any]) -> None:
    """Print every pre-flight problem (one line each, with its fix) and exit 2 if there is any."""
    for problem in problems:
        err.print(f"[bold red]error:[/] {escape(problem.line())}")
    if problems:
        raise typer.Exit(2)


def _crashed(what: str, exc: Exception) -> None:
    """An error no check anticipated: one line (the traceback with GUST_TRACEBACK=1); the stage cache keeps the
    finished work, so the same command resumes."""
    if os.environ.get("GUST_TRACEBACK"):
        raise exc
    _fail(f"{what} failed: {type(exc).__name__}: {exc} (rerun to resume; GUST_TRACEBACK=1 shows the traceback)", 1)


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        _fail(f"--out {out} is a file, not a folder; pass a folder path")


def reason_text(dropped: Mapping[str, int], limit: int | None = None) -> str:
    """`reason=count, ...` by count (most first), or `-`; `limit` keeps the top reasons and says how many more."""
    ranked = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ranked if limit is None else ranked[:limit]
    more = f", +{len(ranked) - len(shown)} more" if len(ranked) > len(shown) else ""
    return (", ".join(f"{k}={v}" for k, v in shown) + more) or "-"


def _summary_rows(summary: Any, timings: Mapping[str, float], cached: set[str]) -> list[list[str]]:
    rows = []
    for stage, report in summary.stages.items():
        seconds = timings.get(stage)
        timing = f"{seconds:.1f}" if seconds is not None else "-"
        timing += " (cached)" if stage in cached else ""
        rows.append([stage, str(report.inputs), str(report.produced), reason_text(report.dropped, 3), timing])
    return rows


def _print_summary(summary: Any, timings: Mapping[str, float], cached: set[str]) -> None:
    columns = ("stage", "inputs", "produced", "dropped (top reasons)", "seconds")
    rows = _summary_rows(summary, timings, cached)
    if out_console.is_terminal:
        table = Table(title=f"gust build → {summary.out}")
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        out_console.print(table)
    else:  # scripts: one tab-separated line per stage, never wrapped
        typer.echo("\t".join(columns))
        for row in rows:
            typer.echo("\t".join(row))
    gust_dir = Path(summary.out) / summary.gust_dir if summary.gust_dir else None
    from gustforge.run_summary import teacher_line

    typer.echo(f"GUST rows: {summary.gust_rows} in {gust_dir}; teacher Pass@k: {teacher_line(summary)}")
    for role, usage in summary.llm.items():
        typer.echo(f"LLM {role}: {usage['requests']} requests, {usage['cache_hits']} cached, "
                   f"{usage['retries']} retries, {usage['total_tokens']} tokens")  # fmt: skip


def _next_commands(out: Path) -> list[str]:
    """Commands worth running after a build, with an environment id that exists in this run."""
    envs = sorted(p for p in (out / "envs").glob("*/manifest.json")) if (out / "envs").is_dir() else []
    if not envs:
        return []
    env_dir = envs[0].parent
    lines = [f"gust env tools {env_dir}"]
    schemas = env_dir / "schemas.json"
    try:
        tools = json.loads(schemas.read_text(encoding="utf-8"))
        # a tool that needs no argument runs as printed; otherwise fill in the "..." placeholders
        tool = next((t for t in tools if not t.get("parameters", {}).get("required")), tools[0])
        required = tool.get("parameters", {}).get("required") or []
        example = {name: "..." for name in required}
        lines.append(f"gust env run {env_dir} {tool['name']} --args '{json.dumps(example)}'")
    except (OSError, ValueError, KeyError, IndexError):
        pass
    lines.append(f"gust env serve {env_dir}    # MCP over stdio")
    if (out / "gust" / "README.md").is_file():
        lines.append(f"gust export --from {out / 'gust'} --dry-run {out / 'hub'}")
    if (out / "verl" / "train.parquet").is_file():
        lines.append(
            f"gust train --algo tara --data {out / 'verl' / 'train.parquet'} --dry-run    # GUST's turn-level gold "
            "(TARA; its turn caps fit long tasks); needs the train extra"
        )
    return lines


def _run_flow(body: Any, progress_console: Console | None = None) -> tuple[Any, Any]:
    """Run `body()` (which runs a flow) on a local Prefect server in its own session, interruptibly.

    On Ctrl-C / SIGTERM: the flow is interrupted, the progress display closed, the server stopped, one line
    printed, exit 130 (see `flows.interrupt`). Returns (body's result, the progress tracker or None).
    """
    from flows.interrupt import on_local_server
    from flows.prefect_env import quiet_expected_failures
    from flows.progress import stage_progress

    quiet_expected_failures()
    if progress_console is None:
        return on_local_server(body), None

    def with_progress() -> tuple[Any, Any]:
        with stage_progress(progress_console) as progress:
            return body(), progress

    return on_local_server(with_progress)


@app.command()
def build(
    inputs: Annotated[list[Path] | None, typer.Option("--input", "-i", help="Raw toolset file/folder.")] = None,
    input_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="toucan_row | toucan_server | openai_tools | mcp_tools_list | toolbench (default: detected)",
        ),
    ] = None,
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
    skip_checks: Annotated[bool, typer.Option("--skip-checks", help="Skip the pre-flight checks.")] = False,
) -> None:
    """Build environments, tasks and the GUST dataset (default: the bundled sample, offline)."""
    from gustforge.errors import GustError

    _check_out(out)
    try:
        extra = [f"input_format={input_format}"] if input_format else []
        extra += [f"min_rows={min_rows}"] if min_rows is not None else []
        extra += [f"llm.refresh_roles={json.dumps(refresh_llm)}"] if refresh_llm else []
        cfg = _load_config(config, [*(overrides or []), *extra],
                           out=out, backend=backend, seed=seed, inputs=inputs, runner=runner, workers=workers,
                           address=address, teacher_url=teacher_url, teacher_model=teacher_model)  # fmt: skip
    except GustError as exc:
        _fail(str(exc))
    for path in cfg.inputs:
        if not Path(path).exists():
            _fail(f"input {path} does not exist")
    if not skip_checks:
        from gustforge.preflight import build_problems

        _stop_on(build_problems(cfg))
    _note_paper_filter(cfg)
    configure_prefect_environment(out)
    if refresh:
        os.environ["PREFECT_TASKS_REFRESH_CACHE"] = "true"
    from flows.build import run_build

    try:
        summary, progress = _run_flow(lambda: run_build(cfg), err)
    except GustError as exc:
        _fail(str(exc), 1)
    except Exception as exc:
        _crashed("build", exc)
    _print_summary(summary, progress.timings, progress.cached)
    if summary.problems:
        _fail("; ".join(summary.problems), 1)
    steps = _next_commands(out)
    if steps:
        err.print("next:")
        for line in steps:
            err.print(f"  {escape(line)}")


def _note_paper_filter(cfg: Any) -> None:
    """Say so when the envgen filter is not the paper's (5-20 tools, <= 4 parameters per tool)."""
    env = cfg.envgen
    if env.paper_filter_overridden:
        err.print(f"note: envgen filter (min_tools={env.min_tools}, max_tools={env.max_tools}, "
                  f"max_params={env.max_params}) differs from the paper's (5-20 tools, <= 4 parameters per tool)",
                  markup=False)  # fmt: skip


def _check_stage_source(name: str, source: Path) -> None:
    if name not in STAGE_NAMES:
        _fail(f"unknown stage {name!r}; valid: {', '.join(STAGE_NAMES)}")
    if not source.exists():
        _fail(f"--from {source} does not exist")
    if name == "envgen":
        return
    if not source.is_dir():
        _fail(f"--from {source} must be a run folder (the --out of an earlier build)")
    previous = _STAGE_INPUT[name]
    found = (source / previous.split(" ")[0]).is_file() or (name == "tdg" and ((source / "envs").is_dir() or any(
        (p / "manifest.json").is_file() for p in source.iterdir())))  # fmt: skip
    if not found:
        _fail(f"stage {name} needs {source}/{previous} (run the earlier stages or `gust build` into {source} first)")


def _ingest_line(out: Path) -> str | None:
    path = out / "reports" / "ingest.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    dropped = _ingest_drops(out)
    produced = sum(r.get("outcome") == "produced" for r in rows)
    return (f"ingest: {produced + sum(dropped.values())} inputs, {produced} toolsets, {sum(dropped.values())} "
            f"quarantined at ingest ({reason_text(dropped)}); details: {out / 'quarantine.jsonl'}")  # fmt: skip


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(STAGE_NAMES)}")],
    source: Annotated[Path, typer.Option("--from", help="Previous stage's run folder (raw inputs for envgen).")],
    out: OutOpt = Path("out"),
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    backend: BackendOpt = None,
    seed: SeedOpt = None,
    only: Annotated[
        bool,
        typer.Option(
            "--only",
            help="Run just this stage; the later stages' outputs in --out are then recorded as stale in "
            "manifest.json (default: re-run every later stage too, from the cache where unchanged).",
        ),
    ] = False,
    direct: Annotated[
        bool,
        typer.Option(
            "--direct",
            help="Run in this process without Prefect: no server start-up, "
            "no stage cache, no UI (same library functions and reports).",
        ),
    ] = False,
) -> None:
    """Re-run one stage on an earlier run's outputs and every stage after it (--only: just this one), inside
    Prefect (logged, cached) or directly (--direct); config.json and manifest.json record the run."""
    from gustforge.errors import GustError

    _check_stage_source(name, source)  # before Prefect starts: a typo costs nothing
    _check_out(out)
    try:
        cfg = _load_config(config, overrides, out=out, backend=backend, seed=seed)
    except GustError as exc:
        _fail(str(exc))
    from gustforge.preflight import build_problems

    _stop_on(build_problems(cfg))
    if name == "envgen":
        _note_paper_filter(cfg)
    try:
        if direct:
            from tasks.direct import run_stages_direct

            summary = run_stages_direct(name, source, cfg, only=only)
        else:
            configure_prefect_environment(out)
            from flows.build import run_stage

            summary, _ = _run_flow(lambda: run_stage(name, source, cfg, only=only))
    except GustError as exc:
        _fail(str(exc), 1)
    except Exception as exc:
        _crashed(f"stage {name}", exc)
    _print_stage_runs(name, summary, out, only=only)


def _print_stage_runs(name: str, summary: Any, out: Path, *, only: bool) -> None:
    """One line per stage this command ran (the named one first), the stale note, then the problems."""
    from tasks.stage_table import downstream_of

    if name == "envgen":
        line = _ingest_line(out)
        if line:
            typer.echo(line)
    for stage_name in summary.seconds:  # the stages this run ran, in order
        report = summary.stages[stage_name]
        typer.echo(f"{stage_name}: {report.inputs} inputs, {report.produced} produced, dropped: "
                   f"{reason_text(report.dropped)}; report: {out / 'reports' / (stage_name + '.jsonl')}")  # fmt: skip
    if only and downstream_of(name):
        err.print(f"note: --only: {', '.join(downstream_of(name))} in {out} still hold outputs made before this "
                  f"change (recorded as stale in {out / 'manifest.json'}); rerun without --only to refresh them",
                  markup=False)  # fmt: skip
    report = summary.stages[name]
    if report.produced == 0:
        _check_empty_stage(name, report.dropped, out)
    if summary.problems:
        _fail("; ".join(summary.problems), 1)


def _check_empty_stage(name: str, dropped: Mapping[str, int], out: Path) -> None:
    """A stage that produced nothing fails the run unless deliberate filtering explains it (e.g. every toolset
    outside the paper's size filter): then it says so and exits 0."""
    from gustforge.accounting import POLICY_REASONS, QUALITY_REASONS

    reasons = Counter(dropped)
    if name == "envgen":
        reasons.update(_ingest_drops(out))
    policy = POLICY_REASONS | QUALITY_REASONS
    if any(reason in policy for reason in reasons):
        err.print(f"warning: stage {name} produced nothing; deliberate filtering explains it "
                  f"({reason_text(reasons)})", markup=False)  # fmt: skip
        return
    _fail(f"stage {name} produced nothing ({reason_text(reasons) if reasons else 'no input items'})", 1)


def _ingest_drops(out: Path) -> Counter[str]:
    path = out / "reports" / "ingest.jsonl"
    if not path.is_file():
        return Counter()
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return Counter(str(r.get("reason", "?")).split(":")[0] for r in rows if r.get("outcome") == "dropped")


def _validate_cron(cron: str) -> None:
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except ValueError as exc:
        first = str(exc).strip().splitlines()
        _fail(f'--cron {cron!r} is not a valid cron string ({first[-1] if first else exc}); e.g. "0 3 * * *"')


_DEPLOY_HOWTO = (
    "gust deploy needs a Prefect server that outlives this command (the embedded one is thrown away on exit).\n"
    "  1. start one:     prefect server start            # SQLite under ~/.prefect; for PostgreSQL set\n"
    "                                                    # PREFECT_API_DATABASE_CONNECTION_URL first\n"
    "  2. point at it:   export PREFECT_API_URL=http://127.0.0.1:4200/api\n"
    "  3. a work pool:   prefect work-pool create gust --type process\n"
    "  4. deploy:        gust deploy --cron '0 3 * * *' --pool gust --register\n"
    "  5. a worker:      prefect worker start --pool gust\n"
    "  (or skip 3-5 and keep `gust deploy --cron ... --serve` running: it serves the schedule itself)"
)


@app.command()
def deploy(
    cron: Annotated[str, typer.Option("--cron", help='Schedule, e.g. "0 3 * * *".')],
    name: Annotated[str, typer.Option("--name", help="Deployment name.")] = "nightly",
    inputs: Annotated[list[Path] | None, typer.Option("--input", "-i", help="Raw toolset file/folder.")] = None,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    backend: BackendOpt = None,
    seed: SeedOpt = None,
    out: OutOpt = Path("out"),
    pool: Annotated[str | None, typer.Option("--pool", help="Work pool (process type) for `deploy` mode.")] = None,
    serve: Annotated[bool, typer.Option("--serve/--register", help="Serve (long-running) or only register.")] = True,
) -> None:
    """Schedule `gust build` (same --input/--config/--set as build): serve it from this process, or register a
    deployment on a work pool. One scheduled build runs at a time; `gust runs` lists them."""
    from gustforge.errors import GustError

    _check_out(out)
    configure_prefect_environment(out)
    from flows.prefect_env import is_ephemeral

    if is_ephemeral():
        err.print(f"[bold red]error:[/] {escape(_DEPLOY_HOWTO)}")
        raise typer.Exit(2)
    _validate_cron(cron)
    try:
        cfg = _load_config(config, overrides, out=out, backend=backend, seed=seed, inputs=inputs)
    except GustError as exc:
        _fail(str(exc))
    for path in cfg.inputs:
        if not Path(path).exists():
            _fail(f"input {path} does not exist")
    from flows.deploy import register_deployment, serve_build

    if serve and pool is None:
        err.print(
            f"serving deployment gust-build/{escape(name)} on cron {escape(repr(cron))} (Ctrl-C / SIGTERM to stop)"
        )
        serve_build(cfg, name=name, cron=cron)
        return
    deployment_id = register_deployment(cfg, name=name, cron=cron, work_pool=pool)
    typer.echo(f"registered deployment gust-build/{name} ({deployment_id}) on cron {cron!r}"
               + (f"; start a worker: prefect worker start --pool {pool}" if pool else ""))  # fmt: skip


@app.command()
def export(
    source: Annotated[Path, typer.Option("--from", help="A GUST folder (OUT/gust).")] = Path("out/gust"),
    hub: Annotated[str | None, typer.Option("--hub", help="Hub dataset repo ORG/NAME.")] = None,
    private: Annotated[bool, typer.Option("--private", help="Create the Hub repo private.")] = False,
    dry_run: Annotated[Path | None, typer.Option("--dry-run", help="Write the upload folder here; no upload.")] = None,
    envs: Annotated[Path | None, typer.Option("--envs", help="Environments folder (default: FROM/../envs).")] = None,
) -> None:
    """Publish a GUST folder with its environments to the Hugging Face Hub (token from HF_TOKEN), or write the
    exact upload folder (--dry-run)."""
    from gustforge.errors import GustError

    if not (source / "README.md").is_file():
        _fail(f"{source} is not a GUST folder (no README.md card); run `gust build` first")
    if hub is None and dry_run is None:
        _fail("give --hub ORG/NAME, or --dry-run DIR to only write the upload folder")
    if dry_run is None:
        from gustforge.preflight import check_hf_token

        problem = check_hf_token()
        _stop_on([problem] if problem else [])
    if dry_run is not None and dry_run.exists() and not dry_run.is_dir():
        _fail(f"--dry-run {dry_run} is a file, not a folder")
    from data.gust import REPO_PLACEHOLDER
    from data.hub import publish

    try:
        result = publish(source, hub or REPO_PLACEHOLDER, private=private, dry_run_dir=dry_run, envs_dir=envs)
    except GustError as exc:
        _fail(str(exc), 1)
    except Exception as exc:  # the Hub answered with an error after retries: say what, not where in the code
        _fail(f"upload to {hub} failed: {type(exc).__name__}: {exc}", 1)
    typer.echo(json.dumps(result.model_dump(mode="json"), indent=2))


from flows.cli_quality import quality  # noqa: E402

app.command(help="Measure an OUT folder's tasks: reports/quality.json, card table, figure panel.")(quality)
from flows.cli_runs import runs  # noqa: E402

app.command(help="Recent builds into a run folder: state, config digest, rows (and the Prefect server's view).")(runs)
_mount("flows.cli_env", "env", "Run, inspect, serve (MCP) or pull a built environment.")
_mount("flows.cli_cache", "cache", "Merge or inspect LLM response caches (one per node in multi-node builds).")
_mount("flows.cli_toucan", "toucan", "Toucan SFT/RL preparation, evaluation and the tool-space K-sweep.")
eval_app = typer.Typer(help="Evaluate a served model (alias of the evaluators' own commands).", no_args_is_help=True,
                       rich_markup_mode=None)  # fmt: skip
app.add_typer(eval_app, name="eval")
try:
    from flows.cli_toucan import evaluate as _toucan_evaluate

    eval_app.command("toucan", help="Alias of `gust toucan eval`.")(_toucan_evaluate)
except ImportError:  # pragma: no cover - the toucan package ships with the core install
    pass
from flows.cli_eval import gust as _gust_evaluate  # noqa: E402

eval_app.command("gust", help="pass^k on GUST tasks with a simulated user (final-state equivalence).")(_gust_evaluate)
_mount("flows.cli_train", "train", "Launch RL training on verl (slca | tara | slca_tara | toolpo | grpo); "
       "needs the train extra.")  # fmt: skip


def main() -> None:
    app(prog_name="gust")


if __name__ == "__main__":
    sys.exit(main())
