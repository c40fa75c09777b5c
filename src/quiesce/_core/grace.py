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
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .callbacks import WriteGuard
from .errors import LogWriteError
from .log import LogSink
from .observe import Observer
from .pins import Pins
from .policy import Policy
from .records import Escalation, EscalationKind, LogRecord

__all__ = ["Grace", "Group"]


@dataclass(slots=True)
class Group:
    """Ids staged for removal together (one transaction).

    ``grace`` is the version from which every reader saw all members marked:
    the group is due once no reader pinned below it remains.
    """

    gid: int
    ids: tuple[str, ...]
    grace: int
    staged: int  #: version that staged it; members changed after it are refused
    reason: str
    actor: str | None
    turn: int | None
    #: members the host retracts (a host plan with an override, :mod:`.edit`):
    #: removed at the grace point even if protected or immutable
    retracted: frozenset[str] = frozenset()
    #: the members passed the policy when staged (by this process): with the
    #: library's own policy a member unchanged since is not classified again
    #: at removal (issue 13: classify once). False for recovered groups.
    checked: bool = False


class Grace(Pins):
    """The grace scheduler of a :class:`~.buffer.Buffer` (a base class: the
    buffer's ``__init__`` sets the fields below)."""

    #: serializes writers; readers never take it (a WriteGuard while a callback runs)
    _write_lock: threading.RLock | WriteGuard
    _policy: Policy
    _sink: LogSink | None
    _staged: list[tuple[int, int, Group]]  #: the due heap: (grace, gid, group)
    _staged_ids: dict[str, Group]  #: every staged id (also those being applied)
    _applying: dict[int, Group]  #: popped, being made durable
    _gids: Iterator[int]
    _backlog_alarm: bool
    _due_hook: Callable[[], None] | None  #: the runtime's wake-up, else None
    _due_flag: bool  #: a due removal waits for the writer holding the lock
    _due_since: float | None
    #: The lowest version readers in *other processes* may still hold (a
    #: shared buffer's members, set by ``quiesce._shared``), or ``None`` for
    #: none; ``-1`` holds every removal back (a replica never applies one).
    _grace_floor: int | None
    _counts: Counter[str]
    #: told of due signals and applied batches (observe.py), or None
    _observer: Observer | None = None

    if TYPE_CHECKING:  # provided by .publish.Publisher and .buffer.Buffer

        def _apply_due_locked(self) -> tuple[str, ...]: ...
        def _apply_due_durable(self, *, blocking: bool) -> tuple[str, ...] | None: ...
        def _record(
            self,
            op: str,
            version: int | None,
            ids: tuple[str, ...],
            *,
            actor: str | None,
            reason: str | None,
            turn: int | None,
            outcome: str,
            detail: dict[str, Any],
        ) -> LogRecord: ...
        def _append_record(self, record: LogRecord) -> None: ...
        def _escalate(self, esc: Escalation) -> None: ...

    def _horizon(self) -> int | None:
        """The oldest version a reader may still hold (``None``: no reader):
        a staged group is due once its grace is at or below it. The local
        oldest pin, lowered to ``_grace_floor`` (the other processes'
        readers of a shared buffer). O(1) amortized."""
        with self._pin_lock:
            oldest = self._oldest_pin()
        floor = self._grace_floor
        if floor is None or (oldest is not None and oldest <= floor):
            return oldest
        return floor

    def _signal_due(self) -> None:
        if self._due_since is None:
            self._due_since = self._clock()
            if self._observer is not None:
                self._observe_due()
        hook = self._due_hook
        if hook is not None:
            hook()
            return
        self._due_flag = True
        self._drain_due()

    def _observe_due(self) -> None:
        observer = self._observer
        try:
            if observer is not None:
                observer.due()
        except Exception:
            self._counts["callback_errors"] += 1

    def _drain_due(self) -> None:
        # Apply due removals unless a writer holds the lock; that writer sees
        # the flag when it releases and drains instead (no reader waits).
        # That writer may be this very thread (a snapshot released inside a
        # policy callback): the lock is re-entrant, so ask it, or the removal
        # would be published in the middle of the outer write.
        if self._write_lock._is_owned():  # type: ignore[union-attr]
            self._due_flag = True
            return
        while self._due_flag:
            if self._sink is not None:
                self._due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    if self._apply_due_durable(blocking=False) is None:
                        return  # a writer holds the lock and drains on release
                continue
            if not self._write_lock.acquire(blocking=False):
                return
            try:
                self._due_flag = False
                with contextlib.suppress(LogWriteError):  # stays staged; stats() tells
                    self._apply_due_locked()
            finally:
                self._write_lock.release()

    def _release(self) -> None:
        self._write_lock.release()
        if self._due_flag and self._due_hook is None:
            self._drain_due()

    def has_due(self) -> bool:
        """Whether some staged removal is due now. O(1)."""
        staged = self._staged
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
            return self._staged[0][0]
        except IndexError:
            return None

    def _pop_due(self) -> list[Group]:
        oldest = self._horizon()
        staged = self._staged
        groups: list[Group] = []
        while staged and (oldest is None or staged[0][0] <= oldest):
            groups.append(heapq.heappop(staged)[2])
        return groups

    def _requeue(self, groups: list[Group]) -> None:
        for g in groups:
            self._applying.pop(g.gid, None)
            heapq.heappush(self._staged, (g.grace, g.gid, g))

    def _stage(self, g: Group) -> None:
        for i in g.ids:
            self._staged_ids[i] = g
        heapq.heappush(self._staged, (g.grace, g.gid, g))
        if self._due_hook is not None:
            self._due_hook()

    def _after_stage(self) -> None:
        bound = self._policy.max_backlog
        if len(self._staged_ids) > bound and not self._backlog_alarm:
            self._backlog_alarm = True
            detail = (
                f"deferred backlog {len(self._staged_ids)} exceeds {bound}: marked entries "
                f"accumulate faster than grace periods drain them"
            )
            with self._pin_lock:
                oldest = self._oldest_pin()
            data = {"deferred": len(self._staged_ids), "bound": bound, "oldest_pin": oldest}
            esc = Escalation(EscalationKind.BACKLOG, detail, None, (), self._head.number, data)
            self._append_record(
                self._record(
                    "escalate",
                    None,
                    (),
                    actor=None,
                    reason=detail,
                    turn=None,
                    outcome=EscalationKind.BACKLOG.value,
                    detail={"kind": EscalationKind.BACKLOG.value, "data": data},
                )
            )
            self._escalate(esc)

    def _after_unstage(self) -> None:
        if self._backlog_alarm and len(self._staged_ids) <= self._policy.max_backlog // 2:
            self._backlog_alarm = False

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version."""
        return {i: g.grace for i, g in self._staged_ids.items()}
