"""The buffer: the write operations and the public surface, composing the rooms.

What it keeps true: every change publishes a new immutable
:class:`~.version.Version` under the write lock, with one attribute store
(atomic under the GIL); the head number only grows; a reader sees exactly
the version it pinned however long it awaits (invariant 1). On any error a
write leaves the head unchanged. ``mark_stale`` and ``append`` never wait
for readers, the barrier or a disk.

:class:`Buffer` is composed of one base class per job, each in its module
with the invariant it keeps in its header:

* :mod:`.pins` — :class:`~.pins.Snapshot` and the lock-free reader registry
  (pin, unpin, the oldest pin);
* :mod:`.grace` — staged removals, the due heap and the horizon;
* :mod:`.publish` — the edit log, flushes, and the durable intent → publish
  path of a removal;
* :mod:`.edit` — edit-plan validation and application;
* :mod:`.stream` — open entries (``open_stream``, :class:`~.stream.StreamWriter`);
* :mod:`.check` — the invariant checker behind ``Buffer._check``;
* here — ``append``, ``mark_stale``, ``prune``, escalations, ``stats``.

``Buffer(Streams(Editor(Publisher(Grace(Pins)))))``: a method call resolves through
the type's method cache, so the composition costs the fast paths nothing;
the fast paths (``Snapshot.__enter__``/``__exit__``, ``mark_stale``,
``append``) are written out and call no helper in the common case.

Threads. Mutations may come from worker threads. Writers serialize on
``_write_lock``; readers never take it.

Prior art: RCU grace periods (liburcu), crossbeam-epoch, PostgreSQL's
``backend_xmin`` horizon, h11's sans-IO state machines.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, SimpleNamespace
from typing import Any

from .check import check_buffer
from .checkpoint import (
    DEFAULT_CHECKPOINT_EVERY,
    CheckpointSink,
    build_checkpoint,
    check_checkpoint_every,
    checkpoint_digest,
    checkpoint_records,
    checkpoint_state,
    recover,
    replay_log,
)
from .entry import MAX_STORED_INT, Entry, check_id, check_int, check_text, check_turn
from .errors import (
    InvalidArgument,
    InvalidType,
    LogFormatError,
    LogWriteError,
    ProtectedEntry,
    ReadmissionRefused,
    dangling_ref,
    duplicate_id,
)
from .graph import cascade, components, sealed_conflicts, sealed_lookups
from .log import DEFAULT_RETENTION, EditLog, LogSink, ReadableSink, Records
from .observe import Observer
from .pins import _NOT_ENTERED, PinRegistry, Snapshot, _missing, _new_object
from .policy import _CACHE_FROM as _CLASSIFY_FROM
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import PROTECTED_KINDS as _PROTECTED
from .policy import Policy, preclassify
from .records import (
    Escalation,
    Mark,
    Outcome,
    Override,
    PruneReport,
    Refusal,
    Stats,
    Status,
    Tombstone,
)
from .state import BufferState, Field, Group
from .stream import Streams
from .verify import compare, read_sink, state_fields, verify_records
from .version import ADD as _ADD
from .version import EMPTY_MAP, Slot, Version
from .version import MAX_CHAIN as _MAX_CHAIN
from .version import PATCH as _PATCH
from .version import PATCH_MAX as _PATCH_MAX
from .version import SAME as _SAME
from .wire import append_record, prune_record, refuse_record, staged_rows

__all__ = ["Buffer", "Snapshot"]


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


# ---------------------------------------------------------------------------
# The buffer


def _weakly(method: Callable[..., Any]) -> Any:
    """``method`` (a bound method of a buffer) called through a weak
    reference to its buffer: a part handed it keeps no buffer alive. Once the
    buffer is gone the call does nothing and returns ``None``. O(1)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args)

    return call


