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
objects the change made anyway (the Mark, the Entry) and its wall-clock time.
:func:`materialize` turns it into the :class:`LogRecord` (``build(seq,
*fields)``) the first time anyone reads it — the view, a flush, a check — and
stores that back, so the record is built at most once and never on the fast
path. A :class:`LogRecord` is a ``tuple`` *subclass*, so ``type(r) is tuple``
tells the two apart. Every value in a compact record is immutable, so the
record built later is exactly the one that would have been built at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload, runtime_checkable

from .records import LogRecord

__all__ = ["EditLog", "LogSink", "Records", "materialize", "materialize_range"]

#: A buffer's record list: LogRecords and compact ``(build, *fields)`` tuples.
Records = list[Any]


#: Serializes building compact records (never the fast paths, which only
#: append): a record is built once, so whoever reads it gets the same object.
_build_lock = threading.Lock()


def materialize(records: Records, index: int) -> LogRecord:
    """The :class:`LogRecord` at ``index``, building (and storing back) a
    compact one. O(1) amortized. Safe from any thread: a record is built
    once, under ``_build_lock``, so every reader gets the same object (a log
    record, once seen, is never replaced — not even by an equal one)."""
    if index < 0:  # normalised first: the list may grow meanwhile
        index += len(records)
        if index < 0:
            raise IndexError("log record index out of range")
    rec = records[index]
    if type(rec) is tuple:
        with _build_lock:
            rec = _built(records, index)  # another thread may have built it meanwhile
    return rec  # type: ignore[no-any-return]


def materialize_range(records: Records, start: int, stop: int) -> list[LogRecord]:
    """Records ``start`` to ``stop`` (exclusive) as LogRecords, in order; the
    build lock is taken once for the whole range."""
    with _build_lock:
        return [_built(records, i) for i in range(start, stop)]


def _built(records: Records, index: int) -> LogRecord:
    """The record at ``index``, built and stored back if compact (call under
    ``_build_lock``)."""
    rec = records[index]
    if type(rec) is tuple:
        rec = rec[0](index, *rec[1:])
        records[index] = rec
    return rec  # type: ignore[no-any-return]


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


class EditLog(Sequence[LogRecord]):
    """A read-only view of a buffer's log; it grows as the buffer appends.

    Indexing and ``len`` are O(1); the view holds the buffer's own list, so it
    never copies.
    """

    __slots__ = ("_records",)

    def __init__(self, records: Records) -> None:
        self._records = records

    @overload
    def __getitem__(self, index: int) -> LogRecord: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[LogRecord]: ...

    def __getitem__(self, index: int | slice) -> LogRecord | Sequence[LogRecord]:
        records = self._records
        if isinstance(index, slice):
            return tuple(materialize(records, i) for i in range(*index.indices(len(records))))
        return materialize(records, index)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[LogRecord]:
        # Iterate over a stable prefix: records appended meanwhile are not seen.
        records = self._records
        for i in range(len(records)):
            yield materialize(records, i)

    def for_id(self, entry_id: str) -> tuple[LogRecord, ...]:
        """Every record that names ``entry_id``. O(len(log))."""
        return tuple(r for r in self if entry_id in r.ids)

    def __repr__(self) -> str:
        return f"<EditLog: {len(self._records)} records>"
