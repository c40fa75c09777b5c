"""Fixtures for benchmarks and tests that measure what comes after a large load.

What it keeps true: :func:`preloaded` returns a buffer whose head is one
version holding the given entries, with the mark fast path's index matching
it, and writes no log record for the load (so such a buffer is never
recovered from its log to that state).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.buffer import Buffer
from .._core.draft import Draft
from .._core.entry import Entry
from .._core.log import LogSink
from .._core.records import (
    Mark,
)

__all__ = ["preloaded"]


def preloaded(entries: Sequence[Entry], *, marked: int = 0, log: LogSink | None = None) -> Buffer:
    """A new :class:`~quiesce.Buffer` whose version 1 holds ``entries`` in
    order, the first ``marked`` of them marked stale (reason ``"bench:
    seeded"``).

    Bulk-loaded through the core's draft in O(n log n): building a 1e6-entry
    buffer by ``append`` would cost seconds and a log nobody reads. No log
    record is written for the load itself (so the log does not replay to
    this state): use it where only the operations *after* it matter, as the
    benchmarks do. With ``log`` (an empty sink), every record those later
    operations produce goes to it on the next ``flush()``. Ids must be
    distinct and ``entries`` must cite only entries listed before them.
    """
    buf = Buffer(log=log)
    draft = Draft(buf.head())
    for e in entries:
        draft.add(e, None, 1)
    for e in entries[:marked]:
        draft.marks[e.id] = Mark(e.id, "bench: seeded", None, 1)
    buf._head = draft.finish(1)
    buf._unmarked = {e.id for e in entries[marked:]}  # the mark fast path's index
    return buf
