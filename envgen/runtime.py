"""The environment runtime: load an env folder (or parts in memory) and call its tools through the sandbox.

Env folder layout (`OUT/envs/<env_id>/`): `manifest.json` (EnvManifest), `schemas.json` (list of ToolSchema dumps),
`db.json`, `tools.py`, `tests.py`, `test_report.json`. An `EnvSession` owns one sandbox worker loaded with the tools
and a copy of the initial DB; arguments are validated against the tool's JSON schema before any code runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import ValidationError

from data import io
from data.models import EnvManifest, TestReport, ToolSchema
from gustforge.errors import CodegenError, InputError, SandboxError, SchemaError
from gustforge.hashing import content_hash
from gustforge.sandbox import SandboxLimits, SandboxPool, SandboxWorker
from gustforge.schemas import errors_of, nonlocal_refs, safe_validator

__all__ = ["Environment", "EnvSession", "call_tool_once", "ENV_FILES"]

logger = logging.getLogger(__name__)

ENV_FILES = ("manifest.json", "schemas.json", "db.json", "tools.py", "tests.py", "test_report.json")


@dataclass(frozen=True)
class Environment:
    """An executable environment: tool schemas, initial DB and the (untrusted) tools module source.

    `initial_db` is never mutated: sessions receive a JSON copy. Build one with `load` or `from_parts`.
    """

    env_id: str
    schemas: tuple[ToolSchema, ...]
    initial_db: dict[str, Any]
    tools_source: str
    manifest: EnvManifest | None = None
    tests_source: str | None = None
    _validators: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [schema.name for schema in self.schemas]
        if len(set(names)) != len(names):
            raise SchemaError(f"env {self.env_id}: duplicate tool names in {names}")
        for schema in self.schemas:
            refs = nonlocal_refs(schema.parameters) + nonlocal_refs(schema.response)
            if refs:
                raise SchemaError(
                    f"env {self.env_id}: tool {schema.name!r} has a non-local reference ({refs[0]}); "
                    "remote and file references are never retrieved"
                )
            try:
                self._validators[schema.name] = safe_validator(schema.parameters, check=True)
            except RecursionError as exc:
                raise SchemaError(f"env {self.env_id}: tool {schema.name!r} has a schema nested too deep") from exc
            except jsonschema.SchemaError as exc:
                raise SchemaError(
                    f"env {self.env_id}: tool {schema.name!r} has an invalid parameters schema: {exc}"
                ) from exc

    @classmethod
    def load(cls, env_dir: Path | str) -> Environment:
        """Read an env folder (manifest.json optional when building; tests.py optional).

        Raises:
            InputError: the folder or a required file is missing or unreadable.
            SchemaError: schemas.json does not hold valid ToolSchema records.
        """
        root = Path(env_dir)
        if not root.is_dir():
            raise InputError(f"environment folder not found: {root}")
        for required in ("schemas.json", "db.json", "tools.py"):
            if not (root / required).is_file():
                raise InputError(f"environment {root} lacks {required}")
        tests_path = root / "tests.py"
        try:
            schemas = tuple(ToolSchema.model_validate(s) for s in io.read_json(root / "schemas.json"))
            manifest_path = root / "manifest.json"
            manifest = EnvManifest.model_validate(io.read_json(manifest_path)) if manifest_path.is_file() else None
            db = io.read_json(root / "db.json")
            tools_source = (root / "tools.py").read_text(encoding="utf-8")
            tests_source = tests_path.read_text(encoding="utf-8") if tests_path.is_file() else None
        except ValidationError as exc:
            raise SchemaError(f"environment {root}: {exc}") from exc
        except (ValueError, RecursionError, TypeError) as exc:  # bad JSON or UTF-8, nesting too deep, wrong shape
            raise InputError(f"environment {root}: unreadable file: {type(exc).__name__}: {str(exc)[:300]}") from exc
        except OSError as exc:
            raise InputError(f"environment {root}: {exc}") from exc
        if not isinstance(db, dict):
            raise InputError(f"environment {root}: db.json must hold an object")
        return cls(
            env_id=manifest.env_id if manifest else root.name,
            schemas=schemas,
            initial_db=db,
            tools_source=tools_source,
            manifest=manifest,
            tests_source=tests_source,
        )

    @classmethod
    def from_parts(
        cls,
        env_id: str,
        schemas: list[ToolSchema] | tuple[ToolSchema, ...],
        initial_db: dict[str, Any],
        tools_source: str,
        manifest: EnvManifest | None = None,
        *,
        tests_source: str | None = None,
    ) -> Environment:
        """Build an environment in memory (so a stage can run it before it is written)."""
        return cls(
            env_id=env_id,
            schemas=tuple(schemas),
            initial_db=initial_db,
            tools_source=tools_source,
            manifest=manifest,
            tests_source=tests_source,
        )

    @property
    def tool_names(self) -> list[str]:
        return [schema.name for schema in self.schemas]

    def schema(self, name: str) -> ToolSchema | None:
        return next((schema for schema in self.schemas if schema.name == name), None)

    def tool_specs(self) -> dict[str, dict[str, Any]]:
        """Tool name -> {"parameters", "response"}: the `schemas` argument of `SandboxWorker.run_tests`."""
        return {s.name: {"parameters": s.parameters, "response": s.response} for s in self.schemas}

    def argument_errors(self, name: str, args: Any) -> list[str]:
        """jsonschema messages for `args` against tool `name` (empty = valid; the tool must exist).

        Runs in this process: sessions validate inside their worker instead (`EnvSession.call`), where a hostile
        schema cannot hang the caller.
        """
        if not isinstance(args, Mapping):
            return [f"arguments must be a JSON object, got {type(args).__name__}"]
        try:
            return errors_of(self._validators[name], dict(args))
        except RecursionError:
            return ["arguments are nested too deep to validate"]

    def session(
        self, limits: SandboxLimits | None = None, *, pool: SandboxPool | None = None, seed: int = 0
    ) -> EnvSession:
        """Start a session: a sandbox worker (own or from `pool`) with the tools and a copy of the initial DB.

        Raises:
            SandboxViolation: the tools module breaks the sandbox policy.
            CodegenError: the tools module lacks a function for some schema.
            SandboxError: the tools module fails at import.
        """
        lease: AbstractContextManager[SandboxWorker] | None = None
        if pool is not None:  # a pooled worker is only ever reused for this same environment
            lease = pool.acquire(seed=seed, owner=content_hash([self.tools_source, self.initial_db]))
            worker = lease.__enter__()
        else:
            worker = SandboxWorker(limits, seed=seed)
        try:
            parameters = {schema.name: schema.parameters for schema in self.schemas}
            defined = worker.load(self.tools_source, self.initial_db, parameters=parameters)
            missing = [name for name in self.tool_names if name not in defined]
            if missing:
                raise CodegenError(f"env {self.env_id}: tools module lacks {', '.join(missing)}")
        except BaseException:
            _release(worker, lease)
            raise
        return EnvSession(self, worker, lease)

    def run_tests(self, limits: SandboxLimits | None = None, *, total_seconds: float = 60.0) -> TestReport:
        """Run `tests_source` against a fresh worker (an env without tests gets a failed report)."""
        if self.tests_source is None:
            return TestReport(passed=False, cases=(), duration_s=0.0, error="environment has no tests module")
        with SandboxWorker(limits) as worker:
            worker.load(self.tools_source, self.initial_db)
            return worker.run_tests(self.tests_source, self.tool_specs(), total_seconds=total_seconds)


def _release(worker: SandboxWorker, lease: AbstractContextManager[SandboxWorker] | None) -> None:
    if lease is None:
        worker.close()
    else:
        lease.__exit__(None, None, None)


class EnvSession:
    """One live copy of an environment. Tool errors are structured results; sandbox faults raise."""

    def __init__(
        self, env: Environment, worker: SandboxWorker, lease: AbstractContextManager[SandboxWorker] | None = None
    ) -> None:
        self.env = env
        self._worker = worker
        self._lease = lease
        self._closed = False

    def call(self, name: str, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Call tool `name` with `args`; invalid arguments and unknown tools return a structured error.

        Raises:
            SandboxTimeout, SandboxMemoryError, SandboxError: the tool broke a sandbox limit (env bug).
        """
        args = {} if args is None else args
        if self.env.schema(name) is None:
            known = ", ".join(self.env.tool_names)
            return {"status": "error", "message": f"unknown tool {name!r}; available: {known}"}
        if not isinstance(args, Mapping):
            return {"status": "error", "message": f"invalid arguments: arguments must be a JSON object, got "
                    f"{type(args).__name__}"}  # fmt: skip
        try:
            payload = json.loads(json.dumps(dict(args), allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            return {"status": "error", "message": f"invalid arguments: not JSON: {str(exc)[:200]}"}
        return self._live().call(name, payload)  # the worker validates `args` against the tool's schema

    def db(self) -> dict[str, Any]:
        """A copy of the live DB."""
        return self._live().get_db()

    def db_hash(self) -> str:
        """`content_hash` of the live DB (canonical JSON, sha256)."""
        return content_hash(self.db())

    def set_db(self, db: dict[str, Any]) -> None:
        """Replace the live DB (e.g. to replay from a snapshot)."""
        self._live().set_db(db)

    def reset(self) -> None:
        """Restore the initial DB and a fresh tools module (seeded `random`/`uuid4` start over)."""
        self._live().reset()

    @property
    def isolation(self) -> dict[str, str]:
        """The isolation layers the session's worker reported at start-up (see `SandboxWorker.isolation`)."""
        return dict(self._worker.isolation)

    def _live(self) -> SandboxWorker:
        if self._closed:  # a pooled worker may already serve another session
            raise SandboxError("environment session is closed")
        return self._worker

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release(self._worker, self._lease)

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def call_tool_once(
    env_dir: Path | str, tool: str, args: Mapping[str, Any] | None = None, *, limits: SandboxLimits | None = None
) -> dict[str, Any]:
    """Load an env folder, call one tool on a fresh copy of its DB and return the output."""
    with Environment.load(env_dir).session(limits) as session:
        return session.call(tool, args)
