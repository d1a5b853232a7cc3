"""`Zygote`: a warmed template process that forks one fresh sandbox worker per environment.

A worker's start is mostly imports (jsonschema alone is ~80 ms of CPU); a pool that gives every environment a
fresh process pays it per environment. The zygote (`child.py` in zygote mode, in the same namespaces a worker
would get) imports and warms everything once and never runs untrusted code; each `spawn` forks it, and the fork
hardens itself exactly like a directly started worker (privilege drop, hard rlimits, audit hook) before it greets.
The parent passes the worker's pipes over a SOCK_SEQPACKET socket and asks the zygote for exit codes and kills.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from gustforge.errors import SandboxError
from gustforge.sandbox.walls import KernelWalls, require_walls, seccomp_filters, seccomp_pipe

if TYPE_CHECKING:
    from gustforge.sandbox.worker import SandboxLayers

__all__ = ["Zygote", "host_usage"]
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_REPLY_SECONDS = 60.0  # a fork or a status query; generous for a loaded machine


class ZygoteProcess:
    """The parent's handle on a forked worker, with the subset of `subprocess.Popen` that `SandboxWorker` uses."""

    def __init__(
        self, zygote: Zygote, pid: int, generation: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]
    ) -> None:
        self.zygote, self.pid, self.generation = zygote, pid, generation
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        # Only the worker holds the write end of its stdout pipe: while that end is open, the worker runs, and the
        # zygote (one process for every worker, behind a lock) need not be asked on every request.
        if self.returncode is None and self._hung_up():
            self.returncode = self.zygote.status(self.pid, self.generation)
        return self.returncode

    def _hung_up(self) -> bool:
        try:
            probe = select.poll()
            probe.register(self.stdout.fileno(), 0)  # hang-ups and errors are reported whatever the mask
            events = probe.poll(0)
        except (OSError, ValueError):  # closed here
            return True
        return any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, mask in events)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("sandbox worker", timeout or 0)
            time.sleep(0.005)
        return code

    def kill(self) -> None:
        self.zygote.kill(self.pid, self.generation)

    def host_pid(self) -> int | None:
        """This worker's pid on the host (the parent measures its CPU and memory there)."""
        return self.zygote.host_pid(self.pid, self.generation)

    kill_group = kill


