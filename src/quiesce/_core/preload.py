"""Bulk loading: a new buffer's first version built in one step, for benchmarks.

Building a 1e6-entry buffer by ``append`` costs seconds and a log nobody
reads; benchmarks and tests that measure what comes *after* a large load
need only the state. :func:`preload` builds it through a :class:`~.draft.Draft`
in O(n log n) and installs it as the head, together with the mark fast
path's index, so ``mark_stale`` and ``prune`` on the loaded entries behave as
after the same appends.

What it keeps true: it loads only a new buffer (version 0, no entries, no log
record, no reader) and raises :class:`~.errors.InvalidArgument` otherwise,
changing nothing; it writes no log record for the load, so the buffer's log
(and its sink) holds only what later operations write, and such a buffer is
never recovered from its log to the loaded state. It is sync, takes the
write lock for the install only, and never awaits: a cancelled caller has
either a loaded buffer or an untouched one.
"""

from __future__ import annotations

from collections.abc import Sequence

from .buffer import Buffer
from .draft import Draft
from .entry import Entry
from .errors import InvalidArgument
from .records import Mark

__all__ = ["preload"]


def preload(buf: Buffer, entries: Sequence[Entry], *, marked: int = 0) -> None:
    """Make ``entries`` the new buffer ``buf``'s version 1, in order, the
    first ``marked`` of them marked stale (reason ``"bench: seeded"``).

    Ids must be distinct and ``entries`` must cite only entries listed
    before them (the draft checks both). O(n log n)."""
    head = buf.head()
    if head.number != 0 or len(head.live) or len(buf.log) or buf.stats().pinned:
        raise InvalidArgument("preload needs a new buffer: no entries, no log records, no readers")
    draft = Draft(head)
    for e in entries:
        draft.add(e, None, 1)
    for e in entries[:marked]:
        draft.marks[e.id] = Mark(e.id, "bench: seeded", None, 1)
    version = draft.finish(1)
    st = buf._st
    with st.write_lock:
        st.head = version
        st.unmarked = {e.id for e in entries[marked:]}  # the mark fast path's index
