"""envgen.build + data.envs: the closed loop, repair, quarantine, env folders and determinism."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import envgen.build as build_module
from data.envs import ENV_FILES, list_env_dirs, read_env_dir, write_env_dir
from data.models import RawTool, ToolKind
from envgen.build import build_environment, build_environments
from envgen.codegen import generate_tools_source
from envgen.config import EnvGenConfig
from envgen.runtime import Environment
from gustforge.sandbox import SandboxPool
from tests.envgen._envgen_samples import sample, sample_toolsets

FAST = EnvGenConfig(sandbox_cpu_seconds=2, sandbox_memory_mb=256, sandbox_wall_seconds=5)


@pytest.fixture(scope="module")
def outcome():
    seen: list[tuple[int, int]] = []
    result = build_environments(sample_toolsets(), FAST, progress=lambda i, n: seen.append((i, n)))
    assert seen[-1] == (12, 12) and len(seen) == 12
    return result


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool(size=1) as p:
        yield p


def test_every_sample_is_built(outcome) -> None:
    assert outcome.report.inputs == outcome.report.produced == 12 and outcome.report.balanced
    assert not outcome.quarantine and all(r.attempts == 1 for r in outcome.results)
    assert [r.toolset_id for r in outcome.results] == [t.toolset_id for t in sample_toolsets()]
    env = outcome.environments[0]
    assert env.env_id.startswith(env.manifest.name.lower().replace(" ", "-")) or env.env_id[-11] == "-"
    assert env.manifest.versions["jsonschema"] and set(env.manifest.timings) == {
        "generate_s",
        "mutation_s",
        "refactor_s",
        "sandbox_s",
    }
    assert env.test_report.passed and env.manifest.tool_count == len(env.schemas)
    for built in outcome.environments:  # every shipped env's suite is scored, at or above the floor
        mutation = built.test_report.mutation
        assert mutation is not None and mutation.total > 0 and mutation.score == built.manifest.mutation_score
        assert mutation.score >= FAST.min_mutation_score, (built.manifest.name, mutation)
        # every mutant ran in the pool's worker: a kill names the failing test, never a harness fault
        assert all(m.by.startswith("test_") for m in mutation.mutants if m.killed), mutation
        assert not any(m.by.startswith("not run") for m in mutation.mutants), mutation
        assert set(built.manifest.behaviours) == {s.name for s in built.schemas}
        rejected = built.test_report.rejected_calls  # counted apart: what only the tool itself can reject
        assert rejected["tool_only"] > 0 and rejected["schema_invalid"] > 0
        assert built.manifest.log_only_tools == [t for t, f in built.manifest.behaviours.items() if f == "log_only"]


def test_env_folder_roundtrip_and_runtime(outcome, tmp_path: Path, pool: SandboxPool) -> None:
    artifacts = outcome.environments[0]
    path = write_env_dir(tmp_path / "envs", artifacts)
    assert path == tmp_path / "envs" / artifacts.env_id and sorted(p.name for p in path.iterdir()) == sorted(ENV_FILES)
    assert read_env_dir(path) == artifacts
    assert write_env_dir(tmp_path / "envs", artifacts) == path  # a rerun replaces the folder
    assert list_env_dirs(tmp_path / "envs") == [path] and not list(path.parent.glob(".*"))
    env = Environment.load(path)
    assert env.env_id == artifacts.env_id and env.initial_db == artifacts.db
    first = artifacts.schemas[0]
    with env.session() as session:
        assert session.call(first.name, {"bogus": 1})["status"] == "error"


def test_rebuild_is_byte_identical(outcome, tmp_path: Path, pool: SandboxPool) -> None:
    toolset = sample("Harbor Clinic")
    again = build_environment(toolset, FAST, sandbox_pool=pool).artifacts
    before = next(e for e in outcome.environments if e.manifest.toolset_id == toolset.toolset_id)
    assert again is not None and again.env_id == before.env_id
    a, b = write_env_dir(tmp_path / "a", again), write_env_dir(tmp_path / "b", before)
    for name in ("schemas.json", "db.json", "tools.py", "tests.py"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def _breaks_update_once(monkeypatch: pytest.MonkeyPatch, *, always: bool = False) -> list[int]:
    calls: list[int] = []

    def broken(refactored, db, **kwargs):
        calls.append(1)
        source = generate_tools_source(refactored, db, **kwargs)
        return source.replace("    record.update(changes)\n", "    pass\n") if always or len(calls) == 1 else source

    monkeypatch.setattr(build_module, "generate_tools_source", broken)
    return calls


def test_offline_repair_falls_back_to_the_action_template(monkeypatch: pytest.MonkeyPatch, pool: SandboxPool) -> None:
    calls = _breaks_update_once(monkeypatch, always=True)
    result = build_environment(sample("Acme Shop"), FAST, sandbox_pool=pool)
    assert result.artifacts is not None and result.attempts == 2 and len(calls) == 2
    kinds = {s.name: s.kind for s in result.artifacts.schemas}
    assert kinds["update_order"] is ToolKind.ACTION and kinds["get_order"] is ToolKind.READ
    manifest = result.artifacts.manifest
    assert manifest.seed == 1 and manifest.log_only_tools == ["update_order"]
    assert manifest.repaired_tools == {"update_order": "crud"} and manifest.behaviours["update_order"] == "log_only"


def test_quarantine_after_k_repairs(monkeypatch: pytest.MonkeyPatch, pool: SandboxPool) -> None:
    _breaks_update_once(monkeypatch)
    result = build_environment(sample("Acme Shop"), FAST.model_copy(update={"max_repairs": 0}), sandbox_pool=pool)
    assert result.artifacts is None and result.quarantine is not None and result.attempts == 1
    assert result.quarantine.reason == "tests_failed:update_order"
    assert "not updated" in result.quarantine.detail
    assert result.quarantine.stage == "envgen" and result.quarantine.provenance == sample("Acme Shop").provenance


def test_refactor_errors_are_quarantined(pool: SandboxPool) -> None:
    toolset = sample("Acme Shop")
    bad = toolset.model_copy(
        update={
            "tools": (
                *toolset.tools[:-1],
                RawTool(name="upload", parameters={"type": "object", "properties": {"f": {"type": "file"}}}),
            )
        }
    )
    outcome = build_environments([bad, toolset], FAST.model_copy(update={"sandbox_workers": 1}))
    assert outcome.report.produced == 1 and outcome.report.dropped == {"unsupported_type": 1}
    assert outcome.results[0].quarantine is not None and "upload.f" in outcome.results[0].quarantine.detail


def test_weak_tests_are_repaired_then_quarantined(monkeypatch: pytest.MonkeyPatch, pool: SandboxPool) -> None:
    strict = FAST.model_copy(update={"min_mutation_score": 1.0, "max_repairs": 1})
    real = build_module.score_suite
    calls: list[int] = []

    def weak(*args, **kwargs):  # the first suite "misses" one seeded bug; the reseeded one kills them all
        report = real(*args, **kwargs)
        calls.append(1)
        if len(calls) > 1:
            return report
        first = report.mutants[0].model_copy(update={"killed": False})
        return report.model_copy(
            update={
                "mutants": (first, *report.mutants[1:]),
                "killed": report.killed - 1,
                "score": (report.killed - 1) / report.total,
            }
        )

    monkeypatch.setattr(build_module, "score_suite", weak)
    result = build_environment(sample("Ledger Bank"), strict, sandbox_pool=pool)
    assert result.artifacts is not None and result.attempts == 2 and result.artifacts.manifest.mutation_score == 1.0

    def always_weak(*args, **kwargs):
        calls.clear()
        return weak(*args, **kwargs)

    monkeypatch.setattr(build_module, "score_suite", always_weak)
    result = build_environment(sample("Ledger Bank"), strict, sandbox_pool=pool)
    assert result.quarantine is not None and result.quarantine.reason == "weak_tests"
    assert "survived: " in result.quarantine.detail and result.attempts == 2


def test_mostly_echo_toolsets_are_quarantined(pool: SandboxPool) -> None:
    toolset = sample("Acme Shop")
    payload = {"type": "object", "properties": {"payload": {"type": "object"}}, "required": ["payload"]}
    echo = [RawTool(name=f"trigger_hook_{i}", description="Fire a hook.", parameters=payload) for i in range(6)]
    result = build_environment(toolset.model_copy(update={"tools": (*toolset.tools[:2], *echo)}), FAST,
                               sandbox_pool=pool)  # fmt: skip
    assert result.quarantine is not None and result.quarantine.reason == "mostly_echo"
    assert "6/8 tools only log and echo" in result.quarantine.detail and result.attempts == 0
