"""The envgen stage: raw inputs read into toolsets (ingest), then one tested environment per toolset.

Stage functions take a shard of items, the build config and the run folder, and return a `ShardResult`
(see `gustforge.shards`); the stage table (`tasks.stage_table`) wires them into the build.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.models import QuarantineRecord, StageReport, Toolset
from gustforge.config import BuildConfig
from gustforge.llm.shared import role_usage, stage_client
from gustforge.shards import IngestSummary, Item, ShardResult, count_reasons, portable, resolve_path, stage_result

__all__ = ["bundled_sample_inputs", "ingest_inputs", "run_envgen", "env_digest", "load_env"]


def bundled_sample_inputs() -> tuple[Path, ...]:
    """The raw toolsets shipped in `data/samples/raw/` (what `gust build` builds with no `--input`)."""
    root = Path(__file__).resolve().parents[1] / "data" / "samples" / "raw"
    return (root,)


# --------------------------------------------------------------------------------------------------- ingest
def ingest_inputs(inputs: Sequence[Path], cfg: BuildConfig) -> IngestSummary:
    """Read every raw input (file or folder), dedupe across files by content hash, apply the size filter."""
    from envgen.ingest import read_toolsets

    toolsets: list[Toolset] = []
    quarantine: list[QuarantineRecord] = []
    inputs_count = 0
    seen: dict[str, str] = {}
    for path in inputs:
        result = read_toolsets(Path(path), fmt=cfg.input_format, cfg=cfg.envgen)
        inputs_count += result.report.inputs
        quarantine.extend(_relative_provenance(q, Path(path)) for q in result.quarantine)
        for toolset in (_relative_provenance(t, Path(path)) for t in result.toolsets):
            if toolset.toolset_id in seen:
                duplicate = QuarantineRecord(item_id=toolset.toolset_id, stage="ingest",
                                             reason=f"duplicate_of:{toolset.toolset_id}",
                                             detail=f"same tools as {seen[toolset.toolset_id]}",
                                             provenance=toolset.provenance)  # fmt: skip
                quarantine.append(duplicate)
                continue
            seen[toolset.toolset_id] = f"{toolset.provenance.path}#{toolset.provenance.record_id}"
            toolsets.append(toolset)
    toolsets.sort(key=lambda t: t.toolset_id)
    report = StageReport(stage="ingest", inputs=inputs_count, produced=len(toolsets), dropped=count_reasons(quarantine))
    return IngestSummary(toolsets=tuple(t.model_dump(mode="json") for t in toolsets),
                         quarantine=tuple(quarantine), report=report)  # fmt: skip


def _relative_provenance(record: Any, root: Path) -> Any:
    """Provenance paths relative to the input's parent (`raw/shop.json`), so manifests hold no machine paths."""
    prov = record.provenance
    if prov is None:
        return record
    from data.gust import license_near

    base = Path(root).resolve().parent
    license_id = prov.license or license_near(Path(prov.path).resolve())  # found while the path still resolves
    try:
        relative = Path(prov.path).resolve().relative_to(base).as_posix()
    except ValueError:
        relative = prov.path
    return record.model_copy(update={"provenance": prov.model_copy(update={"path": relative, "license": license_id})})


# --------------------------------------------------------------------------------------------------- environments
def env_digest(env_dir: Path) -> str:
    """sha256 over an environment's schemas, database and tool code (keys the later stages' caches)."""
    digest = hashlib.sha256()
    for name in ("schemas.json", "db.json", "tools.py"):
        digest.update((env_dir / name).read_bytes())
    return digest.hexdigest()


def load_env(item: Item, out: Path) -> Any:
    """The environment an item points at (its `env_dir`, relative to the run folder `out`)."""
    from envgen.runtime import Environment

    return Environment.load(resolve_path(out, item["env_dir"]))


def run_envgen(items: Sequence[Item], cfg: BuildConfig, out: Path) -> ShardResult:
    """Build, test and write an environment per toolset; failing toolsets are quarantined with the reason."""
    from data.envs import write_env_dir
    from envgen.build import build_environments

    started = time.perf_counter()
    toolsets = [Toolset.model_validate(item) for item in items]
    client = None
    if cfg.envgen.backend == "openai":
        client = stage_client(cfg.envgen.llm.model_copy(update={"backend": "openai"}), out)
    outcome = build_environments(toolsets, cfg.envgen, client=client)
    produced: list[Item] = []
    for result in outcome.results:
        if result.artifacts is None:
            continue
        env_dir = write_env_dir(out / "envs", result.artifacts)
        produced.append({"env_id": env_dir.name, "env_dir": portable(out, env_dir), "digest": env_digest(env_dir)})
    produced.sort(key=lambda i: i["env_id"])
    result = stage_result("envgen", produced, [i["env_id"] for i in produced], list(outcome.quarantine), len(items),
                          started)  # fmt: skip
    return result.model_copy(update={"llm": role_usage(client) if client is not None else {}})
