"""Workers forked from the zygote (what `SandboxPool` uses): as hardened, as limited and as isolated as a worker
started directly, and cheap enough for one fresh process per environment."""

from __future__ import annotations

import json
import os
import signal

import pytest

from gustforge.errors import SandboxMemoryError, SandboxTimeout
from gustforge.sandbox import SandboxLimits, SandboxWorker
from gustforge.sandbox.zygote import Zygote
from tests.gustforge.redteam_payloads import LAYER2

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4)
OK = "def ok(db):\n    return {'status': 'success', 'message': 'ok'}\n"


@pytest.fixture()
def zygote():
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


def test_forked_workers_are_fresh_hardened_and_cheap(zygote: Zygote) -> None:
    first = SandboxWorker(LIMITS, zygote=zygote)  # starts the zygote
    with SandboxWorker(LIMITS, zygote=zygote) as second, first:  # how fast a fork is: bench/sandbox.py
        assert first.pid != second.pid
        for worker in (first, second):
            assert worker.isolation["audit_hook"] == "installed"
            assert worker.isolation["hard_rlimits"] == "lowered to soft"
        if os.geteuid() == 0:  # a uid of each worker's own
            assert first.isolation["privileges"] != second.isolation["privileges"]
            assert first.isolation["privileges"].startswith("dropped from root")
        first.load(OK, {"a": 1})
        assert first.call("ok", {})["message"] == "ok" and second.get_db() == {}


def test_limits_hold_in_a_forked_worker(zygote: Zygote) -> None:
    generous_wall = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=30)  # CPU, not wall, must end it
    with SandboxWorker(generous_wall, zygote=zygote) as worker:
        worker.load(OK + "def spin(db):\n    while True:\n        pass\ndef bomb(db):\n    x = 'a' * 10**10\n", {})
        with pytest.raises(SandboxTimeout, match="CPU limit"):
            worker.call("spin", {})
        with pytest.raises(SandboxMemoryError):
            worker.call("bomb", {})
        assert worker.call("ok", {})["message"] == "ok"  # restarted by a new fork, tools reloaded
        assert worker.restarts == 2


def test_second_layer_holds_in_a_forked_worker(zygote: Zygote, tmp_path) -> None:
    marker = tmp_path / "marker"
    tmp_path.chmod(0o777)
    names = (
        "real_open_secret",
        "real_open_marker",
        "real_system",
        "real_fork",
        "real_import_socket",
        "real_kill_parent",
    )
    with SandboxWorker(LIMITS, static_check=False, zygote=zygote) as worker:
        for name in names:
            source = LAYER2[name].replace("MARKER", str(marker)).replace("SECRET", "/etc/hostname")
            source = source.replace("PORT", "9")
            worker.load(source, {})
            out = worker.call("attack", {})
            assert "PermissionError: sandbox: " in json.dumps(out), (name, out)
    assert not marker.exists()


def test_a_dead_zygote_is_restarted(zygote: Zygote) -> None:
    with SandboxWorker(LIMITS, zygote=zygote) as worker:
        worker.load(OK, {})
        assert zygote._proc is not None
        os.killpg(zygote._proc.pid, signal.SIGKILL)
        zygote._proc.wait()
        with SandboxWorker(LIMITS, zygote=zygote) as fresh:  # a new zygote forks it
            fresh.load(OK, {})
            assert fresh.call("ok", {})["message"] == "ok"