class Zygote:
    """One zygote process, started on first use and restarted if it dies. Thread-safe.

    Args:
        layers: The walls of every worker it forks (the kernel walls wrap the zygote itself).
    """

    def __init__(self, layers: SandboxLayers | None = None) -> None:
        from gustforge.sandbox.worker import SandboxLayers, namespace_prefix  # local: worker imports this module

        self.layers = layers or SandboxLayers()
        self.walls: KernelWalls | None = require_walls() if self.layers.kernel_walls else None
        behind_walls = self.walls is not None and self.walls.available
        self.prefix = () if behind_walls else namespace_prefix()[0]
        self._host_zygote: int | None = None
        self._sandbox_init: HostProcess | None = None  # the PID namespace's init: killing it ends every worker
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._closed = False
        self._generation = 0  # bumped at every (re)start: pids of an earlier zygote mean nothing to a new one

    def spawn(self, settings: dict[str, Any]) -> ZygoteProcess:
        """Fork a fresh worker with `settings`; returns its handle (the worker greets on its stdout)."""
        ends = [os.pipe() for _ in range(3)]  # (read, write) for the worker's stdin, stdout, stderr
        child_fds = [ends[0][0], ends[1][1], ends[2][1]]
        try:
            with self._lock:
                self._ensure()
                reply = self._call({"op": "spawn", "settings": settings}, child_fds)
                generation = self._generation
        except BaseException:
            for fd in (ends[0][1], ends[1][0], ends[2][0]):
                os.close(fd)
            raise
        finally:
            for fd in child_fds:
                os.close(fd)
        pid = int(reply["pid"])
        return ZygoteProcess(
            self, pid, generation, os.fdopen(ends[0][1], "wb"), os.fdopen(ends[1][0], "rb"), os.fdopen(ends[2][0], "rb")
        )

    def status(self, pid: int, generation: int) -> int | None:
        """Exit code of worker `pid` (negative for a signal), None while it runs."""
        with self._lock:
            if not self._running() or generation != self._generation:
                return -signal.SIGKILL  # its namespace (or the kill below) took the worker with it
            code = self._call({"op": "status", "pid": pid}).get("code")
        return None if code is None else int(code)

    def kill(self, pid: int, generation: int) -> None:
        """SIGKILL worker `pid`'s process group."""
        with self._lock:
            if self._running() and generation == self._generation:
                self._call({"op": "kill", "pid": pid})
            elif not self._pid_namespace() and generation == self._generation:  # pids are host pids
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def host_pid(self, pid: int, generation: int) -> int | None:
        """The host pid of worker `pid` (a pid in the zygote's namespace), None once it is gone."""
        zygote = self._host_zygote
        if generation != self._generation or zygote is None:
            return None
        if not self._pid_namespace():
            return pid
        for child in _children(zygote):
            if _namespace_pid(child) == pid:
                return child
        return None

    def _pid_namespace(self) -> bool:
        return bool(self.prefix) or (self.walls is not None and self.walls.available)

    def close(self) -> None:
        """Stop the zygote; with PID namespaces every worker it forked dies with it."""
        with self._lock:
            self._closed = True
            self._stop()

    # ---- internals (under the lock) ---------------------------------------------------------------------------
    def _running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _ensure(self) -> None:
        if self._closed:
            raise SandboxError("sandbox zygote is closed")
        if self._running():
            return
        self._stop()
        self._generation += 1
        from gustforge.sandbox.worker import worker_command  # local: worker imports this module

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        settings = {"zygote_fd": child.fileno()}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        behind_walls = self.walls is not None and self.walls.available
        try:
            with seccomp_pipe(seccomp_filters().wall if behind_walls else b"\0" * 8) as fd:
                self._proc = subprocess.Popen(
                    worker_command(self.walls, settings, fd if behind_walls else None),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    cwd="/",
                    pass_fds=(child.fileno(), fd) if behind_walls else (child.fileno(),),
                    start_new_session=True,
                )
        finally:
            child.close()
        self._sock = parent
        parent.settimeout(_REPLY_SECONDS)
        try:
            ready = json.loads(parent.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            self._stop()
            raise SandboxError(f"sandbox zygote did not start: {exc}") from None
        if not ready.get("ready"):
            self._stop()
            raise SandboxError("sandbox zygote did not start")
        self._host_zygote = _leaf(self._proc.pid)
        self._sandbox_init = HostProcess.first_child_of(self._proc.pid)

    def _call(self, message: dict[str, Any], fds: list[int] | None = None) -> dict[str, Any]:
        sock = self._sock
        if sock is None:
            raise SandboxError("sandbox zygote is not running")
        try:
            socket.send_fds(sock, [json.dumps(message).encode()], fds or [])
            reply = json.loads(sock.recv(1 << 16) or b"null")
        except (OSError, ValueError) as exc:
            self._stop()
            raise SandboxError(f"sandbox zygote failed: {exc}") from None
        if not isinstance(reply, dict):
            self._stop()
            raise SandboxError("sandbox zygote died")
        return reply

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if proc is None:
            return
        init, self._sandbox_init, self._host_zygote = self._sandbox_init, None, None
        if init is not None:  # it outlives a killed bubblewrap; with it ends its PID namespace, every worker included
            init.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _leaf(pid: int) -> int:
    """Follow single children down (bubblewrap -> its PID-namespace init -> the interpreter)."""
    while len(children := _children(pid)) == 1:
        pid = children[0]
    return pid


def _namespace_pid(pid: int) -> int | None:
    """`pid`'s pid in its innermost PID namespace (the last `NSpid` field)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def host_usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, resident bytes) of host process `pid` from /proc, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS, int(fields[21]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


class HostProcess:
    """A host process named by pid *and* start time, so a pid the kernel has since reused is never signalled."""

    __slots__ = ("pid", "start")

    def __init__(self, pid: int, start: str) -> None:
        self.pid, self.start = pid, start

    @staticmethod
    def _start_of(pid: int) -> str | None:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            return stat[stat.rindex(b")") + 2 :].split()[19].decode()
        except (OSError, ValueError, IndexError):
            return None

    @classmethod
    def first_child_of(cls, pid: int) -> HostProcess | None:
        children = _children(pid)
        if not children:
            return None
        start = cls._start_of(children[0])
        return cls(children[0], start) if start is not None else None

    def kill(self) -> None:
        if self._start_of(self.pid) != self.start:
            return  # already gone (and maybe its pid reused)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
