"""The implementations the agent-loop benchmark (:mod:`.agent`) runs its
load on: quiesce and the lock- and copy-based baselines, each the same five
operations (``pin``/``unpin``/``read``, ``append``, ``mark``, ``prune``) its
own way.

What it keeps true: each implementation does only what its way of
synchronising needs and nothing more, so a timed call measures that way (a
sync operation stays a plain call, an async one awaits only its lock); the
baselines keep the same dict of entries and marks. :data:`IMPLS` maps each
name to its class.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from quiesce import Entry, RuntimeBuffer, open_buffer
from quiesce.testing import Observer

__all__ = [
    "IMPLS",
    "DictCopyImpl",
    "GlobalQuiescenceImpl",
    "Impl",
    "LockImpl",
    "QuiesceImpl",
    "RWLockImpl",
]


class Impl:
    """One way to run the load: ``pin``, ``unpin``, ``read``, ``append``,
    ``mark``, ``prune``. Those may be sync or async (each subclass its own
    way); the driver calls sync ones directly, so a sync fast path pays no
    coroutine."""

    name = ""
    backends: tuple[str, ...] = ("asyncio", "trio")

    @asynccontextmanager
    async def running(self, initial: Sequence[Entry]) -> AsyncIterator[None]:
        yield

    def backlog(self) -> int:
        return 0

    def extra(self) -> dict[str, Any]:
        return {}


class QuiesceImpl(Impl):
    name = "quiesce"

    def __init__(self) -> None:
        self.buf: RuntimeBuffer | None = None
        self.wake_delays: list[int] = []

    @asynccontextmanager
    async def running(self, initial: Sequence[Entry]) -> AsyncIterator[None]:
        async with open_buffer(max_pin_age=None) as buf:
            for e in initial:
                buf.append(e)
            self._instrument(buf)
            self.buf = buf
            yield
        self.buf = None

    def _instrument(self, buf: RuntimeBuffer) -> None:
        # Wake-ups between the unpin that makes a removal due and the batch
        # that applies it: the core reports the first due signal since the
        # last application and each applied batch (an Observer, O(1) per
        # call), the scheduler counts its wake-ups.
        delays = self.wake_delays

        class WakeDelays(Observer):
            first_signal: int | None = None

            def due(self) -> None:
                self.first_signal = buf.wakeups

            def applied(self, removed: tuple[str, ...]) -> None:
                if self.first_signal is not None:
                    delays.append(buf.wakeups - self.first_signal)
                    self.first_signal = None

        buf.observe(WakeDelays())

    def pin(self) -> Any:
        assert self.buf is not None
        snap = self.buf.snapshot()
        snap.__enter__()
        return snap

    def unpin(self, token: Any) -> None:
        token.__exit__(None, None, None)

    def read(self, token: Any) -> int:
        return len(token)

    def append(self, entry: Entry) -> None:
        assert self.buf is not None
        self.buf.append(entry)

    def mark(self, entry_id: str) -> None:
        assert self.buf is not None
        self.buf.mark_stale(entry_id, "superseded")

    def prune(self, ids: list[str]) -> None:
        assert self.buf is not None
        self.buf.prune(ids, reason="stale")

    def backlog(self) -> int:
        assert self.buf is not None
        return self.buf.stats().deferred

    def extra(self) -> dict[str, Any]:
        assert self.buf is not None
        stats = self.buf.stats()
        return {
            "wakeups": self.buf.wakeups,
            "batches": self.buf.batches,
            "tombstones": stats.tombstones,
            "reclamation_latency_max_s": stats.reclamation_latency_max,
            "wakeups_to_apply_max": max(self.wake_delays, default=None),
            "wakeups_to_apply_hist": {
                str(k): self.wake_delays.count(k) for k in sorted(set(self.wake_delays))
            },
        }


class _DictImpl(Impl):
    """The baselines' state: a dict of entries and a dict of marks, both in
    window order; a reader's token is the entries dict it reads."""

    def _start(self, initial: Sequence[Entry]) -> None:
        self.entries = {e.id: e for e in initial}
        self.marks: dict[str, str] = {}

    def read(self, token: Any) -> int:
        return len(token)


