"""The invariant checker: every invariant of docs/design.md, asserted on a buffer.

What it keeps true: nothing — it only reads. :func:`check_buffer` raises
``AssertionError`` naming the first invariant it finds broken; it runs under
the buffer's write lock (``Buffer._check``), so the head and the removals
hold still, while readers may pin and unpin beside it: pins in flight are
skipped, and the oldest pin is compared with the readers only when the same
readers (by identity) were pinned before and after the walk (see
:func:`check_buffer` for what a reader that pins and leaves inside the walk
can do to it). O(n + log + readers) per walk, at most ``_WALKS`` walks.
Tests call it after every operation of a seeded random run
(sortedcontainers' habit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .log import materialize, materialize_range
from .pins import PinRegistry
from .policy import IMMUTABLE_KINDS as _IMMUTABLE
from .policy import PROTECTED_KINDS
from .records import HOST_ACTOR
from .state import BufferState, HasState, state_of

if TYPE_CHECKING:
    from .records import Tombstone

__all__ = ["check_buffer", "pin_counts"]


#: walks of the oldest pin one check may take (see check_buffer)
_WALKS = 16


def pin_counts(st: BufferState) -> tuple[Counter[int], int, list[tuple[int, int]]]:
    """Pinned readers per version, the pins in flight (registered, not or no
    longer holding a version) and each set's size, checking each reader's
    registration. Each copy is one C-level operation, atomic under the GIL."""
    counts, in_flight, sizes, _held = _pinned(st)
    return counts, in_flight, sizes


def _pinned(
    st: BufferState,
) -> tuple[Counter[int], int, list[tuple[int, int]], dict[int, object]]:
    """:func:`pin_counts`, and the pinned readers themselves (``id`` ->
    snapshot: held, so no id is reused while the caller keeps the dict)."""
    counts: Counter[int] = Counter()
    in_flight = 0
    held: dict[int, object] = {}
    sets = list(st.pins.items())
    for n, r in sets:
        for snap in list(r):
            v = snap._version
            if v is None:
                in_flight += 1
                continue
            assert v.number == n, f"a reader of version {v.number} is in the set of {n}"
            assert snap._readers is r, "a reader is registered in a set it does not hold"
            counts[n] += 1
            held[id(snap)] = snap
    return counts, in_flight, [(n, len(r)) for n, r in sets], held


def check_buffer(
    st: BufferState | HasState, expect_no_pins: bool, since: int | None = None
) -> None:
    """Assert every invariant of ``st``. ``since``: check only the log
    records from that seq on, as if the ones before were cut (recovery from
    a checkpoint: O(live + tail), whatever the history)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    head = st.head
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
    assert st.markable() == unmarked, "the unmarked index disagrees with the head"
    # marks only on live, mutable entries (but see retraction_marks below);
    # versions within range.
    marked_immutables: list[str] = []
    for i, mark in head.marks.items():
        assert i in live, f"mark on non-live {i!r}"
        if live[i].entry.kind in _IMMUTABLE:
            marked_immutables.append(i)
        assert 0 < mark.version <= head.number
    # (3) exactly one tombstone and one log record per removal; the log grows.
    # Without a sink, records beyond the retention were dropped (log.py):
    # those still held must agree, and can only name tombstoned ids.
    removed_in_log: Counter[str] = Counter()
    retracted: set[str] = set()  #: the host's retractions, as the removal records say
    # Only the host's retraction marks an immutable (staging it); the mark
    # stays if the removal is then refused (moved since, or newly cited).
    retraction_marks: set[str] = set()
    records = st.records
    first = st.log_view.first if since is None else since
    # the log holds all of history: not cut by retention, not compacted
    # (a compacted log starts from a checkpoint summarising it, checkpoint.py)
    whole = first == 0 and not st.compacted
    seq = first
    in_log = st.log_view if since is None else materialize_range(records, since, len(records))
    for rec in in_log:
        assert rec.seq == seq, f"log record {seq} has seq {rec.seq}"
        seq += 1
        if rec.op == "remove":
            for t in rec.detail.get("tombstones", ()):
                removed_in_log[t["id"]] += 1
            retracted.update(rec.detail.get("retracted", ()))
        elif rec.op == "edit" and rec.actor == HOST_ACTOR and rec.detail.get("retracted"):
            marked = {m[0] for m in rec.detail.get("marks", ())}
            retraction_marks.update(marked.intersection(rec.detail["retracted"]))
    assert seq <= len(records), "the log returned records past its end"
    # A retraction's edit record may have been dropped (retention): only a
    # whole log can vouch for every mark on an immutable.
    for i in marked_immutables:
        assert i in retraction_marks or not whole, f"immutable {i!r} is marked"
    tombs = head.tombs.by_id
    if whole:
        assert set(removed_in_log) == set(tombs), "tombstones and removal records disagree"
        checked: Iterable[Tombstone] = tombs.values()
    else:
        # a log cut by retention or started at a checkpoint: the tombstones
        # of the records held (the older ones are in the sink or gone; the
        # checker stays O(live + records held), not O(history))
        found = [tombs.get(i) for i in removed_in_log]
        assert None not in found, "a removal record has no tombstone"
        assert since is not None or first == st.log_view.dropped, "dropped records are not counted"
        checked = [t for t in found if t is not None]
    assert all(c == 1 for c in removed_in_log.values()), "an entry was removed twice"
    by_hash = head.tombs.by_hash
    for t in checked:
        assert t.content_hash in by_hash
        # (4) no protected entry is ever removed, except by the host's
        # explicit retraction: logged as one, and tombstoned as the host's.
        if t.kind is not None and t.kind in PROTECTED_KINDS:
            held = whole or t.id in removed_in_log  # its record not dropped
            assert t.actor == HOST_ACTOR and (t.id in retracted or not held), (
                f"protected {t.id!r} was removed (invariant 4)"
            )
    # (4) no immutable entry's bytes ever change; every live one is tracked
    # (mark_stale relies on it).
    for i, slot in live.items():
        if slot.entry.kind in _IMMUTABLE:
            assert i in st.immutable_hashes, f"immutable {i!r} is not tracked"
    for i, h in st.immutable_hashes.items():
        islot = live.get(i)
        assert islot is not None, f"immutable {i!r} is gone (invariant 4)"
        assert islot.entry.content_hash == h, f"immutable {i!r} changed (invariant 4)"
    # staged removals: live, marked, in the heap.
    heap_ids = {i for _, _, g in st.staged for i in g.ids}
    heap_ids.update(i for g in st.applying.values() for i in g.ids)
    for i, g in st.staged_ids.items():
        assert i in heap_ids, f"staged {i!r} missing from the queue"
        if i in live:
            assert i in head.marks, f"staged {i!r} is not marked"
            assert g.grace <= head.number
    # one removal intent per staged group: only staged groups keep one, and
    # each names an intent record of the log
    gids = {g.gid for _, _, g in st.staged} | set(st.applying)
    for gid, seq in st.intents.items():
        assert gid in gids, f"group {gid} keeps an intent but is no longer staged"
        assert materialize(records, seq).op == "tombstone", f"intent {seq} is not an intent"
    # Open entries (stream.py): exactly the live streaming entries have an
    # open writer, each naming all of its writer's text; a finished entry is
    # a plain Entry.
    streams = st.streams
    for i, slot in live.items():
        e = slot.entry
        if e.streaming:
            w = streams.get(i)
            assert w is not None and not w.closed, f"open entry {i!r} has no open writer"
            assert e._chars == w._text.size, f"open entry {i!r} is not its stream's head"  # type: ignore[attr-defined]
            assert 0 <= w._logged <= w._text.size, f"stream {i!r} logged past its text"
    for i in streams:
        assert i in live and live[i].entry.streaming, f"stream {i!r} is open but not live"
    # (1), (5), (7) pins: every pinned reader is registered in the set of the
    # version it holds; no active reader predates a removal it saw unmarked.
    # Pins take no lock, so this may run while other threads pin and unpin
    # (the write lock held here keeps only the head and the removals still).
    # A registered snapshot whose ``_version`` is None is a pin being
    # validated or released right now: it is skipped. The oldest-pin walk is
    # compared with the readers only if the same readers, by identity, were
    # pinned (none in flight) before and after it: each of them was then
    # registered for the whole walk (a snapshot pins once, and a validated
    # pin leaves its set only by its unpin), so the walk must answer at most
    # the oldest of them (checked on every walk). Exactly the oldest of them,
    # unless a reader pinned and left inside the walk, which no count can see
    # (it leaves the sets as they were: ABA) and which can only make the walk
    # answer an older version, or one where none is counted (the walk saw it
    # registered; oldest_locked may answer a pin still being validated). So a
    # walk answering older than the counted readers is taken again, up to
    # _WALKS times: an oldest_locked that answers wrongly on readers holding
    # still answers so on every walk. (Seen: a pin that had read the head
    # before a write registered its set, was seen by the walk, withdrew and
    # freed its set before the second count; the interleaving explorer's
    # sleepy schedules.)
    with st.pin_lock:
        registry = PinRegistry(st)
        for _ in range(_WALKS):
            counts, in_flight, sizes, readers = _pinned(st)
            oldest = registry.oldest_locked()
            order = set(st.pin_order)
            after, in_flight_after, sizes_after, readers_after = _pinned(st)
            still = (
                not in_flight
                and not in_flight_after
                and (after, sizes_after) == (counts, sizes)
                and readers_after.keys() == readers.keys()
            )
            if not still:
                break
            if counts:
                assert oldest is not None and oldest <= min(counts), (
                    f"the oldest pin is {oldest}, a reader holds {min(counts)} throughout"
                )
            if oldest == (min(counts) if counts else None):
                break
        if still:
            assert oldest == (min(counts) if counts else None), (
                f"the oldest pin is {oldest}, the readers say {min(counts, default=None)}"
            )
            # Empty sets left behind are bounded: each is the head's (kept for
            # its next reader) or still in the pin order, where the walk frees it.
            # Only asserted when no reader may be pinning: a reader between
            # creating its version's set and registering in it (Snapshot.
            # __enter__) leaves an empty set outside the order for a moment,
            # and a write may make that version old meanwhile (it withdraws
            # and frees the set).
            for n, size in sizes:
                assert size or n == head.number or n in order or not expect_no_pins, (
                    f"the empty pin set of version {n} can never be freed (invariant 7)"
                )
        if expect_no_pins:
            assert not counts and not in_flight, (
                f"{sum(counts.values()) + in_flight} pins leaked (invariant 7)"
            )
        if counts:
            assert st.max_removed_grace <= min(counts), (
                "an entry was removed while a reader that saw it unmarked is pinned (invariant 5)"
            )
