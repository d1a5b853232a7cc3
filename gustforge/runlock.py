"""One build at a time per run folder: an exclusive `flock` on `OUT/.gust.lock`, held for the whole run.

Two builds writing one `--out` interleave their stage outputs and each prints a summary of files the other may
have replaced. The lock refuses the second one at once, naming the holder. The kernel drops a `flock` when its
process dies (SIGKILL included), so a killed build never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gustforge.errors import RunLockedError

__all__ = ["LOCK_NAME", "run_lock"]

LOCK_NAME = ".gust.lock"


def _holder(handle: int) -> str:
    try:
        info = json.loads(os.pread(handle, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError):
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid', '?')} (`gust {info.get('command', '?')}`, since {since})"


@contextlib.contextmanager
def run_lock(out: Path, command: str) -> Iterator[None]:
    """Hold the run folder's lock while the body runs.

    Raises:
        RunLockedError: another build or stage run holds the lock on this folder.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    handle = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(
                f"{out} is in use by {_holder(handle)}; wait for it to finish or build into another --out"
            ) from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps({"pid": os.getpid(), "command": command, "since": time.time()}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(handle, 0)
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)
