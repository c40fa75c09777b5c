"""Grace: staged removals, when each becomes due, and who applies it.

What it keeps true: a staged group is applied only once no reader that may
have seen one of its members unmarked is still pinned — its ``grace``
version is at or below the *horizon*, the oldest version any reader may
still hold (invariant 5). Nothing is applied early; nothing due is left
behind without a wake-up (a due signal either applies it inline or leaves a
flag the next writer drains, or wakes the runtime's scheduler).

Removal is two-phase, like RCU or PostgreSQL's VACUUM. A prune request is
decided by the :class:`~.policy.Policy` (the pruner can be refused), then
*staged*: the entry is marked in a new version ``m``, and its removal becomes
due at its **grace point** — when no reader pinned at a version older than
``m`` remains. Readers that pinned at ``m`` or later saw the mark, so they do
not hold the removal back: a steady stream of overlapping readers never
starves it (a grace period, not a global "zero readers" moment). A due
removal is re-validated against the head when applied (:mod:`.publish`: a
survivor that began to cite the entry meanwhile keeps it alive, refused and
logged).

The horizon. Every due test asks :meth:`Grace._horizon` for the oldest
version a reader may still hold; here that is the local oldest pin
(:mod:`.pins`). It is the one seam a buffer shared across processes extends
(the minimum with the members' horizons); nothing else here reads pins.

Threads. Writers serialize on ``_write_lock``; readers never take it. An
unpin that makes a removal due applies it inline when nobody writes (sync
mode), else leaves ``_due_flag`` for the writer that holds the lock to drain
on release; under the async runtime the unpin only calls ``_due_hook``,
which wakes the barrier scheduler. The due heap is ordered by
``(grace, gid)``: the earliest grace is at its front, so the due test is
O(1) and popping k due groups O(k log staged).
"""

from __future__ import annotations

import contextlib
import heapq
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .errors import LogWriteError
from .pins import PinRegistry
from .records import Escalation, EscalationKind, LogRecord
from .state import BufferState, Group
from .wire import escalate_record

__all__ = ["Grace", "Group"]


class Grace:
    """The grace scheduler of a :class:`~.buffer.Buffer` (a base class: the
    buffer's ``__init__`` sets the fields below)."""

    _st: BufferState  #: the buffer's fields (state.py)
    _registry: PinRegistry  #: the reader registry (pins.py)

    if TYPE_CHECKING:  # provided by .publish.Publisher and .buffer.Buffer

        def _apply_due_locked(self) -> tuple[str, ...]: ...
        def _apply_due_durable(self, *, blocking: bool) -> tuple[str, ...] | None: ...
        def _append_record(self, record: LogRecord) -> None: ...
        def _escalate(self, esc: Escalation) -> None: ...

    def _horizon(self) -> int | None:
        """The oldest version a reader may still hold (``None``: no reader):
        a staged group is due once its grace is at or below it. The local
        oldest pin, lowered to ``_grace_floor`` (the other processes'
        readers of a shared buffer). O(1) amortized."""
        with self._st.pin_lock:
            oldest = self._registry.oldest_locked()
        floor = self._st.grace_floor
        if floor is None or (oldest is not None and oldest <= floor):
            return oldest
        return floor

    def _signal_due(self) -> None:
        if self._st.due_since is None:
            self._st.due_since = self._st.clock()
            if self._st.observer is not None:
                self._observe_due()
        hook = self._st.due_hook
        if hook is not None:
            hook()
            return
        self._st.due_flag = True
        self._drain_due()

    def _observe_due(self) -> None:
        observer = self._st.observer
        try:
            if observer is not None:
                observer.due()
        except Exception:
            self._st.counts["callback_errors"] += 1

    def _drain_due(self) -> None:
        # Apply due removals unless a writer holds the lock; that writer sees
        # the flag when it releases and drains instead (no reader waits).
        # That writer may be this very thread (a snapshot released inside a
        # policy callback): the lock is re-entrant, so ask it, or the removal
        # would be published in the middle of the outer write.
        if self._st.write_lock._is_owned():  # type: ignore[union-attr]
            self._st.due_flag = True
            return
        while self._st.due_flag:
            if self._st.sink is not None:
                self._st.due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    if self._apply_due_durable(blocking=False) is None:
                        return  # a writer holds the lock and drains on release
                continue
            if not self._st.write_lock.acquire(blocking=False):
                return
            try:
                self._st.due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    self._apply_due_locked()
            finally:
                self._st.write_lock.release()

    def _release(self) -> None:
        self._st.write_lock.release()
        if self._st.due_flag and self._st.due_hook is None:
            self._drain_due()

    def has_due(self) -> bool:
        """Whether some staged removal is due now. O(1)."""
        staged = self._st.staged
        if not staged:
            return False
        oldest = self._horizon()
        try:
            grace = staged[0][0]
        except IndexError:  # applied meanwhile by another thread
            return False
        return oldest is None or grace <= oldest

    def next_grace(self) -> int | None:
        """The smallest grace version among staged removals, or ``None``."""
        try:
            return self._st.staged[0][0]
        except IndexError:
            return None

    def _pop_due(self) -> list[Group]:
        oldest = self._horizon()
        staged = self._st.staged
        groups: list[Group] = []
        while staged and (oldest is None or staged[0][0] <= oldest):
            groups.append(heapq.heappop(staged)[2])
        return groups

    def _requeue(self, groups: list[Group]) -> None:
        for g in groups:
            self._st.applying.pop(g.gid, None)
            heapq.heappush(self._st.staged, (g.grace, g.gid, g))

    def _stage(self, g: Group) -> None:
        for i in g.ids:
            self._st.staged_ids[i] = g
        heapq.heappush(self._st.staged, (g.grace, g.gid, g))
        if self._st.due_hook is not None:
            self._st.due_hook()

    def _after_stage(self) -> None:
        bound = self._st.policy.max_backlog
        if len(self._st.staged_ids) > bound and not self._st.backlog_alarm:
            self._st.backlog_alarm = True
            detail = (
                f"deferred backlog {len(self._st.staged_ids)} exceeds {bound}: marked entries "
                f"accumulate faster than grace periods drain them"
            )
            with self._st.pin_lock:
                oldest = self._registry.oldest_locked()
            data = {"deferred": len(self._st.staged_ids), "bound": bound, "oldest_pin": oldest}
            esc = Escalation(EscalationKind.BACKLOG, detail, None, (), self._st.head.number, data)
            self._append_record(
                escalate_record(
                    len(self._st.records),
                    time.time(),
                    (),
                    detail,
                    EscalationKind.BACKLOG.value,
                    data,
                )
            )
            self._escalate(esc)

    def _after_unstage(self) -> None:
        if self._st.backlog_alarm and len(self._st.staged_ids) <= self._st.policy.max_backlog // 2:
            self._st.backlog_alarm = False

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version."""
        return {i: g.grace for i, g in self._st.staged_ids.items()}
