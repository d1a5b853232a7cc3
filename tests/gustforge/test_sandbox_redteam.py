"""Red team: escape payloads against the sandbox, run as an attacker would, through the Python API and `gust env run`.

Every payload is checked against host tripwires, not against an expected error message: nothing may be created
next to the secret (a 0o777 folder the unprivileged worker could write to if a wall fell), the secret file's content
and the listener's token must be absent from every output, the listener on 127.0.0.1 must see no connection, and
the parent must stay healthy (only `SandboxError`s, no traceback, a worker that answers afterwards, bounded memory).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from data.models import ToolSchema
from envgen.ingest import read_toolsets
from envgen.runtime import Environment
from gustforge.errors import SandboxError, SandboxTimeout, SchemaError
from gustforge.sandbox import SandboxLimits, SandboxWorker
from gustforge.schemas import nonlocal_refs, safe_validator, validation_errors
from tests.gustforge._tripwire_sockets import Listener
from tests.gustforge.redteam_payloads import LAYER1, LAYER2, REFS, TESTS

REPO = Path(__file__).resolve().parents[2]
LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)
RESPONSE = {"type": "object", "properties": {"status": {"type": "string"}, "message": {"type": "string"}}}
# A representative slice of every class for the fast CLI run; the whole set runs through the CLI as `slow`.
CLI_FAST = (
    "class_pattern_generator_frame",
    "format_class_pattern",
    "coroutine_frame",
    "import_socket",
    "open_secret",
    "cpu_spin_catching",
    "memory_bomb",
    "huge_exception_message",
    "very_deep_output",
    "protocol_forge_output",
    "lone_surrogate_output",
)


@dataclass
class Host:
    """The tripwires: a writable folder holding a readable secret, and a listener."""

    root: Path
    secret: str
    listener: Listener
    outputs: list[str] = field(default_factory=list)

    @property
    def secret_path(self) -> Path:
        return self.root / "secret.txt"

    def fill(self, text: str) -> str:
        return (
            text.replace("MARKER", str(self.root / "marker"))
            .replace("SECRET", str(self.secret_path))
            .replace("PORT", str(self.listener.port))
        )

    def fill_json(self, value: Any) -> Any:
        return json.loads(self.fill(json.dumps(value)))

    def assert_untouched(self, outputs: Iterable[str], label: str) -> None:
        blob = "\n".join(outputs)
        assert sorted(p.name for p in self.root.iterdir()) == ["secret.txt"], f"{label}: a file reached the host"
        assert self.secret_path.read_text() == self.secret, f"{label}: the secret file was changed"
        assert self.listener.hits == [], f"{label}: the listener was reached: {self.listener.hits}"
        assert self.secret not in blob, f"{label}: the secret leaked"
        assert self.listener.token not in blob, f"{label}: a remote body leaked"


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    # /tmp itself, not pytest's 0o700 tmp folder: the worker's unprivileged uid must be *able* to write here, so
    # only the sandbox (not file permissions) stands between an attack and a marker file.
    root = Path(tempfile.mkdtemp(prefix="gust-redteam-", dir="/tmp"))
    root.chmod(0o777)
    secret = f"SECRET-CONTENT-{uuid.uuid4().hex}"
    (root / "secret.txt").write_text(secret)
    (root / "secret.txt").chmod(0o666)
    listener = Listener(f"REMOTE-TOKEN-{uuid.uuid4().hex}")
    try:
        yield Host(root=root, secret=secret, listener=listener)
    finally:
        listener.close()
        shutil.rmtree(root, ignore_errors=True)


def _schema(parameters: dict[str, Any] | None = None, response: dict[str, Any] | None = None) -> ToolSchema:
    return ToolSchema(
        name="attack",
        raw_name="attack",
        description="red-team payload",
        parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
        response=response if response is not None else RESPONSE,
        kind="action",
    )


def _attempt(worker: SandboxWorker, source: str) -> list[str]:
    """Load and call; returns every output (results and error messages). Only SandboxErrors may escape."""
    outputs: list[str] = []
    try:
        worker.load(source, {"vault": "db-content"})
        outputs.append(json.dumps(worker.call("attack", {})))
    except SandboxError as exc:
        outputs.append(f"{type(exc).__name__}: {exc}")
    worker.ping()  # healthy afterwards (restarted if it had to be)
    return outputs


@pytest.fixture(scope="module")
def peak_rss() -> Iterator[None]:
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) / 1024
    assert grown_mb < 300, f"the parent grew by {grown_mb:.0f} MB while reading hostile workers"


# ---- Python API --------------------------------------------------------------------------------------------------
def test_layer1_payloads_through_the_api(host: Host, peak_rss: None) -> None:
    """Every wall on: each payload is refused, contained or killed, and nothing reaches the host."""
    assert len(LAYER1) + len(LAYER2) + len(TESTS) + len(REFS) >= 50
    with SandboxWorker(LIMITS) as worker:
        assert worker.isolation["audit_hook"] == "installed"
        for name, source in LAYER1.items():
            outputs = _attempt(worker, host.fill(source))
            host.assert_untouched(outputs, name)


def test_layer2_payloads_with_the_static_policy_bypassed(host: Host, peak_rss: None) -> None:
    """The static check off, the attack holding the real `os` globals and builtins: the second layer holds."""
    refused = 0
    with SandboxWorker(LIMITS, static_check=False) as worker:
        for name, source in LAYER2.items():
            outputs = _attempt(worker, host.fill(source))
            host.assert_untouched(outputs, name)
            refused += any(
                "PermissionError: sandbox: " in out or "[Errno 1] Operation not permitted" in out
                or out.startswith("Sandbox") for out in outputs
            )  # fmt: skip
    # Nearly all are refused by the audit hook, by the kernel (seccomp's EPERM: a SIGXCPU handler, setuid) or end
    # in a sandbox fault; the rest fail on the kernel otherwise (raising a hard rlimit) or are harmless (adding a
    # second audit hook, flooding stderr).
    assert refused >= len(LAYER2) - 4


def test_layer2_route_really_reaches_real_builtins(host: Host) -> None:
    """Control: the bypass the layer-2 payloads use does reach the real builtins, so their refusals mean something."""
    probe = (
        "def _real():\n    for cls in ().__class__.__base__.__subclasses__():\n"
        "        if cls.__name__ == '_wrap_close':\n            return cls.__init__.__globals__\n"
        "def attack(db):\n    G = _real()\n"
        "    return {'status': 'success', 'message': str(G['__builtins__']['open'] is not None), 'pid': G['getpid']()}\n"
    )
    with SandboxWorker(LIMITS, static_check=False) as worker:
        worker.load(probe, {})
        assert worker.call("attack", {})["message"] == "True"


@pytest.mark.parametrize("name", sorted(TESTS))
def test_generated_tests_cannot_forge_their_result(host: Host, name: str) -> None:
    with SandboxWorker(LIMITS) as worker:
        worker.load("def attack(db):\n    return {'status': 'success', 'message': 'ok'}\n", {})
        specs = {"attack": {"parameters": {"type": "object"}, "response": RESPONSE}}
        report = worker.run_tests(host.fill(TESTS[name]), specs)
        assert not report.passed, report
        host.assert_untouched([report.model_dump_json()], name)
        worker.ping()


def test_test_env_call_with_remote_parameter_schema(host: Host) -> None:
    """`env.call` validates arguments inside the worker: a remote `$ref` there is not fetched either."""
    with SandboxWorker(LIMITS) as worker:
        worker.load("def attack(db, a=1):\n    return {'status': 'success', 'message': 'ok'}\n", {})
        specs = host.fill_json({"attack": {"parameters": REFS["param_property_http"][0], "response": RESPONSE}})
        tests = "def test_attack(env):\n    out = env.call('attack', {'a': 1})\n    env.check(False, str(out))\n"
        report = worker.run_tests(tests, specs)
        assert not report.passed and "unresolvable reference" in report.cases[0].message
        host.assert_untouched([report.model_dump_json()], "env.call")


@pytest.mark.parametrize("name", sorted(REFS))
def test_remote_refs_are_refused_everywhere(host: Host, name: str, tmp_path: Path) -> None:
    parameters, response = host.fill_json(REFS[name])
    # at load: the environment is refused with a clear error
    with pytest.raises(SchemaError, match="non-local reference"):
        Environment.from_parts("e", [_schema(parameters, response or None)], {}, "def attack(db):\n    pass\n")
    # at ingest: the toolset is quarantined with its own reason
    empty = {"type": "object", "properties": {}}
    tools = [
        {"name": "a", "inputSchema": parameters, "outputSchema": response or None},
        {"name": "b", "inputSchema": empty},
    ]
    record = {"tools": tools}
    raw = tmp_path / "mcp.json"
    raw.write_text(json.dumps(record))
    result = read_toolsets(raw)
    assert not result.toolsets and result.quarantine[0].reason == "nonlocal_ref", result.quarantine
    # the validator itself never retrieves, wherever it is used
    outputs = validation_errors({"a": 1}, parameters) + validation_errors({"a": 1}, response)
    assert nonlocal_refs(parameters) or nonlocal_refs(response)
    host.assert_untouched(outputs + [str(q) for q in result.quarantine], name)


def test_safe_validator_never_fetches(host: Host) -> None:
    from jsonschema import Draft7Validator
    from referencing.exceptions import Unresolvable

    for schema in ({"$ref": f"http://127.0.0.1:{host.listener.port}/x"}, {"$ref": f"file://{host.secret_path}"}):
        for validator in (safe_validator(schema), safe_validator(schema, Draft7Validator)):
            with pytest.raises(Unresolvable):
                list(validator.iter_errors(1))
    host.assert_untouched([], "safe_validator")


def test_db_tampering_does_not_survive_reset(host: Host) -> None:
    env = Environment.from_parts("e", [_schema()], {"vault": "initial"}, host.fill(LAYER1["db_tamper"]))
    with env.session(LIMITS) as session:
        assert session.call("attack", {})["message"] == "tampered"
        assert session.db() == {"pwned": True}
        session.reset()
        assert session.db() == {"vault": "initial"}


def test_hostile_schema_pattern_cannot_hang_the_parent(tmp_path: Path) -> None:
    """A catastrophic `pattern` (ReDoS) in a harvested schema: arguments are validated inside the worker, so the
    worker's CPU limit ends it and the parent (API and CLI) answers within its limits."""
    evil = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    tools = "def attack(db, a=''):\n    return {'status': 'success', 'message': 'ran'}\n"
    args = {"a": "a" * 64 + "!"}
    env = Environment.from_parts("e", [_schema(evil)], {}, tools)
    with env.session(LIMITS) as session:
        with pytest.raises(SandboxTimeout, match="CPU limit"):  # the worker's CPU, not the wall clock
            session.call("attack", args)
        assert session.call("attack", {"a": "aaa"})["message"] == "ran"  # restarted, still validating
        assert session.call("attack", {"a": "b"})["message"].startswith("invalid arguments: ")


