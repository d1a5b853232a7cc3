"""`SandboxPool`: warm sandbox workers reused across environments (unloaded between uses, recycled after N uses)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gustforge.errors import SandboxError
from gustforge.sandbox.worker import SandboxLimits, SandboxWorker

__all__ = ["SandboxPool"]


class SandboxPool:
    """Up to `size` workers; `acquire()` lends one with nothing loaded and takes it back afterwards.

    Isolation between environments that share a worker rests on the child's design: each load gets a fresh
    namespace, fresh builtins and fresh read-only module proxies, and attribute stores are forbidden, so one tools
    module cannot leave state behind for the next. Workers are recycled after `max_uses` loans anyway.
    """

    def __init__(self, size: int = 2, limits: SandboxLimits | None = None, *, max_uses: int = 50) -> None:
        if size < 1 or max_uses < 1:
            raise SandboxError("SandboxPool needs size >= 1 and max_uses >= 1")
        self.size = size
        self.limits = limits or SandboxLimits()
        self.max_uses = max_uses
        self._idle: list[tuple[SandboxWorker, int]] = []
        self._started = 0
        self._closed = False
        self._cond = threading.Condition()

    def warm(self) -> None:
        """Start every worker now instead of on first use."""
        with self._cond:
            while self._started < self.size:
                self._idle.append((SandboxWorker(self.limits), 0))
                self._started += 1

    @contextmanager
    def acquire(self, *, seed: int = 0) -> Iterator[SandboxWorker]:
        """Lend a worker (blocks while all are busy); it is unloaded when returned."""
        worker, uses = self._take()
        worker.seed = seed
        try:
            yield worker
        finally:
            self._give_back(worker, uses + 1)

    def _take(self) -> tuple[SandboxWorker, int]:
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("SandboxPool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._started < self.size:
                    self._started += 1
                    break
                self._cond.wait()
        try:
            return SandboxWorker(self.limits), 0
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _give_back(self, worker: SandboxWorker, uses: int) -> None:
        keep = not self._closed and uses < self.max_uses and worker.alive
        if keep:
            try:
                worker.unload()
            except SandboxError:
                keep = False
        with self._cond:
            if keep and not self._closed:
                self._idle.append((worker, uses))
            else:
                worker.close()
                self._started -= 1
            self._cond.notify()

    def close(self) -> None:
        """Stop every idle worker; workers still lent out stop when returned."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._started -= len(idle)
            self._cond.notify_all()
        for worker, _ in idle:
            worker.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