class Buffer(Streams):
    """A versioned context buffer. See the module docstring for the design.

    ``log`` is a :class:`LogSink` (``None``: the in-memory log only); if it
    already holds records, the buffer is recovered from them (head content,
    marks, tombstones, staged removals, the log and the version number).
    ``policy`` decides what may be removed (``None``: :class:`Policy()`).

    Memory stays bounded by the live window, not by history (issue 13): with
    a sink that can read records back (``SQLiteLog``, ``JsonlLog``), the
    in-memory log keeps only the records not yet durable plus a tail of
    :data:`~quiesce._core.log.DURABLE_TAIL` durable ones, and ``buf.log``
    reads older records from the sink. Without a sink it keeps the newest
    ``log_retention`` records (default :data:`~quiesce._core.log.DEFAULT_RETENTION`,
    10,000) and counts the ones it dropped (``buf.log.dropped``; reading one
    raises :class:`LogRecordDropped`). A sink without ``read_range`` keeps
    the whole log in memory. Tombstones stay forever, in one compact store
    (:mod:`.tombs`: no Python object per tombstone, about 60-75 bytes each
    in memory); with a readable sink, those whose removal records are
    durable keep only their index slots in memory (about 8-16 bytes each)
    and are read back from the log when asked for.

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
        log_retention: int = DEFAULT_RETENTION,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        verify: bool = False,
    ) -> None:
        if type(verify) is not bool:
            raise InvalidType(f"verify must be a bool, not {type(verify).__name__}")
        if verify and not isinstance(log, ReadableSink):
            raise InvalidArgument("verify=True needs a log that can be read back")
        if policy is None:
            policy = Policy()
        elif not isinstance(policy, Policy):
            raise InvalidType(f"policy must be a Policy, not {type(policy).__name__}")
        if log is not None and not isinstance(log, LogSink):
            raise InvalidType(f"log must be a LogSink, not {type(log).__name__}")
        if not callable(clock):
            raise InvalidType(f"clock must be a callable returning seconds, not {clock!r}")
        check_int(escalation_capacity, "escalation_capacity")
        check_int(log_retention, "log_retention")
        check_checkpoint_every(checkpoint_every)
        gil_enabled = getattr(sys, "_is_gil_enabled", None)  # Python >= 3.13
        if gil_enabled is not None and not gil_enabled():
            raise RuntimeError(
                "quiesce's lock-free pins rely on the GIL, which is disabled in this "
                "free-threaded interpreter: run it with PYTHON_GIL=1 (or -X gil=1)"
            )
        # checkpoints go only to sinks that recover from them (SQLite, JSONL,
        # PostgreSQL: CheckpointSink); a custom sink without it never sees one
        st = self._st = BufferState(
            policy,
            log,
            clock,
            escalation_capacity=escalation_capacity,
            log_retention=log_retention,
            checkpoint_every=checkpoint_every,
            checkpoints_ok=isinstance(log, CheckpointSink),
        )
        #: the reader registry (pins.py), told the grace queue's horizon and signal
        reg = self._registry = PinRegistry(st)
        # Weakly: a part holding a bound method of its buffer would make every
        # buffer cyclic garbage, freed (its log's file lock released) only by
        # the cycle collector instead of when the last reference goes.
        reg.horizon = _weakly(self._horizon)
        reg.signal_due = _weakly(self._signal_due)
        st.reopen_stream = _weakly(self._reopen)
        if isinstance(log, ReadableSink):
            # the in-memory tail of the log (log.py): a readable sink holds the rest
            st.records.reader = log.read_range
        if log is not None:
            if not (self._st.checkpoints_ok and recover(st, log)):  # type: ignore[arg-type]
                records = log.load()
                if records:
                    replay_log(st, records)
                del records
            self._st.synced = len(self._st.records)
            self._trim_log()
            self._st.head.tombs.spill(self._st.synced)  # durable tombstones leave memory
            if self._st.streams:  # the log ends mid-stream: finish them as aborted
                self._abort_recovered()
        #: seq the next automatic checkpoint is due at (flush() writes it)
        self._st.checkpoint_due = len(self._st.records) + checkpoint_every
        if verify:
            self.verify()

    # The state's fields under their names from before the parts were split,
    # for the runtime's subclass and older tests (state.py's Field); the
    # buffer's own methods read ``self._st``.
    _head = Field[Version]("head")
    _records = Field[Records]("records")
    _write_lock = Field[Any]("write_lock")  # an RLock, or a WriteGuard in a callback
    _pin_lock = Field[threading.Lock]("pin_lock")
    _flush_lock = Field[threading.Lock]("flush_lock")
    _pins = Field[dict[int, dict[Snapshot, None]]]("pins")
    _pin_order = Field[deque[int]]("pin_order")
    _pin_popped = Field[int]("pin_popped")
    _staged = Field[list[tuple[int, int, Group]]]("staged")
    _staged_ids = Field[dict[str, Group]]("staged_ids")
    _sink = Field[LogSink | None]("sink")
    _clock = Field[Callable[[], float]]("clock")
    _due_hook = Field[Callable[[], None] | None]("due_hook")
    _escalation_hook = Field[Callable[[Escalation], bool] | None]("escalation_hook")
    _escalations_dropped = Field[int]("escalations_dropped")
    _grace_floor = Field[int | None]("grace_floor")
    _retention = Field[int]("retention")
    _max_removed_grace = Field[int]("max_removed_grace")

    def _oldest_pin(self) -> int | None:
        """The oldest pinned version (call under the pin lock)."""
        return self._registry.oldest_locked()

    def verify(self) -> int:
        """Prove the durable log's checkpoints: a streaming full replay of
        every durable record (:mod:`.verify`) that compares each checkpoint
        with the state replayed up to it, then — if nothing was written
        since the read began — this buffer's own state with the replay's
        (after recovery from a checkpoint: recovery lost and altered
        nothing). Returns the number of checkpoints compared. Raises
        :class:`LogFormatError` naming the first disagreement (checkpoint
        seq, field, item), or a record the replay refuses; changes nothing.

        Reads the whole log through the sink, outside the write lock (call
        it off the event loop: ``anyio.to_thread.run_sync(buf.verify)``);
        holds the lock only to take the head (a reference) and copy the
        small tables, O(live); the comparison runs after. Memory: the
        replayed state and one chunk of records, not the log. Requires a
        readable sink (:class:`InvalidArgument` otherwise)."""
        sink = self._st.sink
        if not isinstance(sink, ReadableSink):
            raise InvalidArgument("verify() needs a log that can be read back")
        total = self._st.synced
        scratch = Buffer()
        result = verify_records(
            read_sink(sink.read_range, total), Buffer, into=scratch, reader=sink.read_range
        )
        if result.disagreement is not None:
            raise LogFormatError(result.disagreement.message())
        replayed = state_fields(scratch)
        with self._st.write_lock:
            # the state as of now, by reference (a Version never changes) and
            # small copies: O(live ids); the comparison below reads the sink
            # for spilled tombstones, so it runs after the lock is released
            # (an open stream's text that no record holds is not in the replay)
            same = len(self._st.records) == total and not self._unlogged_text()
            mine = SimpleNamespace(
                streams=dict(self._st.streams),
                head=self._st.head,
                staged=list(self._st.staged),
                applying=dict(self._st.applying),
                immutable_hashes=dict(self._st.immutable_hashes),
                protected_at=dict(self._st.protected_at),
                counts=Counter(self._st.counts),
                refusals=Counter(self._st.refusals),
            )
        if same:
            found = compare(state_fields(mine), replayed, total)
            if found is not None:
                raise LogFormatError(
                    f"this buffer disagrees with the replay of its {total} records: "
                    f"{found.field}: {found.detail}"
                )
        return result.checkpoints

    # -- reading --------------------------------------------------------

    @property
    def version(self) -> int:
        """The head version number (strictly increasing)."""
        return self._st.head.number

    @property
    def policy(self) -> Policy:
        return self._st.policy

    @property
    def log(self) -> EditLog:
        """The append-only edit log (read-only view)."""
        return self._st.log_view

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """Tombstones in the head version, by id, oldest first (read-only;
        every one ever written). ``in`` and lookups are O(1) expected (one
        log read for a tombstone that left memory); each read builds an
        equal, new :class:`Tombstone`."""
        return self._st.head.tombs.by_id

    @property
    def sink(self) -> LogSink | None:
        return self._st.sink

    def head(self) -> Version:
        """The head version object (immutable; for tools and the runtime)."""
        return self._st.head

    def snapshot(self) -> Snapshot:
        """A snapshot to use as ``with buf.snapshot() as snap:``; entering pins
        the head version to the calling task. Never awaits, never waits for a
        writer. Pin and unpin are O(1)."""
        snap: Snapshot = _new_object(Snapshot)
        snap._registry = self._registry
        snap._version = None
        snap._task = _NOT_ENTERED
        return snap

    def oldest_pin(self) -> int | None:
        """The oldest version any reader has pinned, or ``None``. O(1) amortized."""
        return self._registry.oldest_pin()

    def __len__(self) -> int:
        return len(self._st.head.live)

    def __repr__(self) -> str:
        pinned = len(self._registry.readers())
        return f"<Buffer version={self.version} entries={len(self)} pinned={pinned}>"

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
        st = self._st
        if len(entry.body) >= _CLASSIFY_FROM and self._own_policy():
            preclassify(entry)  # before the lock: a prune later finds the verdict
        # before the lock too: the spilled tombstones the checks below verify
        # are read back now, never under the write lock (issue 21)
        tombs = st.head.tombs
        held = None
        if tombs.spilled:
            values = (entry.content_hash,) if entry.key is None else (entry.content_hash, entry.key)
            held = tombs.prefetch((entry.id, *entry.refs), values)
        st.write_lock.acquire()
        try:
            head = st.head
            eid = entry.id
            live = head.live
            by_id = head.tombs.by_id
            if eid in live or eid in by_id:
                raise duplicate_id(eid, by_id.get(eid))
            for ref in entry.refs:
                if ref not in live:
                    raise dangling_ref(eid, ref, by_id.get(ref))
            overridden = False
            if head.tombs.by_id:
                tomb = head.tombs.matching(entry.content_hash, entry.key)
                if tomb is not None:
                    if override is None:
                        raise self._readmission_refused(entry, tomb)
                    overridden = True
            n = head.number + 1
            key = head.next_key
            new_live = live.set(eid, _new_tuple(Slot, (entry, key, n)))
            referrers = head.referrers
            for ref in entry.refs:
                referrers = referrers.set(ref, referrers.get(ref, EMPTY_MAP).set(eid, None))
            new = Version(n, new_live, head.marks, head.tombs, referrers, key + 1.0)
            new.derive(head, _ADD, (entry, key))  # the view: head's plus this entry
            if entry.kind in _IMMUTABLE:
                st.immutable_hashes[eid] = entry.content_hash
            else:
                st.unmarked_new.append(eid)  # folded into the index by _markable()
            if entry.kind in _PROTECTED or entry.sealed:
                st.protected_at[eid] = len(st.records)  # the seq of its record
            if override is None:
                # A compact record (log.py): the LogRecord — and the entry's
                # JSON-ready dict — is built when first read.
                records = st.records
                records.append((append_record, entry, key, n, _wall_clock()))
                if len(records) - records.first > st.trim_above:
                    self._trim_log()
            else:
                # "overridden" only when the override let matching content in
                # (_count derives readmissions_overridden from it, also on replay)
                self._append_record(
                    append_record(
                        len(self._st.records),
                        entry,
                        key,
                        n,
                        _wall_clock(),
                        False,
                        override,
                        overridden,
                    )
                )
            st.head = new
            return n
        finally:
            st.write_lock.release()  # _release(), written out
            if held is not None:
                held.release()  # its lookups ran
            if st.due_flag and st.due_hook is None:
                self._drain_due()

    def extend(
        self, entries: Sequence[Entry], overrides: Sequence[Override | None] | None = None
    ) -> int:
        """Publish *one* new version with ``entries`` at the end of the window,
        in order (a batch: a chat message of several blocks, a turn of several
        messages); ``overrides[i]`` lets ``entries[i]`` re-admit tombstoned
        content, as ``append``'s ``override`` does. Returns the head version
        (unchanged for an empty batch).

        All or nothing: every entry is checked as :meth:`append` checks one
        (against the head and the entries before it in the batch: an id used
        twice is a :class:`DuplicateEntry`, a ref may name an earlier entry
        of the batch) before anything is published; on any error the head is
        unchanged (a refused re-admission is logged, as by ``append``). The
        log gets one append record per entry, all of the new version (the
        records after the first carry ``batch: true``, which replay accepts).
        O(k · (log n + refs · log n)) for k entries. Never touches a disk.
        """
        st = self._st
        batch = list(entries)
        if overrides is None:
            given: list[Override | None] = [None] * len(batch)
        else:
            given = list(overrides)
            if len(given) != len(batch):
                raise InvalidArgument(
                    f"overrides must have one item per entry ({len(batch)}), not {len(given)}"
                )
        for e in batch:
            if type(e) is not Entry:
                raise InvalidType(f"extend takes Entries, not {type(e).__name__}")
            if len(e.body) >= _CLASSIFY_FROM and self._own_policy():
                preclassify(e)
        for o in given:
            if o is not None and type(o) is not Override:
                raise InvalidType(f"overrides must be Overrides or None, not {type(o).__name__}")
        if not batch:
            return self.version
        st.write_lock.acquire()
        try:
            head = st.head
            live = head.live
            by_id = head.tombs.by_id
            mine: set[str] = set()
            readmitted: list[bool] = []
            for entry, override in zip(batch, given, strict=True):
                eid = entry.id
                if eid in live or eid in mine:
                    raise duplicate_id(eid, None)
                if eid in by_id:
                    raise duplicate_id(eid, by_id[eid])
                for ref in entry.refs:
                    if ref not in live and ref not in mine:
                        raise dangling_ref(eid, ref, by_id.get(ref))
                tomb = head.tombs.matching(entry.content_hash, entry.key) if by_id else None
                if tomb is not None and override is None:
                    raise self._readmission_refused(entry, tomb)
                readmitted.append(tomb is not None)
                mine.add(eid)
            n = head.number + 1
            key = head.next_key
            new_live = live
            referrers = head.referrers
            placed: list[tuple[Entry, float]] = []
            for entry in batch:
                new_live = new_live.set(entry.id, _new_tuple(Slot, (entry, key, n)))
                for ref in entry.refs:
                    referrers = referrers.set(
                        ref, referrers.get(ref, EMPTY_MAP).set(entry.id, None)
                    )
                placed.append((entry, key))
                key += 1.0
            new = Version(n, new_live, head.marks, head.tombs, referrers, key)
            if len(placed) <= _PATCH_MAX:
                new.derive(head, _PATCH, ((), tuple(placed)))
            for (entry, k), override, overridden in zip(placed, given, readmitted, strict=True):
                if entry.kind in _IMMUTABLE:
                    st.immutable_hashes[entry.id] = entry.content_hash
                else:
                    st.unmarked_new.append(entry.id)
                record = append_record(
                    len(st.records),
                    entry,
                    k,
                    n,
                    _wall_clock(),
                    entry is not batch[0],
                    override,
                    overridden,
                )
                self._append_record(record)
            st.head = new
            return n
        finally:
            st.write_lock.release()
            if st.due_flag and st.due_hook is None:
                self._drain_due()

    def _readmission_refused(self, entry: Entry, tomb: Tombstone) -> ReadmissionRefused:
        """Log the refusal of ``entry``, whose content matches ``tomb``, and
        return the error to raise (call under the write lock; the head stays
        unchanged: only the refusal is logged). O(1)."""
        self._append_record(
            refuse_record(len(self._st.records), time.time(), entry.id, entry.turn, tomb)
        )
        return ReadmissionRefused(
            f"entry {entry.id!r} matches tombstone of {tomb.id!r} (pruned at version "
            f"{tomb.version}: {tomb.reason}); re-admission needs an Override",
            tomb,
        )

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
        if type(reason) is not str or not reason or not reason.isascii():
            check_text(reason, "reason")  # (non-ASCII: no lone surrogates)
        if turn is not None and (type(turn) is not int or not 0 <= turn <= MAX_STORED_INT):
            check_turn(turn)
        # The hot path: records are built with tuple.__new__ (see _new_tuple),
        # and _release() is written out.
        st = self._st
        lock = st.write_lock
        lock.acquire()
        held = True
        try:
            head = st.head
            marks = head.marks
            unmarked = st.unmarked
            try:
                unmarked.remove(entry_id)
            except KeyError:
                if not (st.unmarked_new and entry_id in self._markable()):
                    # Not (live, mutable and unmarked): already marked,
                    # immutable, removed or unknown. The slow path says which,
                    # about this head, once the write lock is released: a
                    # removed id's tombstone may be read back from the sink
                    # (issue 21: no disk under the write lock).
                    held = False
                    lock.release()
                    return _not_markable(head, entry_id)
                unmarked.remove(entry_id)  # appended since the last fold
            n = head.number + 1
            mark: Mark = _new_tuple(Mark, (entry_id, reason, turn, n))
            # A compact record (log.py): the LogRecord is built when first read.
            records = st.records
            records.append((entry_id, reason, turn, n, _wall_clock()))  # log.mark_record
            if list.__len__(records) > st.trim_above:  # (held in memory)
                self._trim_log()
            # Version.with_marks, written out.
            new = _new_object(Version)
            new.number = n
            new.live = head.live
            new.marks = marks.set(entry_id, mark)
            new.tombs = head.tombs
            new.referrers = head.referrers
            new.next_key = head.next_key
            new._entries = head._entries  # marks change neither order nor content
            new._view = view = head._view
            # Version.derive(head, SAME), written out. Every slot is set, so
            # the next mark reads them without an AttributeError (~0.6 µs).
            new._base = None
            new._delta = None
            new._depth = 0
            if view is None:
                try:
                    chained = head._base is not None and head._depth < _MAX_CHAIN
                except AttributeError:  # a version made without a chain
                    chained = False
                if chained:
                    new._base = head
                    new._delta = _SAME_DELTA
                    new._depth = head._depth + 1
            st.head = new
            return mark
        finally:
            if held:
                lock.release()
            if st.due_flag and st.due_hook is None:
                self._drain_due()

    def _markable(self) -> set[str]:
        """The exact index of live, mutable, unmarked ids (call under the
        write lock): folds in the ids appended since the last call. Amortized
        O(1) per append."""
        pending = self._st.unmarked_new
        if pending:
            self._st.unmarked.update(pending)
            pending.clear()
        return self._st.unmarked

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
        ids already removed, an open stream (``CONFLICT``: refused, nothing
        marked or staged; prune it after its close). Ids in one request that cite each other are
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
        if self._st.sink is not None and self.pending_records:
            self.flush()  # a failing disk refuses before anything changes
        head = self._st.head
        # (issue 21: no disk under the write lock) the ids, and the results of
        # the tool calls citing signed reasoning among them (policy.py)
        held = None
        if head.tombs.spilled:
            held = head.tombs.prefetch([*id_list, *sealed_lookups(head, id_list)])
        self._st.write_lock.acquire()
        try:
            outcomes, candidates, staged = self._prune_locked(id_list, reason, actor, turn)
        finally:
            self._release()
            if held is not None:
                held.release()
        if staged and self.has_due():
            # Outside the write lock: a durable removal never makes a
            # concurrent mark wait for the disk.
            with contextlib.suppress(LogWriteError):  # stays DEFERRED; stats() tells
                self.apply_due()
        head = self._st.head
        tombs = head.tombs.by_id
        for i in candidates:
            outcomes[i] = Outcome(Status.PRUNED if i in tombs else Status.DEFERRED)
        return PruneReport({i: outcomes[i] for i in id_list}, head.number)

    def _prune_locked(
        self, id_list: list[str], reason: str, actor: str | None, turn: int | None
    ) -> tuple[dict[str, Outcome], list[str], bool]:
        head = self._st.head
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
            if i in self._st.staged_ids:
                outcomes[i] = Outcome(Status.DEFERRED)
                continue
            e = slot.entry
            if e.streaming:  # never while open (stream.py): nothing marked or staged
                outcomes[i] = Outcome(Status.UNCHANGED, Refusal.CONFLICT)
                continue
            if self._is_immutable(e):
                outcomes[i] = Outcome(Status.UNCHANGED, Refusal.IMMUTABLE)
                continue
            prot = self._protection(e)
            if prot is not None:
                refused[i] = Refusal.PROTECTED if prot == "protected" else Refusal.NEGATIVE
                continue
            candidates[i] = None
        for i in sealed_conflicts(head, candidates):
            del candidates[i]
            refused[i] = Refusal.REFERENCED
        for i in cascade(head, candidates, refused):
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
            Group(
                next(self._st.gids),
                comp,
                max(marks[i].version for i in comp),
                staged_at,
                reason,
                actor,
                turn,
                checked=True,
            )
            for comp in components(head, candidates)
        ]
        version = n if changed else None
        for i in id_list:
            if i in refused:
                outcomes[i] = Outcome(Status.MARKED, refused[i])
        self._append_record(
            prune_record(
                len(self._st.records),
                time.time(),
                version,
                tuple(id_list),
                actor=actor,
                reason=reason,
                turn=turn,
                outcome="staged" if groups else ("marked" if changed else "unchanged"),
                marks=new_marks,
                staged=staged_rows(groups),
                outcomes=outcomes,
            )
        )
        if changed:
            self._st.head = head.with_marks(n, marks)
            self._markable().difference_update(i for i, _r, _t in new_marks)
        for g in groups:
            self._stage(g)
        if groups:
            self._after_stage()
        return outcomes, list(candidates), bool(groups)

    # -- stats and checks --------------------------------------------------

    def stats(self) -> Stats:
        """A frozen picture of the buffer. O(readers + distinct pinned
        versions), a few hundred ns per reader (one ``ReaderInfo`` each)."""
        now = self._st.clock()
        infos, pinned_versions, oldest = self._registry.reader_infos(now)
        head = self._st.head
        removed = self._st.counts["removed"]
        return Stats(
            version=head.number,
            entries=len(head.live),
            retained_versions=len(pinned_versions | {head.number}),
            pinned=len(infos),
            readers=infos,
            oldest_pin_age=max([r.age for r in infos]) if infos else None,
            oldest_pin_version=oldest,
            deferred=len(self._st.staged_ids),
            marks=len(head.marks),
            tombstones=len(head.tombs.by_id),
            refusals=MappingProxyType(dict(self._st.refusals)),
            escalations=self._st.counts["escalations"],
            escalations_dropped=self._st.escalations_dropped,
            tombstone_to_edit_ratio=(len(head.tombs.by_id) / removed) if removed else 1.0,
            readmissions_refused=self._st.counts["readmit_refused"],
            readmissions_overridden=self._st.counts["readmit_overridden"],
            log_records=len(self._st.records),
            log_pending=self.pending_records,
            log_failing=self._st.log_failing,
            reclamation_latency_last=self._st.latency_last,
            reclamation_latency_max=self._st.latency_max,
            callback_errors=self._st.counts["callback_errors"],
        )

    def _append_checkpoint(self) -> None:
        """Append a checkpoint record of the current state, right after its
        anchor (checkpoint.py; flush() calls it). The state is built under
        the write lock (O(live + staged + tombstone index)); its checksum,
        most of the cost, is computed outside it, and the two records
        appended if nothing was appended meanwhile (else built again, all
        under the lock). Writers wait for the state only."""
        lock = self._st.write_lock
        lock.acquire()
        try:
            if self._st.streams:  # logged in this hold: no write uncounted (claims.py)
                self._log_streams_locked()
            state = checkpoint_state(self)
        finally:
            lock.release()
        digest = checkpoint_digest(state)
        lock.acquire()
        try:
            if state["records"] == len(self._st.records) + 1:
                anchor, rec = checkpoint_records(state, digest, time.time())
            else:  # the log grew meanwhile: this state is not the head's
                if self._st.streams:
                    self._log_streams_locked()
                anchor, rec = build_checkpoint(self, time.time())
            self._st.records.append(anchor)
            self._st.records.append(rec)
            self._st.checkpoint_due = rec.seq + 1 + self._st.checkpoint_every
        finally:
            lock.release()

    # -- observation (observe.py) and checks -------------------------------

    def observe(self, observer: Observer | None) -> None:
        """Install ``observer`` (an :class:`~quiesce._core.observe.Observer`)
        to be told of due signals and applied batches, replacing any other;
        ``None`` removes it. Observing changes nothing (see
        :mod:`quiesce._core.observe`). O(1)."""
        if observer is not None and not isinstance(observer, Observer):
            raise InvalidType(f"observer must be an Observer, not {type(observer).__name__}")
        self._st.observer = observer

    def settle(self) -> None:
        """Do now the bookkeeping the fast paths defer (fold the ids
        appended since the last mark into the mark index), so that a memory
        measurement counts it as the buffer's own. Changes no version.
        O(ids appended since the last fold), under the write lock."""
        with self._st.write_lock:
            self._markable()

    def check_invariants(self, *, expect_no_pins: bool = False) -> None:
        """Raise ``AssertionError`` naming the first invariant of
        docs/design.md the current state breaks (with ``expect_no_pins``,
        also if a reader is still pinned). Changes nothing. O(live entries
        + log tail + readers), under the write lock: for tests, demos and
        soak runs, never a hot path."""
        self._check(expect_no_pins=expect_no_pins)

    def _check(self, *, expect_no_pins: bool = False) -> None:
        """Assert every invariant of docs/design.md on the current state.

        O(n + log + readers). For tests: a seeded random stress test calls it
        after every operation (sortedcontainers' habit).
        """
        self._st.write_lock.acquire()
        try:
            check_buffer(self, expect_no_pins)
        finally:
            self._release()


# ---------------------------------------------------------------------------
# helpers


# The fast paths (mark_stale, append) build their Mark and Slot with
# tuple.__new__, skipping the NamedTuple's Python-level __new__ (~0.1 µs
# each); that passes every field positionally, so the field lists are pinned
# here and a change to them fails at import instead of building short tuples.
_new_tuple: Callable[..., Any] = tuple.__new__
_wall_clock = time.time
#: the order change of a mark (Version.derive): none
_SAME_DELTA = (_SAME, None)
_FAST_PATH_FIELDS: dict[Any, str] = {
    Mark: "id reason turn version",
    Slot: "entry key changed",
}
for _cls, _fields in _FAST_PATH_FIELDS.items():
    if _cls._fields != tuple(_fields.split()):  # pragma: no cover - guards edits to records.py
        raise ImportError(f"{_cls.__name__} fields changed: update the fast paths in buffer.py")
