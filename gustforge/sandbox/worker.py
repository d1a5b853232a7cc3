"""`SandboxWorker`: the parent side of the sandbox. Untrusted code runs only in its child process (`child.py`).

The child is a fresh `python -s -P -B` process with a clean environment (`PYTHONHASHSEED=0` so set iteration order
is reproducible), in its own process group and, where the platform permits, in new network and PID namespaces
(`unshare`, probed once per process). It hardens itself before any untrusted code runs (see `child.py`) and greets
the parent with what it applied (`SandboxWorker.isolation`). The protocol is JSON lines with request ids.

The parent treats everything the child sends as hostile: it bounds what it reads (response size, nesting depth,
stderr line length and count), maps malformed, undecodable or out-of-order replies to `SandboxError`, kills the
whole process group on any fault, and never closes a pipe under its stderr reader. It enforces the wall-clock
limit, maps child faults to `SandboxTimeout` / `SandboxMemoryError` / `SandboxViolation` / `SandboxError`, and
restarts the child after a fault: the restarted child holds the last loaded tools (and tests) with the *initial* DB.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from data.models import TestReport
from gustforge.errors import SandboxError, SandboxMemoryError, SandboxTimeout, SandboxViolation
from gustforge.sandbox.check import check_source
from gustforge.sandbox.walls import KernelWalls, allocate_uid, require_walls, seccomp_filters, seccomp_pipe
from gustforge.sandbox.zygote import HostProcess, Zygote, host_usage

if TYPE_CHECKING:
    from gustforge.sandbox.testing import VariantRun

__all__ = [
    "SandboxLimits",
    "SandboxWorker",
    "SandboxLayers",
    "CHILD_SCRIPT",
    "MAX_RESPONSE_BYTES",
    "MAX_DEPTH",
    "namespace_prefix",
    "worker_command",
]

logger = logging.getLogger(__name__)

CHILD_SCRIPT = Path(__file__).with_name("child.py")
MAX_RESPONSE_BYTES = 16 * 1024 * 1024 + 4096  # the child refuses results over 16 MB; anything beyond is hostile
MAX_DEPTH = 66  # the child refuses results nested deeper than 64 (+2 for the response envelope)
STDERR_LINES = 40
STDERR_LINE_CHARS = 1000
START_SECONDS = 60.0  # the child imports and warms jsonschema before greeting; slow on a loaded machine
POLL_SECONDS = 0.1  # how often the parent measures a busy worker's CPU time and memory
CPU_SLACK_SECONDS = 0.25  # the parent's measurement is in clock ticks and polled: allow a little over the limit
# The child writes raw UTF-8 (ensure_ascii=False), so it never escapes a surrogate; an escaped one would decode to
# a string that cannot be printed or encoded (a lone surrogate) and crash whoever prints the result.
_SURROGATE_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_FAULTS: dict[str, type[SandboxError]] = {
    "violation": SandboxViolation,
    "memory": SandboxMemoryError,
    "error": SandboxError,
}


@functools.cache
def namespace_prefix() -> tuple[tuple[str, ...], str]:
    """The command prefix that puts the worker in new network and PID namespaces, and what was found.

    Probed once per process with the exact prefix (root: `unshare --net --pid --fork`; other users add
    `--user`, which needs unprivileged user namespaces). Returns `((), reason)` where it is not permitted.
    """
    if not sys.platform.startswith("linux"):
        return (), f"no namespaces on {sys.platform}"
    tool = shutil.which("unshare")
    if tool is None:
        return (), "unshare(1) not found"
    prefix = (tool, *(() if os.geteuid() == 0 else ("--user",)), "--net", "--pid", "--fork", "--kill-child")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return (), f"unshare probe failed: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.decode("utf-8", "replace").strip()[:200]
        return (), f"unshare not permitted: {reason or probe.returncode}"
    return prefix, "network and PID namespaces"


class SandboxLimits(BaseModel):
    """Resource limits of one sandbox request (CPU and wall time per request; memory for the whole process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: float = Field(default=5, gt=0, description="CPU time per request (rounded up to whole seconds).")
    memory_mb: int = Field(default=512, ge=64, description="Address-space limit of the worker process.")
    wall_seconds: float = Field(default=10, gt=0, description="Wall-clock time per request.")
    cpu_cap_seconds: int = Field(
        default=3600, ge=1, description="CPU hard limit of the worker's whole life (no request can raise it)."
    )


class SandboxLayers(BaseModel):
    """Which walls are up. Everything is on by default; only the red-team tests (proving each wall holds on its
    own, and that the tests notice when it is gone) and the benchmark's baselines turn one off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kernel_walls: bool = True  # bubblewrap namespaces + read-only minimal root + the wall seccomp filter
    worker_seccomp: bool = True  # the stricter filter each worker loads once hardened
    parent_limits: bool = True  # CPU and memory measured and enforced from the parent
    drop_privileges: bool = True
    audit_hook: bool = True
    separate_harness: bool = True  # generated tests run in a worker of their own, their verdict out of the tools' reach


class _State(BaseModel):
    """What the worker must re-create after a restart."""

    model_config = ConfigDict(frozen=True)

    tools_source: str
    db: dict[str, Any]
    seed: int
    parameters: dict[str, Any] | None = None
    extensions: tuple[str, ...] = ()
    tests: tuple[str, dict[str, Any]] | None = None


class SandboxWorker:
    """One sandbox process holding one tools module and its live DB. Requests are serialised by a lock.

    Args:
        limits: CPU, memory and wall limits.
        seed: Seed of the tools module's `random` / `uuid4`.
        static_check: Only the red-team tests turn this off, to prove the second layer holds on its own.
        validation: Warm jsonschema in the worker (generated tests and argument checks validate inside it);
            only the benchmark's baseline turns it off.
        zygote: Fork the worker from this warmed template process instead of starting Python afresh (pools).

    Example:
        >>> with SandboxWorker() as worker:                                    # doctest: +SKIP
        ...     worker.load("def ping(db):\\n    return {'status': 'success', 'message': 'pong'}", {})
        ['ping']
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        seed: int = 0,
        static_check: bool = True,
        validation: bool = True,
        zygote: Zygote | None = None,
        layers: SandboxLayers | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.layers = layers or (zygote.layers if zygote is not None else SandboxLayers())
        self.walls = zygote.walls if zygote is not None else (require_walls() if self.layers.kernel_walls else None)
        self.seed = seed
        self.restarts = 0
        self.isolation: dict[str, str] = {}
        self._static_check = static_check
        self._validation = validation
        self._zygote = zygote
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = bytearray()
        self._next_id = 0
        self._stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self._state: _State | None = None
        self._closed = False
        self._host_pid: int | None = None
        self._sandbox_init: HostProcess | None = None  # a direct worker's launcher's child (bwrap/unshare's init)
        self._launch: tuple[dict[str, Any], int | None] = ({}, None)  # settings and seccomp fd of the next start
        self.tool_names: list[str] = []  # the loaded tools module's public functions (mutants included)
        self._harness: SandboxWorker | None = None  # runs this worker's tests (see `_test_harness`)
        self._harness_load: dict[str, Any] | None = None  # a harness's tests, replayed after a restart
        self._request_cpu: float | None = None  # the worker's CPU time when the request in flight was sent
        self._reply_cpu: float | None = None  # ... and when the previous request was sent
        with self._lock:
            self._start()

    # ---- public API -------------------------------------------------------------------------------------------
    def load(
        self, tools_source: str, db: dict[str, Any], *, parameters: dict[str, dict[str, Any]] | None = None
    ) -> list[str]:
        """Check and exec a tools module with `db` as its live DB; returns its public function names.

        `parameters` (tool name -> JSON schema): `call` then validates arguments inside the worker, under its
        limits, and answers invalid ones with `{"status": "error", "message": "invalid arguments: ..."}`.

        Raises:
            SandboxViolation: the source breaks the policy.
            SandboxError: the module fails at import; SandboxTimeout / SandboxMemoryError on limits.
        """
        if self._static_check:
            check_source(tools_source)
        with self._lock:
            self._state = None
            request = {"op": "load", "source": tools_source, "db": db, "seed": self.seed, "parameters": parameters}
            names = self._request(request)
            self._state = _State(tools_source=tools_source, db=db, seed=self.seed, parameters=parameters)
            self.tool_names = [str(name) for name in self._expect(list, names)]
        return list(self.tool_names)

    def extend(self, source: str) -> list[str]:
        """Check `source` and exec it into the loaded tools module after the module itself (now and after every
        reset); returns the module's public function names. Mutation scoring adds its mutants this way, so only
        their own text is checked, not the whole module again.

        Raises:
            SandboxViolation: the source breaks the policy. SandboxError: nothing loaded, or it fails at import.
        """
        if self._static_check:
            check_source(source)
        with self._lock:
            if self._state is None:
                raise SandboxError("load a tools module before extending it")
            names = self._request({"op": "extend", "source": source})
            self._state = self._state.model_copy(update={"extensions": (*self._state.extensions, source)})
            self.tool_names = [str(name) for name in self._expect(list, names)]
        return list(self.tool_names)

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run `tool(db, **args)` on the live DB. Tool exceptions come back as `{"status": "error", ...}`."""
        return self._expect(dict, self._request({"op": "call", "tool": tool, "args": args}))

    def get_db(self) -> dict[str, Any]:
        """The live DB (a JSON copy)."""
        return self._expect(dict, self._request({"op": "get_db"}))

    def set_db(self, db: dict[str, Any]) -> None:
        """Replace the live DB (the tools module keeps its state)."""
        self._request({"op": "set_db", "db": db})

    def reset(self) -> None:
        """Restore the initial DB (sent from this side, which holds the authoritative copy), re-exec the tools
        module and reseed `random`/`uuid4`."""
        with self._lock:
            db = self._state.db if self._state is not None else None
            self._request({"op": "reset", "db": db})

    def unload(self) -> None:
        """Forget the tools, tests and DB."""
        with self._lock:
            self._state, self.tool_names = None, []
            self._close_harness()
            if self._proc is not None:
                self._request({"op": "unload"})

    def ping(self) -> float:
        """Round-trip time of an empty request, in seconds."""
        start = time.perf_counter()
        self._request({"op": "ping"})
        return time.perf_counter() - start

    def run_tests(
        self, tests_source: str, schemas: dict[str, dict[str, Any]], *, total_seconds: float = 60.0
    ) -> TestReport:
        """Run every `test_*(env)` of a tests module against the loaded tools, each on a fresh DB.

        Args:
            tests_source: The generated tests module.
            schemas: Tool name -> {"parameters": ..., "response": ...}; `env.call` validates arguments with it.
            total_seconds: Wall budget for the whole run; tests not started in time fail as "not run".

        Returns:
            A `TestReport`; sandbox-level failures (violation, import error, no tests) set `error` and never raise.
        """
        from gustforge.sandbox.testing import run_test_module  # local: keeps the worker module small

        return run_test_module(self, tests_source, schemas, total_seconds=total_seconds)

    def run_tool_variants(
        self,
        tests_source: str,
        schemas: dict[str, dict[str, Any]],
        variants: Sequence[tuple[str, Mapping[str, str]]],
        *,
        total_seconds: float = 60.0,
    ) -> tuple[str | None, list[VariantRun]]:
        """Run one tool's tests per variant `(tool, {tool: function})`, its `env.call_tool(tool)` calls redirected
        to `function`, until a test fails (mutation scoring); see `gustforge.sandbox.testing.run_tool_variants`."""
        from gustforge.sandbox.testing import run_tool_variants

        return run_tool_variants(self, tests_source, schemas, variants, total_seconds=total_seconds)

    def close(self) -> None:
        """Stop the child process group; the worker cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._close_harness()
            self._kill()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Pid of the process running untrusted code: on the host (below the `unshare` wrapper and namespace
        init), or in the zygote's namespace for a forked worker."""
        pid = self._proc.pid if self._proc is not None else None
        if not isinstance(self._proc, subprocess.Popen):
            return pid
        while pid is not None:
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                break
            if len(children) != 1:
                break
            pid = int(children[0])
        return pid

    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; callers should close()
        proc = getattr(self, "_proc", None)
        # Only a directly started child: a zygote round trip from a finaliser could wait on a lock its own
        # thread holds. A forked worker reads EOF and exits once its pipes are collected, or dies with the zygote.
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            init = getattr(self, "_sandbox_init", None)
            if init is not None:
                init.kill()
            _kill_group(proc)

    # ---- used by gustforge.sandbox.testing ---------------------------------------------------------------------
    def _test_harness(self) -> SandboxWorker:
        """The worker that runs this worker's generated tests (started on first use, kept until unload/close).

        Tests run in a process of their own: their `env` reaches the tools here only through requests this
        process relays (`_answer_harness`), so code in the tools module cannot touch a test's bookkeeping or
        verdict, whatever wall it breaks inside its own process.
        """
        if not self.layers.separate_harness:
            return self
        if self._harness is None or self._harness._closed:
            self._harness = SandboxWorker(self.limits, seed=self.seed, static_check=self._static_check,
                                          zygote=self._zygote, layers=self.layers)  # fmt: skip
        return self._harness

    def _close_harness(self) -> None:
        harness, self._harness = self._harness, None
        if harness is not None and harness is not self:
            harness.close()

    def _load_tests(self, tests_source: str, schemas: dict[str, Any]) -> list[str]:
        """Load a tests module into this worker's harness; returns its test names."""
        if self._static_check:
            check_source(tests_source)
        with self._lock:
            if self._state is None:
                raise SandboxError("load a tools module before running tests")
            harness = self._test_harness()
            if harness is self:  # the harness layer is off (a red-team test): the tests run beside the tools
                names = self._request({"op": "load_tests", "source": tests_source, "schemas": schemas})
                self._state = self._state.model_copy(update={"tests": (tests_source, schemas)})
                return [str(name) for name in self._expect(list, names)]
        return harness._load_harness(tests_source, schemas, self.tool_names, self.seed)

    def _load_harness(self, source: str, schemas: dict[str, Any], tools: list[str], seed: int) -> list[str]:
        payload = {"op": "load_harness", "source": source, "schemas": schemas, "tools": tools, "seed": seed}
        with self._lock:
            self._harness_load = None
            names = self._request(payload)
            self._harness_load = payload
        return [str(name) for name in self._expect(list, names)]

    def _run_test(self, name: str, *, wall_seconds: float, redirect: dict[str, str] | None = None) -> dict[str, Any]:
        """Run one test in the harness; returns {"passed", "message", "tool"}. A fault of this (tools) worker
        during the test fails it, whatever the test did with the error it saw."""
        request: dict[str, Any] = {"op": "run_test", "name": name}
        if redirect:
            request["redirect"] = redirect
        faults: list[str] = []
        harness = self._test_harness()
        if harness is self:
            return self._expect(dict, self._request(request, wall_seconds=wall_seconds))
        with harness._lock:
            harness._ensure_started()
            result = harness._expect(
                dict,
                harness._send(
                    request, wall_seconds=wall_seconds, on_need=lambda need: self._answer_harness(need, faults)
                ),
            )
        if faults:
            return {**result, "passed": False, "message": "; ".join([*faults, str(result.get("message") or "")])}
        return result

    def _answer_harness(self, need: Any, faults: list[str]) -> dict[str, Any]:
        """One request of a running test to the tools: a call, the DB, or a reset."""
        op = need.get("op") if isinstance(need, dict) else None
        try:
            if op == "call" and isinstance(need.get("tool"), str) and isinstance(need.get("args"), dict):
                return {"result": self._call(need["tool"], need["args"], validate=need.get("validate") is not False)}
            if op == "db":
                return {"result": self.get_db()}
            if op == "reset":
                self.reset()
                return {"result": None}
            raise SandboxError(f"sandbox protocol violated: the test harness asked for {str(op)[:40]!r}")
        except SandboxError as exc:
            faults.append(f"{type(exc).__name__}: {exc}"[: STDERR_LINE_CHARS * 4])
            return {"fault": faults[-1]}

    def _call(self, tool: str, args: dict[str, Any], *, validate: bool) -> dict[str, Any]:
        return self._expect(dict, self._request({"op": "call", "tool": tool, "args": args, "validate": validate}))

    def _drop_tests(self) -> None:
        with self._lock:
            if self._state is not None:
                self._state = self._state.model_copy(update={"tests": None})
            if self._harness is not None:
                self._harness._harness_load = None

    def _expect(self, kind: type, value: Any) -> Any:
        if not isinstance(value, kind):
            with self._lock:
                self._kill()
            raise SandboxError(f"sandbox protocol violated: expected {kind.__name__}, got {type(value).__name__}")
        return value

    # ---- process management -----------------------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "cpu_seconds": self.limits.cpu_seconds,
            "memory_mb": self.limits.memory_mb,
            "cpu_cap": self.limits.cpu_cap_seconds,
            "static_check": self._static_check,
            "validation": self._validation,
            "layers": {"drop_privileges": self.layers.drop_privileges, "audit_hook": self.layers.audit_hook},
        }
        if self.layers.worker_seccomp and (program := _worker_filter()):
            settings["seccomp"] = program
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            settings["uid"] = allocate_uid()
        if self._zygote is not None and self.walls is not None and self.walls.available:
            settings["own_namespaces"] = True  # a fork leaves the zygote's user/network/IPC/UTS namespaces
        return settings

    def _start(self) -> None:
        settings = self._settings()
        if self._zygote is not None:
            self._proc = self._zygote.spawn(settings)  # type: ignore[assignment]
        else:
            self._proc = self._popen(settings)
        self._buffer = bytearray()
        self._stderr.clear()
        self._host_pid, self._request_cpu, self._reply_cpu = None, None, None
        threading.Thread(target=self._drain_stderr, args=(self._proc,), daemon=True).start()
        hello = self._read_message(max(START_SECONDS, self.limits.wall_seconds), expect_id=None)
        if isinstance(self._proc, subprocess.Popen):
            self._sandbox_init = HostProcess.first_child_of(self._proc.pid)
        facts = hello.get("hello") if isinstance(hello, dict) else None
        if not isinstance(facts, dict):
            self._kill()
            raise SandboxError("sandbox worker did not greet with its isolation report")
        self.isolation = _isolation_report(facts, static_check=self._static_check, walls=self.walls,
                                           layers=self.layers, uid=settings.get("uid"))  # fmt: skip

    def _popen(self, settings: dict[str, Any]) -> subprocess.Popen[bytes]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        behind_walls = self.walls is not None and self.walls.available
        with seccomp_pipe(seccomp_filters().wall if behind_walls else b"\0" * 8) as fd:
            self._launch = (settings, fd if behind_walls else None)
            return subprocess.Popen(
                self._command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                close_fds=True,
                pass_fds=(fd,) if behind_walls else (),
                start_new_session=True,
            )

    def _command(self) -> list[str]:
        settings, seccomp_fd = self._launch
        return worker_command(self.walls, settings, seccomp_fd)

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        """Keep the last few stderr lines, each clipped: the child may write without end or without newlines.

        The thread owns the pipe: it closes it at EOF, so nothing closes it underneath a blocked read.
        """
        stream = proc.stderr
        if stream is None:
            return
        fd, partial = stream.fileno(), b""
        try:
            while chunk := os.read(fd, 1 << 16):
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()[:STDERR_LINE_CHARS]
                for line in lines[-STDERR_LINES:]:
                    self._stderr.append(line[:STDERR_LINE_CHARS].decode("utf-8", "replace").rstrip())
        except OSError:
            pass
        finally:
            if partial:
                self._stderr.append(partial.decode("utf-8", "replace").rstrip())
            stream.close()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._buffer = bytearray()
        if proc is None:
            return
        init, self._sandbox_init = self._sandbox_init, None
        if init is not None:  # the sandbox's PID-namespace init outlives a killed launcher; with it ends the sandbox
            init.kill()
        _kill_group(proc)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):  # stderr belongs to its reader thread
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _ensure_started(self) -> None:
        if self._closed:
            raise SandboxError("sandbox worker is closed")
        if self.alive:
            return
        self._kill()
        self._start()
        self.restarts += 1
        state = self._state
        if state is not None:
            self._send(
                {"op": "load", "source": state.tools_source, "db": state.db, "seed": state.seed,
                 "parameters": state.parameters}
            )  # fmt: skip
            for extension in state.extensions:
                self._send({"op": "extend", "source": extension})
            if state.tests is not None:
                self._send({"op": "load_tests", "source": state.tests[0], "schemas": state.tests[1]})
        if self._harness_load is not None:
            self._send(self._harness_load)

    def _request(self, payload: dict[str, Any], *, wall_seconds: float | None = None) -> Any:
        with self._lock:
            self._ensure_started()
            return self._send(payload, wall_seconds=wall_seconds)

    def _send(self, payload: dict[str, Any], *, wall_seconds: float | None = None, on_need: Any = None) -> Any:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise SandboxError("sandbox worker is not running")
        wall = self.limits.wall_seconds if wall_seconds is None else wall_seconds
        self._next_id += 1
        try:
            request = json.dumps({**payload, "id": self._next_id}).encode("utf-8") + b"\n"
        except (TypeError, ValueError, RecursionError) as exc:
            raise SandboxError(f"request cannot be sent to the sandbox: {type(exc).__name__}: {exc}") from None
        self._begin_request()
        try:
            proc.stdin.write(request)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        deadline = time.monotonic() + wall
        try:
            response = self._read_message(wall, expect_id=self._next_id)
            while on_need is not None and "need" in response:  # a test harness asking for the tools
                self._answer(on_need(response["need"]))
                response = self._read_message(max(deadline - time.monotonic(), 0.001), expect_id=self._next_id)
        finally:
            self._end_request()
        if response.get("ok") is True:
            return response.get("result")
        kind = str(response.get("fault", "error"))
        if kind != "violation":  # the child's state is suspect after anything but a rejected source
            self._kill()
        message = str(response.get("message", "sandbox fault"))[: STDERR_LINE_CHARS * 4]
        raise _FAULTS.get(kind, SandboxError)(message)

    def _answer(self, answer: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise SandboxError("sandbox worker is not running")
        try:
            proc.stdin.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def _read_message(self, wall: float, *, expect_id: int | None) -> dict[str, Any]:
        """One reply line, parsed and checked; anything malformed kills the worker and raises `SandboxError`."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        line = self._read_line(proc.stdout.fileno(), wall)
        problem = "reply holds an escaped surrogate (not valid Unicode)" if _SURROGATE_ESCAPE.search(line) else ""
        try:
            message = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            message, problem = None, f"undecodable reply ({type(exc).__name__})"
        if not problem and not isinstance(message, dict):
            problem = "reply is not a JSON object"
        elif not problem and _too_deep(message, MAX_DEPTH):
            problem = f"reply nested deeper than {MAX_DEPTH} levels"
        elif not problem and expect_id is not None and message.get("id") != expect_id:
            problem = "reply out of order (forged or stale protocol line)"
        if problem:
            self._kill()
            raise SandboxError(f"sandbox protocol violated: {problem}")
        return message  # type: ignore[return-value]

    def _read_line(self, fd: int, wall: float) -> bytes:
        """One line within `wall` seconds and `MAX_RESPONSE_BYTES`; each byte is scanned once."""
        deadline = time.monotonic() + wall
        buffer, scanned = self._buffer, 0
        while (end := buffer.find(b"\n", scanned)) < 0:
            scanned = len(buffer)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                raise SandboxTimeout(f"wall-clock limit of {wall:g}s exceeded")
            ready, _, _ = select.select([fd], [], [], min(remaining, POLL_SECONDS))
            if not ready:
                if self._proc is not None and self._proc.poll() is not None:  # dead, but a grandchild holds the pipe
                    raise self._died()
                self._enforce_limits()
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._died()
            buffer += chunk
            if len(buffer) > MAX_RESPONSE_BYTES:
                self._kill()
                raise SandboxError(f"sandbox reply larger than {MAX_RESPONSE_BYTES} bytes")
        line = bytes(buffer[:end])
        del buffer[: end + 1]
        return line

    # ---- limits enforced from this side --------------------------------------------------------------------
    def _usage(self) -> tuple[float, int] | None:
        """(CPU seconds, resident bytes) of the worker process, read from the host's /proc."""
        if not self.layers.parent_limits or self._proc is None:
            return None
        if self._host_pid is None:
            proc = self._proc
            self._host_pid = proc.host_pid() if hasattr(proc, "host_pid") else self.pid
        return host_usage(self._host_pid) if self._host_pid else None

    def _begin_request(self) -> None:
        """Note the worker's CPU time; one that used more than a request's allowance since the previous request
        began kept computing after its reply (only a hostile worker does that) and is killed."""
        usage = self._usage()
        previous, self._request_cpu = self._reply_cpu, usage[0] if usage else None
        self._reply_cpu = self._request_cpu
        allowance = self.limits.cpu_seconds + 2 * CPU_SLACK_SECONDS
        if usage and previous is not None and usage[0] - previous > allowance:
            self._kill()
            raise SandboxTimeout(f"CPU limit of {self.limits.cpu_seconds:g}s exceeded between requests "
                                 "(measured by the parent)")  # fmt: skip

    def _end_request(self) -> None:
        self._request_cpu = None

    def _enforce_limits(self) -> None:
        """Kill a worker past its CPU or memory limit, whatever it did to its own rlimits and signal handlers."""
        if self._request_cpu is None:
            return
        usage = self._usage()
        if usage is None:
            return
        cpu, rss = usage
        if cpu - self._request_cpu > self.limits.cpu_seconds + CPU_SLACK_SECONDS:
            self._kill()
            raise SandboxTimeout(f"CPU limit of {self.limits.cpu_seconds:g}s exceeded (measured by the parent)")
        if rss > self.limits.memory_mb * 1024 * 1024:
            self._kill()
            raise SandboxMemoryError(f"memory limit of {self.limits.memory_mb} MB exceeded (measured by the parent)")

    def _died(self) -> SandboxError:
        proc = self._proc
        try:
            code = proc.wait(timeout=5) if proc is not None else None
        except subprocess.TimeoutExpired:
            code = None
        time.sleep(0.01)  # let the stderr thread catch the last lines
        tail = " | ".join(list(self._stderr)[-5:])
        self._kill()
        died_of = _signal_of(code)
        if died_of == signal.SIGXCPU:
            return SandboxTimeout(f"CPU limit of {self.limits.cpu_seconds:g}s exceeded")
        if "MemoryError" in tail or died_of == signal.SIGKILL:
            return SandboxMemoryError(f"worker died under the {self.limits.memory_mb} MB memory limit: {tail}")
        logger.warning("sandbox worker died with code %s: %s", code, tail)
        return SandboxError(f"sandbox worker died (exit code {code}): {tail}")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group (it leads a session of its own), then the child itself."""
    if not isinstance(proc, subprocess.Popen):  # a zygote's fork: the zygote kills it
        proc.kill()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
    if proc.poll() is None:
        try:
            proc.kill()
        except OSError:
            pass


def _signal_of(code: int | None) -> int | None:
    """The signal that ended the worker: negative return codes, or 128+N mirrored by the PID-namespace init."""
    if code is None:
        return None
    if code < 0:
        return -code
    return code - 128 if code > 128 else None


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            if level > limit:
                return True
            stack.extend((item, level + 1) for item in node)
    return False


def _worker_filter() -> str:
    """The worker filter as hex, '' where libseccomp is missing (weak mode)."""
    try:
        return seccomp_filters().worker.hex()
    except (OSError, ImportError, ValueError):
        return ""


def worker_command(walls: KernelWalls | None, settings: dict[str, Any], seccomp_fd: int | None) -> list[str]:
    """The command that starts `child.py` with `settings`: behind the kernel walls, or (weak mode, or a layer
    turned off by a test) in the network and PID namespaces `unshare` gives where permitted."""
    if walls is not None and walls.available:
        wall = ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
        return [*walls.prefix, *wall, walls.interpreter, "-S", "-s", "-B", walls.child_script, json.dumps(settings)]
    prefix, _ = namespace_prefix()
    return [*prefix, sys.executable, "-s", "-P", "-B", str(CHILD_SCRIPT), json.dumps(settings)]


def _isolation_report(
    facts: dict[str, Any],
    *,
    static_check: bool,
    walls: KernelWalls | None,
    layers: SandboxLayers,
    uid: int | None,
) -> dict[str, str]:
    """What the child says it applied, checked against this process (namespaces are compared, not assumed)."""
    _, namespaces = namespace_prefix()
    behind_walls = walls is not None and walls.available
    fallback = walls.reason if walls is not None else "kernel walls off (layer test)"
    shared = f"shared ({namespaces})" if not behind_walls else "shared"

    def new(kind: str) -> bool:
        theirs, ours = facts.get(f"{kind}_ns"), _own_namespace(kind)
        return bool(theirs) and bool(ours) and theirs != ours

    privileges = str(facts.get("privileges", "unknown"))[:200]
    if uid is not None and facts.get("uid") != uid and layers.drop_privileges:
        privileges = f"root: the worker did not switch to its uid {uid} ({privileges})"
    return {
        "platform": sys.platform,
        "static_policy": "on" if static_check else "off (red-team test)",
        "audit_hook": "installed" if facts.get("audit_hook") is True else "missing",
        "privileges": privileges,
        "hard_rlimits": "lowered to soft" if facts.get("rlimits_hard_equal_soft") is True else "not all lowered",
        "kernel_walls": walls.reason if behind_walls else f"off: {fallback}",
        "user_namespace": "new"
        if behind_walls and walls.user_namespace
        else "host (uid per worker)"
        if uid
        else "host",
        "mount_namespace": "new, read-only minimal root" if behind_walls and new("mnt") else shared,
        "network_namespace": "new" if new("net") else shared,
        "pid_namespace": "new" if new("pid") else shared,
        "ipc_namespace": "new" if behind_walls else shared,
        "namespaces_of_its_own": str(
            facts.get("own_namespaces") or ("all (a sandbox of its own)" if behind_walls else "none")
        ),
        "seccomp": ("wall filter + " if behind_walls else "") + str(facts.get("seccomp", "none")),
        "parent_limits": "CPU and memory enforced by the parent" if layers.parent_limits else "off (layer test)",
        "dumpable": "no" if facts.get("non_dumpable") is True else "yes",
    }


def _own_namespace(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""
