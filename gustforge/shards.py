"""Shards of a stage: the items that flow between stages, what one shard produced, and the paths items carry.

Every stage function (in its stage package: `envgen.stage`, `tdg.stage`, `data.stage`, `trainer.stage`) takes a
shard — a list of small JSON-able items — and returns a `ShardResult` whose items feed the next stage. Every input
item ends as produced or quarantined: `ShardResult.report` balances. This module knows no stage; the stage table
(`tasks.stage_table`) composes them.

Items per stage (what flows between shards):
    envgen      in: Toolset dumps                 out: {env_id, env_dir, digest}
    tdg         in: env items                     out: env item + {graphs: [paths]}
    sample      in: tdg items                     out: env item + {skeletons: [Skeleton dumps]}
    reconstruct in: sample items                  out: env item + {traces: [GoldenTrace dumps]}
    tasks       in: reconstruct items             out: env item + {records: [TaskRecord dumps]}
    verify      in: tasks items                   out: env item + {records: [verified TaskRecord dumps]}
    quality     in: verify items (all shards)     out: verify items less the hard failures; reports/quality.json
    export      in: verify items (all shards)     out: the GUST folder
    convert     in: export item                   out: verl RL parquet (`OUT/verl/train.parquet`) for `gust train`
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from data import io
from data.models import QuarantineRecord, StageReport, StrictModel
from gustforge.errors import UNAVAILABLE_REASON, GustError
from gustforge.hashing import content_hash

if TYPE_CHECKING:  # the build config composes the stage packages' configs; this module only reads it
    from gustforge.config import BuildConfig

__all__ = [
    "Item",
    "Usage",
    "ShardResult",
    "IngestSummary",
    "shard_items",
    "merge_results",
    "add_usage",
    "sum_usage",
    "count_reasons",
    "stage_result",
    "parallel_map",
    "code_digest",
    "inputs_digest",
    "config_subset_key",
    "resolve_path",
    "portable",
    "rebase_item",
    "save_items",
]

Item = dict[str, Any]
Usage = dict[str, dict[str, int]]

_PATH_KEYS = ("env_dir", "gust_dir", "verl_parquet", "verl_test_parquet")
_LLM_RUNTIME_FIELDS = ("max_concurrency", "timeout_s", "max_retries", "backoff_base_s", "backoff_max_s", "retry_seed",
                       "breaker_threshold", "breaker_cooldown_s", "max_total_tokens", "api_key_env")  # fmt: skip


class ShardResult(StrictModel):
    """What one shard of one stage produced, dropped and how long it took."""

    stage: str
    shard: int
    items: tuple[Item, ...] = ()
    produced_ids: tuple[str, ...] = ()
    quarantine: tuple[QuarantineRecord, ...] = ()
    report: StageReport
    seconds: float = Field(default=0.0, description="Wall time of the shard's work.")
    llm: Usage = Field(default_factory=dict, description="LLM requests/tokens/retries/cache hits per role.")
    outputs: dict[str, str] | None = Field(
        default=None,
        description="sha256 of every file/folder the shard owns as written (see gustforge.outputs); "
        "None = not recorded.",
    )

    @property
    def retryable(self) -> int:
        """Items dropped only because the LLM endpoint was unreachable: worth another run of this shard."""
        return sum(1 for q in self.quarantine if q.reason == UNAVAILABLE_REASON)


class IngestSummary(StrictModel):
    """The raw inputs read, deduplicated and size-filtered: the envgen stage's items and the ingest quarantine."""

    toolsets: tuple[Item, ...]
    quarantine: tuple[QuarantineRecord, ...]
    report: StageReport


def shard_items(items: Sequence[Item], *, shard_size: int, max_shards: int) -> list[list[Item]]:
    """Split items into at most `max_shards` contiguous shards of about `shard_size` (order kept)."""
    if not items:
        return []
    n_shards = min(max_shards, math.ceil(len(items) / shard_size))
    size = math.ceil(len(items) / n_shards)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def add_usage(a: Usage, b: Usage) -> Usage:
    """Per-role counters summed."""
    out = {role: dict(counts) for role, counts in a.items()}
    for role, counts in b.items():
        mine = out.setdefault(role, {})
        for name, value in counts.items():
            mine[name] = mine.get(name, 0) + value
    return dict(sorted(out.items()))


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Per-role counters summed over many shards."""
    total: Usage = {}
    for usage in usages:
        total = add_usage(total, usage)
    return total


def merge_results(stage: str, results: Sequence[ShardResult]) -> ShardResult:
    """One result for a whole stage: items in shard order, reports and LLM usage summed."""
    dropped: dict[str, int] = {}
    for result in results:
        for reason, count in result.report.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    report = StageReport(
        stage=stage,
        inputs=sum(r.report.inputs for r in results),
        produced=sum(r.report.produced for r in results),
        dropped=dict(sorted(dropped.items())),
    )
    return ShardResult(
        stage=stage,
        shard=-1,
        items=tuple(item for r in results for item in r.items),
        produced_ids=tuple(i for r in results for i in r.produced_ids),
        quarantine=tuple(q for r in results for q in r.quarantine),
        report=report,
        seconds=sum(r.seconds for r in results),
        llm=sum_usage(r.llm for r in results),
        outputs=_merge_outputs(r.outputs for r in results),
    )


def _merge_outputs(recorded: Iterable[dict[str, str] | None]) -> dict[str, str] | None:
    """The union of the shards' recorded outputs; None when no shard recorded any."""
    merged: dict[str, str] | None = None
    for outputs in recorded:
        if outputs is not None:
            merged = {**(merged or {}), **outputs}
    return merged