class _InPlaceImpl(_DictImpl):
    """A baseline whose writers change the dicts in place, without a lock
    (``append`` and ``mark`` are plain sync calls)."""

    @asynccontextmanager
    async def running(self, initial: Sequence[Entry]) -> AsyncIterator[None]:
        self._start(initial)
        yield

    def append(self, entry: Entry) -> None:
        self.entries[entry.id] = entry

    def mark(self, entry_id: str) -> None:
        self.marks.setdefault(entry_id, "superseded")


class _LockedImpl(_DictImpl):
    """A dict guarded by a lock: a reader holds ``read_lock`` while it holds
    its snapshot; appends, marks and prunes take ``write_lock``."""

    backends = ("asyncio",)
    read_lock: Any
    write_lock: Any

    async def pin(self) -> Any:
        await self.read_lock.acquire()
        return self.entries

    def unpin(self, token: Any) -> None:
        self.read_lock.release()

    async def append(self, entry: Entry) -> None:
        async with self.write_lock:
            self.entries[entry.id] = entry

    async def mark(self, entry_id: str) -> None:
        async with self.write_lock:
            self.marks.setdefault(entry_id, "superseded")

    async def prune(self, ids: list[str]) -> None:
        async with self.write_lock:
            for i in ids:
                self.entries.pop(i, None)
                self.marks.pop(i, None)


class RWLockImpl(_LockedImpl):
    name = "aiorwlock"

    @asynccontextmanager
    async def running(self, initial: Sequence[Entry]) -> AsyncIterator[None]:
        import aiorwlock

        lock = aiorwlock.RWLock()
        self.read_lock, self.write_lock = lock.reader, lock.writer
        self._start(initial)
        yield


class LockImpl(_LockedImpl):
    name = "asyncio.Lock"

    @asynccontextmanager
    async def running(self, initial: Sequence[Entry]) -> AsyncIterator[None]:
        self.read_lock = self.write_lock = asyncio.Lock()
        self._start(initial)
        yield


class DictCopyImpl(_InPlaceImpl):
    """A reader copies both dicts (O(n)) and reads its copy."""

    name = "dict-copy"

    def pin(self) -> Any:
        return (self.entries.copy(), self.marks.copy())

    def unpin(self, token: Any) -> None:
        pass

    def read(self, token: Any) -> int:
        return len(token[0])

    def prune(self, ids: list[str]) -> None:
        for i in ids:
            self.entries.pop(i, None)
            self.marks.pop(i, None)


class GlobalQuiescenceImpl(_InPlaceImpl):
    """Removals wait for a moment with zero readers pinned."""

    name = "global-quiescence"

    def _start(self, initial: Sequence[Entry]) -> None:
        super()._start(initial)
        self.readers = 0
        self.pending: dict[str, None] = {}

    def pin(self) -> Any:
        self.readers += 1
        return self.entries

    def unpin(self, token: Any) -> None:
        self.readers -= 1
        if not self.readers and self.pending:
            self._apply()

    def prune(self, ids: list[str]) -> None:
        for i in ids:
            self.marks.setdefault(i, "stale")
            self.pending[i] = None
        if not self.readers:
            self._apply()

    def _apply(self) -> None:
        for i in self.pending:
            self.entries.pop(i, None)
            self.marks.pop(i, None)
        self.pending.clear()

    def backlog(self) -> int:
        return len(self.pending)


IMPLS: dict[str, Callable[[], Impl]] = {
    "quiesce": QuiesceImpl,
    "aiorwlock": RWLockImpl,
    "asyncio.Lock": LockImpl,
    "dict-copy": DictCopyImpl,
    "global-quiescence": GlobalQuiescenceImpl,
}
