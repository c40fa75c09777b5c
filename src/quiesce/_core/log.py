"""The append-only edit log: the in-memory view and the sink protocol.

Seed 002, condition 1: the log of prunings lives outside the prunable window
and the editor cannot delete from it. :class:`EditLog` is a read-only
``Sequence``: it has no method that removes or replaces a record, and the
buffer only ever appends. Durable sinks (``quiesce._log``) implement
:class:`LogSink`; the core never imports them.

Group commit: records are appended in memory on every change (the mark fast
path never touches a disk) and handed to the sink in batches by
``Buffer.flush()`` and before every removal is published.

Deferred records. The two hottest writers (``mark_stale`` and ``append``)
append a *compact* record: a plain ``tuple`` ``(build, *fields)`` holding the
objects the change made anyway (the Entry) and its wall-clock time, or for a
mark ``(id, reason, turn, version, time)`` (atomic values only, so the
garbage collector untracks it; :func:`.wire.mark_record`).
:func:`materialize` turns it into the :class:`LogRecord` (``build(seq,
*fields)``) the first time anyone reads it — the view, a flush, a check — and
stores that back, so the record is built at most once and never on the fast
path. A :class:`LogRecord` is a ``tuple`` *subclass*, so ``type(r) is tuple``
tells the two apart. Every value in a compact record is immutable, so the
record built later is exactly the one that would have been built at once.

Bounded memory (issue 13). A buffer's record list is a :class:`Records`: the
in-memory *tail* of the log, records ``first`` .. ``len - 1``; ``len()`` is
the number of records ever written (the next ``seq``). Once records are
durable in a sink that can read them back (:class:`ReadableSink`), the buffer
trims the tail (:meth:`Records.trim`): memory keeps at most
``keep`` records past the last durable one plus what is not durable yet, and
:class:`EditLog` reads older records from the sink, in chunks. Without such a
sink the tail is cut to a retention (:data:`DEFAULT_RETENTION` records) and
the cut is counted (``EditLog.dropped``); reading a dropped record raises
:class:`LogRecordDropped`. A record read back from a sink is checked: a
missing or damaged one raises :class:`LogFormatError`, never another record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, overload, runtime_checkable

from .errors import LogFormatError, LogRecordDropped
from .records import LogRecord
from .wire import mark_record

__all__ = [
    "DEFAULT_RETENTION",
    "DURABLE_TAIL",
    "EditLog",
    "LogSink",
    "ReadableSink",
    "Records",
    "build_compact",
    "check_read",
    "mark_record",
    "materialize",
    "materialize_range",
]

#: Records a buffer without a readable sink keeps in memory (the newest
#: ones; older ones are dropped and counted, see :attr:`EditLog.dropped`).
DEFAULT_RETENTION = 10_000

#: Durable records a buffer with a readable sink keeps in memory past the
#: last one it made durable (the rest are read back from the sink). Small:
#: a kept append record keeps its entry's body alive, pruned or not.
DURABLE_TAIL = 32

#: Records read from a sink per call while iterating an old part of the log.
READ_CHUNK = 1_024

#: Serializes building compact records and trimming the tail (never the fast
#: paths, which only append): a record is built once, so whoever reads it
#: gets the same object, and a trim never moves a record being built.
_build_lock = threading.Lock()


class Records(list[Any]):
    """A buffer's in-memory log tail: LogRecords and compact records.

    ``list`` indexing is *local* (element 0 is record :attr:`first`);
    ``len()`` is *absolute*: the number of records ever written, so the next
    record's ``seq`` is ``len(records)``. Appending is ``list.append`` (the
    fast paths pay nothing). Read records by ``seq`` with :func:`materialize`.

    Invariants: records ``first`` .. ``len - 1`` are in the list, in order;
    records before ``first`` are in the sink (``reader``) or were dropped
    (``dropped`` of them, all before ``first``, only when there is no
    reader). ``first`` only grows; it moves only in :meth:`trim`, under the
    build lock, inside a seqlock (``_gen`` odd while moving) so that a
    lock-free ``len()`` never sees a half-moved tail.
    """

    __slots__ = ("_gen", "dropped", "first", "reader")

    def __init__(self) -> None:
        super().__init__()
        #: seq of the first record held in memory
        self.first = 0
        #: records dropped from memory with no sink to read them back from
        self.dropped = 0
        #: ``read(start, stop)`` of the sink holding records before ``first``
        self.reader: Callable[[int, int], Sequence[LogRecord]] | None = None
        self._gen = 0

    def __len__(self) -> int:
        while True:
            gen = self._gen
            total = self.first + list.__len__(self)
            if gen == self._gen and not gen & 1:
                return total
            if gen & 1:  # a trim is moving the tail: wait for it, do not spin
                with _build_lock:
                    pass

    def held(self) -> int:
        """Records held in memory. O(1)."""
        return list.__len__(self)

    def trim(self, durable: int, keep: int) -> int:
        """Drop records older than ``min(durable, len - keep)`` from memory.

        ``durable``: records ``0 .. durable - 1`` can be read back from
        ``reader`` (pass ``len(self)`` and no reader to drop by retention; the
        drop is then counted in :attr:`dropped`). Drops only when at least
        ``keep`` records (and at least 16) would go, so the O(tail) move is
        amortized O(1) per record. Returns the number dropped. Safe while
        other threads append (``list.append`` only adds at the end) and read
        (the seqlock and the build lock).
        """
        cut = min(durable, len(self) - keep)
        count = cut - self.first
        if count < max(keep, 16):
            return 0
        with _build_lock:
            self._gen += 1
            try:
                del self[:count]
                self.first = cut
                if self.reader is None:
                    self.dropped += count
            finally:
                self._gen += 1
        return count

    def read(self, start: int, stop: int) -> list[LogRecord]:
        """Records ``start`` .. ``stop - 1`` (absolute, ``0 <= start <= stop
        <= len``) as LogRecords, from memory or the sink. Raises
        :class:`LogRecordDropped` for a dropped record and
        :class:`LogFormatError` for one the sink cannot return intact."""
        out: list[LogRecord] = []
        while start < stop:
            first = self.first
            if start >= first:
                with _build_lock:
                    first = self.first
                    if start >= first:
                        out.extend(_built(self, i, i - first) for i in range(start, stop))
                        return out
            upto = min(stop, first)
            out.extend(self._read_old(start, upto))
            start = upto
        return out

    def _read_old(self, start: int, stop: int) -> Sequence[LogRecord]:
        reader = self.reader
        if reader is None:
            raise LogRecordDropped(
                f"log record {start} was dropped from memory: this buffer has no sink to "
                f"read it back from and keeps only records {self.first} on "
                f"({self.dropped} dropped)"
            )
        return check_read(reader(start, stop), start, stop)


def check_read(records: Sequence[LogRecord], start: int, stop: int) -> Sequence[LogRecord]:
    """``records``, if they are exactly records ``start`` .. ``stop - 1`` in
    order; otherwise :class:`LogFormatError` (a sink lost or reordered one).
    Sinks call it on what they read; the core calls it again on what a sink
    returns, so a faulty sink cannot hand back a wrong record."""
    if len(records) != stop - start:
        raise LogFormatError(
            f"the log sink returned {len(records)} record(s) for seq {start}..{stop - 1}: "
            f"a record has gone missing from the log"
        )
    for offset, rec in enumerate(records):
        if not isinstance(rec, LogRecord) or rec.seq != start + offset:
            got = rec.seq if isinstance(rec, LogRecord) else type(rec).__name__
            raise LogFormatError(
                f"the log sink returned {got} where record {start + offset} was due"
            )
    return records


def _seq_of(value: object) -> int | None:
    """The ``seq`` a record-shaped value claims (its first field), if any."""
    if isinstance(value, tuple) and len(value) == len(LogRecord._fields):
        seq = value[0]
        if type(seq) is int:
            return seq
    return None


def _first_of(records: Records | list[Any]) -> int:
    return records.first if type(records) is Records else 0


def materialize(records: Records | list[Any], index: int) -> LogRecord:
    """The :class:`LogRecord` with ``seq`` ``index`` (negative: from the
    end), building (and storing back) a compact one. O(1) amortized for a
    record in memory; a record older than the tail is read from the sink
    (:class:`LogRecordDropped` if it was dropped). Safe from any thread: a
    record is built once, under the build lock, so every reader gets the
    same object (a log record, once seen, is never replaced — not even by an
    equal one). A record read back from the sink is a new, equal object."""
    if index < 0:  # normalised first: the list may grow meanwhile
        index += len(records)
        if index < 0:
            raise IndexError("log record index out of range")
    first = _first_of(records)
    local = index - first
    if local >= 0:
        try:
            rec = records[local]  # Records has list's own, local __getitem__
        except IndexError:
            rec = None
        # Lock-free: a built record proves its own seq (a trim may have
        # moved the list between reading ``first`` and indexing it).
        if rec is not None and type(rec) is not tuple and rec.seq == index:
            return rec  # type: ignore[no-any-return]
        with _build_lock:
            first = _first_of(records)
            local = index - first
            if local >= 0:
                if local >= list.__len__(records):
                    raise IndexError("log record index out of range")
                return _built(records, index, local)
    assert type(records) is Records
    return records.read(index, index + 1)[0]


def materialize_range(records: Records | list[Any], start: int, stop: int) -> list[LogRecord]:
    """Records ``start`` to ``stop`` (exclusive) as LogRecords, in order; the
    build lock is taken once for the part in memory."""
    if type(records) is Records:
        return records.read(start, stop)
    with _build_lock:
        return [_built(records, i, i) for i in range(start, stop)]


def _built(records: list[Any], seq: int, local: int) -> LogRecord:
    """The record ``seq`` at list position ``local``, built and stored back
    if compact (call under the build lock)."""
    rec = list.__getitem__(records, local)
    if type(rec) is tuple:
        rec = build_compact(seq, rec)
        list.__setitem__(records, local, rec)
    return rec  # type: ignore[no-any-return]


def build_compact(seq: int, rec: tuple[Any, ...]) -> LogRecord:
    """The LogRecord of compact record ``rec`` at ``seq``: a mark's
    ``(id, reason, turn, version, time)`` or ``(build, *fields)``."""
    build = rec[0]
    if type(build) is str:
        return mark_record(seq, *rec)
    return build(seq, *rec[1:])  # type: ignore[no-any-return]




@runtime_checkable
class LogSink(Protocol):
    """Where log records become durable.

    ``write`` must be atomic: either every record in the batch is durable when
    it returns, or it raises and none of them will be recovered (a torn tail
    is detected and dropped on ``load``). ``load`` returns the records already
    in the store, in ``seq`` order, for recovery.
    """

    def load(self) -> Sequence[LogRecord]: ...

    def write(self, records: Sequence[LogRecord]) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ReadableSink(LogSink, Protocol):
    """A sink that can read durable records back (optional; issue 13).

    ``read_range(start, stop)`` returns records ``start`` .. ``stop - 1``
    (``seq`` order, ``0 <= start <= stop``), all of them durable (written by
    a ``write`` that returned, or found on open). It must never return a
    wrong record: a record that is missing, damaged or out of place raises
    :class:`LogFormatError` (:func:`check_read` does the check). It may be
    called from any thread, concurrently with ``write``. Cost: O(log size +
    the records read) — SQLite reads by its ``seq`` primary key, JSONL by a
    sparse offset index. A buffer whose sink has it keeps only a tail of the
    log in memory; a sink without it (a custom one) keeps the whole log in
    memory, as before.
    """

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]: ...


class EditLog(Sequence[LogRecord]):
    """A read-only view of a buffer's log; it grows as the buffer appends.

    ``len`` is O(1) and counts every record ever written. Indexing is O(1)
    for a record in memory, one sink read for an older one (iteration reads
    the old part in chunks of :data:`READ_CHUNK`). The view holds the
    buffer's own list, so it never copies. Without a readable sink, records
    older than :attr:`first` were dropped (:attr:`dropped` of them): indexing
    one raises :class:`LogRecordDropped`; iteration, ``reversed``, slices,
    ``index``, ``count`` and ``in`` work on the records still held and never
    raise it, also while another thread appends and the retention trims.
    """

    __slots__ = ("_records",)

    def __init__(self, records: Records | list[Any]) -> None:
        self._records = records

    @overload
    def __getitem__(self, index: int) -> LogRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[LogRecord]: ...

    def __getitem__(self, index: int | slice) -> LogRecord | Sequence[LogRecord]:
        """``log[seq]``: one record (:class:`LogRecordDropped` if it was
        dropped, ``IndexError`` past either end). ``log[a:b:c]``: the records
        of that slice *still held* (a slice never raises for dropped records;
        one dropped while the slice is read is left out). O(1) per record in
        memory, chunked sink reads for older ones."""
        records = self._records
        if not isinstance(index, slice):
            return materialize(records, index)
        start, stop, step = index.indices(len(records))
        if step == 1:
            while True:
                lo = max(start, self.first)
                try:
                    return tuple(materialize_range(records, lo, max(lo, stop)))
                except LogRecordDropped:
                    continue  # trimmed meanwhile: ``first`` moved past ``lo``
        out: list[LogRecord] = []
        for i in range(start, stop, step):
            if i < self.first:
                if step < 0:
                    break  # every later index is older still
                continue
            try:
                out.append(materialize(records, i))
            except LogRecordDropped:
                if step < 0:
                    break
        return tuple(out)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def first(self) -> int:
        """The ``seq`` of the oldest record this log can still return."""
        records = self._records
        if type(records) is Records and records.reader is None:
            return records.first
        return 0

    @property
    def dropped(self) -> int:
        """Records dropped from memory that no sink holds (0 with a readable
        sink, or below the retention)."""
        records = self._records
        return records.dropped if type(records) is Records else 0

    @property
    def in_memory(self) -> int:
        """Records held in memory (the tail). O(1)."""
        records = self._records
        return records.held() if type(records) is Records else len(records)

    def __iter__(self) -> Iterator[LogRecord]:
        """The records held, oldest first, over the prefix that exists when
        iteration starts (records appended meanwhile are not seen). Never
        raises :class:`LogRecordDropped`: a record the retention drops while
        the iteration is under way (another thread appending) is skipped, so
        the records yielded are always consecutive runs in ``seq`` order.
        O(1) per record, chunked sink reads for old ones."""
        records = self._records
        stop = len(records)
        start = self.first
        while start < stop:
            upto = min(stop, start + READ_CHUNK)
            try:
                chunk = materialize_range(records, start, upto)
            except LogRecordDropped:
                # ``first`` only grows and is past ``start`` now: go on there.
                start = max(start, self.first)
                continue
            yield from chunk
            start = upto

    def __reversed__(self) -> Iterator[LogRecord]:
        """The records held, newest first, from the last one that exists when
        iteration starts down to :attr:`first`; stops (never raises) where the
        retention has dropped records meanwhile. Reads in chunks of
        :data:`READ_CHUNK`."""
        records = self._records
        hi = len(records)
        while True:
            lo = max(self.first, hi - READ_CHUNK)
            if lo >= hi:
                return
            try:
                chunk = materialize_range(records, lo, hi)
            except LogRecordDropped:
                continue  # trimmed meanwhile: ``first`` moved, read what is left
            yield from reversed(chunk)
            hi = lo

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """The ``seq`` of ``value`` (``Sequence.index`` semantics, ``start``
        and ``stop`` included): O(1) for a record, since a record's ``seq``
        is its position; ``ValueError`` if the log does not hold it (also when
        it was dropped)."""
        n = len(self._records)
        if start < 0:
            start = max(start + n, 0)
        if stop is None:
            stop = n
        elif stop < 0:
            stop += n
        seq = _seq_of(value)
        if seq is not None and start <= seq < stop and seq >= self.first:
            try:
                if materialize(self._records, seq) == value:
                    return seq
            except (LogRecordDropped, IndexError):
                pass
        raise ValueError(f"{value!r} is not in the log")

    def __contains__(self, value: object) -> bool:
        """Whether the log holds ``value``; O(1), as :meth:`index`."""
        try:
            self.index(value)
        except ValueError:
            return False
        return True

    def count(self, value: Any) -> int:
        """1 if the log holds ``value``, else 0 (records are unique: each
        carries its own ``seq``). O(1)."""
        return 1 if value in self else 0

    def for_id(self, entry_id: str) -> tuple[LogRecord, ...]:
        """Every record that names ``entry_id``. O(len(log))."""
        return tuple(r for r in self if entry_id in r.ids)

    def __repr__(self) -> str:
        extra = f", {self.dropped} dropped" if self.dropped else ""
        return f"<EditLog: {len(self._records)} records{extra}>"
