"""Import boundaries: library code never imports Prefect; only trainer/ imports torch and verl."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("data", "envgen", "tdg", "gustforge", "toucan", "gusteval")


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", LIBRARIES)
def test_libraries_do_not_import_orchestration_or_training(package: str) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(_imported_roots(p) & {"prefect", "torch", "verl", "ray"})
                 for p in (ROOT / package).rglob("*.py")}  # fmt: skip
    assert not {k: v for k, v in offenders.items() if v}


def test_rewards_and_conversion_import_without_torch() -> None:
    for path in [*(ROOT / "trainer" / "rewards").rglob("*.py"), ROOT / "trainer" / "convert.py",
                 ROOT / "trainer" / "rows.py"]:  # fmt: skip
        assert not _imported_roots(path) & {"torch", "verl"}, path


def test_tasks_are_thin_wrappers() -> None:
    checked = 0
    for path in (ROOT / "tasks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", "") == "task" for d in node.decorator_list
            ):
                body_lines = node.end_lineno - node.body[0].lineno + 1  # type: ignore[operator]
                assert body_lines <= 15, f"{path.name}:{node.name} has {body_lines} lines"
                checked += 1
    assert checked >= 5


def test_every_package_is_installed_not_just_on_the_test_path(tmp_path: Path) -> None:
    import subprocess
    import sys

    packages = ["gustforge", "data", "envgen", "tdg", "tasks", "flows", "trainer", "toucan", "gusteval"]
    probe = "import importlib, sys; [importlib.import_module(p) for p in sys.argv[1:]]"
    done = subprocess.run([sys.executable, "-c", probe, *packages], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
