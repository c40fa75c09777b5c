"""Pins: a reader's :class:`Snapshot` and the lock-free registry of readers.

What it keeps true: a reader that pinned version ``v`` is visible to every
writer that publishes after the pin succeeded, until the reader unpins; and
the oldest pin this registry reports is never newer than a pinned reader's
version (the grace scheduler's horizon, :mod:`.grace`, rests on it).

Protocol. A pin is one entry in the set of readers of its version
(the state's ``pins``: version number -> dict of snapshots); each set's
number is in ``pin_order``, a deque whose front is the oldest pinned
version. Pin and unpin take no lock (they are the readers' fast path):
under the GIL each step is one atomic C-level operation (``dict.get``, a
dict store or delete, a deque append), and a pin is *validated* like a
hazard pointer — register in the head's set, then re-read the head; if it
moved, withdraw and retry. The first pin of a version
(:meth:`PinRegistry.pin_slow`) appends its number at the right end of the
order (unless it is there already) *before* it makes the set, and once its
pin is validated it leaves the pair ``(version, set)`` in the registry's
*head set* (one tuple, stored and read whole); every other pin reads the
head, finds it in the head set (by identity: ``hv is head``) and only
registers in that set and validates.

Correctness. (1) A successful pin was registered while its version was still
the head: a writer that publishes after it, and later asks for the oldest
pin, sees it (the writer's new head is stored after the registration it
must see, and the walk reads the sets after the head); and its number is in
the order then: the set it found was made after the number was appended,
and a number leaves the order only once it is not the head (rule 3), which
the pin's validation would have seen. (1') A pin through the head set
registers in the head's set in ``pins``: the pair was stored after a
validation saw its version ``v`` the head, with its set made while ``v``
was the head; a set is deleted only once its version is not the head
(rule 2), every publish installs a new :class:`~.version.Version` object
and head numbers only grow, so ``v`` is the head during one interval only;
a pin that finds ``hv is v`` for the head ``v`` it read, and then
validates ``v`` again, did both inside that interval, in which ``v``'s set
is never deleted. A stale pair (stored late by a slow validation, or of a
version no longer the head) never matches a later head: it only costs a
slow path. The registry forgets a pair whose version is not the head when
it frees a set (:meth:`PinRegistry.forget_head_set`), so it keeps no
finished version alive for long. Two rules make the
unlocked cleanup safe, both resting on the head number only growing: (2) an
empty set is deleted only by someone who first saw that its version is no
longer the head (no pin there can succeed any more) and *then* saw it
empty; (3) ``pin_order`` is popped only at its front, only under
``pin_lock`` (which serializes the walkers, never the readers), by the same
rule. A pin whose validation fails withdraws and, if it leaves its set
empty, takes the last-unpin path, so no set and no due removal is lost.
The walk runs when a pin appends a number behind an older one (an order
found empty has nothing to free) and after each stream write
(:meth:`.stream.StreamWriter.write`: the writer frees the version it
replaced, so readers of a streaming buffer rarely walk).
Pin and unpin are O(1) amortized, independent of the buffer's size and of
the number of readers. This relies on the GIL: ``Buffer()`` refuses to run
in a free-threaded interpreter whose GIL is off.

The hand-off. The last reader of a version asks the grace scheduler whether
the earliest staged removal is now due (the grace queue's horizon, a hook
:class:`PinRegistry` is handed) and signals it;
what a signal does (apply inline, or wake the runtime's scheduler) is
:mod:`.grace`'s business.

Reader ages. A pin reads no clock (a clock call was ~10% of a pin). It
copies the registry's open :class:`PinEpoch` (one attribute read); each
pass over the readers — ``stats()`` (:meth:`PinRegistry.reader_infos`) and
the reader-age alarm (:meth:`PinRegistry.stuck_readers`) — first closes the
open epoch under its own epoch lock: stamps it with the pass's ``now`` and opens a
new one (:meth:`PinRegistry.close_epoch`, O(1) whatever the number of
readers). So a reader's pin time is the time of the first pass after it
pinned (or of the first removal staged after it, which stamps the open
epoch too: a reader holding back a removal is dated no later than the
removal's staging): its age is a lower bound, short by at most the time between two
passes (the runtime's alarm passes every ``max_pin_age / 2``, so a stuck
reader is escalated at most one such interval later than an exact pin time
would have it), never longer than the truth (the alarm never fires early). Until the
first pass its pin time is unknown (``reader_of`` gives ``None``; its age in
``stats()`` is 0). A snapshot whose reads are guarded by its pin time
(:class:`~.replication.GuardedSnapshot`) is stamped with a clock
reading when it is made, by its maker.

Cancellation. Nothing here awaits. ``Snapshot.__exit__`` unpins with plain
synchronous code, so a cancelled reader always releases its pin.

``tests/core/test_pin_interleavings.py`` steps this code line by line (and
bytecode by bytecode) under chosen schedules; keep the protocol's lines here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any

from . import tasks as _tasks
from .entry import Entry, check_id
from .errors import EntryPruned, SnapshotReleased, UnknownEntry
from .records import Mark, ReaderInfo, Tombstone
from .state import BufferState
from .version import Version

__all__ = ["PinEpoch", "PinRegistry", "Snapshot", "reader_of"]


_NOT_ENTERED: Any = object()
_new_object = object.__new__
_get_ident = threading.get_ident
_loop_cache = _tasks._loop_cache
_current_task_of = _tasks.current_task_of
_cache_trio = _tasks.cache_trio
_active_threads = _tasks._active_threads
_task_name = _tasks.task_name
_tuple_new = tuple.__new__


class PinEpoch:
    """The pin time of the readers that pinned between two passes (see
    "Reader ages" in the module docstring): ``at`` is ``None`` while the
    epoch is open (the registry's current one, which pins copy), then the
    clock reading of the pass that closed it, set once."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


class Snapshot:
    """A reader's pinned view of one version.

    Use it as ``with buf.snapshot() as snap:``. Entering pins the head version
    to the calling task (O(1)); leaving unpins it, also on error and on
    cancellation (``__exit__`` is synchronous: cancellation cannot skip it).
    Every read sees the pinned version and nothing else. After the block, any
    use raises :class:`SnapshotReleased`. A snapshot is pinned at most once.
    """

    __slots__ = ("__weakref__", "_epoch", "_readers", "_registry", "_task", "_version")

    _epoch: PinEpoch
    _readers: dict[Snapshot, None]
    _registry: PinRegistry
    _version: Version | None
    _task: object

    # No __init__: Buffer.snapshot() builds a snapshot with a C-level type
    # call (``Snapshot()``, cheaper than ``object.__new__(Snapshot)`` or a
    # Python __init__ frame) and sets exactly three slots: ``_registry``,
    # ``_version`` (None) and ``_task`` (_NOT_ENTERED until the one pin, then
    # the pinning task). ``_epoch`` (the pin time, stamped lazily: see
    # "Reader ages" in the module docstring) and ``_readers`` (the set this
    # snapshot is registered in) are set at pin.

    # Pin and unpin are the readers' fast path (a goal: <= 0.12x an aiorwlock
    # reader acquire + release), so they are written out here rather than
    # delegated to Buffer methods, inline the task probe's cached case, and
    # take no lock: see "Pins" in the module docstring for the protocol and
    # why each step is safe against writers and unpinners in other threads.

    def __enter__(self) -> Snapshot:
        """Pin the head version to the calling task. O(1) amortized; never
        waits (a retry happens only when a write lands between reading the
        head and registering, and each retry sees a newer head)."""
        if self._task is not _NOT_ENTERED:
            raise SnapshotReleased("a snapshot is pinned once; take a new buffer.snapshot()")
        # The task probe (tasks.current_task), its cached cases (an asyncio
        # loop's run, or this thread's trio entry) and its trio case inline.
        cached = _loop_cache.loop
        if cached is not None:
            loop, ident, task_of, key = cached
            # still the run it was cached in (by identity: see tasks.py)
            if loop._thread_id is ident:
                task = task_of(key)
                if task is None:  # a loop callback, not a task (or no trio task)
                    task = _current_task_of(ident, loop)
            else:
                task = _current_task_of(ident, loop)
        else:
            task = None
            ident = _get_ident()
            if (trio_context := _tasks._trio_context) is not None:
                # No asyncio loop cached for this thread. A trio task step
                # running here is the answer (no asyncio task can be current
                # in the same step: trio's guest mode runs its steps in
                # asyncio callbacks); asked first, it saves asking asyncio for
                # a running loop (a getpid() system call), and the thread's
                # trio entry is cached for the next pins. Otherwise, if no
                # asyncio loop runs, the thread (from threading's table;
                # current_task_of otherwise).
                task = trio_context.__dict__.get("task")
                if task is None:
                    running = _tasks._aio_running_loop
                    if running is not None and running() is None:
                        task = _active_threads.get(ident)
                else:
                    _cache_trio()
            if task is None:
                task = _current_task_of(ident, None)
        reg = self._registry
        # The pin time: the open epoch, which the next pass stamps (no clock
        # read here). Set before the task, which reader_of tests first.
        self._epoch = reg.epoch
        self._task = task
        st = reg.st
        v = st.head
        # The registry's head set: the (version, reader set) pair the last
        # pin_slow validated. If that version is the head just read, the set
        # is the head's set in ``pins`` and its number is in the pin order
        # (see "Pins" in the module docstring): register, then re-read the
        # head. (No ``pins.get(v.number)``: that and the read of ``number``,
        # unspecialized on a Version, which has ``__getattr__``, were ~60 ns.)
        hv, readers = reg.head_set
        if hv is v:
            readers[self] = None
            if st.head is v:
                self._readers = readers
                self._version = v
                return self
            # A write landed meanwhile: withdraw, then pin the new head.
            del readers[self]
            if not readers:
                reg.last_unpin(v.number, readers)
        reg.pin_slow(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Unpin; signals the barrier if that makes a staged removal due. O(1)
        amortized. Synchronous: cancellation cannot skip it."""
        v = self._version
        if v is None:
            return
        self._version = None
        readers = self._readers
        del readers[self]
        if readers:
            return
        reg = self._registry
        st = reg.st
        if st.head is v and not st.staged:
            return  # the head's set is kept for its next reader
        reg.last_unpin(v.number, readers)

    def _v(self) -> Version:
        v = self._version
        if v is None:
            raise SnapshotReleased(
                "snapshot is not pinned: use it inside its 'with buf.snapshot()' block"
            )
        return v

    def _v_for(self, entry_id: object) -> Version:
        """:meth:`_v`, for a read of ``entry_id`` (an id, checked). One call,
        as :meth:`_v` is: the lookups cost no extra frame."""
        v = self._version
        if v is None:
            return self._v()  # raises SnapshotReleased
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        return v

    @property
    def version(self) -> int:
        """The pinned version number."""
        return self._v().number

    @property
    def pinned(self) -> bool:
        """Whether the snapshot is pinned now."""
        return self._version is not None

    def __len__(self) -> int:
        return len(self._v().live)

    def __iter__(self) -> Iterator[Entry]:
        """Live entries in window order. O(1) per entry; the version's
        ordered view is built (or derived) once, on first use, and cached on
        the immutable version; no flat copy of it is made to iterate
        (:meth:`~.version.Version.iter_entries`)."""
        return self._v().iter_entries()

    def entries(self) -> tuple[Entry, ...]:
        """Live entries in window order, as a tuple."""
        return self._v().entries()

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._v().live

    def __getitem__(self, entry_id: str) -> Entry:
        """The live entry; :class:`EntryPruned` (with the tombstone) if it was
        removed in this version; :class:`UnknownEntry` if never seen."""
        v = self._v_for(entry_id)
        slot = v.live.get(entry_id)
        if slot is not None:
            return slot.entry
        raise _missing(v, entry_id)

    def get(self, entry_id: str, default: Any = None) -> Any:
        """The live entry or ``default``."""
        v = self._v_for(entry_id)
        slot = v.live.get(entry_id)
        return default if slot is None else slot.entry

    def resolve(self, entry_id: str) -> Entry | Tombstone:
        """The entry, or its tombstone if removed; :class:`UnknownEntry` if it
        never existed. "Deleted" and "never existed" stay distinguishable."""
        v = self._v_for(entry_id)
        slot = v.live.get(entry_id)
        if slot is not None:
            return slot.entry
        tomb = v.tombs.by_id.get(entry_id)
        if tomb is not None:
            return tomb
        raise UnknownEntry(f"no entry {entry_id!r} in version {v.number}")

    def mark(self, entry_id: str) -> Mark | None:
        """The entry's mark as of the pinned version, or ``None``."""
        v = self._v_for(entry_id)
        return v.marks.get(entry_id)

    def is_stale(self, entry_id: str) -> bool:
        """Whether the entry is marked in the pinned version."""
        v = self._v_for(entry_id)
        return entry_id in v.marks

    @property
    def marks(self) -> Mapping[str, Mark]:
        """Marks of live entries in the pinned version."""
        return self._v().marks

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """Tombstones visible in the pinned version, by id."""
        return self._v().tombs.by_id

    def __repr__(self) -> str:
        v = self._version
        return f"<Snapshot {'released' if v is None else f'of version {v.number}'}>"


def reader_of(snap: Snapshot) -> tuple[object, Version | None, float | None]:
    """What a reader's registry entry holds: its task (``None`` before it
    pinned), its pinned version (``None`` while pinning, unpinning or
    released) and its pin time on the buffer's clock (``None`` before it
    pinned, and until a pass stamped its epoch: see "Reader ages" in the
    module docstring). Lock-free: each field is one read, atomic under the GIL (a
    reader pinned at the same moment may show its version ``None``: skip
    it, as the reader-age alarm does). O(1)."""
    task = snap._task
    if task is _NOT_ENTERED:
        return None, None, None
    return task, snap._version, snap._epoch.at


def _missing(v: Version, entry_id: str) -> Exception:
    tomb = v.tombs.by_id.get(entry_id)
    if tomb is not None:
        return EntryPruned(
            f"entry {entry_id!r} was pruned at version {tomb.version}: {tomb.reason}", tomb
        )
    return UnknownEntry(f"no entry {entry_id!r} in version {v.number}")


class PinRegistry:
    """The reader registry of one buffer: the slow path of pinning and
    unpinning (:meth:`Snapshot.__enter__` and :meth:`Snapshot.__exit__` are
    the fast path) and the walk of the pin order.

    It is handed the buffer's :class:`~.state.BufferState` (whose ``pins``,
    ``pin_order``, ``pin_lock`` and ``pin_popped`` only this module and the
    readers' fast path write) and, once the grace queue exists, two hooks:
    ``horizon`` (the oldest version a reader may hold, :mod:`.grace`) and
    ``signal_due`` (a staged removal is due). It never calls up into the
    buffer that holds it."""

    __slots__ = ("_epoch_lock", "epoch", "head_set", "horizon", "signal_due", "st")

    def __init__(self, st: BufferState) -> None:
        self.st = st
        #: the head set: ``(version, its reader set)`` as the last
        #: :meth:`pin_slow` validated it (``(None, {})`` before the first pin
        #: and once forgotten), which :meth:`Snapshot.__enter__` uses while
        #: that version is the head. One tuple, read and replaced whole
        #: (atomic under the GIL), so the pair is always consistent.
        self.head_set: tuple[Version | None, dict[Snapshot, None]] = _NO_HEAD_SET
        #: the open epoch: what a pin takes as its pin time (see "Reader ages")
        self.epoch = PinEpoch()
        #: serializes epoch swaps only; held for two assignments, never while
        #: taking another lock (so it nests inside ``pin_lock`` or the write lock)
        self._epoch_lock = threading.Lock()
        #: the grace queue's horizon and due signal (installed by the buffer)
        self.horizon: Callable[[], int | None] = self.oldest_pin
        self.signal_due: Callable[[], None] = _no_signal

    def readers(self) -> list[Snapshot]:
        """Every pinned snapshot. Safe from any thread: each copy is one
        C-level operation, atomic under the GIL. A snapshot whose pin is still
        being validated in another thread may be listed with ``_version``
        ``None``; callers skip those."""
        return [s for readers in list(self.st.pins.values()) for s in list(readers)]

    def close_epoch(self, now: float) -> None:
        """Stamp the readers pinned since the last close with ``now``: the
        open epoch gets ``now`` and a new one opens, under the registry's own
        epoch lock (so two closers never close one epoch twice or lose one;
        any thread, under any other lock or none). O(1), whatever the number
        of readers: every reader of the epoch shares its one stamp. A pin
        that copied the old epoch just before the swap is stamped ``now``
        too (it pinned while the close ran). Called by each pass over the
        readers and by the grace queue when it stages a removal."""
        with self._epoch_lock:
            epoch = self.epoch
            self.epoch = PinEpoch()
        epoch.at = now

    def reader_infos(self, now: float) -> tuple[tuple[ReaderInfo, ...], set[int], int | None]:
        """What ``stats()`` reports of the readers: one :class:`ReaderInfo`
        per pinned reader (age against ``now``, never negative), the pinned
        version numbers and the oldest pinned version. The reader sets are
        copied under ``pin_lock`` (walkers only: readers never take it);
        names are found outside it. A reader's task and pin time never
        change once it is pinned, so a reader unpinning meanwhile is either
        listed whole or not at all. O(readers + pinned versions), one tuple
        per reader: a task's name is found by its type
        (:func:`.tasks.task_name`)."""
        name = _task_name
        st = self.st
        with st.pin_lock:
            self.close_epoch(now)
            oldest = self.oldest_locked()
            snaps = [s for readers in list(st.pins.values()) for s in list(readers)]
        # A reader whose epoch is still open (it copied the new one after the
        # swap) pinned after ``now``: age 0.
        infos: tuple[ReaderInfo, ...] = tuple(
            [
                _tuple_new(
                    ReaderInfo,
                    (
                        name(s._task),
                        v.number,
                        age if (at := s._epoch.at) is not None and (age := now - at) > 0.0 else 0.0,
                    ),
                )
                for s in snaps
                if (v := s._version) is not None
            ]
        )
        return infos, {r[1] for r in infos}, oldest

    def pin_slow(self, snap: Snapshot) -> None:
        """Pin ``snap`` (its task already set) to the head, the way that also
        makes the head's reader set: :meth:`Snapshot.__enter__` found no set
        for the head, or its validation failed. The number goes to the right
        end of the order (unless it is there already) *before* the set is
        made, so a reader that finds the set finds the number in the order;
        then register, then re-read the head; retry while a write lands in
        between (each retry sees a newer head). Once validated, stores
        ``(version, set)`` as the head set, which the head's next pins use
        (rule (1') in the module docstring). O(1) amortized; never waits
        (appending behind an older number walks the order if no other walker
        is at it: :meth:`trim`)."""
        st = self.st
        pins = st.pins
        order = st.pin_order
        while True:
            v = st.head
            n = v.number
            readers = pins.get(n)
            if readers is None:
                try:
                    last = order[-1] if order else None  # (raising costs ~1 µs)
                except IndexError:  # emptied by a walker in another thread meanwhile
                    last = None
                if last != n:
                    order.append(n)
                    if last is not None:  # (an empty order has nothing to free)
                        self.trim()
                readers = pins.setdefault(n, {})
            readers[snap] = None
            # In the order and registered, both before the head is re-read:
            # see "Pins" in the module docstring.
            if st.head is v:
                snap._readers = readers
                snap._version = v
                # validated: the next pins of v take the fast path
                self.head_set = (v, readers)
                return
            # A write landed meanwhile: withdraw, then pin the new head.
            del readers[snap]
            if not readers:
                self.last_unpin(n, readers)

    def last_unpin(self, n: int, readers: dict[Snapshot, None]) -> None:
        """The last reader of version ``n`` left (``readers``: the set it
        left). Frees the set unless ``n`` is the head, and if removals are
        staged, sees whether the earliest is due now (the barrier's signal;
        also retries one left due earlier, e.g. after a failed log write)."""
        st = self.st
        if st.head.number != n and not readers:  # the head first, then the set
            st.pins.pop(n, None)
            self.forget_head_set()
        staged = st.staged
        if not staged:
            return
        oldest = self.horizon()
        try:
            grace = staged[0][0]
        except IndexError:  # applied meanwhile by a writer in another thread
            return
        if oldest is None or grace <= oldest:
            self.signal_due()

    def trim(self) -> None:
        """Drop finished versions from the front of the pin order, if no
        other walker is at it (never waits). Called when a new version is
        first pinned. The order then holds the pinned versions plus a few
        finished ones: the head's entry, which the walk keeps while it is the
        head, and what stands behind it (an entry appended by a pin that
        withdrew, or duplicates); later walks free them once they reach the
        front."""
        lock = self.st.pin_lock
        if lock.acquire(False):
            try:
                self.oldest_locked()
            finally:
                lock.release()

    def oldest_locked(self) -> int | None:
        """The oldest pinned version (call under ``pin_lock``). Pops finished
        versions off the front of the order: a version is finished once it is
        not the head and then its set is seen empty (no pin of it can succeed
        any more). O(1) amortized. May answer a version whose only reader is
        a pin still being validated (conservative: that reader withdraws and
        signals)."""
        st = self.st
        order = st.pin_order
        pins = st.pins
        while order:
            n = order[0]
            if st.head.number == n:  # the head first, then its set
                return n if pins.get(n) else None
            if pins.get(n):
                return n
            order.popleft()
            st.pin_popped += 1
            readers = pins.get(n)
            if readers is not None and not readers:
                pins.pop(n, None)
            self.forget_head_set()
        return None

    def forget_head_set(self) -> None:
        """Drop the head set if its version is no longer the head (no pin
        can use it any more), so the registry does not keep a finished
        version alive. Lock-free and only ever a cache miss if it races a
        :meth:`pin_slow` storing a newer pair: the next pin of the head
        takes the slow path and stores it again. O(1)."""
        hv = self.head_set[0]
        if hv is not None and hv is not self.st.head:
            self.head_set = _NO_HEAD_SET

    def oldest_pin(self) -> int | None:
        """The oldest version any reader has pinned, or ``None``. O(1) amortized."""
        with self.st.pin_lock:
            return self.oldest_locked()

    def stuck_readers(
        self,
        now: float,
        max_age: float,
        pos: int,
        escalated: Callable[[Snapshot], bool],
        mark: Callable[[Snapshot], None],
    ) -> tuple[list[Snapshot], int]:
        """The stuck-pin report for a reader-age alarm: the readers pinned
        longer than ``max_age`` at ``now`` (the buffer's clock) that
        ``escalated`` does not know yet, each passed to ``mark`` under
        ``pin_lock`` before it is returned (so two passes at once never
        report a reader twice), and the new ``pos``.

        ``pos`` is the alarm's cursor, ``pin_popped + i`` of the first
        ``pin_order`` entry it has not passed for good (start at 0; hand
        back what the last pass returned). The pass walks the pinned
        versions from there, oldest first, each version's readers in pin
        order, and stops at the first reader not old yet or still pinning
        or unpinning: a reader is reported only after every reader before it
        in that order was. Hence, in each version, the reported readers still
        pinned form a prefix of its readers (readers only leave, or join at
        the end), found by bisection over ``escalated``; the cursor passes a
        version for good once it is not the head and its readers are all
        reported. A reader whose pin registered behind a younger one is
        reported once that one is old.

        Cost: O(log readers) calls of ``escalated``, a C-level copy of each
        visited version's reader set, O(1) per reported reader; not a walk of
        every pinned reader. Pops finished versions off the front of the
        order first (:meth:`oldest_locked`). Both callbacks run under
        ``pin_lock`` (readers never take it): they must be O(1) and must not
        pin, unpin or walk. Never awaits; takes ``pin_lock`` and releases it
        on any exception (``mark``'s too: the readers marked before it stay
        marked, and are not returned)."""
        found: list[Snapshot] = []
        st = self.st
        with st.pin_lock:
            self.close_epoch(now)  # stamps the readers pinned since the last pass
            self.oldest_locked()  # pops finished versions off the front
            order = st.pin_order
            pins = st.pins
            head = st.head.number
            i = max(0, pos - st.pin_popped)
            advance = True  # every version before i is passed for good
            stop = False
            while i < len(order) and not stop:
                n = order[i]
                readers = pins.get(n)
                snaps = list(readers) if readers else []
                lo, hi = 0, len(snaps)
                while lo < hi:  # the reported prefix
                    mid = (lo + hi) // 2
                    if escalated(snaps[mid]):
                        lo = mid + 1
                    else:
                        hi = mid
                for k in range(lo, len(snaps)):  # no copy of the prefix
                    snap = snaps[k]
                    _task, pinned, since = reader_of(snap)
                    if pinned is None or since is None or now - since <= max_age:
                        stop = True  # pinning, unpinning, or not old yet
                        break
                    mark(snap)
                    found.append(snap)
                if stop or n == head:
                    advance = False  # its readers may still come of age / join
                if advance:
                    pos = st.pin_popped + i + 1
                i += 1
        return found, pos


#: the head set of a registry no pin has validated yet (or that forgot it):
#: ``None`` is never a head, so the fast path never uses its dict
_NO_HEAD_SET: tuple[Version | None, dict[Snapshot, None]] = (None, {})


def _no_signal() -> None:
    """The due signal before a grace queue is installed: nothing is staged."""
