"""The parent against a hostile child: a worker process that a bypass has taken over and that now attacks the parent.

Each test swaps the real child for a small script that greets like the real one and then misbehaves: huge lines,
deep nesting, undecodable bytes, forged replies, a grandchild that holds stderr open. The parent must answer with
a `SandboxError` within its limits, keep its memory bounded and leave no process behind.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import pytest

from gustforge.errors import SandboxError, SandboxTimeout
from gustforge.sandbox import SandboxLimits, SandboxWorker

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=3)
_GREET = 'import os, sys, time, json\nos.write(1, b\'{"hello": {"audit_hook": true}}\\n\')\nsys.stdin.readline()\n'


class HostileWorker(SandboxWorker):
    """A worker whose child runs `script` (after the greeting) instead of `child.py`."""

    def __init__(self, script: str) -> None:
        self.script = _GREET + script
        super().__init__(LIMITS, static_check=False)

    def _command(self) -> list[str]:
        return [sys.executable, "-c", self.script]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "script,match",
    [
        ('os.write(1, b\'{"ok": true, "id": 1, "result": "\' + b\'x\' * (40 << 20))\n', "larger than"),
        ("os.write(1, b'[' * 500000 + b'\\n')\n", "protocol violated"),
        ("os.write(1, b'{\"ok\": true, \"id\": 1, \"result\": ' + b'[' * 500 + b']' * 500 + b'}\\n')\n", "deeper"),
        ("os.write(1, b'\\xff\\xfe\\xfd\\n')\n", "undecodable"),
        ("os.write(1, b'[1, 2]\\n')\n", "not a JSON object"),
        ('os.write(1, b\'{"ok": true, "id": 999, "result": "forged"}\\n\')\n', "out of order"),
        ('os.write(1, b\'{"ok": true, "id": 1, "result": [1]}\\n\')\n', "expected dict"),
        ('os.write(1, b\'{"ok": true, "id": 1, "result": {"m": "\\\\ud800"}}\\n\')\n', "surrogate"),
    ],
    ids=[
        "huge_reply",
        "very_deep_reply",
        "deep_reply",
        "undecodable",
        "not_an_object",
        "forged_id",
        "wrong_type",
        "surrogate",
    ],
)
def test_malformed_replies_are_sandbox_errors(script: str, match: str) -> None:
    before = _rss_mb()
    with HostileWorker(script + "time.sleep(30)\n") as worker:
        with pytest.raises(SandboxError, match=match):
            worker.call("attack", {})
        assert not worker.alive  # killed, not trusted again
    assert _rss_mb() - before < 200


def test_huge_stderr_without_newlines_keeps_the_parent_small() -> None:
    before = _rss_mb()
    script = "for _ in range(200):\n    os.write(2, b'x' * (1 << 20))\nsys.exit(1)\n"
    with HostileWorker(script) as worker:
        with pytest.raises(SandboxError) as info:
            worker.call("attack", {})
    assert _rss_mb() - before < 100
    assert len(str(info.value)) < 10_000


def test_grandchild_holding_stderr_neither_hangs_nor_survives(tmp_path: Path) -> None:
    """The child forks a grandchild that keeps stderr (and stdout) open, then hangs: the wall limit still applies,
    the whole process group dies, and closing the worker does not wait for the pipe."""
    pid_file = tmp_path / "grandchild.pid"
    script = (
        f"pid = os.fork()\nif pid == 0:\n    time.sleep(120)\n    os._exit(0)\n"
        f"open({str(pid_file)!r}, 'w').write(str(pid))\ntime.sleep(120)\n"
    )
    with HostileWorker(script) as worker:
        with pytest.raises(SandboxTimeout):  # the wall-clock limit ended it (the pipes are still held)
            worker.call("attack", {})
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_child_dies_while_an_escaped_grandchild_holds_stderr(tmp_path: Path) -> None:
    """A grandchild that left the process group (setsid) keeps stderr open after the child exits: the parent
    reports the death at once instead of waiting for the pipe to close."""
    pid_file = tmp_path / "grandchild.pid"
    script = (
        f"pid = os.fork()\nif pid == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
        f"open({str(pid_file)!r}, 'w').write(str(pid))\nos._exit(3)\n"
    )
    try:
        with HostileWorker(script) as worker:
            with pytest.raises(SandboxError, match="died"):  # "died", not a wall-clock timeout
                worker.call("attack", {})
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_worker_that_does_not_greet_is_refused() -> None:
    class Silent(SandboxWorker):
        def _command(self) -> list[str]:
            return [sys.executable, "-c", "import os; os.write(1, b'{\"ok\": true}\\n')"]

    with pytest.raises(SandboxError, match="greet"):
        Silent(LIMITS)


def test_real_worker_reports_its_isolation() -> None:
    with SandboxWorker(LIMITS) as worker:
        report = worker.isolation
    assert report["audit_hook"] == "installed"
    assert report["hard_rlimits"] == "lowered to soft"
    if os.geteuid() == 0:
        assert report["privileges"].startswith("dropped from root")
    assert set(report) >= {"network_namespace", "pid_namespace", "platform"}
    json.dumps(report)