def count_reasons(quarantine: Sequence[QuarantineRecord]) -> dict[str, int]:
    """Drops per reason code, sorted; "tests_failed:get_order" counts as tests_failed."""
    return dict(sorted(Counter(record.reason.split(":", 1)[0] for record in quarantine).items()))


def stage_result(stage: str, items: Sequence[Item], produced_ids: Sequence[str],
                 quarantine: Sequence[QuarantineRecord], inputs: int, started: float) -> ShardResult:  # fmt: skip
    """A shard's result, checked to balance: every input is produced or quarantined.

    Raises:
        GustError: when produced + dropped != inputs (a stage lost or invented items).
    """
    report = StageReport(stage=stage, inputs=inputs, produced=len(produced_ids), dropped=count_reasons(quarantine))
    if not report.balanced:
        raise GustError(f"stage {stage}: accounting does not balance: {report}")
    return ShardResult(stage=stage, shard=0, items=tuple(items), produced_ids=tuple(produced_ids),
                       quarantine=tuple(quarantine), report=report, seconds=time.perf_counter() - started)  # fmt: skip


def parallel_map(fn: Callable[[Any], Any], args: Sequence[Any], workers: int) -> list[Any]:
    """`[fn(a) for a in args]`, on `workers` threads when > 1 (LLM-bound work; order kept)."""
    if workers <= 1 or len(args) <= 1:
        return [fn(a) for a in args]
    with ThreadPoolExecutor(max_workers=min(workers, len(args)), thread_name_prefix="gust-llm") as pool:
        return list(pool.map(fn, args))


# --------------------------------------------------------------------------------------------------- cache keys
def code_digest(packages: Iterable[str]) -> str:
    """sha256 over the source files of the given packages: a library edit invalidates the stage cache."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def inputs_digest(paths: Sequence[Path]) -> str:
    """sha256 over the raw input files' names and bytes (folders walked in sorted order)."""
    digest = hashlib.sha256()
    for path in paths:
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
        for file in files:
            digest.update(str(file).encode())
            if not file.exists():
                digest.update(b"<missing>")
                continue
            with file.open("rb") as handle:  # chunked: a corpus file may be gigabytes
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def config_subset_key(cfg: BuildConfig, config_keys: Iterable[str]) -> str:
    """Hash of only the given (dotted) config keys; LLM runtime knobs (how fast we ask) never count."""
    dumped = cfg.model_dump(mode="json")
    for settings in (dumped["llm"], dumped["envgen"]["llm"]):  # how fast we ask never changes what we get
        for name in _LLM_RUNTIME_FIELDS:
            settings.pop(name, None)
    picked: dict[str, Any] = {}
    for dotted in config_keys:
        node: Any = dumped
        for part in dotted.split("."):
            node = node[part]
        picked[dotted] = node
    return content_hash(picked)


# --------------------------------------------------------------------------------------------------- paths
def resolve_path(out: Path, path: str | Path) -> Path:
    """A path stored in a run folder's items: relative to the run folder (portable) or absolute (outside it)."""
    path = Path(path)
    return path if path.is_absolute() else Path(out) / path


def portable(out: Path, path: str | Path) -> str:
    """`path` relative to the run folder when it lies inside it, so a moved run folder keeps working."""
    try:
        return Path(path).resolve().relative_to(Path(out).resolve()).as_posix()
    except ValueError:
        return str(Path(path).resolve())


def rebase_item(item: Item, source: Path, out: Path) -> Item:
    """Item paths written relative to `source` made valid for a stage writing to `out`."""
    if Path(source).resolve() == Path(out).resolve():
        return item
    fixed = dict(item)
    for key in _PATH_KEYS:
        if isinstance(fixed.get(key), str):
            fixed[key] = portable(out, resolve_path(source, fixed[key]))
    if isinstance(fixed.get("graphs"), list):
        fixed["graphs"] = [portable(out, resolve_path(source, p)) for p in fixed["graphs"]]
    return fixed


def save_items(out: Path, merged: ShardResult) -> Path:
    """`OUT/work/<stage>.jsonl`: the stage's output items, so a later `gust stage` can start from them.

    Paths inside items are relative to the run folder (see `resolve_path`), so a moved run folder still works.
    """
    return io.write_jsonl(out / "work" / f"{merged.stage}.jsonl", merged.items)