def test_environments_never_share_a_worker(host: Host) -> None:
    from gustforge.sandbox import SandboxPool

    register = "def attack(db):\n    return {'status': 'success', 'message': str(isinstance([], ChainMap))}\n"
    source = "from collections import ChainMap\n" + register
    with SandboxPool(size=1, limits=LIMITS) as pool:
        first = Environment.from_parts("a", [_schema()], {}, source)
        second = Environment.from_parts("b", [_schema()], {"x": 1}, source)
        with first.session(pool=pool) as one:
            pid_one = one._worker.pid
        with second.session(pool=pool) as two:
            assert two._worker.pid != pid_one
            assert two.call("attack", {})["message"] == "False"


# ---- through `gust env run` --------------------------------------------------------------------------------------
def _write_env(root: Path, name: str, tools: str, schema: ToolSchema | None = None) -> Path:
    env_dir = root / name
    env_dir.mkdir()
    (env_dir / "schemas.json").write_text(json.dumps([(schema or _schema()).model_dump(mode="json")]))
    (env_dir / "db.json").write_text(json.dumps({"vault": "db-content"}))
    (env_dir / "tools.py").write_text(tools)
    return env_dir


def _gust_env_run(env_dir: Path, args: str = "{}") -> tuple[int, str, str]:
    gust = Path(sys.executable).with_name("gust")
    command = [str(gust)] if gust.exists() else [sys.executable, "-m", "flows.cli"]
    limits = ["--cpu-seconds", "1", "--memory-mb", "256", "--wall-seconds", "4"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [*command, "env", "run", str(env_dir), "attack", "--args", args, *limits],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO),
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _cli_sweep(
    host: Host, payloads: dict[str, str], workdir: Path, schemas: dict[str, ToolSchema] | None = None
) -> None:
    dirs = {
        name: _write_env(workdir, name, host.fill(source), (schemas or {}).get(name))
        for name, source in payloads.items()
    }
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(dirs, pool.map(_gust_env_run, dirs.values()), strict=True))
    for name, (code, stdout, stderr) in results.items():
        assert code in (0, 2, 3), f"{name}: exit {code}\n{stderr[-2000:]}"
        assert "Traceback" not in stdout + stderr, f"{name}: the CLI printed a traceback\n{stderr[-3000:]}"
        if code == 0:
            json.loads(stdout)
        host.assert_untouched([stdout, stderr], f"gust env run {name}")


