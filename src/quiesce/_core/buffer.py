"""The multi-version context buffer: pins, marks, policy-checked prune and edit.

Design
======

Every change publishes a new immutable :class:`~.version.Version`; the head
pointer is swapped with one attribute store (atomic under the GIL). A reader
*pins* the head for the length of its ``with buf.snapshot()`` block and sees
exactly that version however long it awaits (invariant 1).

Removal is two-phase, like RCU or PostgreSQL's VACUUM. A prune request is
decided by the :class:`~.policy.Policy` (the pruner can be refused), then
*staged*: the entry is marked in a new version ``m``, and its removal becomes
due at its **grace point** — when no reader pinned at a version older than
``m`` remains. Readers that pinned at ``m`` or later saw the mark, so they do
not hold the removal back: a steady stream of overlapping readers never
starves it (a grace period, not a global "zero readers" moment). A due
removal is re-validated against the head when applied (a survivor that began
to cite the entry meanwhile keeps it alive, refused and logged).

Pins. A pin is one entry in the set of readers of its version
(``_pins``: version number -> dict of snapshots) plus, for the first pin of
a version, its number at the right end of ``_pin_order``, a deque whose front
is the oldest pinned version. Pin and unpin take no lock (they are the
readers' fast path): under the GIL each step is one atomic C-level operation
(``dict.setdefault``, a dict store or delete, a deque append), and a pin is
*validated* like a hazard pointer — register in the head's set, then re-read
the head; if it moved, withdraw and retry. So a successful pin was
registered while its version was still the head: a writer that publishes
after it, and later asks for the oldest pin, sees it. Two rules make the
unlocked cleanup safe, both resting on the head number only growing: an
empty set is deleted only by someone who first saw that its version is no
longer the head (no pin there can succeed any more) and *then* saw it
empty; ``_pin_order`` is popped only at its front, only under ``_pin_lock``
(which serializes the walkers, never the readers), by the same rule. Pin
and unpin are O(1) amortized, independent of the buffer's size and of the
number of readers. This relies on the GIL: ``Buffer()`` refuses to run in
a free-threaded interpreter whose GIL is off.

Threads. Mutations may come from worker threads. Writers serialize on
``_write_lock``; readers never take it. An unpin that makes a removal due
applies it inline when nobody writes (sync mode), else leaves a flag that the
writer drains on release; under the async runtime the unpin only wakes the
barrier scheduler.

Durability. Records are appended to the in-memory log on every change; the
sink receives them in groups (``flush()``), and a removal's record — with its
tombstones and every record before it — is made durable *before* the removal
is published.

Cancellation. Nothing here awaits. ``Snapshot.__exit__`` unpins with plain
synchronous code, so a cancelled reader always releases its pin.

Prior art: RCU grace periods (liburcu), crossbeam-epoch, PostgreSQL's
``backend_xmin`` horizon, h11's sans-IO state machines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any

from . import tasks as _tasks
from .entry import Entry, check_id, check_text, check_turn
from .errors import (
    DanglingReference,
    DuplicateEntry,
    EntryPruned,
    InvalidArgument,
    InvalidType,
    LogWriteError,
    ProtectedEntry,
    ReadmissionRefused,
    SnapshotReleased,
    UnknownEntry,
)
from .log import EditLog, LogSink, Records, materialize, materialize_range
from .plan import EditPlan, Move, Prune, Rewrite, Summarize
from .policy import Policy
from .records import (
    EditReport,
    Escalation,
    EscalationKind,
    LogRecord,
    Mark,
    Outcome,
    Override,
    PruneReport,
    ReaderInfo,
    Refusal,
    Stats,
    Status,
    Tombstone,
)
from .tasks import current_task, task_name
from .version import EMPTY_MAP, Slot, Version

__all__ = ["Buffer", "Snapshot"]



# ---------------------------------------------------------------------------
# Staged removals


@dataclass(slots=True)
class _Group:
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


# ---------------------------------------------------------------------------
# Drafts: batch changes to a version, then freeze them


class _Draft:
    """A mutable working copy of a version (``Map.mutate()`` underneath), used
    by every multi-part change and by recovery. ``finish`` freezes it.
    """

    __slots__ = ("base", "live", "marks", "next_key", "referrers", "tombs")

    def __init__(self, base: Version) -> None:
        self.base = base
        self.live = base.live.mutate()
        self.marks = base.marks.mutate()
        self.tombs = base.tombs
        self.referrers = base.referrers.mutate()
        self.next_key = base.next_key

    def add(self, entry: Entry, key: float | None, number: int) -> float:
        if key is None:
            key = self.next_key
        if key >= self.next_key:
            self.next_key = float(int(key) + 1)
        self.live[entry.id] = Slot(entry, key, number)
        for ref in entry.refs:
            self.referrers[ref] = self.referrers.get(ref, EMPTY_MAP).set(entry.id, None)
        return key

    def _unlink(self, entry: Entry) -> None:
        for ref in entry.refs:
            cited = self.referrers.get(ref)
            if cited is None or entry.id not in cited:
                continue
            cited = cited.delete(entry.id)
            if len(cited):
                self.referrers[ref] = cited
            else:
                del self.referrers[ref]

    def replace(self, entry: Entry, number: int) -> None:
        old: Slot = self.live[entry.id]
        self._unlink(old.entry)
        self.live[entry.id] = Slot(entry, old.key, number)
        for ref in entry.refs:
            self.referrers[ref] = self.referrers.get(ref, EMPTY_MAP).set(entry.id, None)

    def set_key(self, entry_id: str, key: float, number: int, *, touch: bool = True) -> None:
        """Give ``entry_id`` a new order key; ``touch`` records the change as
        made at ``number`` (a renumbering alone is not a change to the entry)."""
        old: Slot = self.live[entry_id]
        self.live[entry_id] = Slot(old.entry, key, number if touch else old.changed)
        if key >= self.next_key:
            self.next_key = float(int(key) + 1)

    def remove(self, tomb: Tombstone) -> None:
        slot: Slot = self.live[tomb.id]
        self._unlink(slot.entry)
        del self.live[tomb.id]
        if tomb.id in self.marks:
            del self.marks[tomb.id]
        self.tombs = self.tombs.add(tomb)

    def finish(self, number: int) -> Version:
        return Version(
            number,
            self.live.finish(),
            self.marks.finish(),
            self.tombs,
            self.referrers.finish(),
            self.next_key,
        )


def _key_between(lo: float | None, hi: float | None) -> float | None:
    """An order key strictly between ``lo`` and ``hi`` (``None``: unbounded),
    or ``None`` when float precision leaves no room (the caller renumbers)."""
    if lo is None and hi is None:
        return 0.0
    if lo is None:
        assert hi is not None
        return hi - 1.0
    if hi is None:
        return lo + 1.0
    mid = (lo + hi) / 2.0
    return mid if lo < mid < hi else None


# ---------------------------------------------------------------------------
# Snapshots


_NOT_ENTERED: Any = object()
_new_object = object.__new__
_get_ident = threading.get_ident
_thread_loops = _tasks._thread_loops


class Snapshot:
    """A reader's pinned view of one version.

    Use it as ``with buf.snapshot() as snap:``. Entering pins the head version
    to the calling task (O(1)); leaving unpins it, also on error and on
    cancellation (``__exit__`` is synchronous: cancellation cannot skip it).
    Every read sees the pinned version and nothing else. After the block, any
    use raises :class:`SnapshotReleased`. A snapshot is pinned at most once.
    """

    __slots__ = ("__weakref__", "_buffer", "_readers", "_since", "_task", "_version")

    _since: float
    _readers: dict[Snapshot, None]

    def __init__(self, buffer: Buffer) -> None:
        # Buffer.snapshot() builds snapshots without this frame (the pin fast
        # path); both set exactly these three slots. ``_task`` is _NOT_ENTERED
        # until the one pin, then the pinning task; ``_since`` and
        # ``_readers`` (the set this snapshot is registered in) are set at pin.
        self._buffer = buffer
        self._version: Version | None = None
        self._task: object = _NOT_ENTERED

    # Pin and unpin are the readers' fast path (a goal: <= 0.2x an aiorwlock
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
        # The task probe (tasks.current_task), its cached asyncio case inline.
        ident = _get_ident()
        ref = _thread_loops.get(ident)
        task = None
        if ref is not None:
            loop = ref()
            if loop is not None and loop._thread_id == ident:
                task = _tasks._aio_task_of(loop)  # type: ignore[misc]
        if task is None:
            task = current_task()
        self._task = task
        buf = self._buffer
        self._since = buf._clock()
        pins = buf._pins
        order = buf._pin_order
        while True:
            v = buf._head
            n = v.number
            readers = pins.get(n)
            if readers is None:
                readers = pins.setdefault(n, {})
            readers[self] = None
            # Registered before the order is consulted, and both before the
            # head is re-read: see "Pins" in the module docstring.
            try:
                last = order[-1]
            except IndexError:
                last = None
            if last != n:
                order.append(n)
                buf._trim_pins()
            if buf._head is v:
                break
            # A write landed meanwhile: withdraw, then pin the new head.
            del readers[self]
            if not readers:
                buf._last_unpin(n, readers)
        self._readers = readers
        self._version = v
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
        buf = self._buffer
        if buf._head is v and not buf._staged:
            return  # the head's set is kept for its next reader
        buf._last_unpin(v.number, readers)

    def _v(self) -> Version:
        v = self._version
        if v is None:
            raise SnapshotReleased(
                "snapshot is not pinned: use it inside its 'with buf.snapshot()' block"
            )
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
        """Live entries in window order. O(1) per entry after the version's
        first iteration (the order is cached on the immutable version)."""
        return iter(self._v().entries())

    def entries(self) -> tuple[Entry, ...]:
        """Live entries in window order, as a tuple."""
        return self._v().entries()

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._v().live

    def __getitem__(self, entry_id: str) -> Entry:
        """The live entry; :class:`EntryPruned` (with the tombstone) if it was
        removed in this version; :class:`UnknownEntry` if never seen."""
        v = self._v()
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        slot = v.live.get(entry_id)
        if slot is not None:
            return slot.entry
        raise _missing(v, entry_id)

    def get(self, entry_id: str, default: Any = None) -> Any:
        """The live entry or ``default``."""
        v = self._v()
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        slot = v.live.get(entry_id)
        return default if slot is None else slot.entry

    def resolve(self, entry_id: str) -> Entry | Tombstone:
        """The entry, or its tombstone if removed; :class:`UnknownEntry` if it
        never existed. "Deleted" and "never existed" stay distinguishable."""
        v = self._v()
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        slot = v.live.get(entry_id)
        if slot is not None:
            return slot.entry
        tomb = v.tombs.by_id.get(entry_id)
        if tomb is not None:
            return tomb
        raise UnknownEntry(f"no entry {entry_id!r} in version {v.number}")

    def mark(self, entry_id: str) -> Mark | None:
        """The entry's mark as of the pinned version, or ``None``."""
        v = self._v()
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        return v.marks.get(entry_id)

    def is_stale(self, entry_id: str) -> bool:
        """Whether the entry is marked in the pinned version."""
        v = self._v()
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
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


