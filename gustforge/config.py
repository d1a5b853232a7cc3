"""The build configuration: one frozen, typed section per stage, loadable from YAML/TOML, overridable per key.

`gust build --config build.yaml --set envgen.max_repairs=3 --set tdg.n_graphs=2` — the effective config is saved
with every run as `OUT/config.json`.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from data.config import ExportConfig
from data.models import SourceFormat, StrictModel
from envgen.config import EnvGenConfig
from gustforge.errors import ConfigError
from gustforge.llm import LLMSettings
from tdg.config import TDGConfig
from tdg.quality import QualityConfig
from tdg.verify_config import TeacherConfig, VerifyConfig

__all__ = ["RunnerConfig", "BudgetConfig", "BuildConfig", "load_config", "parse_override"]

Runner = Literal["local", "process", "ray", "dask"]


class RunnerConfig(StrictModel):
    """Where shard tasks run. `local` = threads in this process; `ray`/`dask` = Prefect task runners."""

    kind: Runner = Field(default="local", description="local | process | ray | dask")
    max_workers: int = Field(default=2, ge=1, description="Parallel shard tasks (threads, processes or Ray CPUs).")
    address: str | None = Field(default=None, description="Ray cluster address or Dask scheduler; None = local.")
    shard_size: int = Field(
        default=64, ge=1, description="Items per shard (toolsets, environments, tasks): the most work a kill loses."
    )
    max_shards: int = Field(
        default=512,
        ge=1,
        description="Upper bound on shards per stage (Prefect task runs; the embedded SQLite server writes ~10 "
        "runs/s, so 512 per stage is fine over a multi-hour build; use PostgreSQL beyond).",
    )


class BudgetConfig(StrictModel):
    """Per-stage error budgets: a stage whose *failure* share exceeds its budget fails the run.

    Failures are drops for malformed input, tool/code errors and outages; deliberate filtering (size filter,
    duplicates, per-env caps, teacher/solvability/quality verdicts) is reported but does not count.
    """

    ingest: float = Field(
        default=0.95, ge=0, le=1,
        description="Max share of raw records rejected as unreadable, malformed or hostile. Loose by default: "
        "harvested corpora are noisy and every bad record is quarantined on its own; a run whose inputs yield "
        "nothing still fails (min_rows, or a stage that produced nothing).",
    )  # fmt: skip
    envgen: float = Field(default=0.5, ge=0, le=1, description="Max failed share of input toolsets.")
    tdg: float = Field(default=0.5, ge=0, le=1, description="Max failed share of environments.")
    sample: float = Field(default=0.5, ge=0, le=1, description="Max failed share of environments.")
    reconstruct: float = Field(default=0.5, ge=0, le=1, description="Max failed share of skeletons.")
    tasks: float = Field(default=0.5, ge=0, le=1, description="Max failed share of golden traces.")
    verify: float = Field(default=0.5, ge=0, le=1, description="Max failed share of tasks.")
    export: float = Field(default=0.0, ge=0, le=1, description="Max share of tasks lost while exporting.")
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
    export: ExportConfig = Field(default_factory=ExportConfig, description="GUST export: held-out split by env.")
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    budgets: BudgetConfig = Field(default_factory=BudgetConfig)
    min_rows: int = Field(default=1, ge=0, description="A build with fewer GUST rows exits non-zero (0 = allow).")

    @model_validator(mode="before")
    @classmethod
    def _share_llm_settings(cls, data: Any) -> Any:
        """One `llm:` block serves every role unless a role is set explicitly.

        With `llm.backend: openai`: envgen uses the model (`envgen.backend`, `envgen.llm`), the TDG edge inferer
        is the LLM judge (`tdg.inferer: llm`), and the teacher uses the same endpoint (`verify.teacher`).
        """
        if not isinstance(data, dict) or "llm" not in data:
            return data
        llm = data["llm"]
        settings = llm if isinstance(llm, LLMSettings) else LLMSettings.model_validate(llm or {})
        data = dict(data)
        envgen = _as_dict(data.get("envgen"))
        envgen.setdefault("llm", llm)
        if settings.backend == "openai":
            envgen.setdefault("backend", "openai")
            tdg = _as_dict(data.get("tdg"))
            tdg.setdefault("inferer", "llm")
            data["tdg"] = tdg
            verify = _as_dict(data.get("verify"))
            teacher = _as_dict(verify.get("teacher"))
            if "base_url" not in teacher:
                defaults = TeacherConfig.from_llm_settings(
                    settings, max_concurrency=settings.max_concurrency
                ).model_dump(exclude_defaults=True)
                teacher = {**defaults, **teacher}
            verify["teacher"] = teacher
            data["verify"] = verify
        data["envgen"] = envgen
        return data


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    return dict(value or {})


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


def load_config(path: Path | None = None, overrides: list[str] | None = None, *,
                environ: Mapping[str, str] | None = None, **fields: Any) -> BuildConfig:  # fmt: skip
    """Config file (YAML or TOML) ← `GUST_LLM_*` environment ← `--set` overrides ← explicit CLI fields.

    Args:
        path: YAML/TOML file, or None.
        overrides: `section.key=value` strings.
        environ: Environment to read `GUST_LLM_*` from (default `os.environ`).
        **fields: Top-level fields (None values are ignored).
    """
    data: dict[str, Any] = _read_config_file(path) if path else {}
    env_llm = LLMSettings.env_values(environ)
    if env_llm:  # GUST_LLM_* win over the config file and lose to --set
        llm = data.get("llm")
        data["llm"] = {**(llm if isinstance(llm, dict) else {}), **env_llm}
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
