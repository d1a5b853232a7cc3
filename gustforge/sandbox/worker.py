"""`SandboxWorker`: the parent side of the sandbox. Untrusted code runs only in its child process (`child.py`).

The child is a fresh `python -s -P -B` process with a clean environment (`PYTHONHASHSEED=0` so set iteration order
is reproducible), speaking JSON lines over stdin/stdout. The parent enforces the wall-clock limit, maps child
faults to `SandboxTimeout` / `SandboxMemoryError` / `SandboxViolation` / `SandboxError`, and restarts the child
after a fault: the restarted child holds the last loaded tools (and tests) with the *initial* DB again.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.models import TestReport
from gustforge.errors import SandboxError, SandboxMemoryError, SandboxTimeout, SandboxViolation
from gustforge.sandbox.check import check_source

__all__ = ["SandboxLimits", "SandboxWorker", "CHILD_SCRIPT", "MAX_RESPONSE_BYTES"]

logger = logging.getLogger(__name__)

CHILD_SCRIPT = Path(__file__).with_name("child.py")
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a runaway output must not exhaust the parent
_FAULTS: dict[str, type[SandboxError]] = {
    "violation": SandboxViolation,
    "memory": SandboxMemoryError,
    "error": SandboxError,
}


class SandboxLimits(BaseModel):
    """Resource limits of one sandbox request (CPU and wall time per request; memory for the whole process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_seconds: float = Field(default=5, gt=0, description="CPU time per request (rounded up to whole seconds).")
    memory_mb: int = Field(default=512, ge=64, description="Address-space limit of the worker process.")
    wall_seconds: float = Field(default=10, gt=0, description="Wall-clock time per request.")


class _State(BaseModel):
    """What the worker must re-create after a restart."""

    model_config = ConfigDict(frozen=True)

    tools_source: str
    db: dict[str, Any]
    seed: int
    tests: tuple[str, dict[str, Any]] | None = None


class SandboxWorker:
    """One sandbox process holding one tools module and its live DB. Requests are serialised by a lock.

    Example:
        >>> with SandboxWorker() as worker:                                    # doctest: +SKIP
        ...     worker.load("def ping(db):\\n    return {'status': 'success', 'message': 'pong'}", {})
        ['ping']
    """

    def __init__(self, limits: SandboxLimits | None = None, *, seed: int = 0) -> None:
        self.limits = limits or SandboxLimits()
        self.seed = seed
        self.restarts = 0
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._stderr: deque[str] = deque(maxlen=40)
        self._state: _State | None = None
        self._closed = False
        self._start()

    # ---- public API -------------------------------------------------------------------------------------------
    def load(self, tools_source: str, db: dict[str, Any]) -> list[str]:
        """Check and exec a tools module with `db` as its live DB; returns its public function names.

        Raises:
            SandboxViolation: the source breaks the policy.
            SandboxError: the module fails at import; SandboxTimeout / SandboxMemoryError on limits.
        """
        check_source(tools_source)
        with self._lock:
            self._state = None
            names = self._request({"op": "load", "source": tools_source, "db": db, "seed": self.seed})
            self._state = _State(tools_source=tools_source, db=db, seed=self.seed)
        return list(names)

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run `tool(db, **args)` on the live DB. Tool exceptions come back as `{"status": "error", ...}`."""
        return dict(self._request({"op": "call", "tool": tool, "args": args}))

    def get_db(self) -> dict[str, Any]:
        """The live DB (a JSON copy)."""
        return dict(self._request({"op": "get_db"}))

    def set_db(self, db: dict[str, Any]) -> None:
        """Replace the live DB (the tools module keeps its state)."""
        self._request({"op": "set_db", "db": db})

    def reset(self) -> None:
        """Restore the initial DB, re-exec the tools module and reseed `random`/`uuid4`."""
        self._request({"op": "reset"})

    def unload(self) -> None:
        """Forget the tools, tests and DB (used by `SandboxPool` between environments)."""
        with self._lock:
            self._state = None
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

    def close(self) -> None:
        """Stop the child process; the worker cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._kill()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> SandboxWorker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:  # last resort; callers should close()
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    # ---- used by gustforge.sandbox.testing ---------------------------------------------------------------------
    def _load_tests(self, tests_source: str, schemas: dict[str, Any]) -> list[str]:
        check_source(tests_source)
        with self._lock:
            if self._state is None:
                raise SandboxError("load a tools module before running tests")
            names = self._request({"op": "load_tests", "source": tests_source, "schemas": schemas})
            self._state = self._state.model_copy(update={"tests": (tests_source, schemas)})
        return list(names)

    def _run_test(self, name: str, *, wall_seconds: float) -> dict[str, Any]:
        return dict(self._request({"op": "run_test", "name": name}, wall_seconds=wall_seconds))

    def _drop_tests(self) -> None:
        with self._lock:
            if self._state is not None:
                self._state = self._state.model_copy(update={"tests": None})

    # ---- process management -----------------------------------------------------------------------------------
    def _start(self) -> None:
        settings = json.dumps({"cpu_seconds": self.limits.cpu_seconds, "memory_mb": self.limits.memory_mb})
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        self._proc = subprocess.Popen(
            [sys.executable, "-s", "-P", "-B", str(CHILD_SCRIPT), settings],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        self._buffer = b""
        self._stderr.clear()
        threading.Thread(target=self._drain_stderr, args=(self._proc,), daemon=True).start()

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stderr is None:
            return
        for line in proc.stderr:
            self._stderr.append(line.decode("utf-8", "replace").rstrip())

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

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
            self._send({"op": "load", "source": state.tools_source, "db": state.db, "seed": state.seed})
            if state.tests is not None:
                self._send({"op": "load_tests", "source": state.tests[0], "schemas": state.tests[1]})

    def _request(self, payload: dict[str, Any], *, wall_seconds: float | None = None) -> Any:
        with self._lock:
            self._ensure_started()
            return self._send(payload, wall_seconds=wall_seconds)

    def _send(self, payload: dict[str, Any], *, wall_seconds: float | None = None) -> Any:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise SandboxError("sandbox worker is not running")
        wall = self.limits.wall_seconds if wall_seconds is None else wall_seconds
        try:
            proc.stdin.write(json.dumps(payload).encode("utf-8") + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None
        line = self._read_line(proc.stdout.fileno(), wall)
        response = json.loads(line)
        if response.get("ok"):
            return response.get("result")
        kind = str(response.get("fault", "error"))
        if kind != "violation":  # the child's state is suspect after anything but a rejected source
            self._kill()
        raise _FAULTS.get(kind, SandboxError)(str(response.get("message", "sandbox fault")))

    def _read_line(self, fd: int, wall: float) -> bytes:
        deadline = time.monotonic() + wall
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill()
                raise SandboxTimeout(f"wall-clock limit of {wall:g}s exceeded")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._died()
            self._buffer += chunk
            if len(self._buffer) > MAX_RESPONSE_BYTES:
                self._kill()
                raise SandboxError(f"sandbox response larger than {MAX_RESPONSE_BYTES} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _died(self) -> SandboxError:
        proc = self._proc
        code = proc.wait() if proc is not None else None
        time.sleep(0.01)  # let the stderr thread catch the last lines
        tail = " | ".join(list(self._stderr)[-5:])
        self._kill()
        if code is not None and code < 0 and -code == signal.SIGXCPU:
            return SandboxTimeout(f"CPU limit of {self.limits.cpu_seconds:g}s exceeded")
        if "MemoryError" in tail or (code is not None and -code == signal.SIGKILL):
            return SandboxMemoryError(f"worker died under the {self.limits.memory_mb} MB memory limit: {tail}")
        logger.warning("sandbox worker died with code %s: %s", code, tail)
        return SandboxError(f"sandbox worker died (exit code {code}): {tail}")
