"""The build configuration: one frozen, typed section per stage, loadable from YAML/TOML, overridable per key.

`gust build --config build.yaml --set envgen.max_repairs=3 --set tdg.n_graphs=2` — the effective config is saved
with every run as `OUT/config.json`.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from data.models import SourceFormat, StrictModel
from envgen.config import EnvGenConfig
from gustforge.errors import ConfigError
from gustforge.llm import LLMSettings
from tdg.config import TDGConfig
from tdg.quality import QualityConfig
from tdg.verify_config import VerifyConfig

__all__ = ["RunnerConfig", "BudgetConfig", "BuildConfig", "load_config", "parse_override"]

Runner = Literal["local", "process", "ray", "dask"]


class RunnerConfig(StrictModel):
    """Where shard tasks run. `local` = threads in this process; `ray`/`dask` = Prefect task runners."""

    kind: Runner = Field(default="local", description="local | process | ray | dask")
    max_workers: int = Field(default=2, ge=1, description="Parallel shard tasks (threads, processes or Ray CPUs).")
    address: str | None = Field(default=None, description="Ray cluster address or Dask scheduler; None = local.")
    shard_size: int = Field(default=64, ge=1, description="Items per shard (toolsets, environments, tasks).")
    max_shards: int = Field(
        default=8, ge=1, description="Upper bound on shards per stage: Prefect's SQLite server chokes above ~100 runs."
    )


class BudgetConfig(StrictModel):
    """Per-stage error budgets: a stage whose quarantine share exceeds its budget fails the run."""

    envgen: float = Field(default=1.0, ge=0, le=1, description="Max quarantined share of input toolsets.")
    reconstruct: float = Field(default=1.0, ge=0, le=1, description="Max dropped share of skeletons.")
    verify: float = Field(default=1.0, ge=0, le=1, description="Max dropped share of tasks.")
    convert: float = Field(default=0.0, ge=0, le=1, description="Max share of tasks that fail verl conversion.")


class BuildConfig(StrictModel):
    """Everything `gust build` needs. Seeds are explicit; the same config + inputs give byte-identical outputs."""

    inputs: tuple[Path, ...] = Field(default=(), description="Raw toolset files or folders; empty = bundled sample.")
    input_format: SourceFormat | None = Field(
        default=None, description="Raw input format for every input; None = detected per file/record."
    )
    out: Path = Field(default=Path("out"), description="Run folder; also holds the stage cache.")
    seed: int = Field(default=0, description="Master seed (copied into stage configs that have none set).")
    llm: LLMSettings = Field(default_factory=LLMSettings)
    envgen: EnvGenConfig = Field(default_factory=EnvGenConfig)
    tdg: TDGConfig = Field(default_factory=TDGConfig)
    verify: VerifyConfig = Field(
        default_factory=VerifyConfig, description="Replay, solvability, teacher Pass@k (no endpoint = not run)."
    )
    quality: QualityConfig = Field(default_factory=QualityConfig, description="Quality checks, drops and targets.")
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    budgets: BudgetConfig = Field(default_factory=BudgetConfig)

    @model_validator(mode="before")
    @classmethod
    def _share_llm_settings(cls, data: Any) -> Any:
        """One `llm:` block serves every role; a stage may still set its own (e.g. `envgen.llm`)."""
        if isinstance(data, dict) and "llm" in data:
            envgen = dict(data.get("envgen") or {})
            envgen.setdefault("llm", data["llm"])
            data = {**data, "envgen": envgen}
        return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b=VALUE` → (['a', 'b'], value); VALUE parsed as JSON when it is JSON, else kept as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().split("."), value


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        loaded = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return loaded


def load_config(path: Path | None = None, overrides: list[str] | None = None, **fields: Any) -> BuildConfig:
    """Config file (YAML or TOML) ← `--set` overrides ← explicit CLI fields (None values are ignored)."""
    data: dict[str, Any] = _read_config_file(path) if path else {}
    for override in overrides or []:
        keys, value = parse_override(override)
        node = data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {override!r}: {key!r} is not a section")
        node[keys[-1]] = value
    for name, value in fields.items():
        if value is not None:
            data[name] = value
    try:
        return BuildConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid build config:\n{exc}") from exc
