"""Environment folders on disk: `OUT/envs/<env_id>/{manifest, schemas, db, tools.py, tests.py, test_report}`.

A folder is written in a hidden temp folder beside its final place and renamed into place, so readers never see
a half-written environment (a rerun replaces the folder whole).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import Field

from data.models import EnvManifest, StrictModel, TestReport, ToolSchema

__all__ = ["EnvArtifacts", "ENV_FILES", "env_dir", "write_env_dir", "read_env_dir", "list_env_dirs"]

ENV_FILES = ("manifest.json", "schemas.json", "db.json", "tools.py", "tests.py", "test_report.json")


class EnvArtifacts(StrictModel):
    """Everything that makes one executable environment."""

    manifest: EnvManifest
    schemas: tuple[ToolSchema, ...]
    db: dict[str, Any] = Field(description="Initial mock DB: {collection: {str(id): record}}.")
    tools_source: str
    tests_source: str
    test_report: TestReport

    @property
    def env_id(self) -> str:
        return self.manifest.env_id


ENVS_DIR_MODE = 0o750


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _contents(artifacts: EnvArtifacts) -> dict[str, str]:
    return {
        "manifest.json": artifacts.manifest.model_dump_json(indent=2) + "\n",
        "schemas.json": _json([s.model_dump(mode="json") for s in artifacts.schemas]),
        "db.json": _json(artifacts.db),
        "tools.py": artifacts.tools_source,
        "tests.py": artifacts.tests_source,
        "test_report.json": artifacts.test_report.model_dump_json(indent=2) + "\n",
    }


def env_dir(envs_dir: Path, env_id: str) -> Path:
    """Where the environment `env_id` lives in the environments folder (`OUT/envs`)."""
    return Path(envs_dir) / env_id


def write_env_dir(envs_dir: Path, artifacts: EnvArtifacts) -> Path:
    """Write an environment folder atomically (temp folder + rename), replacing an older one.

    Args:
        envs_dir: the run's environments folder, `OUT/envs`; the environment goes to `OUT/envs/<env_id>/`.
        artifacts: the environment.

    Returns:
        The environment folder.
    """
    final = env_dir(envs_dir, artifacts.env_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    # Environments are untrusted code and data: the folder holding them is the owner's and group's only (a run
    # folder may be shared with a team or containers, not with every user on the host); exports stay 0644.
    final.parent.chmod(ENVS_DIR_MODE)
    tmp = Path(tempfile.mkdtemp(prefix=f".{artifacts.env_id}.", suffix=".tmp", dir=final.parent))
    tmp.chmod(ENVS_DIR_MODE)
    try:
        for name, text in _contents(artifacts).items():
            (tmp / name).write_text(text, encoding="utf-8")
        if final.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{artifacts.env_id}.", suffix=".old", dir=final.parent))
            os.replace(final, trash / "env")
            os.replace(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_env_dir(path: Path) -> EnvArtifacts:
    """Read an environment folder written by `write_env_dir`.

    Raises:
        FileNotFoundError: a file of the layout is missing.
    """
    path = Path(path)
    text = {name: (path / name).read_text(encoding="utf-8") for name in ENV_FILES}
    return EnvArtifacts(
        manifest=EnvManifest.model_validate_json(text["manifest.json"]),
        schemas=tuple(ToolSchema.model_validate(s) for s in json.loads(text["schemas.json"])),
        db=json.loads(text["db.json"]),
        tools_source=text["tools.py"],
        tests_source=text["tests.py"],
        test_report=TestReport.model_validate_json(text["test_report.json"]),
    )


def list_env_dirs(envs_dir: Path) -> list[Path]:
    """Environment folders in `OUT/envs`, sorted by env id (temp folders excluded)."""
    root = Path(envs_dir)
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "manifest.json").is_file()
    )