def _not_markable(head: Version, entry_id: str) -> Mark:
    """mark_stale's slow path for an id not in the markable index: the first
    mark if it is marked already, else the error saying why it cannot be."""
    existing = head.marks.get(entry_id)
    if existing is not None:
        return existing
    slot = head.live.get(entry_id)
    if slot is None:
        raise _missing(head, entry_id) from None  # not chained to the index miss
    raise ProtectedEntry(
        f"entry {entry_id!r} is a {slot.entry.kind.name}: immutable, never marked"
    ) from None


def _missing(v: Version, entry_id: str) -> Exception:
    tomb = v.tombs.by_id.get(entry_id)
    if tomb is not None:
        return EntryPruned(
            f"entry {entry_id!r} was pruned at version {tomb.version}: {tomb.reason}", tomb
        )
    return UnknownEntry(f"no entry {entry_id!r} in version {v.number}")


# ---------------------------------------------------------------------------
# The buffer


class Buffer:
    """A versioned context buffer. See the module docstring for the design.

    ``log`` is a :class:`LogSink` (``None``: the in-memory log only); if it
    already holds records, the buffer is recovered from them (head content,
    marks, tombstones, staged removals, the log and the version number).
    ``policy`` decides what may be removed (``None``: :class:`Policy()`).

    Every public method is synchronous and safe to call from coroutines and
    from worker threads. Only the methods that make removals durable
    (``prune``, ``edit``, ``apply_due``, ``flush``) may wait for a disk.
    """

    def __init__(
        self,
        log: LogSink | None = None,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        escalation_capacity: int = 10_000,
    ) -> None:
        if policy is None:
            policy = Policy()
        elif not isinstance(policy, Policy):
            raise InvalidType(f"policy must be a Policy, not {type(policy).__name__}")
        if log is not None and not isinstance(log, LogSink):
            raise InvalidType(f"log must be a LogSink, not {type(log).__name__}")
        gil_enabled = getattr(sys, "_is_gil_enabled", None)  # Python >= 3.13
        if gil_enabled is not None and not gil_enabled():
            raise RuntimeError(
                "quiesce's lock-free pins rely on the GIL, which is disabled in this "
                "free-threaded interpreter: run it with PYTHON_GIL=1 (or -X gil=1)"
            )
        self._policy = policy
        self._sink = log
        self._clock = clock
        self._write_lock = threading.RLock()
        self._pin_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._head = Version.empty()
        # pins
        # version number -> the snapshots pinning it (insertion-ordered dicts)
        self._pins: dict[int, dict[Snapshot, None]] = {}
        self._pin_order: deque[int] = deque()
        # staged removals
        self._staged: list[tuple[int, int, _Group]] = []
        self._staged_ids: dict[str, _Group] = {}
        self._applying: dict[int, _Group] = {}  # popped, being made durable
        # Ids live, mutable and unmarked in the head: the mark fast path asks
        # this set (a hash lookup) instead of two persistent-map lookups.
        # Kept exact under the write lock; _check() asserts it.
        self._unmarked: set[str] = set()
        # Ids appended since the index was last folded (a list append is
        # cheaper than a set insert into a large, cold table); _markable()
        # folds them in, under the write lock, before the index is asked.
        self._unmarked_new: list[str] = []
        self._gids = itertools.count(1)
        self._backlog_alarm = False
        # Readers outside this process (a shared buffer's other members): the
        # lowest version they may still read, or None for none. A removal is
        # due only when its grace version is <= this too; -1 holds every
        # removal back (a replica never applies one itself).
        self._grace_floor: int | None = None
        # due signalling (the runtime installs _due_hook to wake its scheduler)
        self._due_hook: Callable[[], None] | None = None
        self._due_flag = False
        self._due_since: float | None = None
        self._latency_last: float | None = None
        self._latency_max: float | None = None
        # escalations (the runtime installs _escalation_hook)
        self._escalation_hook: Callable[[Escalation], bool] | None = None
        self._escalations: deque[Escalation] = deque(maxlen=escalation_capacity)
        self._escalations_dropped = 0
        # the log
        self._records: Records = []  # LogRecords and compact records (log.py)
        self._log_view = EditLog(self._records)
        self._synced = 0
        self._log_failing = False
        self._counts: Counter[str] = Counter()
        self._refusals: Counter[Refusal] = Counter()
        # invariant 4 bookkeeping: the bytes every immutable entry was admitted with
        self._immutable_hashes: dict[str, str] = {}
        self._max_removed_grace = 0
        if log is not None:
            records = log.load()
            if records:
                from .replay import replay

                replay(self, records)
                self._synced = len(self._records)

    # -- reading --------------------------------------------------------

    @property
    def version(self) -> int:
        """The head version number (strictly increasing)."""
        return self._head.number

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def log(self) -> EditLog:
        """The append-only edit log (read-only view)."""
        return self._log_view

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """Tombstones in the head version, by id (read-only)."""
        return self._head.tombs.by_id

    @property
    def sink(self) -> LogSink | None:
        return self._sink

    def head(self) -> Version:
        """The head version object (immutable; for tools and the runtime)."""
        return self._head

    def snapshot(self) -> Snapshot:
        """A snapshot to use as ``with buf.snapshot() as snap:``; entering pins
        the head version to the calling task. Never awaits, never waits for a
        writer. Pin and unpin are O(1)."""
        snap: Snapshot = _new_object(Snapshot)
        snap._buffer = self
        snap._version = None
        snap._task = _NOT_ENTERED
        return snap

    def __len__(self) -> int:
        return len(self._head.live)

    def __repr__(self) -> str:
        return f"<Buffer version={self.version} entries={len(self)} pinned={len(self._readers)}>"

    @property
    def _readers(self) -> list[Snapshot]:
        """Every pinned snapshot. Safe from any thread: each copy is one
        C-level operation, atomic under the GIL. A snapshot whose pin is still
        being validated in another thread may be listed with ``_version``
        ``None``; callers skip those."""
        return [s for readers in list(self._pins.values()) for s in list(readers)]

    # -- pins -------------------------------------------------------------

    # Pinning and unpinning are Snapshot.__enter__ and Snapshot.__exit__;
    # below is their slow path and the walk of the pin order.

    def _last_unpin(self, n: int, readers: dict[Snapshot, None]) -> None:
        """The last reader of version ``n`` left (``readers``: the set it
        left). Frees the set unless ``n`` is the head, and if removals are
        staged, sees whether the earliest is due now (the barrier's signal;
        also retries one left due earlier, e.g. after a failed log write)."""
        if self._head.number != n and not readers:  # the head first, then the set
            self._pins.pop(n, None)
        staged = self._staged
        if not staged:
            return
        with self._pin_lock:
            oldest = self._with_floor(self._oldest_pin())
        try:
            grace = staged[0][0]
        except IndexError:  # applied meanwhile by a writer in another thread
            return
        if oldest is None or grace <= oldest:
            self._signal_due()

    def _trim_pins(self) -> None:
        """Drop finished versions from the front of the pin order, if no
        other walker is at it (never waits). Called when a new version is
        first pinned. The order then holds the pinned versions plus a few
        finished ones: the head's entry, which the walk keeps while it is the
        head, and what stands behind it (an entry appended by a pin that
        withdrew, or duplicates); later walks free them once they reach the
        front."""
        lock = self._pin_lock
        if lock.acquire(False):
            try:
                self._oldest_pin()
            finally:
                lock.release()

    def _oldest_pin(self) -> int | None:
        """The oldest pinned version (call under ``_pin_lock``). Pops finished
        versions off the front of the order: a version is finished once it is
        not the head and then its set is seen empty (no pin of it can succeed
        any more). O(1) amortized. May answer a version whose only reader is
        a pin still being validated (conservative: that reader withdraws and
        signals)."""
        order = self._pin_order
        pins = self._pins
        while order:
            n = order[0]
            if self._head.number == n:  # the head first, then its set
                return n if pins.get(n) else None
            if pins.get(n):
                return n
            order.popleft()
            readers = pins.get(n)
            if readers is not None and not readers:
                pins.pop(n, None)
        return None

    def oldest_pin(self) -> int | None:
        """The oldest version any reader has pinned, or ``None``. O(1) amortized."""
        with self._pin_lock:
            return self._oldest_pin()

    def _with_floor(self, oldest: int | None) -> int | None:
        """``oldest`` lowered to the readers outside this process
        (``_grace_floor``): what a removal's grace version is compared with."""
        floor = self._grace_floor
        if floor is None or (oldest is not None and oldest <= floor):
            return oldest
        return floor

    # -- due removals ------------------------------------------------------

    def _signal_due(self) -> None:
        if self._due_since is None:
            self._due_since = self._clock()
        hook = self._due_hook
        if hook is not None:
            hook()
            return
        self._due_flag = True
        self._drain_due()

    def _drain_due(self) -> None:
        # Apply due removals unless a writer holds the lock; that writer sees
        # the flag when it releases and drains instead (no reader waits).
        # That writer may be this very thread (a snapshot released inside a
        # policy callback): the lock is re-entrant, so ask it, or the removal
        # would be published in the middle of the outer write.
        if self._write_lock._is_owned():  # type: ignore[attr-defined]
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
        oldest = self._with_floor(self.oldest_pin())
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

    def apply_due(self) -> tuple[str, ...]:
        """Apply every staged removal that is due, as one new version (one
        batch), re-validating each against the head. Returns the removed ids.

        Raises :class:`LogWriteError` if the tombstones cannot be made durable;
        then nothing is published and the removals stay staged.

        With a durable sink the disk write happens *outside* the write lock,
        so ``mark_stale`` and ``append`` never wait for a disk: (1) under the
        lock, pop the due groups and log their tombstones as an intent
        (``tombstone`` record); (2) without it, flush the log — the tombstones
        are now durable; (3) under the lock, re-validate against the head of
        that moment, publish one version and log the ``remove`` record. A
        crash between (2) and the next flush recovers the groups staged again.
        """
        if self._sink is not None:
            return self._apply_due_durable(blocking=True) or ()
        self._write_lock.acquire()
        try:
            return self._apply_due_locked()
        finally:
            self._release()

    def _pop_due(self) -> list[_Group]:
        with self._pin_lock:
            oldest = self._with_floor(self._oldest_pin())
        staged = self._staged
        groups: list[_Group] = []
        while staged and (oldest is None or staged[0][0] <= oldest):
            groups.append(heapq.heappop(staged)[2])
        return groups

    def _requeue(self, groups: list[_Group]) -> None:
        for g in groups:
            self._applying.pop(g.gid, None)
            heapq.heappush(self._staged, (g.grace, g.gid, g))

    def _apply_due_locked(self) -> tuple[str, ...]:
        """Single-phase application (no durable sink); under the write lock."""
        groups = self._pop_due()
        if not groups:
            return ()
        try:
            return self._remove_groups(groups)
        except BaseException:
            self._requeue(groups)
            raise

    def _apply_due_durable(self, *, blocking: bool) -> tuple[str, ...] | None:
        """The three phases of :meth:`apply_due` with a durable sink. Returns
        ``None`` when ``blocking`` is false and a writer holds the lock (the
        due flag is left for it)."""
        lock = self._write_lock
        if not lock.acquire(blocking):
            self._due_flag = True
            return None
        try:
            groups = self._pop_due()
            if not groups:
                return ()
            for g in groups:
                self._applying[g.gid] = g
            intent = self._log_intent(groups)
        finally:
            lock.release()
        try:
            self.flush()
        except BaseException:
            with lock:
                self._requeue(groups)
            raise
        lock.acquire()
        try:
            try:
                removed = self._remove_groups(groups, intent)
            except BaseException:
                self._requeue(groups)
                raise
        finally:
            self._release()
        # Make the removal record durable too (outside the lock). If this
        # fails the tombstones are still durable in the intent; a crash before
        # the next flush recovers the groups staged again.
        with contextlib.suppress(LogWriteError):
            self.flush()
        return removed

    def _log_intent(self, groups: list[_Group]) -> int:
        """Log the tombstones the groups would write (version not yet known)."""
        live = self._head.live
        tombs = []
        for g in groups:
            for i in g.ids:
                slot = live.get(i)
                if slot is not None:
                    e = slot.entry
                    tomb = Tombstone(i, e.content_hash, g.reason, g.turn, g.actor, 0, e.kind, e.key)
                    tombs.append(_tomb_to_dict(tomb) | {"version": None})
        record = self._record(
            "tombstone",
            None,
            tuple(i for g in groups for i in g.ids),
            actor=None,
            reason="removal intent",
            turn=None,
            outcome="intent",
            detail={"gids": [g.gid for g in groups], "tombstones": tombs},
        )
        self._append_record(record)
        return record.seq

    def _remove_groups(self, groups: list[_Group], intent: int | None = None) -> tuple[str, ...]:
        head = self._head
        policy = self._policy
        refused: dict[str, Refusal] = {}
        removal: dict[str, _Group] = {}
        for g in groups:
            for i in g.ids:
                slot = head.live.get(i)
                if slot is None:
                    continue
                if slot.changed > g.staged:
                    refused[i] = Refusal.CONFLICT
                elif policy.is_immutable(slot.entry):
                    refused[i] = Refusal.IMMUTABLE
                else:
                    prot = policy.protection(slot.entry)
                    if prot is not None:
                        refused[i] = Refusal.PROTECTED if prot == "protected" else Refusal.NEGATIVE
                    else:
                        removal[i] = g
        for i in _cascade(head, removal, refused):
            del removal[i]
        n = head.number + 1
        tombs: list[Tombstone] = []
        draft = _Draft(head) if removal else None
        for i, g in removal.items():
            e = head.live[i].entry
            tomb = Tombstone(i, e.content_hash, g.reason, g.turn, g.actor, n, e.kind, e.key)
            tombs.append(tomb)
            assert draft is not None
            draft.remove(tomb)
        ids = tuple(i for g in groups for i in g.ids)
        record = self._record(
            "remove",
            n if removal else None,
            ids,
            actor=groups[0].actor if len(groups) == 1 else None,
            reason=groups[0].reason if len(groups) == 1 else "batch",
            turn=None,
            outcome="applied" if removal and not refused else ("partial" if removal else "refused"),
            detail={
                "gids": [g.gid for g in groups],
                "tombstones": [_tomb_to_dict(t) for t in tombs],
                "refused": {i: r.value for i, r in refused.items()},
                "refusals": [r.value for r in refused.values()],
                **({} if intent is None else {"intent": intent}),
            },
        )
        if removal:
            # Invariant: a tombstone is durable before the removal it records
            # is published. With a sink, the caller made it durable in the
            # intent record (_apply_due_durable); without one there is no disk.
            assert intent is not None or self._sink is None
            self._append_record(record)
            assert draft is not None
            new = draft.finish(n)
            self._max_removed_grace = max(
                self._max_removed_grace, max(g.grace for g in groups)
            )
            self._head = new
            self._markable().difference_update(removal)
        else:
            self._append_record(record)
        for g in groups:
            self._applying.pop(g.gid, None)
            for i in g.ids:
                self._staged_ids.pop(i, None)
        self._after_unstage()
        if self._due_since is not None:
            lat = max(0.0, self._clock() - self._due_since)
            self._latency_last = lat
            self._latency_max = lat if self._latency_max is None else max(self._latency_max, lat)
            self._due_since = None
        return tuple(removal)

    # -- the log -----------------------------------------------------------

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
    ) -> LogRecord:
        return LogRecord(
            len(self._records), time.time(), op, version, ids, actor, reason, turn, outcome, detail
        )

    def _append_record(self, record: LogRecord) -> None:
        self._records.append(record)
        _count(self, record)

    def flush(self) -> None:
        """Return once every change made before the call is durable in the sink.

        One sink write (one commit) for every pending record, whatever their
        number. Raises :class:`LogWriteError` on failure; the records stay
        pending and a later successful ``flush()`` resumes.
        """
        sink = self._sink
        if sink is None:
            return
        with self._flush_lock:
            start = self._synced
            # a stable prefix; appends go on meanwhile
            batch = materialize_range(self._records, start, len(self._records))
            if not batch:
                return
            try:
                sink.write(batch)
            except Exception as exc:
                self._log_failing = True
                raise LogWriteError(f"edit log write failed: {exc}") from exc
            self._log_failing = False
            self._synced = start + len(batch)

    @property
    def pending_records(self) -> int:
        """Records not yet durable in the sink."""
        return 0 if self._sink is None else len(self._records) - self._synced

    # -- escalations -------------------------------------------------------

    def _escalate(self, esc: Escalation) -> None:
        """Deliver an escalation (never blocks). Undeliverable ones are counted."""
        hook = self._escalation_hook
        if hook is not None:
            if not hook(esc):
                self._escalations_dropped += 1
            return
        if len(self._escalations) == self._escalations.maxlen:
            self._escalations_dropped += 1
        self._escalations.append(esc)

    def drain_escalations(self) -> list[Escalation]:
        """Escalations queued while no runtime consumes them (oldest first)."""
        out = list(self._escalations)
        self._escalations.clear()
        return out

    def escalate(
        self,
        kind: EscalationKind,
        detail: str,
        *,
        data: Mapping[str, Any] | None = None,
    ) -> Escalation:
        """Log and deliver an escalation raised outside the core (the runtime's
        reader-age alarm)."""
        esc = Escalation(kind, detail, None, (), self.version, dict(data or {}))
        self._write_lock.acquire()
        try:
            self._append_record(
                self._record(
                    "escalate",
                    None,
                    tuple(str(i) for i in (data or {}).get("ids", ())),
                    actor=None,
                    reason=detail,
                    turn=None,
                    outcome=kind.value,
                    detail={"kind": kind.value, "data": dict(data or {})},
                )
            )
        finally:
            self._release()
        self._escalate(esc)
        return esc

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

    # -- append ------------------------------------------------------------

    def append(self, entry: Entry, *, override: Override | None = None) -> int:
        """Publish a new version with ``entry`` at the end of the window.

        Raises :class:`DuplicateEntry` (id live or tombstoned),
        :class:`DanglingReference` (a ref unknown or tombstoned; carries the
        tombstone), :class:`ReadmissionRefused` (content hash or key matches a
        tombstone and no ``override``). On any error the version is unchanged
        (a refused re-admission is logged). O(log n + refs·log n). Never
        touches a disk.
        """
        if type(entry) is not Entry:
            raise InvalidType(f"append takes an Entry, not {type(entry).__name__}")
        if override is not None and type(override) is not Override:
            raise InvalidType(f"override must be an Override, not {type(override).__name__}")
        self._write_lock.acquire()
        try:
            head = self._head
            eid = entry.id
            live = head.live
            by_id = head.tombs.by_id
            if eid in live:
                raise DuplicateEntry(f"entry {eid!r} is already in the buffer")
            if eid in by_id:
                raise DuplicateEntry(
                    f"entry {eid!r} was pruned at version {by_id[eid].version}; ids are not reused"
                )
            for ref in entry.refs:
                if ref not in live:
                    tomb = by_id.get(ref)
                    if tomb is not None:
                        raise DanglingReference(
                            f"entry {eid!r} cites {ref!r}, pruned at version {tomb.version}: "
                            f"{tomb.reason}",
                            ref,
                            tomb,
                        )
                    raise DanglingReference(f"entry {eid!r} cites unknown entry {ref!r}", ref, None)
            overridden = False
            if head.tombs.by_id:
                tomb = head.tombs.matching(entry.content_hash, entry.key)
                if tomb is not None:
                    if override is None:
                        self._append_record(
                            self._record(
                                "refuse",
                                None,
                                (eid,),
                                actor=None,
                                reason="re-admission of tombstoned content",
                                turn=entry.turn,
                                outcome=Refusal.READMISSION.value,
                                detail={
                                    "request": "append",
                                    "tombstone": _tomb_to_dict(tomb),
                                    "refusals": [Refusal.READMISSION.value],
                                },
                            )
                        )
                        raise ReadmissionRefused(
                            f"entry {eid!r} matches tombstone of {tomb.id!r} (pruned at version "
                            f"{tomb.version}: {tomb.reason}); re-admission needs an Override",
                            tomb,
                        )
                    overridden = True
            n = head.number + 1
            key = head.next_key
            new_live = live.set(eid, _new_tuple(Slot, (entry, key, n)))
            referrers = head.referrers
            for ref in entry.refs:
                referrers = referrers.set(ref, referrers.get(ref, EMPTY_MAP).set(eid, None))
            new = Version(n, new_live, head.marks, head.tombs, referrers, key + 1.0)
            if entry.kind in _IMMUTABLE:
                self._immutable_hashes[eid] = entry.content_hash
            else:
                self._unmarked_new.append(eid)  # folded into the index by _markable()
            if override is None:
                # A compact record (log.py): the LogRecord — and the entry's
                # JSON-ready dict — is built when first read.
                self._records.append((_build_append_record, entry, key, n, _wall_clock()))
            else:
                record = _build_append_record(len(self._records), entry, key, n, _wall_clock())
                # "overridden" only when the override let matching content in
                # (_count derives readmissions_overridden from it, also on replay)
                detail = dict(record.detail)
                detail["override"] = {"reason": override.reason, "turn": override.turn}
                self._append_record(
                    record._replace(
                        reason=override.reason,
                        outcome="overridden" if overridden else "applied",
                        detail=detail,
                    )
                )
            self._head = new
            return n
        finally:
            self._write_lock.release()  # _release(), written out
            if self._due_flag and self._due_hook is None:
                self._drain_due()

    # -- mark ----------------------------------------------------------------

    def mark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        """Mark an entry stale: the sync fast path (seed 000's safe operation).

        Never awaits, never waits for readers, the barrier or a disk; O(log n)
        (one persistent-map ``set``), plus folding the ids appended since the
        last mark into the markable index (amortized O(1) per append; a set
        update, no persistent-map work). Idempotent: the first mark stands and is
        returned again. Raises :class:`ProtectedEntry` for ``CONSTRAINT`` and
        ``INSTRUCTION``, :class:`EntryPruned` for a removed entry,
        :class:`UnknownEntry` for an id never seen.
        """
        if type(entry_id) is not str or not entry_id:
            check_id(entry_id)
        if type(reason) is not str or not reason:
            check_text(reason, "reason")
        if turn is not None and (type(turn) is not int or turn < 0):
            check_turn(turn)
        # The hot path: records are built with tuple.__new__ (see _new_tuple),
        # and _release() is written out.
        lock = self._write_lock
        lock.acquire()
        try:
            head = self._head
            marks = head.marks
            unmarked = self._unmarked
            try:
                unmarked.remove(entry_id)
            except KeyError:
                if not (self._unmarked_new and entry_id in self._markable()):
                    # Not (live, mutable and unmarked): already marked,
                    # immutable, removed or unknown. The slow path says which.
                    return _not_markable(head, entry_id)
                unmarked.remove(entry_id)  # appended since the last fold
            n = head.number + 1
            mark: Mark = _new_tuple(Mark, (entry_id, reason, turn, n))
            # A compact record (log.py): the LogRecord is built when first read.
            self._records.append((_build_mark_record, mark, _wall_clock()))
            # Version.with_marks, written out.
            new = _new_object(Version)
            new.number = n
            new.live = head.live
            new.marks = marks.set(entry_id, mark)
            new.tombs = head.tombs
            new.referrers = head.referrers
            new.next_key = head.next_key
            new._entries = head._entries  # marks change neither order nor content
            self._head = new
            return mark
        finally:
            lock.release()
            if self._due_flag and self._due_hook is None:
                self._drain_due()

    def _markable(self) -> set[str]:
        """The exact index of live, mutable, unmarked ids (call under the
        write lock): folds in the ids appended since the last call. Amortized
        O(1) per append."""
        pending = self._unmarked_new
        if pending:
            self._unmarked.update(pending)
            pending.clear()
        return self._unmarked

    # -- prune ---------------------------------------------------------------

    def prune(
        self,
        ids: Iterable[str],
        *,
        reason: str,
        actor: str | None = None,
        turn: int | None = None,
    ) -> PruneReport:
        """Seed 000's decision procedure, per id.

        ``PRUNED``: removed now (no reader pinned it unmarked), tombstone
        written and durable. ``DEFERRED``: marked now, removed at its grace
        point. ``MARKED``: refused and marked instead (``PROTECTED``,
        ``NEGATIVE``, or ``REFERENCED`` by a surviving entry not in the same
        request). ``UNCHANGED``: immutable kinds, unknown ids (``UNKNOWN``),
        ids already removed. Ids in one request that cite each other are
        removed together as one transaction; refusals cascade (a refused id
        survives, so whatever it cites is refused too).

        With a durable sink, pending records are flushed before anything
        changes (a failing disk raises :class:`LogWriteError`, version
        unchanged); the tombstones are durable before a removal is published.
        """
        if isinstance(ids, str | bytes):
            raise InvalidType("prune takes a collection of ids, not a bare str")
        if not hasattr(ids, "__iter__"):
            raise InvalidType(f"prune takes a collection of ids, not {type(ids).__name__}")
        raw = list(ids)
        for i in raw:
            check_id(i)
        id_list = list(dict.fromkeys(raw))
        check_text(reason, "reason")
        if actor is not None:
            check_id(actor, "actor")
        check_turn(turn)
        if self._sink is not None and self.pending_records:
            self.flush()  # a failing disk refuses before anything changes
        self._write_lock.acquire()
        try:
            outcomes, candidates, staged = self._prune_locked(id_list, reason, actor, turn)
        finally:
            self._release()
        if staged and self.has_due():
            # Outside the write lock: a durable removal never makes a
            # concurrent mark wait for the disk.
            with contextlib.suppress(LogWriteError):  # stays DEFERRED; stats() tells
                self.apply_due()
        head = self._head
        tombs = head.tombs.by_id
        for i in candidates:
            outcomes[i] = Outcome(Status.PRUNED if i in tombs else Status.DEFERRED)
        return PruneReport({i: outcomes[i] for i in id_list}, head.number)

    def _prune_locked(
        self, id_list: list[str], reason: str, actor: str | None, turn: int | None
    ) -> tuple[dict[str, Outcome], list[str], bool]:
        head = self._head
        policy = self._policy
        outcomes: dict[str, Outcome] = {}
        candidates: dict[str, None] = {}
        refused: dict[str, Refusal] = {}
        for i in id_list:
            slot = head.live.get(i)
            if slot is None:
                if i in head.tombs.by_id:
                    outcomes[i] = Outcome(Status.UNCHANGED)
                else:
                    outcomes[i] = Outcome(Status.UNCHANGED, Refusal.UNKNOWN)
                continue
            if i in self._staged_ids:
                outcomes[i] = Outcome(Status.DEFERRED)
                continue
            e = slot.entry
            if policy.is_immutable(e):
                outcomes[i] = Outcome(Status.UNCHANGED, Refusal.IMMUTABLE)
                continue
            prot = policy.protection(e)
            if prot is not None:
                refused[i] = Refusal.PROTECTED if prot == "protected" else Refusal.NEGATIVE
                continue
            candidates[i] = None
        for i in _cascade(head, candidates, refused):
            del candidates[i]
        n = head.number + 1
        marks = head.marks
        new_marks: list[list[Any]] = []
        for i in itertools.chain(refused, candidates):
            if i not in marks:
                marks = marks.set(i, Mark(i, reason, turn, n))
                new_marks.append([i, reason, turn])
        changed = bool(new_marks)
        staged_at = n if changed else head.number
        groups = [
            _Group(
                next(self._gids),
                comp,
                max(marks[i].version for i in comp),
                staged_at,
                reason,
                actor,
                turn,
            )
            for comp in _components(head, candidates)
        ]
        version = n if changed else None
        for i in id_list:
            if i in refused:
                outcomes[i] = Outcome(Status.MARKED, refused[i])
        detail = {
            "marks": new_marks,
            "staged": [[g.gid, list(g.ids), g.grace, g.staged] for g in groups],
            "outcomes": {
                i: [o.status.value, None if o.refusal is None else o.refusal.value]
                for i, o in outcomes.items()
            },
            "refusals": [o.refusal.value for o in outcomes.values() if o.refusal is not None],
        }
        self._append_record(
            self._record(
                "prune",
                version,
                tuple(id_list),
                actor=actor,
                reason=reason,
                turn=turn,
                outcome="staged" if groups else ("marked" if changed else "unchanged"),
                detail=detail,
            )
        )
        if changed:
            self._head = head.with_marks(n, marks)
            self._markable().difference_update(i for i, _r, _t in new_marks)
        for g in groups:
            self._stage(g)
        if groups:
            self._after_stage()
        return outcomes, list(candidates), bool(groups)

    def _stage(self, g: _Group) -> None:
        for i in g.ids:
            self._staged_ids[i] = g
        heapq.heappush(self._staged, (g.grace, g.gid, g))
        if self._due_hook is not None:
            self._due_hook()

    # -- edit ------------------------------------------------------------------

    def edit(self, plan: EditPlan) -> EditReport:
        """Seed 002's all-or-nothing self-edit.

        Refused as a whole — window unchanged, one :class:`Escalation`
        emitted, the refusal logged — when an op touches a rationale id
        (``RATIONALE``); an immutable entry is rewritten, pruned or summarized
        (``IMMUTABLE``); a protected entry would be removed or paraphrased
        (``PROTECTED``/``NEGATIVE``); a surviving entry would still cite a
        removed one (``REFERENCED``); new content matches a tombstone without
        an override (``READMISSION``); an entry the plan touches changed after
        ``plan.base`` (``CONFLICT``); an id is not live (``UNKNOWN``).

        Applied plans publish rewrites, moves and summaries at once and stage
        removals (pruned and summarized ids) for their grace point, like
        :meth:`prune`. A summary id that is live or tombstoned raises
        :class:`DuplicateEntry`; a ref to an unknown entry raises
        :class:`DanglingReference`; a ``base`` newer than the head raises
        :class:`InvalidArgument`. O(ops·log n), plus O(n) for a plan with a
        move or summary (window order).
        """
        if type(plan) is not EditPlan:
            raise InvalidType(f"edit takes an EditPlan, not {type(plan).__name__}")
        if self._sink is not None and self.pending_records:
            self.flush()  # a failing disk refuses before anything changes
        self._write_lock.acquire()
        try:
            report = self._edit_locked(plan)
        finally:
            self._release()
        if not report.deferred:
            return report
        if self.has_due():
            # Outside the write lock, like prune().
            with contextlib.suppress(LogWriteError):  # stays deferred; stats() tells
                self.apply_due()
        head = self._head
        tombs = head.tombs.by_id
        removed = report.deferred
        return dataclasses.replace(
            report,
            version=head.number,
            removed=tuple(i for i in removed if i in tombs),
            deferred=tuple(i for i in removed if i not in tombs),
        )

    def _edit_locked(self, plan: EditPlan) -> EditReport:
        head = self._head
        if plan.base is not None and plan.base > head.number:
            raise InvalidArgument(f"plan base {plan.base} is newer than the head {head.number}")
        refusals: dict[Refusal, None] = {}
        why: list[str] = []

        def refuse(r: Refusal, msg: str) -> None:
            refusals[r] = None
            why.append(msg)

        policy = self._policy
        rationale = set(plan.rationale)
        removed: dict[str, None] = {}
        new_refs: dict[str, tuple[str, ...]] = {}
        touched: dict[str, None] = {}

        def live_entry(i: str) -> Entry | None:
            touched[i] = None
            slot = head.live.get(i)
            if slot is None:
                tomb = head.tombs.by_id.get(i)
                if tomb is not None and plan.base is not None and tomb.version > plan.base:
                    refuse(Refusal.CONFLICT, f"{i!r} was removed after base {plan.base}")
                else:
                    refuse(Refusal.UNKNOWN, f"{i!r} is not a live entry")
                return None
            if i in rationale:
                refuse(Refusal.RATIONALE, f"{i!r} is part of the plan's own rationale")
            return slot.entry

        def check_removable(e: Entry, verb: str) -> None:
            if policy.is_immutable(e):
                refuse(Refusal.IMMUTABLE, f"{e.id!r} is a {e.kind.name} and cannot be {verb}")
                return
            prot = policy.protection(e)
            if prot == "protected":
                refuse(
                    Refusal.PROTECTED, f"{e.id!r} is a {e.kind.name}: protected from being {verb}"
                )
            elif prot == "negative":
                refuse(Refusal.NEGATIVE, f"{e.id!r} records a negative result: cannot be {verb}")

        overridden: list[str] = []

        def check_content(e: Entry, key: str | None) -> None:
            # A rewrite keeps its entry's key, which was admitted already: only
            # its new bytes can re-admit anything. A summary is new on both.
            tomb = head.tombs.matching(e.content_hash, key)
            if tomb is not None and plan.override is not None:
                overridden.append(e.id)
            elif tomb is not None:
                refuse(
                    Refusal.READMISSION,
                    f"new content for {e.id!r} matches the tombstone of {tomb.id!r}",
                )

        def check_new_refs(owner: str, refs: tuple[str, ...]) -> None:
            for ref in refs:
                if ref not in head.live:
                    tomb = head.tombs.by_id.get(ref)
                    if tomb is not None:
                        raise DanglingReference(
                            f"{owner!r} would cite {ref!r}, pruned at version {tomb.version}",
                            ref,
                            tomb,
                        )
                    raise DanglingReference(
                        f"{owner!r} would cite unknown entry {ref!r}", ref, None
                    )

        rewrites: list[tuple[Entry, Entry]] = []
        summaries: list[tuple[Summarize, tuple[str, ...]]] = []
        moves: list[Move] = []
        for op in plan.ops:
            if isinstance(op, Prune):
                e = live_entry(op.id)
                if e is not None:
                    check_removable(e, "pruned")
                    removed[op.id] = None
            elif isinstance(op, Rewrite):
                e = live_entry(op.id)
                if e is None:
                    continue
                check_removable(e, "rewritten")
                refs = e.refs if op.refs is None else op.refs
                check_new_refs(op.id, refs)
                new_entry = e.replace(body=op.body, refs=refs)
                check_content(new_entry, None)
                new_refs[op.id] = refs
                rewrites.append((e, new_entry))
            elif isinstance(op, Summarize):
                into = op.into
                if into.id in head.live or into.id in head.tombs.by_id:
                    raise DuplicateEntry(f"summary id {into.id!r} is already used")
                check_new_refs(into.id, into.refs)
                for i in op.ids:
                    e = live_entry(i)
                    if e is not None:
                        check_removable(e, "summarized")
                        removed[i] = None
                check_content(into, into.key)
                summaries.append((op, op.ids))
            else:
                live_entry(op.id)
                if op.before is not None and op.before not in head.live:
                    refuse(Refusal.UNKNOWN, f"move target {op.before!r} is not a live entry")
                moves.append(op)
        # No survivor may cite a removed entry.
        for i in removed:
            for r in head.cited_by(i):
                if r in removed:
                    continue
                if i in new_refs.get(r, head.live[r].entry.refs):
                    refuse(Refusal.REFERENCED, f"{i!r} would be removed but {r!r} cites it")
        for r, refs in new_refs.items():
            for ref in refs:
                if ref in removed:
                    refuse(Refusal.REFERENCED, f"rewritten {r!r} cites removed {ref!r}")
        for op, _ in summaries:
            for ref in op.into.refs:
                if ref in removed:
                    refuse(Refusal.REFERENCED, f"summary {op.into.id!r} cites removed {ref!r}")
        # Optimistic check for a planner that thought while others wrote.
        if plan.base is not None:
            for i in touched:
                slot = head.live.get(i)
                if slot is not None and slot.changed > plan.base:
                    refuse(Refusal.CONFLICT, f"{i!r} changed at version {slot.changed} > base")
        if refusals:
            return self._refuse_edit(plan, tuple(refusals), why)
        return self._apply_edit(
            plan, head, rewrites, summaries, moves, tuple(removed), bool(overridden)
        )

    def _refuse_edit(
        self, plan: EditPlan, refusals: tuple[Refusal, ...], why: list[str]
    ) -> EditReport:
        head = self._head
        detail = "; ".join(dict.fromkeys(why))
        esc = Escalation(EscalationKind.REFUSED_EDIT, detail, plan, refusals, head.number)
        self._append_record(
            self._record(
                "edit",
                None,
                _plan_ids(plan),
                actor=plan.actor,
                reason=plan.reason,
                turn=plan.turn,
                outcome="refused",
                detail={
                    "plan": plan.to_dict(),
                    "refusals": [r.value for r in refusals],
                    "why": list(dict.fromkeys(why)),
                    "rationale": self._rationale_copy(plan),
                    "escalation": EscalationKind.REFUSED_EDIT.value,
                },
            )
        )
        self._escalate(esc)
        return EditReport(False, refusals, esc, head.number)

    def _rationale_copy(self, plan: EditPlan) -> list[dict[str, Any]]:
        # Provenance separation (seed 002): the log keeps the rationale's bytes.
        out: list[dict[str, Any]] = []
        for i in plan.rationale:
            slot = self._head.live.get(i)
            if slot is not None:
                out.append({"id": i, "hash": slot.entry.content_hash, "body": slot.entry.body})
            else:
                out.append({"id": i, "hash": None, "body": None})
        return out

    def _apply_edit(
        self,
        plan: EditPlan,
        head: Version,
        rewrites: list[tuple[Entry, Entry]],
        summaries: list[tuple[Summarize, tuple[str, ...]]],
        moves: list[Move],
        removed: tuple[str, ...],
        overridden: bool = False,
    ) -> EditReport:
        n = head.number + 1
        draft = _Draft(head)
        for _old, new_entry in rewrites:
            draft.replace(new_entry, n)
            if new_entry.kind in _IMMUTABLE:  # pragma: no cover - immutables refused above
                self._immutable_hashes[new_entry.id] = new_entry.content_hash
        keys: dict[str, float] = {}
        renumbered: set[str] | None = None
        if summaries or moves:
            renumbered = _place(head, draft, summaries, moves, keys, n)
        inserted = []
        for op, _covered in summaries:
            inserted.append({"entry": op.into.to_dict(), "key": draft.live[op.into.id].key})
            if op.into.kind in _IMMUTABLE:
                self._immutable_hashes[op.into.id] = op.into.content_hash
        new_marks: list[list[Any]] = []
        staged_ids = [i for i in removed if i not in self._staged_ids]
        for i in staged_ids:
            if i not in draft.marks:
                draft.marks[i] = Mark(i, plan.reason, plan.turn, n)
                new_marks.append([i, plan.reason, plan.turn])
        group = None
        if staged_ids:
            grace = max(draft.marks[i].version for i in staged_ids)
            group = _Group(
                next(self._gids), tuple(staged_ids), grace, n, plan.reason, plan.actor, plan.turn
            )
        self._append_record(
            self._record(
                "edit",
                n,
                _plan_ids(plan),
                actor=plan.actor,
                reason=plan.reason,
                turn=plan.turn,
                outcome="applied",
                detail={
                    "plan": plan.to_dict(),
                    "rewrites": [new.to_dict() for _old, new in rewrites],
                    "inserted": inserted,
                    # after a renumbering ``keys`` holds every live id, and
                    # only the ``placed`` ones changed (for base checks)
                    "keys": {i: draft.live[i].key for i in keys},
                    **({} if renumbered is None else {"placed": sorted(renumbered)}),
                    "marks": new_marks,
                    "staged": []
                    if group is None
                    else [[group.gid, list(group.ids), group.grace, group.staged]],
                    "rationale": self._rationale_copy(plan),
                    "refusals": [],
                    # the override let content matching a tombstone back in
                    **({"readmission_overridden": True} if overridden else {}),
                },
            )
        )
        self._head = draft.finish(n)
        markable = self._markable()
        markable.update(op.into.id for op, _ in summaries if op.into.kind not in _IMMUTABLE)
        markable.difference_update(i for i, _r, _t in new_marks)
        if group is not None:
            self._stage(group)
            self._after_stage()
        return EditReport(True, (), None, n, (), removed)

    # -- stats and checks --------------------------------------------------

    def stats(self) -> Stats:
        """A frozen picture of the buffer. O(readers + distinct pinned versions)."""
        now = self._clock()
        with self._pin_lock:
            # read each reader's fields under the lock: a reader unpinning
            # meanwhile must not be seen half-released
            pins = [(s._task, s._version, s._since) for s in self._readers]
            oldest = self._oldest_pin()
            pinned_versions = {v.number for _t, v, _s in pins if v is not None}
        head = self._head
        infos = tuple(
            ReaderInfo(task_name(task), v.number, max(0.0, now - since))
            for task, v, since in pins
            if v is not None
        )
        removed = self._counts["removed"]
        return Stats(
            version=head.number,
            entries=len(head.live),
            retained_versions=len(pinned_versions | {head.number}),
            pinned=len(infos),
            readers=infos,
            oldest_pin_age=max((r.age for r in infos), default=None),
            oldest_pin_version=oldest,
            deferred=len(self._staged_ids),
            marks=len(head.marks),
            tombstones=len(head.tombs.by_id),
            refusals=MappingProxyType(dict(self._refusals)),
            escalations=self._counts["escalations"],
            escalations_dropped=self._escalations_dropped,
            tombstone_to_edit_ratio=(len(head.tombs.by_id) / removed) if removed else 1.0,
            readmissions_refused=self._counts["readmit_refused"],
            readmissions_overridden=self._counts["readmit_overridden"],
            log_records=len(self._records),
            log_pending=self.pending_records,
            log_failing=self._log_failing,
            reclamation_latency_last=self._latency_last,
            reclamation_latency_max=self._latency_max,
        )

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version."""
        return {i: g.grace for i, g in self._staged_ids.items()}

    def _check(self, *, expect_no_pins: bool = False) -> None:
        """Assert every invariant of DESIGN.md on the current state.

        O(n + log + readers). For tests: a seeded random stress test calls it
        after every operation (sortedcontainers' habit).
        """
        self._write_lock.acquire()
        try:
            _check_buffer(self, expect_no_pins)
        finally:
            self._release()


# ---------------------------------------------------------------------------
# helpers

_EMPTY_DETAIL: Mapping[str, Any] = MappingProxyType({})

# The fast paths (mark_stale, append) build their Mark and Slot with
# tuple.__new__, skipping the NamedTuple's Python-level __new__ (~0.1 µs
# each); that passes every field positionally, so the field lists are pinned
# here and a change to them fails at import instead of building short tuples.
_new_tuple: Callable[..., Any] = tuple.__new__
_wall_clock = time.time
_FAST_PATH_FIELDS: dict[Any, str] = {
    Mark: "id reason turn version",
    Slot: "entry key changed",
}
for _cls, _fields in _FAST_PATH_FIELDS.items():
    if _cls._fields != tuple(_fields.split()):  # pragma: no cover - guards edits to records.py
        raise ImportError(f"{_cls.__name__} fields changed: update the fast paths in buffer.py")

from .policy import IMMUTABLE_KINDS as _IMMUTABLE  # noqa: E402

# Builders of the compact records of the fast paths (see log.py): called with
# the record's seq, then the fields the fast path stored.


def _build_mark_record(seq: int, mark: Mark, at: float) -> LogRecord:
    return LogRecord(
        seq, at, "mark", mark.version, (mark.id,), None, mark.reason, mark.turn, "applied",
        _EMPTY_DETAIL,
    )


def _build_append_record(seq: int, entry: Entry, key: float, n: int, at: float) -> LogRecord:
    return LogRecord(
        seq, at, "append", n, (entry.id,), None, None, entry.turn, "applied",
        {"entry": entry.to_dict(), "key": key},
    )


def _tomb_to_dict(t: Tombstone) -> dict[str, Any]:
    return {
        "id": t.id,
        "content_hash": t.content_hash,
        "reason": t.reason,
        "turn": t.turn,
        "actor": t.actor,
        "version": t.version,
        "kind": None if t.kind is None else t.kind.value,
        "key": t.key,
    }


def _plan_ids(plan: EditPlan) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for op in plan.ops:
        if isinstance(op, Summarize):
            out.update(dict.fromkeys(op.ids))
            out[op.into.id] = None
        else:
            out[op.id] = None
    return tuple(out)


def _cascade(head: Version, removal: Mapping[str, Any], refused: dict[str, Refusal]) -> list[str]:
    """Refuse (``REFERENCED``) every id in ``removal`` cited by an entry that
    survives; a refused id survives, so what it cites is rechecked (the
    cascade). Fills ``refused``; returns the ids to drop from ``removal``.
    O(removal + their referrers)."""
    keep: set[str] = set(removal)
    stack = list(removal)
    dropped: list[str] = []
    while stack:
        i = stack.pop()
        if i not in keep:
            continue
        for r in head.cited_by(i):
            if r not in keep:
                keep.discard(i)
                refused[i] = Refusal.REFERENCED
                dropped.append(i)
                stack.extend(ref for ref in head.live[i].entry.refs if ref in keep)
                break
    return dropped


def _components(head: Version, ids: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Connected components of ``ids`` under refs (either direction), each in
    request order: ids that cite each other are removed as one transaction."""
    parent = {i: i for i in ids}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i in ids:
        for ref in head.live[i].entry.refs:
            if ref in parent:
                a, b = find(i), find(ref)
                if a != b:
                    parent[a] = b
    comps: dict[str, list[str]] = {}
    for i in ids:
        comps.setdefault(find(i), []).append(i)
    return [tuple(c) for c in comps.values()]


def _place(
    head: Version,
    draft: _Draft,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    keys: dict[str, float],
    n: int,
) -> set[str] | None:
    """Insert summaries and apply moves in window order, filling ``keys`` with
    every new order key. Returns ``None``, or the ids the plan placed when the
    float gap was exhausted and every key was renumbered. O(n)."""
    order = head.ordered_ids()
    key_of: dict[str, float] = {}
    placed: set[str] = set()
    ok = True

    def k(i: str) -> float:
        got = key_of.get(i)
        return got if got is not None else head.live[i].key

    def put(i: str, index: int) -> None:
        nonlocal ok
        order.insert(index, i)
        placed.add(i)
        if not ok:
            return  # every key is renumbered below; only the order matters now
        lo = k(order[index - 1]) if index > 0 else None
        hi = k(order[index + 1]) if index + 1 < len(order) else None
        key = _key_between(lo, hi)
        if key is None:
            ok = False
        else:
            key_of[i] = key

    for op, covered in summaries:
        cover = set(covered)
        first = next(idx for idx, i in enumerate(order) if i in cover)
        put(op.into.id, first)
        draft.add(op.into, key_of.get(op.into.id, 0.0), n)
    for mv in moves:
        order.remove(mv.id)
        index = len(order) if mv.before is None else order.index(mv.before)
        put(mv.id, index)
    if ok:
        for i, key in key_of.items():
            draft.set_key(i, key, n)
            keys[i] = key
        return None
    # Renumber every key in the new order (rare: ~50 halvings of one gap).
    for idx, i in enumerate(order):
        slot: Slot = draft.live[i]
        draft.live[i] = Slot(slot.entry, float(idx), n if i in placed else slot.changed)
        keys[i] = float(idx)
    draft.next_key = float(len(order))
    return placed


def _count(buf: Buffer, record: LogRecord) -> None:
    """Derive the statistics counters from a record (used live and on replay)."""
    counts = buf._counts
    detail = record.detail
    for r in detail.get("refusals", ()):
        buf._refusals[Refusal(r)] += 1
    op = record.op
    if op == "remove":
        counts["removed"] += len(detail.get("tombstones", ()))
    elif op == "refuse" and record.outcome == Refusal.READMISSION.value:
        counts["readmit_refused"] += 1
    elif (op == "append" and record.outcome == "overridden") or (
        op == "edit" and detail.get("readmission_overridden")
    ):
        counts["readmit_overridden"] += 1
    if op == "escalate" or (op == "edit" and record.outcome == "refused"):
        counts["escalations"] += 1


def _pin_counts(buf: Buffer) -> tuple[Counter[int], int, list[tuple[int, int]]]:
    """Pinned readers per version, the pins in flight (registered, not or no
    longer holding a version) and each set's size, checking each reader's
    registration. Each copy is one C-level operation, atomic under the GIL."""
    counts: Counter[int] = Counter()
    in_flight = 0
    sets = list(buf._pins.items())
    for n, r in sets:
        for snap in list(r):
            v = snap._version
            if v is None:
                in_flight += 1
                continue
            assert v.number == n, f"a reader of version {v.number} is in the set of {n}"
            assert snap._readers is r, "a reader is registered in a set it does not hold"
            counts[n] += 1
    return counts, in_flight, [(n, len(r)) for n, r in sets]


def _check_buffer(buf: Buffer, expect_no_pins: bool) -> None:
    head = buf._head
    live = head.live
    # (2) no live entry cites a removed or unknown entry; referrers index exact.
    expected: dict[str, set[str]] = {}
    keys: set[float] = set()
    for i, slot in live.items():
        assert slot.entry.id == i, f"slot {i!r} holds {slot.entry.id!r}"
        assert slot.key not in keys, f"duplicate order key {slot.key}"
        assert slot.key < head.next_key, f"order key {slot.key} >= next_key"
        keys.add(slot.key)
        assert slot.changed <= head.number
        assert i not in head.tombs.by_id, f"{i!r} is both live and tombstoned"
        for ref in slot.entry.refs:
            assert ref in live, f"live {i!r} cites {ref!r}, which is not live (invariant 2)"
            expected.setdefault(ref, set()).add(i)
    got = {t: set(m) for t, m in head.referrers.items()}
    assert got == expected, "referrers index out of date"
    unmarked = {
        i for i, slot in live.items() if i not in head.marks and slot.entry.kind not in _IMMUTABLE
    }
    assert buf._markable() == unmarked, "the unmarked index disagrees with the head"
    # marks only on live, mutable entries; versions within range.
    for i, mark in head.marks.items():
        assert i in live, f"mark on non-live {i!r}"
        assert live[i].entry.kind not in _IMMUTABLE, f"immutable {i!r} is marked"
        assert 0 < mark.version <= head.number
    # (3) exactly one tombstone and one log record per removal; the log grows.
    removed_in_log: Counter[str] = Counter()
    records = buf._records
    for seq in range(len(records)):
        rec = materialize(records, seq)
        assert rec.seq == seq, f"log record {seq} has seq {rec.seq}"
        if rec.op == "remove":
            for t in rec.detail.get("tombstones", ()):
                removed_in_log[t["id"]] += 1
    tombs = head.tombs.by_id
    assert set(removed_in_log) == set(tombs), "tombstones and removal records disagree"
    assert all(c == 1 for c in removed_in_log.values()), "an entry was removed twice"
    for t in tombs.values():
        assert head.tombs.by_hash.get(t.content_hash) is not None
        # (4) no protected entry is ever removed.
        if t.kind is not None:
            from .policy import PROTECTED_KINDS

            assert t.kind not in PROTECTED_KINDS, f"protected {t.id!r} was removed (invariant 4)"
    # (4) no immutable entry's bytes ever change; every live one is tracked
    # (mark_stale relies on it).
    for i, slot in live.items():
        if slot.entry.kind in _IMMUTABLE:
            assert i in buf._immutable_hashes, f"immutable {i!r} is not tracked"
    for i, h in buf._immutable_hashes.items():
        islot = live.get(i)
        assert islot is not None, f"immutable {i!r} is gone (invariant 4)"
        assert islot.entry.content_hash == h, f"immutable {i!r} changed (invariant 4)"
    # staged removals: live, marked, in the heap.
    heap_ids = {i for _, _, g in buf._staged for i in g.ids}
    heap_ids.update(i for g in buf._applying.values() for i in g.ids)
    for i, g in buf._staged_ids.items():
        assert i in heap_ids, f"staged {i!r} missing from the queue"
        if i in live:
            assert i in head.marks, f"staged {i!r} is not marked"
            assert g.grace <= head.number
    # (1), (5), (7) pins: every pinned reader is registered in the set of the
    # version it holds; no active reader predates a removal it saw unmarked.
    # Pins take no lock, so this may run while other threads pin and unpin
    # (the write lock held here keeps only the head and the removals still).
    # A registered snapshot whose ``_version`` is None is a pin being
    # validated or released right now: it is skipped. The oldest-pin walk is
    # compared with the readers only if they did not change around it.
    with buf._pin_lock:
        counts, in_flight, sizes = _pin_counts(buf)
        oldest = buf._oldest_pin()
        order = set(buf._pin_order)
        still = _pin_counts(buf) == (counts, 0, sizes) and not in_flight
        if still:
            assert oldest == (min(counts) if counts else None), (
                f"the oldest pin is {oldest}, the readers say {min(counts, default=None)}"
            )
            # Empty sets left behind are bounded: each is the head's (kept for
            # its next reader) or still in the pin order, where the walk frees it.
            for n, size in sizes:
                assert size or n == head.number or n in order, (
                    f"the empty pin set of version {n} can never be freed (invariant 7)"
                )
        if expect_no_pins:
            assert not counts and not in_flight, (
                f"{sum(counts.values()) + in_flight} pins leaked (invariant 7)"
            )
        if counts:
            assert buf._max_removed_grace <= min(counts), (
                "an entry was removed while a reader that saw it unmarked is pinned (invariant 5)"
            )
