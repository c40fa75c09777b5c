"""Scheduling: the interface through which an event-loop runtime drives a buffer.

The runtime (``quiesce._runtime``) applies a buffer's due removals from a
barrier scheduler and hands its escalations to a stream. For that the core
must call it back — wake the scheduler when a removal becomes due, deliver
an escalation — and tell it a little about the buffer. This module is the
one place that touches the buffer's internals for it; code outside
``_core`` (a subclass of :class:`~.buffer.Buffer` included) drives the
scheduling only through :class:`Scheduling`.

What it keeps true:

1. **Both hooks or neither.** :meth:`Scheduling.attach` installs the due
   hook and the escalation hook together, under the write lock, and hands
   back the escalations queued while no runtime consumed them (in the same
   critical section: a writer's escalation goes either to the queue the
   runtime just drained or to its hook, never lost between the two);
   :meth:`Scheduling.detach` removes both. A writer sees the runtime's
   pair or none, never one of them.
2. **Read-only.** :meth:`Scheduling.held_back` reads the grace queue and
   changes nothing; :meth:`Scheduling.stuck_readers` changes only the
   caller's own alarm state (through its ``mark``) and pops finished
   versions off the pin order, as any walk of it does.

The handle holds the buffer's state, its pin registry, its grace queue and its
publisher, never the buffer
(a buffer that holds its handle is not cyclic garbage); the hooks it
installs are the runtime's, which the runtime detaches when it stops.

Cancellation: nothing here awaits; every method is sync and O(1) except
:meth:`Scheduling.held_back` and :meth:`Scheduling.stuck_readers`.
Threads: every method may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .buffer import Buffer
    from .pins import Snapshot
    from .records import Escalation

__all__ = ["Scheduling"]

#: wakes the scheduler; called from any thread, must never block
Wake = Callable[[], None]
#: takes an escalation, False if it could not be delivered (counted dropped)
Deliver = Callable[["Escalation"], bool]


class Scheduling:
    """The scheduling handle of one buffer (see the module docstring).
    O(1) to build; one per runtime."""

    __slots__ = ("_grace", "_pub", "_registry", "_st")

    def __init__(self, buf: Buffer) -> None:
        self._st = buf._st  #: the buffer's fields (state.py)
        self._grace = buf._grace  #: its grace queue (grace.py)
        self._pub = buf._pub  #: its publisher, which owns the escalation queue
        self._registry = buf._registry  #: its readers (pins.py)

    def attach(self, wake: Wake, deliver: Deliver) -> list[Escalation]:
        """Install ``wake`` as the due hook and ``deliver`` as the
        escalation hook, and return the escalations queued before (oldest
        first; the queue is left empty). O(queued), under the write lock."""
        st = self._st
        with st.write_lock:
            queued = self._pub.drain_escalations()
            st.due_hook = wake
            st.escalation_hook = deliver
        return queued

    def detach(self) -> None:
        """Remove both hooks: due removals are applied by the writer that
        releases the last blocking pin again, escalations queue. O(1)."""
        st = self._st
        with st.write_lock:
            st.due_hook = None
            st.escalation_hook = None

    def count_dropped(self) -> None:
        """Count one escalation the runtime could not deliver (its stream
        was full or closed) in ``stats().escalations_dropped``; it is in
        the log all the same. O(1)."""
        self._st.escalations_dropped += 1

    def held_back(self) -> Callable[[int], int]:
        """A function ``v`` -> how many staged removals a reader pinned at
        version ``v`` holds back (:meth:`.grace.Grace.held_back`)."""
        return self._grace.held_back()

    def now(self) -> float:
        """The buffer's clock (the one pin times are taken on). O(1)."""
        return self._st.clock()

    def stuck_readers(
        self,
        now: float,
        max_age: float,
        pos: int,
        escalated: Callable[[Snapshot], bool],
        mark: Callable[[Snapshot], None],
    ) -> tuple[list[Snapshot], int]:
        """The readers pinned longer than ``max_age`` at ``now`` that
        ``escalated`` does not know yet (each passed to ``mark`` under the
        pin lock), and the alarm's new cursor: see
        :meth:`.pins.PinRegistry.stuck_readers` (its cost and rules)."""
        return self._registry.stuck_readers(now, max_age, pos, escalated, mark)
