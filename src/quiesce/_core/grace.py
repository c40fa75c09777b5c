"""Grace: the queue of staged removals and when each becomes due.

What it keeps true: a staged group is due only once no reader that may
have seen one of its members unmarked is still pinned — its ``grace``
version is at or below the *horizon*, the oldest version any reader may
still hold (invariant 5). Nothing here applies a removal: the removal
path (:mod:`.publish`) pops the due groups from this queue, and puts back
any it could not make durable.

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

The horizon. Every due test asks :meth:`Grace.horizon` for the oldest
version a reader may still hold; here that is the local oldest pin
(:mod:`.pins`), lowered to the state's ``grace_floor`` (the readers of a
buffer shared across processes, :mod:`.replication`). Nothing else here
reads pins.

The part. :class:`Grace` is handed the buffer's state and its reader
registry and holds nothing else: it calls no other part and never the
buffer that holds it. The due heap (the state's ``staged``) is ordered by
``(grace, gid)``: the earliest grace is at its front, so the due test is
O(1) and popping k due groups O(k log staged). Every method but
:meth:`Grace.has_due`, :meth:`Grace.next_grace`, :meth:`Grace.horizon`,
:meth:`Grace.staged` and :meth:`Grace.held_back` is called under the
write lock.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Mapping

from .pins import PinRegistry
from .state import BufferState, Group

__all__ = ["Grace", "Group"]


class Grace:
    """The grace queue of one buffer (see the module docstring). O(1) to build."""

    __slots__ = ("__weakref__", "_registry", "_st")

    def __init__(self, st: BufferState, registry: PinRegistry) -> None:
        self._st = st  #: the buffer's fields (state.py)
        self._registry = registry  #: the reader registry (pins.py)

    def horizon(self) -> int | None:
        """The oldest version a reader may still hold (``None``: no reader):
        a staged group is due once its grace is at or below it. The local
        oldest pin, lowered to ``grace_floor`` (the other processes'
        readers of a shared buffer). O(1) amortized."""
        with self._st.pin_lock:
            oldest = self._registry.oldest_locked()
        floor = self._st.grace_floor
        if floor is None or (oldest is not None and oldest <= floor):
            return oldest
        return floor

    def has_due(self) -> bool:
        """Whether some staged removal is due now. O(1)."""
        staged = self._st.staged
        if not staged:
            return False
        oldest = self.horizon()
        try:
            grace = staged[0][0]
        except IndexError:  # applied meanwhile by another thread
            return False
        return oldest is None or grace <= oldest

    def next_grace(self) -> int | None:
        """The smallest grace version among staged removals, or ``None``. O(1)."""
        try:
            return self._st.staged[0][0]
        except IndexError:
            return None

    def pop_due(self) -> list[Group]:
        """Pop every due group, earliest grace first (under the write lock).
        O(k log staged) for k groups."""
        oldest = self.horizon()
        staged = self._st.staged
        groups: list[Group] = []
        while staged and (oldest is None or staged[0][0] <= oldest):
            groups.append(heapq.heappop(staged)[2])
        return groups

    def requeue(self, groups: list[Group]) -> None:
        """Put back groups popped by :meth:`pop_due` that were not applied
        (under the write lock). O(k log staged)."""
        for g in groups:
            self._st.applying.pop(g.gid, None)
            heapq.heappush(self._st.staged, (g.grace, g.gid, g))

    def stage(self, g: Group) -> None:
        """Queue ``g`` (under the write lock) and wake the runtime's
        scheduler if one is installed. Stamps the readers pinned since the
        last pass with the clock (pins read none, see :mod:`.pins`): the
        readers that hold ``g`` back are dated no later than its staging, so
        their age counts from then even if no alarm pass ran in between
        (one clock read and an O(1) epoch swap per staged group).
        O(|g| + log staged)."""
        self._registry.close_epoch(self._st.clock())
        for i in g.ids:
            self._st.staged_ids[i] = g
        heapq.heappush(self._st.staged, (g.grace, g.gid, g))
        if self._st.due_hook is not None:
            self._st.due_hook()

    def after_unstage(self) -> None:
        """Clear the backlog alarm once the backlog fell to half its bound
        (under the write lock; the alarm is raised by :mod:`.publish`). O(1)."""
        if self._st.backlog_alarm and len(self._st.staged_ids) <= self._st.policy.max_backlog // 2:
            self._st.backlog_alarm = False

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version. O(staged)."""
        return {i: g.grace for i, g in self._st.staged_ids.items()}

    def held_back(self) -> Callable[[int], int]:
        """A function ``v`` -> how many staged removals a reader pinned at
        version ``v`` holds back (those whose grace point is above ``v``),
        as of this call; changes nothing. Building it is O(staged + g log g)
        for g distinct grace points (a copy of the due heap, suffix sums);
        each call of it is O(log g), a bisection."""
        counts: dict[int, int] = {}
        for grace, _gid, group in list(self._st.staged):
            counts[grace] = counts.get(grace, 0) + len(group.ids)
        graces = sorted(counts)
        above = [*itertools.accumulate(counts[g] for g in reversed(graces))][::-1]
        above.append(0)

        def held(v: int) -> int:
            return above[bisect.bisect_right(graces, v)]

        return held
