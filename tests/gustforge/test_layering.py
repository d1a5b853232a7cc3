"""Layering: flows → tasks → stage packages → gustforge / data. Data flows down the layers once.

gustforge is cross-cutting: it never imports a stage package, a data-stage module, Prefect, tasks or flows — the
one exception is the build config schema (`gustforge/config.py`), which composes the stage packages' config
models and nothing else. Stage packages never import Prefect, tasks or flows.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGE_PACKAGES = ("envgen", "tdg", "trainer", "gusteval", "toucan")
ORCHESTRATION = ("prefect", "tasks", "flows")
DATA_LAYER = (
    "data",
    "data.io",
    "data.models",
    "data.config",
)  # what gustforge may use of `data`: the models and the only I/O
CONFIG_MODELS = {"envgen.config", "tdg.config", "tdg.verify_config", "tdg.quality"}  # composed by gustforge/config.py


def _imports(path: Path) -> set[str]:
    """Absolute module names a source file imports (at any depth, including function-local and TYPE_CHECKING)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "data")
    return names


def _root(name: str) -> str:
    return name.split(".")[0]


def _gustforge_offences(path: Path) -> list[str]:
    allowed = CONFIG_MODELS if path == ROOT / "gustforge" / "config.py" else set()
    bad = []
    for name in _imports(path):
        if name in allowed:
            continue
        if _root(name) in STAGE_PACKAGES + ORCHESTRATION or (_root(name) == "data" and name not in DATA_LAYER):
            bad.append(name)
    return sorted(bad)


@pytest.mark.parametrize("path", sorted((ROOT / "gustforge").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_gustforge_imports_no_stage_package(path: Path) -> None:
    assert _gustforge_offences(path) == []


@pytest.mark.parametrize("package", [*STAGE_PACKAGES, "data"])
def test_stage_packages_import_no_orchestration(package: str) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _root(n) in ORCHESTRATION)
                 for p in (ROOT / package).rglob("*.py")}  # fmt: skip
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_layering_check_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tdg.stage import run_tdg\n    from data.gust import write_gust\n")
    assert _gustforge_offences(bad) == ["data.gust", "tdg.stage"]


def test_generic_machinery_loads_no_stage_package() -> None:
    """Importing the cross-cutting modules pulls in no stage package, data-stage module or Prefect."""
    probe = ("import sys, gustforge.shards, gustforge.accounting, gustforge.run_summary, gustforge.llm, "
             "gustforge.sandbox, gustforge.errors, gustforge.registry, gustforge.hashing; "
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in sys.argv[1:] "
             "or (m.startswith('data.') and m not in ('data.io', 'data.models')))))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe, *STAGE_PACKAGES, *ORCHESTRATION], cwd=ROOT,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.split() == []
