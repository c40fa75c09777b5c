"""The quiesce exception hierarchy.

Every error quiesce raises derives from :class:`QuiesceError`. Where a lookup
fails the error also derives from :class:`KeyError`, and where an argument has
the wrong type or value it also derives from :class:`TypeError` or
:class:`ValueError`, so callers may catch either the precise quiesce name or
the builtin they would expect.

Invariant: a call that raises any of these (except :class:`LogWriteError`
raised *after* a version was published, which each call documents) leaves the
buffer's head version unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base_errors import LogFormatError as LogFormatError
from .base_errors import QuiesceError as QuiesceError

if TYPE_CHECKING:
    from .tombstone import Tombstone


class InvalidArgument(QuiesceError, ValueError):
    """An argument has the right type but an invalid value (empty id, a ref to
    itself, a negative turn, an empty reason)."""


class InvalidType(QuiesceError, TypeError):
    """An argument has the wrong type (a bare ``str`` where a collection of ids
    is expected, a non-``Entry`` appended, ...)."""


class UnknownEntry(QuiesceError, KeyError):
    """The id was never seen by this buffer (neither live nor tombstoned)."""


class EntryPruned(QuiesceError, KeyError):
    """The id names an entry that was removed; :attr:`tombstone` says when and why."""

    def __init__(self, message: str, tombstone: Tombstone) -> None:
        super().__init__(message)
        self.tombstone = tombstone


class DuplicateEntry(QuiesceError, ValueError):
    """An entry with this id is live or tombstoned already."""


class DanglingReference(QuiesceError, ValueError):
    """A ref names an unknown or tombstoned entry.

    :attr:`tombstone` is the tombstone when the target was removed, ``None``
    when it never existed: "deleted" and "never existed" stay distinguishable.
    """

    def __init__(self, message: str, ref: str, tombstone: Tombstone | None) -> None:
        super().__init__(message)
        self.ref = ref
        self.tombstone = tombstone


class ReadmissionRefused(QuiesceError):
    """Content (by hash) or key matches a tombstone and no ``Override`` was given."""

    def __init__(self, message: str, tombstone: Tombstone) -> None:
        super().__init__(message)
        self.tombstone = tombstone

    @classmethod
    def of_append(cls, entry_id: str, tombstone: Tombstone) -> ReadmissionRefused:
        """The refusal of appending ``entry_id``, which matches ``tombstone``
        (the one message, wherever an append is refused)."""
        t = tombstone
        return cls(
            f"entry {entry_id!r} matches tombstone of {t.id!r} (pruned at version "
            f"{t.version}: {t.reason}); re-admission needs an Override",
            t,
        )


class ProtectedEntry(QuiesceError):
    """The operation is not allowed on this entry's kind (e.g. marking a
    ``CONSTRAINT`` or ``INSTRUCTION``)."""


class SnapshotReleased(QuiesceError, RuntimeError):
    """The snapshot is not pinned: used after its ``with`` block, or before it."""


class BufferClosed(QuiesceError, RuntimeError):
    """The buffer (or its runtime) is closed."""


class StreamClosed(QuiesceError, RuntimeError):
    """A write, close or abort on a stream that is closed or aborted
    already (:class:`~quiesce.StreamWriter`). Raised before anything
    changes: the head version and the entry stay as they were."""


class ReentrantWrite(QuiesceError, RuntimeError):
    """A write to a buffer from inside a callback the buffer is running while
    it writes (a policy classifier calling ``mark_stale`` or ``append``, a log
    sink calling ``flush``). Raised before anything changes; callbacks may read
    the buffer, not write it."""


class LogWriteError(QuiesceError, OSError):
    """The edit-log sink failed to make records durable.

    The records stay pending in memory; a later successful ``flush()`` resumes.
    No removal is published without its tombstone being durable.
    :attr:`pending` is the number of records still pending when the error
    says so (leaving ``open_buffer`` past its ``close_timeout``), else 0.
    """

    def __init__(self, *args: object, pending: int = 0) -> None:
        super().__init__(*args)
        self.pending = pending


class LogRecordDropped(QuiesceError, LookupError):
    """A log record was dropped from memory by the retention of a buffer that
    has no durable sink to read it back from (``buf.log.dropped`` says how many
    records are gone; ``buf.log.first`` is the oldest one still held).

    A :class:`LookupError` but deliberately *not* an :class:`IndexError`: the
    sequence protocol (``Sequence.index``, ``reversed``, the old iteration
    protocol) reads an ``IndexError`` as "past the end", and a dropped
    record is not the end of the log. The log's own ``index``, ``count``,
    ``in``, ``reversed`` and slices work on the records still held."""


class LogLocked(QuiesceError, BlockingIOError):
    """The log file is open for writing by another sink object, in this or
    another process: one writer per log file. Raised at once when the second
    one opens it (it never waits); nothing is written."""


# -- the admission checks' errors (append, extend, open_stream share them) ----


def duplicate_id(
    entry_id: str, tomb: Tombstone | None, what: str = "already in the buffer"
) -> DuplicateEntry:
    """The error for an id in use: live (``what`` says how) or tombstoned."""
    if tomb is not None:
        return DuplicateEntry(
            f"entry {entry_id!r} was pruned at version {tomb.version}; ids are not reused"
        )
    return DuplicateEntry(f"entry {entry_id!r} is {what}")


def dangling_ref(entry_id: str, ref: str, tomb: Tombstone | None) -> DanglingReference:
    """The error for a ref to an entry not live: tombstoned or never seen."""
    if tomb is not None:
        return DanglingReference(
            f"entry {entry_id!r} cites {ref!r}, pruned at version {tomb.version}: {tomb.reason}",
            ref,
            tomb,
        )
    return DanglingReference(f"entry {entry_id!r} cites unknown entry {ref!r}", ref, None)
