"""The buffer: the façade over its parts, and the write fast paths.

What it keeps true: every change publishes a new immutable
:class:`~.version.Version` under the write lock, with one attribute store
(atomic under the GIL); the head number only grows; a reader sees exactly
the version it pinned however long it awaits (invariant 1). On any error a
write leaves the head unchanged. ``mark_stale`` and ``append`` never wait
for readers, the barrier or a disk.

:class:`Buffer` holds one :class:`~.state.BufferState` (every field, in
one place) and the parts that work on it, each in its module with the
invariant it keeps in its header, each handed the state and the parts
below it, none holding the buffer:

* :mod:`.pins` — :class:`~.pins.PinRegistry`, the lock-free reader registry
  (:class:`~.pins.Snapshot` is the readers' fast path);
* :mod:`.grace` — :class:`~.grace.Grace`, the queue of staged removals and
  its horizon;
* :mod:`.publish` — :class:`~.publish.Publisher`, the log tail (records,
  trim, flush, escalations), the due signal and the durable removal path;
* :mod:`.stream` — :class:`~.stream.Streams`, the open entries;
* :mod:`.edit` — :class:`~.edit.Editor`, prune requests and edit plans;
* :mod:`.check`, :mod:`.checkpoint`, :mod:`.verify` — functions of the state.

Here: the public surface, which delegates to the parts (one call, off the
fast paths), and the fast paths themselves — ``snapshot()``, ``append``,
``extend`` and ``mark_stale`` are written out and call no helper in the
common case (a delegating call would cost them a frame).

Threads. Mutations may come from worker threads. Writers serialize on the
state's ``write_lock``; readers never take it.

Prior art: RCU grace periods (liburcu), crossbeam-epoch, PostgreSQL's
``backend_xmin`` horizon, h11's sans-IO state machines.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .check import check_buffer
from .checkpoint import (
    DEFAULT_CHECKPOINT_EVERY,
    CheckpointSink,
    append_checkpoint,
    check_checkpoint_every,
    gc_paused,
    recover,
    replay_log,
)
from .edit import Editor
from .entry import MAX_STORED_INT, Entry, check_id, check_int, check_text, check_turn
from .errors import (
    InvalidArgument,
    InvalidType,
    ProtectedEntry,
    dangling_ref,
    duplicate_id,
)
from .extend import extend
from .grace import Grace
from .log import DEFAULT_RETENTION, EditLog, LogSink, ReadableSink
from .observe import Observer
from .pins import _NOT_ENTERED, PinRegistry, Snapshot, _missing, _new_object
from .plan import EditPlan
from .policy import _CACHE_FROM as _CLASSIFY_FROM
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import PROTECTED_KINDS as _PROTECTED
from .policy import Policy, preclassify
from .publish import Publisher
from .records import (
    EditReport,
    Escalation,
    EscalationKind,
    Mark,
    Override,
    PruneReport,
    Stats,
    Tombstone,
)
from .state import BufferState, weakly
from .stream import Streams, StreamWriter
from .verify import verify_buffer
from .version import ADD as _ADD
from .version import EMPTY_MAP, Slot, Version
from .version import SEG as _SEG
from .version import next_seg as _next_seg
from .wire import append_record

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


class Buffer:
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
        # The parts, lowest first; each is handed the state and the parts
        # below it. What a lower part calls of a higher one (the registry's
        # horizon and due signal, the publisher's flush hooks, recovery's
        # reopening of a stream) is handed to it weakly (state.weakly): no
        # part holds the buffer or a part above it, so a buffer is freed by
        # its last reference (its log's file lock released), never cyclic garbage.
        reg = self._registry = PinRegistry(st)
        grace = self._grace = Grace(st, reg)
        pub = self._pub = Publisher(st, grace, reg)
        streams = self._streams = Streams(st, pub, reg)
        self._editor = Editor(st, pub, grace)
        reg.horizon = weakly(grace.horizon)
        reg.signal_due = weakly(pub.signal_due)
        st.reopen_stream = weakly(streams.reopen)
        pub.log_streams = weakly(streams.log_streams)
        pub.unlogged_text = weakly(streams.unlogged_text)
        pub.append_checkpoint = functools.partial(
            append_checkpoint, st, weakly(streams.log_streams_locked)
        )
        if isinstance(log, ReadableSink):
            # the in-memory tail of the log (log.py): a readable sink holds the rest
            st.records.reader = log.read_range
        if log is not None:
            # one collector pause over recovery and the trim after it: the
            # recovered records the trim drops (all but the durable tail) are
            # freed before the collector is back, so its first collection
            # walks only what stays (checkpoint.gc_paused)
            with gc_paused():
                if not (st.checkpoints_ok and recover(st, log)):  # type: ignore[arg-type]
                    records = log.load()
                    if records:
                        replay_log(st, records)
                    del records
                st.synced = len(st.records)
                pub.trim_log()
                st.head.tombs.spill(st.synced)  # durable tombstones leave memory
            if st.streams:  # the log ends mid-stream: finish them as aborted
                streams.abort_recovered()
        #: seq the next automatic checkpoint is due at (flush() writes it)
        st.checkpoint_due = len(st.records) + checkpoint_every
        if verify:
            self.verify()

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
        return verify_buffer(self._st, Buffer, self._streams.unlogged_text)

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
        snap = Snapshot()  # a C-level call: Snapshot has no __init__
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
        if len(entry.body) >= _CLASSIFY_FROM and self._pub.own_policy():
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
            if eid in live:
                raise duplicate_id(eid, None)
            # one pass over the tombstones: the id, then the content hash or key
            gone, tomb = by_id.admission(eid, entry.content_hash, entry.key)
            if gone is not None:
                raise duplicate_id(eid, gone)
            for ref in entry.refs:
                if ref not in live:
                    raise dangling_ref(eid, ref, by_id.get(ref))
            overridden = False
            if tomb is not None:
                if override is None:
                    raise self._pub.refuse_readmission(entry, tomb)
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
                    self._pub.trim_log()
            else:
                # "overridden" only when the override let matching content in
                # (_count derives readmissions_overridden from it, also on replay)
                self._pub.append_record(
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
                self._pub.drain_due()

    def extend(
        self, entries: Sequence[Entry], overrides: Sequence[Override | None] | None = None
    ) -> int:
        """Publish *one* new version with ``entries`` at the end of the window,
        in order, all or nothing (:func:`.extend.extend` states the rules);
        ``overrides[i]`` lets ``entries[i]`` re-admit tombstoned content, as
        ``append``'s ``override`` does. Returns the head version (unchanged
        for an empty batch). O(k · (log n + refs · log n)); never touches a disk."""
        return extend(self._st, self._pub, entries, overrides)

    # -- mark ----------------------------------------------------------------

    def mark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        """Mark an entry stale: the sync fast path (seed 000's safe operation).

        Never awaits, never waits for readers, the barrier or a disk; O(1):
        no persistent-map work (the mark joins the head's run of marks; the
        new version's marks map is built when first read, at most
        :data:`.version.SEG` sets plus its segment's once-only start:
        :class:`.version.MarkSeg`), plus folding the ids appended since the
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
            unmarked = st.unmarked
            try:
                unmarked.remove(entry_id)
            except KeyError:
                if not (st.unmarked_new and entry_id in st.markable()):
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
                self._pub.trim_log()
            # The new version, written out: its marks map is left unset (built
            # on first read, Version.__getattr__); the mark joins the head's
            # segment of its run of marks (version.py, "Runs of marks").
            new = _new_object(Version)
            seg = head._mseg
            if seg is None or (k := head._mk) >= _SEG or k != list.__len__(seg.marks):
                seg = _next_seg(head)
            seg_marks = seg.marks
            seg_marks.append(mark)
            new._mseg = seg
            new._mk = list.__len__(seg_marks)
            new.number = n
            new.live = head.live
            new.tombs = head.tombs
            new.referrers = head.referrers
            new.next_key = head.next_key
            new._entries = head._entries  # marks change neither order nor content
            # The order is the head's: share its view, or its derivation (base
            # and delta), so a run of marks never lengthens a view chain.
            new._view = view = head._view
            if view is None:
                try:
                    new._base = head._base
                    new._delta = head._delta
                    new._depth = head._depth
                except AttributeError:  # a version made without a chain: sorts
                    new._base = None
                    new._delta = None
                    new._depth = 0
            else:
                new._base = None
                new._delta = None
                new._depth = 0
            st.head = new
            return mark
        finally:
            if held:
                lock.release()
            if st.due_flag and st.due_hook is None:
                self._pub.drain_due()

    # -- delegated to the parts ------------------------------------------------

    def prune(
        self,
        ids: Iterable[str],
        *,
        reason: str,
        actor: str | None = None,
        turn: int | None = None,
    ) -> PruneReport:
        """Seed 000's decision procedure, per id (:meth:`.edit.Editor.prune`).

        ``PRUNED``: removed now (no reader pinned it unmarked), tombstone
        written and durable. ``DEFERRED``: marked now, removed at its grace
        point. ``MARKED``: refused and marked instead (``PROTECTED``,
        ``NEGATIVE``, or ``REFERENCED`` by a surviving entry not in the same
        request). ``UNCHANGED``: immutable kinds, unknown ids (``UNKNOWN``),
        ids already removed, an open stream (``CONFLICT``). Ids in one
        request that cite each other are removed together as one
        transaction; refusals cascade. With a durable sink, pending records
        are flushed before anything changes (a failing disk raises
        :class:`LogWriteError`, version unchanged); the tombstones are
        durable before a removal is published."""
        return self._editor.prune(ids, reason, actor, turn, self.flush, self.apply_due)

    def edit(self, plan: EditPlan) -> EditReport:
        """Seed 002's all-or-nothing self-edit (:meth:`.edit.Editor.edit`
        states every rule): refused as a whole — window unchanged, one
        :class:`Escalation`, the refusal logged — if any op breaks a rule;
        else rewrites, moves and summaries are published in one version and
        removals staged for their grace point, like :meth:`prune`'s.
        O(ops·log n)."""
        return self._editor.edit(plan, self.flush, self.apply_due)

    def apply_due(self) -> tuple[str, ...]:
        """Apply every staged removal that is due, as one new version,
        re-validating each against the head; returns the removed ids. Raises
        :class:`LogWriteError` if the tombstones cannot be made durable
        (nothing published, the removals stay staged). With a durable sink
        the disk write happens outside the write lock
        (:meth:`.publish.Publisher.apply_due`)."""
        return self._pub.apply_due()

    def flush(self, *, checkpoint: bool = False) -> None:
        """Return once every change made before the call is durable in the
        sink: one sink write (one commit) for every pending record. Raises
        :class:`LogWriteError` on failure (the records stay pending). With
        ``checkpoint=True``, or once ``checkpoint_every`` records were
        written since the last one, a checkpoint of the state goes in the
        same commit (:meth:`.publish.Publisher.flush`)."""
        self._pub.flush(checkpoint=checkpoint)

    @property
    def pending_records(self) -> int:
        """Records not yet durable in the sink (an open stream's text that
        no record holds yet counts as one: the next flush logs it)."""
        return self._pub.pending_records

    def has_due(self) -> bool:
        """Whether some staged removal is due now. O(1)."""
        return self._grace.has_due()

    def next_grace(self) -> int | None:
        """The smallest grace version among staged removals, or ``None``."""
        return self._grace.next_grace()

    def staged(self) -> Mapping[str, int]:
        """Ids staged for removal → their grace version."""
        return self._grace.staged()

    def drain_escalations(self) -> list[Escalation]:
        """Escalations queued while no runtime consumes them (oldest first)."""
        return self._pub.drain_escalations()

    def escalate(
        self, kind: EscalationKind, detail: str, *, data: Mapping[str, Any] | None = None
    ) -> Escalation:
        """Log and deliver an escalation raised outside the core (the
        runtime's reader-age alarm); see :meth:`.publish.Publisher.escalate`
        for the checks (nothing is logged if one fails)."""
        return self._pub.escalate(kind, detail, data=data)

    def open_stream(
        self,
        id: str,
        kind: Any,
        *,
        refs: Iterable[str] = (),
        turn: int | None = None,
        key: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> StreamWriter:
        """Publish a new entry that is still being written and return its
        :class:`StreamWriter` (:meth:`.stream.Streams.open_stream` lists the
        errors, each changing nothing). Sync, never touches a disk."""
        return self._streams.open_stream(id, kind, refs=refs, turn=turn, key=key, meta=meta)

    def streams(self) -> Mapping[str, StreamWriter]:
        """The open streams by id (a copy). O(open streams)."""
        return self._streams.streams()

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
            log_pending=self._pub.pending_records,
            log_failing=self._st.log_failing,
            reclamation_latency_last=self._st.latency_last,
            reclamation_latency_max=self._st.latency_max,
            callback_errors=self._st.counts["callback_errors"],
        )

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
            self._st.markable()

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
            self._pub.release()


# ---------------------------------------------------------------------------
# helpers


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
