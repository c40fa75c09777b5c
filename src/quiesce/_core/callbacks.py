"""Calling user code: what a callback may and may not do.

What it keeps true: no user callback — the policy's negative classifier (or
a :class:`~.policy.Policy` subclass's ``protection``/``is_immutable``), the
log sink — can break an invariant of the buffer it serves, by raising or by
calling back into it.

* A callback that runs under the buffer's write lock (the policy, asked by
  ``prune``, ``edit`` and by the re-check of a due removal) sees the lock
  replaced by a :class:`WriteGuard` for the length of the call: any write to
  the same buffer from the same thread — ``append``, ``mark_stale``,
  ``prune``, ``edit``, ``apply_due``, ``escalate``, ``flush``, ``_check`` — raises
  :class:`~.errors.ReentrantWrite` at once, before it changes anything (the
  write lock is re-entrant, so without the guard the nested write would
  publish a version in the middle of the outer one). Other threads wait for
  the real lock as usual. Reads (snapshots, ``stats()``) are allowed.
* A policy callback that raises an :class:`Exception` (a ``ReentrantWrite``
  it let through included) is answered fail-safe: the entry counts as a
  negative result, so it is kept (the removal is refused with ``NEGATIVE``,
  its mark stays), and the failure is escalated (``REFUSED_EDIT`` with
  ``data["callback"]`` naming the callback), logged, and counted in
  ``stats().callback_errors``. It never reaches a reader's
  ``Snapshot.__exit__``, the runtime's scheduler, or the caller of
  ``prune``/``edit``.
* A sink's ``write`` that raises becomes :class:`~.errors.LogWriteError`
  (records stay pending, nothing is published); a sink that calls
  ``flush()`` — or ``prune``/``edit``, which flush — on the buffer it serves
  gets ``ReentrantWrite`` instead of a deadlock on the flush lock.

The guard costs nothing on the fast paths: it is installed only around a
policy call, and ``mark_stale``/``append`` read ``_write_lock`` as before.
A callback must not wait for another thread that writes to the same buffer
(that thread waits for the write lock the callback's caller holds).
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from .errors import ReentrantWrite

__all__ = ["WriteGuard"]

_get_ident = threading.get_ident


class WriteGuard:
    """Stands in for a buffer's write lock while a callback runs under it.

    ``acquire`` from the thread running the callback raises
    :class:`ReentrantWrite`; from any other thread it waits for the real lock.
    ``release`` and ``_is_owned`` are the real lock's. O(1).
    """

    __slots__ = ("_callback", "_lock", "_owner")

    def __init__(self, lock: Any, callback: str) -> None:
        self._lock = lock
        self._owner = _get_ident()
        self._callback = callback

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.refuse_owner("a write to the buffer")
        return bool(self._lock.acquire(blocking, timeout))

    def refuse_owner(self, what: str) -> None:
        """Raise :class:`ReentrantWrite` if called from the thread running the
        callback (``what`` names the call); else nothing."""
        if _get_ident() == self._owner:
            raise ReentrantWrite(
                f"{what} from inside its {self._callback} (which runs while the buffer is "
                f"being written): callbacks may read the buffer, not write it"
            )

    def release(self) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:
        return bool(self._lock._is_owned())

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
