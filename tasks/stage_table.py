"""The stage table: which stage function runs each stage, what it reads, and what keys its cache.

The composing layer's one view of the pipeline: the flows (`flows.build`, `gust stage`) and the Prefect task
wrappers (`tasks.stages`) look stages up here; each stage's work lives in its stage package (`envgen.stage`,
`tdg.stage`, `data.stage`, `trainer.stage`) and the generic sharding and accounting in `gustforge.shards` and
`gustforge.accounting`. Importing this module imports no Prefect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from data import io
from data.stage import run_export
from envgen.stage import env_digest, ingest_inputs, run_envgen
from gustforge.accounting import POLICY_REASONS, QUALITY_REASONS, check_ingest_budget, write_ingest_report
from gustforge.config import BuildConfig
from gustforge.errors import GustError
from gustforge.registry import Registry
from gustforge.shards import Item, ShardResult, config_subset_key, portable, rebase_item
from tdg.stage import run_quality, run_reconstruct, run_sample, run_tasks, run_tdg, run_verify
from trainer.stage import run_convert

__all__ = ["STAGE_ORDER", "STAGES", "StageSpec", "stage_config_key", "discover_items"]


@dataclass(frozen=True)
class StageSpec:
    """A stage: its shard function, the stage whose outputs it reads, the library packages whose source keys its
    cache, the config keys it reads, the drop reasons that are deliberate filtering (outside its budget), and
    whether it must see every item at once (near-duplicates, per-env medians) instead of shards."""

    name: str
    run: Callable[[Sequence[Item], BuildConfig, Path], ShardResult]
    previous: str | None
    packages: tuple[str, ...]
    config_keys: tuple[str, ...]
    policy: frozenset[str] = field(default=POLICY_REASONS)
    dataset_wide: bool = False


_SPECS = (
    StageSpec("envgen", run_envgen, None, ("envgen", "gustforge", "data"), ("envgen", "llm", "input_format")),
    StageSpec("tdg", run_tdg, "envgen", ("tdg", "data"), ("tdg.inferer", "tdg.n_graphs", "tdg.seed", "llm")),
    StageSpec("sample", run_sample, "tdg", ("tdg", "data"), ("tdg",)),
    StageSpec("reconstruct", run_reconstruct, "sample", ("tdg", "envgen", "gustforge", "data"),
              ("tdg.seed", "tdg.max_unlinked_traces")),
    StageSpec("tasks", run_tasks, "reconstruct", ("tdg", "envgen", "gustforge", "data"), ("seed", "llm")),
    StageSpec("verify", run_verify, "tasks", ("tdg", "envgen", "gustforge", "data"), ("verify", "quality")),
    StageSpec("quality", run_quality, "verify", ("tdg", "data"), ("quality",), POLICY_REASONS | QUALITY_REASONS,
              dataset_wide=True),
    StageSpec("export", run_export, "quality", ("data",),
              ("seed", "verify.teacher", "verify.require_solvable", "export"),
              dataset_wide=True),
    StageSpec("convert", run_convert, "export", ("trainer", "data"), ("seed",)),
)  # fmt: skip
STAGE_ORDER: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
STAGES: Registry[StageSpec] = Registry("stage")
for _spec in _SPECS:
    STAGES.add(_spec.name, _spec)


def stage_config_key(stage: str, cfg: BuildConfig) -> str:
    """Hash of only the config keys a stage reads: editing one stage's config never invalidates upstream."""
    return config_subset_key(cfg, STAGES.get(stage).config_keys)


def discover_items(stage: str, source: Path, cfg: BuildConfig) -> list[Item]:
    """Items a stage would receive, read back from an earlier run folder (for `gust stage NAME --from PATH`).

    `source` is a run folder (holding `work/<previous>.jsonl`) or, for `tdg`, a folder of environments; for
    `envgen`, raw inputs (ingested here, with `reports/ingest.jsonl` written and the ingest budget checked).
    """
    source = Path(source)
    spec = STAGES.get(stage)
    if spec.previous is None:
        ingest = ingest_inputs([source], cfg)
        write_ingest_report(cfg.out, ingest)
        check_ingest_budget(ingest, cfg)
        return list(ingest.toolsets)
    saved = source / "work" / f"{spec.previous}.jsonl"
    if saved.is_file():
        return [rebase_item(item, source, cfg.out) for item in io.read_jsonl(saved)]
    envs_root = source if stage == "tdg" and not (source / "envs").is_dir() else source / "envs"
    if stage == "tdg" and envs_root.is_dir():
        env_dirs = sorted(p for p in envs_root.iterdir() if (p / "manifest.json").is_file())
        return [{"env_id": p.name, "env_dir": portable(cfg.out, p), "digest": env_digest(p)} for p in env_dirs]
    raise GustError(f"stage {stage!r} needs the outputs of {spec.previous!r}: expected {saved}")
