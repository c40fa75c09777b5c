"""Replication: the interface through which a follower and a sequencer drive a buffer.

A buffer shared across processes (``quiesce._shared``) runs one local
:class:`~.buffer.Buffer` per member. A *replica* follows a log another
process writes: it applies batches of records, never applies a removal
itself, and holds no sink. The *sequencer* attaches the shared sink under a
writer epoch, tags the records of each forwarded request (the *stamp*), and
lowers the grace horizon to the other members' readers. This module is the
one place that touches the buffer's internals for them; code outside
``_core`` drives replication only through :class:`Replication`.

What it keeps true:

1. **One attachment at a time.** :meth:`Replication.attach` and
   :meth:`Replication.detach` swap the sink, the durable mark, the
   checkpoint schedule and the grace floor together, under the write lock:
   a writer sees either the replica's state (no sink, every removal held
   back) or the sequencer's, never a mix. A detach names the epoch it ends;
   a stale detach (an older epoch than the one attached) changes nothing.
   Detaching reports the records that were not durable (they are lost to
   the shared log: the caller rebuilds from it).
2. **A stamp is on a record before any flush can read it.** Inside
   :meth:`Replication.serving` the flush lock is held by the serving thread
   (re-entrant: the request's own inline flush may take it again), and
   every record that thread appends is passed through the stamp: records
   written through the core's record path as they are appended, the fast
   paths' compact records (``append``, ``mark_stale``) when the block ends,
   before the flush lock is released. No flush by another thread commits
   an unstamped record of the request.
3. **A batch is one version.** :meth:`Replication.apply_records` applies
   records that continue this buffer's log (``seq`` from
   :attr:`Replication.applied` on, no gap) under the write lock, with
   :func:`~.replay.replay`'s checks; readers see the head before or after
   the whole batch.
4. **The grace floor only holds back.** :meth:`Replication.set_grace_floor`
   lowers the horizon (:meth:`~.grace.Grace.horizon`) to the other
   processes' readers; ``-1`` holds every removal back (a replica).
   :meth:`Replication.hold_back` vetoes removals whose intent is being made
   durable (they are requeued, never published).

Cancellation: nothing here awaits; every method is sync and either
completes or raises before changing anything, so a cancelled caller never
leaves half an attachment. A :meth:`Replication.serving` block left by an
exception still stamps the records appended so far and releases its locks.

Threads: every method may be called from any thread. The core imports no
event loop and no driver: the sink is any :class:`~.log.LogSink`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .checkpoint import CheckpointSink, recover, replay_log
from .errors import InvalidArgument, InvalidType
from .log import LogSink, _build_lock, build_compact
from .pins import _NOT_ENTERED, Snapshot
from .records import LogRecord
from .replay import replay

if TYPE_CHECKING:
    from .buffer import Buffer
    from .version import Version

__all__ = ["GuardedSnapshot", "ReadGate", "Replication", "Stamp"]

#: A record -> the same record with the request's tag. Must be idempotent
#: (a record may be passed through it twice) and keep ``seq``.
Stamp = Callable[[LogRecord], LogRecord]

_get_ident = threading.get_ident


class GuardedSnapshot(Snapshot):
    """A snapshot whose every read first asks a guard.

    ``guard(pinned_at, version)`` is called on each read with the pin time
    and the pinned version number; it raises to refuse the read (a shared
    member whose lease expired raises ``LeaseLost``). The pin time is the
    buffer's clock read when the snapshot was made (or the time its maker
    passed, read on that clock): never later than the pin, so a guard that
    voids snapshots pinned up to some moment voids every one pinned before
    it (a snapshot made before that moment and pinned after it is voided
    too: refused, never wrongly served). Pinning and unpinning are exactly
    :class:`Snapshot`'s (the lock-free fast path: this class adds no frame
    to them; a plain snapshot's pin time is stamped lazily, too coarse for
    a guard); a read costs one call more. Made by :meth:`Replication.snapshot`.
    """

    __slots__ = ("_read_guard", "_since")

    _read_guard: Callable[[float, int], None]
    _since: float

    def _v(self) -> Version:
        v = Snapshot._v(self)
        self._read_guard(self._since, v.number)
        return v

    def _v_for(self, entry_id: object) -> Version:
        v = self._v()  # the guard first, as for every read
        Snapshot._v_for(self, entry_id)  # then the id's check
        return v


class ReadGate:
    """What a snapshot maker of :meth:`Replication.snapshot_maker` checks
    before each pin: a pin whose clock reading is later than ``deadline``
    (the buffer's clock), or any pin while ``lost`` is not None, is refused.

    Its owner (a shared member: the lease deadline and the counted loss)
    writes the two public fields; a pin reads one derived field, ``limit``:
    ``deadline`` while ``lost`` is None, else -inf, so the pin's check is
    one comparison (``now > gate.limit``). Each write of ``deadline`` or
    ``lost`` sets ``limit`` under the gate's lock, from the pair as it is
    then: writes are serialized, so ``limit`` always agrees with the last
    write of each field (two racing writers cannot leave a stale ``limit``).
    Readers take no lock (``limit`` is one float reference: an atomic read):
    a pin that races a write is decided by the value it read, and its
    snapshot's reads still ask the guard, which decides each read on its
    own. Nobody but the setters writes ``limit``. O(1) memory; made with
    ``deadline`` -inf (every pin refused) until the owner sets it.
    """

    __slots__ = ("_deadline", "_lock", "_lost", "limit")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadline = float("-inf")
        self._lost: BaseException | None = None
        #: pins read on the buffer's clock later than this are refused
        #: (derived: ``deadline``, or -inf while ``lost`` is set)
        self.limit = float("-inf")

    @property
    def deadline(self) -> float:
        """Pins read on the buffer's clock later than this are refused."""
        return self._deadline

    @deadline.setter
    def deadline(self, deadline: float) -> None:
        with self._lock:
            self._deadline = deadline
            self.limit = deadline if self._lost is None else float("-inf")

    @property
    def lost(self) -> BaseException | None:
        """Not None: every pin is refused."""
        return self._lost

    @lost.setter
    def lost(self, lost: BaseException | None) -> None:
        with self._lock:
            self._lost = lost
            self.limit = self._deadline if lost is None else float("-inf")


class Replication:
    """The replication handle of one buffer (see the module docstring).

    Make it once, right after the buffer, before the buffer is shared with
    other threads: it makes the buffer's flush lock re-entrant (a request
    served inside :meth:`serving` flushes inline while holding it) and
    installs the stamping hook on the buffer's record path. One handle per
    buffer (a second raises :class:`InvalidArgument`).
    """

    __slots__ = ("_buf", "_epoch", "_registry", "_serving", "_st")

    def __init__(self, buf: Buffer) -> None:
        from .buffer import Buffer

        if not isinstance(buf, Buffer):
            raise InvalidType(f"Replication takes a Buffer, not {type(buf).__name__}")
        st = buf._st
        if st.record_hook is not None:
            raise InvalidArgument("this buffer has a replication handle already")
        self._buf = buf
        #: the buffer's fields (state.py): what this handle drives
        self._st = st
        #: the buffer's pin registry (what its snapshots pin through)
        self._registry = buf._registry
        #: the epoch of the attached sink (None: detached)
        self._epoch: int | None = None
        #: (thread, stamp) while that thread serves a request
        self._serving: tuple[int, Stamp] | None = None
        st.flush_lock = threading.RLock()  # type: ignore[assignment]
        st.record_hook = self._hook

    # -- state ---------------------------------------------------------------

    @property
    def buffer(self) -> Buffer:
        return self._buf

    @property
    def applied(self) -> int:
        """Records in this buffer's log (appended or applied): the ``seq``
        of the next one. O(1), lock-free."""
        return len(self._st.records)

    @property
    def durable(self) -> int:
        """Records known durable in the attached sink (records ``0`` ..
        ``durable - 1``); the records applied from a shared log count as
        durable once a sink is attached. O(1), lock-free."""
        return self._st.synced

    @property
    def epoch(self) -> int | None:
        """The epoch of the attached sink, or None while detached."""
        return self._epoch

    # -- the sink --------------------------------------------------------------

    def attach(
        self, sink: LogSink, *, epoch: int, checkpoint_every: int, grace_floor: int | None = 0
    ) -> None:
        """Make ``sink`` this buffer's log sink for writer epoch ``epoch``
        (the buffer becomes the sequencer's): every record already in the
        buffer counts as durable (it came from the shared log), checkpoints
        are written every ``checkpoint_every`` records if the sink recovers
        from them (0: only on ``flush(checkpoint=True)``), and the grace
        floor becomes ``grace_floor`` (0 until the members' horizons are
        read). All under the write lock. O(1)."""
        if not isinstance(sink, LogSink):
            raise InvalidType(f"sink must be a LogSink, not {type(sink).__name__}")
        if type(epoch) is not int:
            raise InvalidType(f"epoch must be an int, not {type(epoch).__name__}")
        st = self._st
        with st.write_lock:
            st.synced = len(st.records)
            st.sink = sink
            st.checkpoints_ok = isinstance(sink, CheckpointSink)
            st.checkpoint_every = checkpoint_every
            st.checkpoint_due = len(st.records) + checkpoint_every
            st.grace_floor = grace_floor
            self._epoch = epoch

    def detach(self, epoch: int | None = None) -> int:
        """Drop the sink (the buffer becomes a replica's: it never writes to
        a log again and holds every removal back). With ``epoch``, only the
        attachment of that epoch is ended (a stale call returns 0 and changes
        nothing). Returns the records that were not durable: they are in
        this buffer only, lost to the shared log. O(1), under the write lock."""
        buf = self._buf
        st = self._st
        with st.write_lock:
            if epoch is not None and epoch != self._epoch:
                return 0
            lost = buf.pending_records
            st.sink = None
            st.grace_floor = -1
            self._epoch = None
            return lost

    # -- grace -------------------------------------------------------------------

    def set_grace_floor(self, floor: int | None) -> None:
        """Lower the horizon to ``floor``, the oldest version readers in other
        processes may hold (``None``: none; ``-1``: hold every removal back).
        If a staged removal is due at the new horizon, the due signal is sent
        (applied inline or the runtime's scheduler woken). O(1)."""
        if floor is not None and type(floor) is not int:
            raise InvalidType(f"floor must be an int or None, not {type(floor).__name__}")
        buf = self._buf
        st = self._st
        with st.write_lock:
            st.grace_floor = floor
        if buf.has_due():
            buf._pub.signal_due()

    @property
    def grace_floor(self) -> int | None:
        return self._st.grace_floor

    def removals_in_flight(self, gids: Iterable[int]) -> dict[int, int]:
        """Of the removal groups ``gids`` (a ``tombstone`` intent record's
        ``detail["gids"]``), those being made durable now, gid -> grace
        version. Lock-free (a sink's ``before_commit`` calls it inside the
        flush). O(len(gids))."""
        applying = self._st.applying
        out: dict[int, int] = {}
        for gid in gids:
            g = applying.get(gid)
            if g is not None:
                out[gid] = g.grace
        return out

    def hold_back(self, gids: Iterable[int], floor: int | None) -> None:
        """Veto the removals of groups ``gids`` whose intent is being made
        durable: they are requeued when the flush returns, not published
        (the intent record is harmless: recovery ignores an intent without
        its removal). Sets the grace floor to ``floor`` (without a due
        signal: the floor just rose no further). Under the write lock."""
        st = self._st
        with st.write_lock:
            for gid in gids:
                st.applying.pop(gid, None)
            st.grace_floor = floor

    # -- records -----------------------------------------------------------------

    def _hook(self, record: LogRecord) -> LogRecord:
        serving = self._serving
        if serving is not None and serving[0] == _get_ident():
            return serving[1](record)
        return record

    @contextmanager
    def serving(self, stamp: Stamp, *, exclusive: bool = False) -> Iterator[None]:
        """Apply one forwarded request in the block: every record this thread
        appends meanwhile is passed through ``stamp`` before a flush can read
        it (invariant 2). Holds the flush lock for the block (re-entrant: the
        request's own inline flush takes it again; another thread's flush
        waits, so it commits the request's records only once the block has
        ended). With ``exclusive`` the write lock is held too, so the records
        from the block's start are the request's alone; the fast paths'
        compact records are built and stamped at its end (O(records
        stamped)). Use ``exclusive`` for the fast paths only (``append``,
        ``mark_stale``): a prune or edit may wait for a disk, which must not
        happen under the write lock. On an exception the records appended so
        far are stamped all the same, and both locks are released."""
        st = self._st
        with st.flush_lock:
            self._serving = (_get_ident(), stamp)
            try:
                if not exclusive:
                    yield
                    return
                with st.write_lock:
                    start = len(st.records)
                    try:
                        yield
                    finally:
                        self._stamp_tail(start, stamp)
            finally:
                self._serving = None

    def _stamp_tail(self, start: int, stamp: Stamp) -> None:
        """Stamp records ``start`` .. end (call holding the write and flush
        locks): compact ones are built now. A reader of ``log`` that built one
        of them in between keeps a record equal to the stored one but for the
        stamp."""
        records = self._st.records
        with _build_lock:
            for seq in range(start, len(records)):
                local = seq - records.first
                rec = list.__getitem__(records, local)
                if type(rec) is tuple:  # compact (log.py): build it now
                    rec = build_compact(seq, rec)
                list.__setitem__(records, local, stamp(rec))

    def apply_records(self, records: Sequence[LogRecord], *, strict: bool = False) -> int:
        """Apply the records that continue this buffer's log, as one new
        version (invariant 3): those with ``seq`` below :attr:`applied` are
        skipped (already applied); the rest must start at :attr:`applied`
        with no gap, else nothing is applied (a follower reads again). With
        ``strict`` nothing is skipped: every record must continue the log
        (a reader of a whole log: a gap raises). A fresh buffer whose first
        record is a compacted log's checkpoint starts from its state
        (:func:`~.checkpoint.replay_log`). Returns the number applied.
        Raises :class:`LogFormatError` for a record replay refuses (then
        the buffer must be rebuilt). O(records · log n), under the write
        lock."""
        st = self._st
        with st.write_lock:
            start = len(st.records)
            fresh = list(records) if strict else [r for r in records if r.seq >= start]
            if not fresh or (not strict and fresh[0].seq != start):
                return 0
            if start == 0:
                replay_log(st, fresh)
            else:
                replay(st, fresh)
            return len(fresh)

    def load(self, sink: CheckpointSink) -> bool:
        """Fill this fresh buffer from the newest valid checkpoint of ``sink``
        and the records after it (a damaged checkpoint is skipped with a
        warning, :func:`~.checkpoint.recover`). Returns False, the buffer
        left fresh, when there is none (then apply the whole log with
        :meth:`apply_records`). The records before the checkpoint stay in the
        sink only: this buffer (which has no sink) counts them as dropped
        from memory, as its retention would. Under the write lock."""
        st = self._st
        with st.write_lock:
            if not recover(st, sink):
                return False
            st.records.dropped = st.records.first
            return True

    def forget_held_records(self) -> int:
        """Drop the records held in memory once there are at least 16 (a
        scratch buffer replaying a log chunk by chunk keeps its state, not
        its log); they count as dropped. Returns the number dropped. Under the write
        lock. Amortized O(1) per record."""
        st = self._st
        with st.write_lock:
            records = st.records
            return records.trim(len(records), 0)

    # -- reads -------------------------------------------------------------------

    def snapshot(
        self, guard: Callable[[float, int], None], since: float | None = None
    ) -> GuardedSnapshot:
        """A snapshot of this buffer whose reads ask ``guard`` first
        (:class:`GuardedSnapshot`), with pin time ``since`` (default: the
        buffer's clock, read now; a caller that has just read that clock
        passes its reading). Pinning is :meth:`Buffer.snapshot`'s fast path:
        O(1), never waits."""
        snap = GuardedSnapshot()  # a C-level call: no __init__
        snap._read_guard = guard
        snap._since = self._st.clock() if since is None else since
        snap._registry = self._registry
        snap._version = None
        snap._task = _NOT_ENTERED
        return snap

    def snapshot_maker(
        self,
        gate: ReadGate,
        guard: Callable[[float, int], None],
        refuse: Callable[[], BaseException],
    ) -> Callable[[], GuardedSnapshot]:
        """A maker of guarded snapshots that checks ``gate`` first: each call
        reads the buffer's clock once; if that reading is past
        ``gate.deadline`` or ``gate.lost`` is set (one comparison with
        ``gate.limit``), it raises ``refuse()``
        (which may count the refusal: it runs in the caller's thread),
        else it returns what :meth:`snapshot` with ``guard`` and that
        reading as the pin time would. The check, the clock read and the
        snapshot's making are one call frame (the maker is meant to be
        installed as its owner's ``snapshot``: a replica's pin costs one
        clock read and one frame more than nothing, no more than a local
        pin's frame). O(1), no lock, never waits, any thread; a snapshot is
        made only after the check passed, so a refused call changes
        nothing."""
        registry = self._registry
        clock = self._st.clock

        # Five free variables (each call copies them into its frame); the
        # class and the marker are module globals.
        def snapshot() -> GuardedSnapshot:
            now = clock()
            if now > gate.limit:  # past the deadline, or the lease is lost
                raise refuse()
            snap = GuardedSnapshot()  # a C-level call: no __init__
            snap._read_guard = guard
            snap._since = now
            snap._registry = registry
            snap._version = None
            snap._task = _NOT_ENTERED
            return snap

        return snapshot