def test_gust_env_run_fast_slice(host: Host, tmp_path: Path) -> None:
    _cli_sweep(host, {name: LAYER1[name] for name in CLI_FAST}, tmp_path)


@pytest.mark.slow
def test_gust_env_run_every_payload(host: Host, tmp_path: Path) -> None:
    _cli_sweep(host, {name: src for name, src in LAYER1.items() if name not in CLI_FAST}, tmp_path)


def test_gust_env_run_hostile_env_files_and_refs(host: Host, tmp_path: Path) -> None:
    """Hostile files, remote `$ref`s and hostile arguments are load errors (exit 2) or structured errors, never a
    traceback, and no `$ref` is fetched."""
    tools = "def attack(db, a=None):\n    return {'status': 'success', 'message': 'ok'}\n"
    cases: dict[str, tuple[Path, str]] = {
        f"ref_{name}": (_write_env(tmp_path, f"ref_{name}", tools, _schema(*host.fill_json(REFS[name]))), "{}")
        for name in REFS
    }
    deep = "[" * 100_000 + "]" * 100_000
    for name in ("deep_db", "deep_schema", "schema_150_levels", "bad_utf8_schemas", "bad_utf8_tools", "null_bytes"):
        cases[name] = (_write_env(tmp_path, name, tools), "{}")
    (tmp_path / "deep_db" / "db.json").write_text(deep)
    (tmp_path / "deep_schema" / "schemas.json").write_text(deep)
    nested: dict[str, Any] = {"type": "object"}
    for _ in range(75):
        nested = {"type": "object", "properties": {"a": nested}}
    schema = _schema({"type": "object", "properties": {"a": nested}}).model_dump(mode="json")
    (tmp_path / "schema_150_levels" / "schemas.json").write_text(json.dumps([schema]))
    (tmp_path / "bad_utf8_schemas" / "schemas.json").write_bytes(b"\xff\xfe[")
    (tmp_path / "bad_utf8_tools" / "tools.py").write_bytes(b"\xff\xfe\x00def")
    (tmp_path / "null_bytes" / "tools.py").write_text("def attack(db):\n    return {}\x00\n")
    plain = _write_env(tmp_path, "plain", tools)
    cases["deep_args"] = (plain, '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    cases["deep_args_900"] = (plain, '{"a": ' + "[" * 900 + "]" * 900 + "}")
    cases["not_json_args"] = (plain, "{'a': 1")
    evil = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    cases["redos_pattern"] = (_write_env(tmp_path, "redos", tools, _schema(evil)), json.dumps({"a": "a" * 64 + "!"}))
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(cases, pool.map(lambda case: _gust_env_run(*case), cases.values()), strict=True))
    for name, (code, stdout, stderr) in results.items():
        assert code in (0, 2, 3), f"{name}: exit {code}\n{stderr[-2000:]}"
        assert "Traceback" not in stdout + stderr, f"{name}: the CLI printed a traceback\n{stderr[-3000:]}"
    assert results["deep_db"][0] == 2 and results["bad_utf8_tools"][0] == 2 and results["schema_150_levels"][0] == 2
    assert all(results[f"ref_{name}"][0] == 2 for name in REFS)
    assert results["redos_pattern"][0] == 3  # the worker's CPU limit, not a hung parent
    host.assert_untouched([out for _, out, err in results.values()], "hostile env files")


# ---- the non-root path (a developer laptop) ---------------------------------------------------------------------
_NON_ROOT_SCRIPT = """
import json, sys
from gustforge.sandbox import SandboxLimits, SandboxWorker
sys.path.insert(0, sys.argv[1])
payloads = json.loads(sys.argv[2])
out = {"uid": __import__("os").geteuid(), "outputs": []}
limits = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)
with SandboxWorker(limits, static_check=False) as worker:
    out["isolation"] = worker.isolation
    for source in payloads:
        try:
            worker.load(source, {})
            out["outputs"].append(json.dumps(worker.call("attack", {})))
        except Exception as exc:
            out["outputs"].append(type(exc).__name__ + ": " + str(exc))
from gustforge.sandbox import SandboxPool
with SandboxPool(size=1, limits=limits) as pool, pool.acquire() as worker:
    out["pool_isolation"] = worker.isolation
    worker.load(payloads[-1], {})
    out["pool"] = worker.call("attack", {})
print(json.dumps(out))
"""


def test_works_and_holds_for_a_non_root_user(host: Host) -> None:
    """Run the parent as a non-root user (a user namespace without root mapped: no capabilities, uid != 0)."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("already non-root (the whole suite covers this path) or unshare(1) missing")
    as_user = [unshare, "--user", "--map-user=1000", "--map-group=1000"]  # uid 1000, like a laptop user
    probe = subprocess.run([*as_user, "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces not permitted here: {probe.stderr!r}")
    names = ("real_open_secret", "real_system", "real_import_socket", "real_fork", "real_open_marker")
    payloads = [host.fill(LAYER2[name]) for name in names]
    payloads.append("def attack(db):\n    return {'status': 'success', 'message': 'works'}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [*as_user, sys.executable, "-c", _NON_ROOT_SCRIPT, str(REPO), json.dumps(payloads)],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["uid"] == 1000
    # namespaces through `unshare --user` where unprivileged user namespaces are enabled, else reported as shared
    for kind in ("network_namespace", "pid_namespace"):
        assert report["isolation"][kind] == "new" or report["isolation"][kind].startswith("shared (unshare")
    assert report["isolation"]["audit_hook"] == "installed"
    assert report["isolation"]["privileges"].startswith("unprivileged")
    assert report["isolation"]["hard_rlimits"] == "lowered to soft"
    assert json.loads(report["outputs"][-1])["message"] == "works"
    assert report["pool"]["message"] == "works"  # a zygote-forked worker, as a non-root user
    assert report["pool_isolation"]["audit_hook"] == "installed"
    host.assert_untouched(report["outputs"], "non-root")
