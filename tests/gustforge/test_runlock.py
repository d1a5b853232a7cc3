"""One build per run folder: the second is refused with the holder named; a killed holder frees the lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gustforge.errors import RunLockedError
from gustforge.runlock import LOCK_NAME, run_lock


def test_second_holder_is_refused_and_named(tmp_path: Path) -> None:
    with run_lock(tmp_path, "build"):
        with pytest.raises(RunLockedError, match=rf"in use by pid {os.getpid()} \(`gust build`") as refused:
            with run_lock(tmp_path, "stage export"):
                pass
        assert "another --out" in str(refused.value)
    with run_lock(tmp_path, "stage export"):  # released when the first run ended
        pass


def test_lock_of_a_sigkilled_process_is_free(tmp_path: Path) -> None:
    script = (
        "import sys, time; from pathlib import Path; from gustforge.runlock import run_lock\n"
        "with run_lock(Path(sys.argv[1]), 'build'):\n    print('held', flush=True); time.sleep(120)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid}"):
            with run_lock(tmp_path, "build"):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / LOCK_NAME).exists()  # the file stays; the kernel dropped the lock with its process
    with run_lock(tmp_path, "build"):
        pass
