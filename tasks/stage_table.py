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
from gustforge.errors import BAD_REPLY_REASONS, GustError
from gustforge.outputs import outputs_key, owned_paths, record_outputs, stale_outputs
from gustforge.registry import Registry
from gustforge.shards import Item, ShardResult, config_subset_key, portable, rebase_item
from tdg.stage import run_quality, run_reconstruct, run_sample, run_tasks, run_tdg, run_verify
from trainer.stage import run_convert

__all__ = ["STAGE_ORDER", "STAGES", "StageSpec", "stage_config_key", "discover_items", "run_shard", "needs_rerun",
           "upstream_key", "downstream_of"]


@dataclass(frozen=True)
class StageSpec:
    """A stage: its shard function, the stage whose outputs it reads, the library packages whose source keys its
    cache, the config keys it reads, the drop reasons that are deliberate filtering (outside its budget), whether
    it must see every item at once (near-duplicates, per-env medians) instead of shards, and the outputs it owns:
    item keys holding paths it wrote (`outputs`) and run-folder paths it writes (`files`), whose content digests
    decide whether a cached result may be served (`gustforge.outputs`)."""

    name: str
    run: Callable[[Sequence[Item], BuildConfig, Path], ShardResult]
    previous: str | None
    packages: tuple[str, ...]
    config_keys: tuple[str, ...]
    policy: frozenset[str] = field(default=POLICY_REASONS)
    dataset_wide: bool = False
    outputs: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    @property
    def owns_outputs(self) -> bool:
        return bool(self.outputs or self.files)


_SPECS = (
    StageSpec("envgen", run_envgen, None, ("envgen", "gustforge", "data"), ("envgen", "llm", "input_format"),
              outputs=("env_dir",)),
    StageSpec("tdg", run_tdg, "envgen", ("tdg", "data"), ("tdg.inferer", "tdg.n_graphs", "tdg.seed", "llm"),
              outputs=("graphs",)),
    StageSpec("sample", run_sample, "tdg", ("tdg", "data"), ("tdg",)),
    StageSpec("reconstruct", run_reconstruct, "sample", ("tdg", "envgen", "gustforge", "data"),
              ("tdg.seed", "tdg.max_unlinked_traces", "tdg.state_variants", "tdg.variant_budget")),
    StageSpec("tasks", run_tasks, "reconstruct", ("tdg", "envgen", "gustforge", "data"), ("seed", "llm")),
    StageSpec("verify", run_verify, "tasks", ("tdg", "envgen", "gustforge", "data"), ("verify", "quality")),
    StageSpec("quality", run_quality, "verify", ("tdg", "data"), ("quality",), POLICY_REASONS | QUALITY_REASONS,
              dataset_wide=True, files=("reports/quality.json",)),
    StageSpec("export", run_export, "quality", ("data",),
              ("seed", "verify.teacher", "verify.require_solvable", "export"),
              dataset_wide=True, files=("gust",)),
    StageSpec("convert", run_convert, "export", ("trainer", "data"), ("seed",),
              files=("verl/train.parquet", "verl/test.parquet")),
)  # fmt: skip
STAGE_ORDER: tuple[str, ...] = tuple(spec.name for spec in _SPECS)
STAGES: Registry[StageSpec] = Registry("stage")
for _spec in _SPECS:
    STAGES.add(_spec.name, _spec)


def stage_config_key(stage: str, cfg: BuildConfig) -> str:
    """Hash of only the config keys a stage reads: editing one stage's config never invalidates upstream."""
    return config_subset_key(cfg, STAGES.get(stage).config_keys)


def run_shard(stage: str, items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Run one shard of a stage and record the content digest of every output it owns, as written."""
    spec = STAGES.get(stage)
    result = spec.run(items, cfg, out)
    owned = owned_paths(result.items, item_keys=spec.outputs, files=spec.files)
    return result.model_copy(update={"outputs": record_outputs(out, owned)})


def needs_rerun(stage: str, result: ShardResult, out: Path, *, cached: bool = False) -> list[str]:
    """Why a shard result must be computed again: items lost to an unreachable endpoint, owned outputs that are no
    longer on disk as the result recorded them, or (a cache hit from an earlier build) items dropped on unusable
    LLM replies, which the next build asks again. Empty = serve it."""
    reasons = [f"{result.retryable} item(s) lost to an unreachable LLM endpoint"] if result.retryable else []
    bad = sum(1 for q in result.quarantine if q.reason.split(":", 1)[0] in BAD_REPLY_REASONS)
    if cached and bad:
        reasons.append(f"{bad} item(s) dropped on unusable LLM replies in an earlier build; asking again")
    stale = stale_outputs(out, result.outputs, owns_outputs=STAGES.get(stage).owns_outputs)
    if stale:
        shown = ", ".join(stale[:3]) + (f" (+{len(stale) - 3} more)" if len(stale) > 3 else "")
        reasons.append(f"outputs changed or missing on disk: {shown}")
    return reasons


def upstream_key(stage: str, out: Path) -> str:
    """Digest of the run-folder files earlier stages wrote (e.g. `reports/quality.json` for export's card), as on
    disk now: part of a stage's cache key, so a stage reading them is re-run when they change."""
    before = STAGE_ORDER[: STAGE_ORDER.index(stage)]
    files = [path for name in before for path in STAGES.get(name).files]
    return outputs_key([record_outputs(out, files)])


def downstream_of(stage: str) -> tuple[str, ...]:
    """The stages after `stage`, in order: what depends on its outputs."""
    return STAGE_ORDER[STAGE_ORDER.index(stage) + 1 :]


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
