"""`SandboxPool`: warm sandbox workers, one fresh process per environment.

A worker is never lent to a second environment: whatever one environment's code left in its process (a class
registered with an ABC, a shared default argument, garbage with a looping finaliser) cannot reach the next. A
worker returned by an environment is kept only for that same environment (`owner`, e.g. a hash of its tools and
DB: `tdg` replays many sessions of one env); otherwise it is closed and a fresh one is started in the background,
so a new environment still finds a warm process. Fresh workers are forked from a `Zygote` (a warmed template
process that never runs untrusted code), which makes a fresh process per environment cheap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gustforge.errors import SandboxError
from gustforge.sandbox.worker import SandboxLayers, SandboxLimits, SandboxWorker
from gustforge.sandbox.zygote import Zygote

__all__ = ["SandboxPool"]


class _Slot:
    __slots__ = ("worker", "uses", "owner")

    def __init__(self, worker: SandboxWorker, uses: int = 0, owner: str | None = None) -> None:
        self.worker, self.uses, self.owner = worker, uses, owner


class SandboxPool:
    """Up to `size` workers; `acquire(owner=...)` lends one that no other owner has used, with nothing loaded.

    Args:
        size: Most workers alive at once (idle, lent or starting).
        limits: Limits of every worker.
        max_uses: A worker kept for one owner is recycled after this many loans anyway.
        layers: Which walls are up (all by default; only tests and benchmarks turn one off).
    """

    def __init__(
        self,
        size: int = 2,
        limits: SandboxLimits | None = None,
        *,
        max_uses: int = 50,
        layers: SandboxLayers | None = None,
    ) -> None:
        if size < 1 or max_uses < 1:
            raise SandboxError("SandboxPool needs size >= 1 and max_uses >= 1")
        self.size = size
        self.limits = limits or SandboxLimits()
        self.max_uses = max_uses
        self._idle: list[_Slot] = []
        self._started = 0
        self._closed = False
        self._cond = threading.Condition()
        self._zygote = Zygote(layers)

    def warm(self) -> None:
        """Start every worker now instead of on first use."""
        with self._cond:
            missing = self.size - self._started
            self._started += missing
        for _ in range(missing):
            self._add_fresh()

    @contextmanager
    def acquire(self, *, seed: int = 0, owner: str | None = None) -> Iterator[SandboxWorker]:
        """Lend a worker (blocks while all are busy); it is unloaded when returned.

        Args:
            seed: Seed of the tools module's `random` / `uuid4`.
            owner: Who uses it (an environment's identity). Only a worker this owner used before, or a fresh
                one, is lent; without an owner the worker is never lent again.
        """
        slot = self._take(owner)
        slot.worker.seed = seed
        try:
            yield slot.worker
        finally:
            self._give_back(slot, owner)

    def _take(self, owner: str | None) -> _Slot:
        evicted: list[_Slot] = []
        try:
            with self._cond:
                while True:
                    if self._closed:
                        raise SandboxError("SandboxPool is closed")
                    mine = [s for s in self._idle if owner is not None and s.owner == owner]
                    fresh = [s for s in self._idle if s.owner is None]
                    if mine or fresh:
                        slot = (mine or fresh)[0]
                        self._idle.remove(slot)
                        return slot
                    if self._idle and self._started >= self.size:  # only other owners' workers: replace one
                        evicted.append(self._idle.pop(0))
                        self._started -= 1
                    if self._started < self.size:
                        self._started += 1
                        break
                    self._cond.wait()
        finally:
            for slot in evicted:
                slot.worker.close()
        try:
            return _Slot(self._new_worker())
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise

    def _give_back(self, slot: _Slot, owner: str | None) -> None:
        slot.uses += 1
        keep = not self._closed and owner is not None and slot.uses < self.max_uses and slot.worker.alive
        if keep:
            try:
                slot.worker.unload()
            except SandboxError:
                keep = False
        with self._cond:
            if keep and not self._closed:
                slot.owner = owner
                self._idle.append(slot)
                self._cond.notify()
                return
            self._started -= 1
            refill = not self._closed and self._started < self.size
            if refill:
                self._started += 1
            last_out = self._closed and self._started == 0
            self._cond.notify()
        slot.worker.close()
        if refill:
            threading.Thread(target=self._add_fresh, daemon=True).start()
        if last_out:
            self._zygote.close()

    def _add_fresh(self) -> None:
        """Start one worker (already counted in `_started`) and make it available."""
        try:
            worker = self._new_worker()
        except Exception:  # noqa: BLE001 - a failed background start only shrinks the pool until the next refill
            with self._cond:
                self._started -= 1
                self._cond.notify()
            return
        with self._cond:
            if self._closed:
                self._started -= 1
                last_out = self._started == 0
            else:
                self._idle.append(_Slot(worker))
                self._cond.notify()
                return
        worker.close()
        if last_out:
            self._zygote.close()

    def _new_worker(self) -> SandboxWorker:
        return SandboxWorker(self.limits, zygote=self._zygote)

    def close(self) -> None:
        """Stop every idle worker and the zygote; workers still lent out stop when returned."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._started -= len(idle)
            self._cond.notify_all()
        for slot in idle:
            slot.worker.close()
        if not self._started:
            self._zygote.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
