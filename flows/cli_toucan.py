"""`gust toucan`: prepare Toucan SFT/RL data, evaluate a model in-domain, build K-sweep datasets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from flows.prefect_env import configure_prefect_environment

__all__ = ["app"]

app = typer.Typer(help="Toucan SFT/RL preparation, in-domain evaluation, tool-space K-sweep.", no_args_is_help=True)

Out = Annotated[Path, typer.Option("--out", "-o", help="Output folder.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of every random choice.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@app.command()
def prepare(
    input_path: Annotated[Path, typer.Option("--input", "-i", help="Toucan rows: .parquet or .jsonl.")],
    out: Out = Path("out/toucan"),
    seed: Seed = 42,
    start_turn: Annotated[int, typer.Option(help="First decomposed user turn: 2 = paper, 1 = every turn.")] = 2,
    test_single: Annotated[int, typer.Option(help="Held-out native single-turn samples (full scale).")] = 3000,
    test_multi: Annotated[int, typer.Option(help="Held-out decomposed multi-turn samples (full scale).")] = 1000,
    arg_check: Annotated[str, typer.Option(help="Gold-argument check: off | required | full.")] = "required",
) -> None:
    """Phases 1-4: filter + repair, hold out the test set, decompose, split SFT / RL (see out/report.json)."""
    from toucan.config import ArgCheck, PrepareConfig

    if not input_path.is_file():
        raise _fail(f"input file not found: {input_path}")
    cfg = PrepareConfig(seed=seed, decompose_start_turn=start_turn, test_single_turn=test_single,
                        test_multi_turn=test_multi, arg_check=ArgCheck(arg_check))  # fmt: skip
    configure_prefect_environment(out)
    from flows.toucan import toucan_prepare_flow

    typer.echo(json.dumps(toucan_prepare_flow(str(input_path.resolve()), str(out.resolve()), cfg), indent=2))


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

    summary = toucan_eval_flow(str(data.resolve()), str(out.resolve()), settings, cfg, judge, judge_options, mocker)
    typer.echo((out / "report.md").read_text(encoding="utf-8"))
    if summary["failed"]:
        typer.echo(f"{summary['failed']} samples failed (endpoint errors); rerun to retry them", err=True)


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

    paths = toucan_ksweep_flow(str(data.resolve()), str((out / strategy).resolve()), cfg)
    from data.io import read_json

    for row in read_json(Path(paths["stats"])):
        tokens = row["system_prompt_tokens"]["mean"]
        typer.echo(f"K={row['k']:>4}  kept {row['kept']:>5}/{row['inputs']:<5} skip rate {row['skip_rate']:.3f}  "
                   f"system tokens mean {tokens:.0f} ({row['token_counter']})")  # fmt: skip
