"""`gust toucan`: prepare Toucan SFT/RL data, evaluate a model in-domain, build K-sweep datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.interrupt import on_local_server
from flows.prefect_env import configure_prefect_environment

__all__ = ["app"]

app = typer.Typer(help="Toucan SFT/RL preparation, in-domain evaluation, tool-space K-sweep.", no_args_is_help=True,
                  rich_markup_mode=None)  # fmt: skip

Out = Annotated[Path, typer.Option("--out", "-o", help="Output folder.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of every random choice.")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _reasons(dropped: dict[str, int]) -> str:
    ranked = sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k}={v}" for k, v in ranked) or "-"


@app.command()
def prepare(
    input_path: Annotated[
        Path, typer.Option("--input", "-i", help="Toucan rows: .parquet, .jsonl, .json, or a folder of them.")
    ],  # fmt: skip
    out: Out = Path("out/toucan"),
    seed: Seed = 42,
    start_turn: Annotated[int, typer.Option(help="First decomposed user turn: 2 = paper, 1 = every turn.")] = 2,
    test_single: Annotated[int, typer.Option(help="Held-out native single-turn samples (full scale).")] = 3000,
    test_multi: Annotated[int, typer.Option(help="Held-out decomposed multi-turn samples (full scale).")] = 1000,
    arg_check: Annotated[str, typer.Option(help="Gold-argument check: off | required | full.")] = "required",
) -> None:
    """Phases 1-4: filter + repair, hold out the test set, decompose, split SFT / RL (see out/report.json)."""
    from toucan.config import ArgCheck, PrepareConfig

    if not input_path.exists():
        raise _fail(f"input not found: {input_path}")
    if input_path.is_file() and input_path.suffix not in (".parquet", ".jsonl", ".json"):
        raise _fail(f"--input {input_path}: expected .parquet, .jsonl, .json or a folder of them")
    cfg = PrepareConfig(seed=seed, decompose_start_turn=start_turn, test_single_turn=test_single,
                        test_multi_turn=test_multi, arg_check=ArgCheck(arg_check))  # fmt: skip
    configure_prefect_environment(out)
    from flows.toucan import toucan_prepare_flow

    paths = on_local_server(lambda: toucan_prepare_flow(str(input_path.resolve()), str(out.resolve()), cfg))
    from data.io import read_json

    phases = read_json(Path(paths["report"]))["phases"]
    for phase in phases:
        outputs = ", ".join(f"{k} {v}" for k, v in phase["outputs"].items()) or "nothing"
        typer.echo(f"{phase['phase']}: {phase['inputs']} {phase['unit']} in → {outputs}; "
                   f"dropped: {_reasons(phase['dropped'])}")  # fmt: skip
    counts = _split_counts(paths)
    typer.echo("outputs: " + ", ".join(f"{name} {n} rows ({paths[name]})" for name, n in counts.items()))
    if not any(counts.values()):
        first = phases[0] if phases else {"inputs": 0, "dropped": {}}
        raise _fail(f"nothing prepared from {first['inputs']} input rows (dropped: {_reasons(first['dropped'])}); "
                    f"details: {out / 'quarantine.jsonl'}", 1)  # fmt: skip


def _split_counts(paths: dict[str, str]) -> dict[str, int]:
    import pyarrow.parquet as pq

    return {name: pq.ParquetFile(paths[name]).metadata.num_rows for name in ("test", "rl", "sft") if name in paths}


@app.command("eval")
def evaluate(
    data: Annotated[Path, typer.Option("--data", help="Test parquet from `gust toucan prepare`.")],
    endpoint: Annotated[str, typer.Option("--endpoint", help="OpenAI-compatible base URL (…/v1).")],
    model: Annotated[str | None, typer.Option("--model", help="Served model name (default: first listed).")] = None,
    out: Out = Path("out/toucan-eval"),
    concurrency: Annotated[int, typer.Option(help="Requests in flight.")] = 8,
    max_turns: Annotated[int, typer.Option(help="Generations per episode.")] = 7,
    responder: Annotated[str, typer.Option(help="Tool observations: replay | template | llm.")] = "replay",
    mocker_endpoint: Annotated[str | None, typer.Option(help="SGLS mocker endpoint for --responder llm.")] = None,
    mocker_model: Annotated[str | None, typer.Option(help="SGLS mocker model.")] = None,
    judge: Annotated[str, typer.Option(help="Summary judge: heuristic (offline proxy) | llm.")] = "heuristic",
    judge_endpoint: Annotated[str | None, typer.Option(help="Judge endpoint for --judge llm.")] = None,
    judge_model: Annotated[str | None, typer.Option(help="Judge model for --judge llm.")] = None,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N samples.")] = None,
    seed: Seed = 0,
) -> None:
    """Run the model through the training tool loop on every test sample; write results, report.md, metrics.png."""
    from gustforge.llm import LLMSettings
    from toucan.config import EvalConfig, ResponderMode

    if not data.is_file():
        raise _fail(f"test parquet not found: {data}")
    from gustforge.preflight import check_endpoint

    for url, name, role in ((endpoint, model, "evaluated model"), (mocker_endpoint, mocker_model, "mocker"),
                            (judge_endpoint if judge == "llm" else None, judge_model, "judge")):  # fmt: skip
        problem = check_endpoint(url, name, role=role) if url else None
        if problem:
            raise _fail(problem.line())
    if out.exists() and not out.is_dir():
        raise _fail(f"--out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    settings = LLMSettings(backend="openai", base_url=endpoint, model=model, max_concurrency=concurrency,
                           cache_path=out / "llm-cache.sqlite")  # fmt: skip
    mocker = None
    if mocker_endpoint:
        mocker = LLMSettings(backend="openai", base_url=mocker_endpoint, model=mocker_model, temperature=0.6)
    cfg = EvalConfig(max_turns=max_turns, responder=ResponderMode(responder), limit=limit, seed=seed)
    judge_options = {"base_url": judge_endpoint, "model": judge_model} if judge == "llm" else {}
    configure_prefect_environment(out)
    from flows.toucan import toucan_eval_flow

    summary = on_local_server(lambda: toucan_eval_flow(str(data.resolve()), str(out.resolve()), settings, cfg, judge,
                                            judge_options, mocker))  # fmt: skip
    typer.echo((out / "report.md").read_text(encoding="utf-8"))
    if summary["n"] == 0:
        raise _fail(f"no sample was scored ({summary['failed']} failed); no metrics for n = 0", 1)
    if summary["failed"]:
        raise _fail(f"{summary['failed']} samples failed (endpoint errors); rerun to retry them", 1)


@app.command()
def ksweep(
    data: Annotated[Path, typer.Option("--data", help="Test parquet (verl rows) to expand or contract.")],
    k: Annotated[str, typer.Option("--k", help="Comma-separated sizes; 0 = original.")] = "0,25,50,100,150",
    strategy: Annotated[str, typer.Option(help="Distractors: random | hard.")] = "random",
    embedder: Annotated[str, typer.Option(help="Hard negatives: auto | minilm | tfidf.")] = "auto",
    max_tokens: Annotated[int, typer.Option(help="Prompt token budget; longer rows are skipped.")] = 32768,
    tokenizer: Annotated[Path | None, typer.Option(help="Local tokenizer.json (else chars/4).")] = None,
    out: Out = Path("out/toucan-ksweep"),
    seed: Seed = 0,
) -> None:
    """Candidate sets of exactly K tools (gold kept) for each K; writes k<K>.parquet and stats.json."""
    from toucan.config import DistractorStrategy, EmbedderName, KSweepConfig

    if embedder == "minilm":
        from gustforge.preflight import check_extras

        problems = check_extras(["embed"], purpose="--embedder minilm")
        if problems:
            raise _fail(problems[0].line())
    if not data.is_file():
        raise _fail(f"parquet not found: {data}")
    try:
        ks = tuple(int(x) for x in k.split(",") if x.strip())
    except ValueError:
        raise _fail(f"--k must be comma-separated integers, got {k!r}") from None
    cfg = KSweepConfig(ks=ks, strategy=DistractorStrategy(strategy), embedder=EmbedderName(embedder),
                       max_prompt_tokens=max_tokens, tokenizer_path=tokenizer, seed=seed)  # fmt: skip
    configure_prefect_environment(out)
    from flows.toucan import toucan_ksweep_flow

    paths = on_local_server(lambda: toucan_ksweep_flow(str(data.resolve()), str((out / strategy).resolve()), cfg))
    from data.io import read_json

    for row in read_json(Path(paths["stats"])):
        tokens = row["system_prompt_tokens"]["mean"]
        typer.echo(f"K={row['k']:>4}  kept {row['kept']:>5}/{row['inputs']:<5} skip rate {row['skip_rate']:.3f}  "
                   f"system tokens mean {tokens:.0f} ({row['token_counter']})")  # fmt: skip
