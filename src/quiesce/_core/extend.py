"""A batch append: several entries published as one version.

What it keeps true: a batch is all or nothing — every entry is checked as
``append`` checks one (against the head and the entries before it in the
batch) before anything is published; on any error the head is unchanged
(a refused re-admission is logged). The log gets one append record per
entry, all of the new version (the records after the first carry
``batch: true``, which replay accepts). Never touches a disk; the write
lock is held only for the checks and the publication.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .entry import Entry
from .errors import InvalidArgument, InvalidType, dangling_ref, duplicate_id
from .ledger import guarded
from .policy import _CACHE_FROM as _CLASSIFY_FROM
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import preclassify
from .publish import Publisher
from .records import Override
from .state import BufferState
from .version import EMPTY_MAP, Slot, Version
from .version import PATCH as _PATCH
from .version import PATCH_MAX as _PATCH_MAX
from .wire import append_record

__all__ = ["extend"]

_new_tuple: Callable[..., Any] = tuple.__new__
_wall_clock = time.time


def extend(
    st: BufferState,
    pub: Publisher,
    entries: Sequence[Entry],
    overrides: Sequence[Override | None] | None = None,
) -> int:
    """Publish *one* new version with ``entries`` at the end of the window,
    in order (a batch: a chat message of several blocks, a turn of several
    messages); ``overrides[i]`` lets ``entries[i]`` re-admit tombstoned
    content, as ``append``'s ``override`` does. Returns the head version
    (unchanged for an empty batch).

    All or nothing: every entry is checked as ``Buffer.append`` checks one
    (against the head and the entries before it in the batch: an id used
    twice is a :class:`DuplicateEntry`, a ref may name an earlier entry
    of the batch) before anything is published; on any error the head is
    unchanged (a refused re-admission is logged, as by ``append``). The
    log gets one append record per entry, all of the new version (the
    records after the first carry ``batch: true``, which replay accepts).
    O(k · (log n + refs · log n)) for k entries. Never touches a disk.
    """
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
        if len(e.body) >= _CLASSIFY_FROM and pub.own_policy():
            preclassify(e)
    for o in given:
        if o is not None and type(o) is not Override:
            raise InvalidType(f"overrides must be Overrides or None, not {type(o).__name__}")
    if not batch:
        return st.head.number
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
            gone, tomb = by_id.admission(eid, entry.content_hash, entry.key)
            if gone is not None:
                raise duplicate_id(eid, gone)
            for ref in entry.refs:
                if ref not in live and ref not in mine:
                    raise dangling_ref(eid, ref, by_id.get(ref))
            if tomb is not None and override is None:
                raise pub.refuse_readmission(entry, tomb)
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
                referrers = referrers.set(ref, referrers.get(ref, EMPTY_MAP).set(entry.id, None))
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
            if guarded(entry):
                st.protected_at[entry.id] = len(st.records)  # ledger.py: its record's seq
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
            pub.append_record(record)
        st.head = new
        return n
    finally:
        st.write_lock.release()
        if st.due_flag and st.due_hook is None:
            pub.drain_due()
