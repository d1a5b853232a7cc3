"""Clean interruption of a CLI command that runs a flow: Ctrl-C / SIGTERM → one line, exit 130 within seconds.

Order on a signal: the flow is interrupted first (KeyboardInterrupt in the main thread; Prefect records the run
as crashed while its server still answers), then the local Prefect server is stopped, then the process exits
without waiting for shard threads. The server runs in its own session (see `flows.prefect_env.local_server`), so
the terminal's Ctrl-C reaches only this process and never kills the server under a running flow.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypeVar

__all__ = ["INTERRUPTED_LINE", "EXIT_INTERRUPTED", "interruptible", "on_local_server"]

T = TypeVar("T")

INTERRUPTED_LINE = "interrupted; rerun the same command to resume"
EXIT_INTERRUPTED = 130
_GRACE_SECONDS = 6.0  # the whole exit stays well under 10 s even if a flow, the drain or the server hangs


def _exit_now(code: int = EXIT_INTERRUPTED) -> None:
    try:
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.stderr.flush()
    finally:
        os._exit(code)


@contextmanager
def interruptible(
    cleanup: Callable[[], None] = lambda: None, abort: Callable[[], None] = lambda: None
) -> Iterator[None]:
    """Run the body; on SIGINT/SIGTERM interrupt it, run `cleanup` (stop the server), print one line, exit 130.

    A second signal, or a body/cleanup that takes longer than a few seconds, runs `abort` (kill the server without
    waiting) and exits at once.
    """

    def give_up() -> None:
        try:
            abort()
        finally:
            _exit_now()

    if threading.current_thread() is not threading.main_thread():  # signals only reach the main thread
        yield
        return
    state = {"signalled": False}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if state["signalled"]:
            give_up()
        state["signalled"] = True
        logging.disable(logging.CRITICAL)  # no crash reports or retry warnings from here on
        watchdog = threading.Timer(_GRACE_SECONDS, give_up)
        watchdog.daemon = True
        watchdog.start()
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        state["signalled"] = True
        logging.disable(logging.CRITICAL)
        try:
            cleanup()
        finally:
            _exit_now()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def on_local_server(body: Callable[[], T]) -> T:
    """Run `body()` (which runs a flow) on a `LocalServer` started for it, interruptibly (see `interruptible`)."""
    from flows.prefect_env import LocalServer

    server = LocalServer()
    with interruptible(cleanup=server.stop, abort=server.kill):
        server.start()
        try:
            return body()
        finally:
            server.stop()
