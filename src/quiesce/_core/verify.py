"""Verify a log: a streaming full replay that checks every checkpoint (issue 21).

What it keeps true: :func:`verify_records` reads the records once, in
order, and replays them into a scratch buffer (no sink: nothing is
written); at each checkpoint record ``s`` it compares the checkpoint's
state, restored the way recovery restores it, with the state the replay of
records ``0 .. s - 1`` built, field by field — version, next order key,
live entries (bytes, keys, versions), marks, tombstones (and which is the
newest of each content hash and key), staged removal groups, the
immutable-bytes table, the protected-entry ledger, the counters — and
whether the record before it is its anchor (checkpoint.py: recovery uses
no checkpoint without one), and stops at the first disagreement, naming
the checkpoint's seq, the field and the first differing item. A checkpoint
that passes is exactly what a full replay gives: recovering from it loses
and alters nothing. What a full replay of the records builds is, by definition, the log's state; an
impossible record fails the replay (``LogFormatError``) as it fails
``Buffer(log=...)``.

Memory: constant in the log's length, given a bounded live window: the
replayed state plus one chunk of records (the scratch buffer's in-memory
log is cut after each chunk; a checkpoint in it is held without its
state once compared) and the one checkpoint being compared (its state,
restored; dropped before the next chunk): a checkpoint carries the
tombstone index, so what it costs grows with the tombstones, but only one
is decoded at a time (tests/log/test_log_verify_memory.py). The replayed
tombstones leave memory as a durable buffer's do (their index slots stay, 10-17 bytes each, the
buffer's own bound) whenever the removal records can be read back: through
the log's ``read_range`` (``Buffer.verify()``) or, from a stream alone
(``quiesce verify``, ``quiesce compact``), through a :class:`RemovalStore`
the caller gives (``_log/verify.py`` keeps the removal records' tombstone
lists in a temporary file, 16 bytes of memory per removal record); only a
caller that gives neither keeps those lists in memory (O(tombstones)).
Each comparison is streaming too: the tombstones of both sides are
compared as a count and a keyed multiset digest of their rows and of which
one is the newest of each content hash and key (:class:`TombDigest`,
O(1) memory, O(tombstones) time reading each spilled one back once); a
mismatch is named by a second pass over 256 digest buckets and the items
of the first differing one (O(tombstones / 256) for that moment). Time:
O(records · log n) to replay plus O(state) per checkpoint.

A compacted log (``quiesce compact``) starts from its base checkpoint
(seq 0): its history is in SRC, so it is the replay's starting point —
checked for its claims (:mod:`.claims`), not compared.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .checkpoint import CHECKPOINT_OP, _restore, check_anchor, replay_log, verify_checkpoint
from .errors import InvalidArgument, LogFormatError
from .log import ReadableSink, check_read
from .records import LogRecord
from .replay import replay
from .state import BufferState, HasState, state_of
from .stream_replay import durable_dict

if TYPE_CHECKING:
    from .state import BufferState, HasState

__all__ = [
    "Disagreement",
    "RemovalStore",
    "TombDigest",
    "VerifyResult",
    "state_fields",
    "tomb_digests",
    "verify_buffer",
    "verify_records",
]

#: records replayed into the scratch buffer at a time
CHUNK = 2048


class Disagreement(NamedTuple):
    """The first place a checkpoint and the full replay differ."""

    seq: int  #: the checkpoint record's seq
    field: str  #: the state field (``live``, ``marks``, ``tombstones``, ...)
    detail: str  #: the first differing item, for people

    def message(self) -> str:
        return (
            f"checkpoint {self.seq} disagrees with the replay of records 0..{self.seq - 1}: "
            f"{self.field}: {self.detail}"
        )


class VerifyResult(NamedTuple):
    """What :func:`verify_records` found."""

    records: int  #: records read
    checkpoints: int  #: checkpoints compared (and agreeing, up to the first that does not)
    disagreement: Disagreement | None  #: None: every checkpoint agrees with the replay


#: the multiset digests' key: drawn per process, never written anywhere, so
#: whoever crafts a checkpoint cannot aim at a digest collision
_DIGEST_KEY = os.urandom(16)
_DIGEST_MOD = 1 << 128
#: buckets of the second pass that names a mismatch (see TombDigest.items_in)
_BUCKETS = 256


_DIGEST_BASE = hashlib.blake2b(digest_size=16, key=_DIGEST_KEY, person=b"quiesce-verify")


def _item_hash(item: tuple[Any, ...]) -> int:
    """The keyed 128-bit BLAKE2b of ``repr(item)`` (values are str, int,
    None, enums and tuples of them: their repr is exact)."""
    h = _DIGEST_BASE.copy()
    h.update(repr(item).encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "little")


class TombDigest:
    """A version's tombstones as one comparable value, in O(1) memory.

    ``kind`` ``"rows"``: each tombstone's fields; ``"winners"``: each id
    the id index finds, and for each content hash (and each key) the id of
    the newest tombstone with it (what ``by_hash`` / ``by_key`` answer).
    The value is the count and the sum, mod 2**128, of a keyed BLAKE2b of
    each item: independent of the order (a restored checkpoint may hold
    its tombstones in another), and, the key being secret, no crafted set
    of rows sums to another's. Two are equal iff kind, count and sum are
    (a collision: chance 2**-128).
    :func:`tomb_digests` builds both kinds in one pass; :class:`_Running`
    keeps a replay's up to date in O(new tombstones). Iterating yields the
    items again, oldest first; :meth:`items_in` gives those of one digest
    bucket, to name a mismatch."""

    __slots__ = ("_tombs", "count", "digest", "kind")

    def __init__(self, tombs: Any, kind: str, digest: int) -> None:
        self._tombs = tombs  # a Tombs: an immutable prefix of its store
        self.kind = kind
        self.count = len(tombs)
        self.digest = digest % _DIGEST_MOD

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for rows, winners in _items(self._tombs):
            yield from (rows if self.kind == "rows" else winners)

    def items_in(self, bucket: int) -> list[tuple[Any, ...]]:
        """The items whose digest falls in ``bucket`` (of :data:`_BUCKETS`)."""
        return [i for i in self if _item_hash(i) % _BUCKETS == bucket]

    def buckets(self) -> list[int]:
        """The digest of each bucket (the second pass of a mismatch)."""
        out = [0] * _BUCKETS
        for item in self:
            h = _item_hash(item)
            out[h % _BUCKETS] = (out[h % _BUCKETS] + h) % _DIGEST_MOD
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TombDigest):
            return NotImplemented
        return (self.kind, self.count, self.digest) == (other.kind, other.count, other.digest)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{self.count} tombstone {self.kind}, digest {self.digest:032x}>"


def _items(
    tombs: Any, start: int = 0
) -> Iterator[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]]:
    """For each tombstone from position ``start``: its row item and its
    winner items (``("id", id)`` if the id index finds it, ``("hash", h,
    id)`` if it is the newest of its content hash, ``("key", k, id)`` of its
    key), as judged by the index of ``tombs`` (a claimed checkpoint's own)."""
    store = tombs._store
    if store is None:
        return
    n = tombs._n
    for p in range(start, n):
        t = store.tomb(p)
        winners: list[tuple[Any, ...]] = [("id", t.id)] if store.find_id(t.id, n) == p else []
        if store.newest_hash(t.content_hash, n) == p:
            winners.append(("hash", t.content_hash, t.id))
        if t.key is not None and store.newest_key(t.key, n) == p:
            winners.append(("key", t.key, t.id))
        yield [tuple(t)], winners


def tomb_digests(tombs: Any) -> tuple[TombDigest, TombDigest]:
    """The rows and winners digests of ``tombs``, in one pass. O(tombstones)
    time (each spilled one read back from its record), O(1) memory."""
    rows_sum = winners_sum = 0
    for rows, winners in _items(tombs):
        rows_sum += _item_hash(rows[0])
        for w in winners:
            winners_sum += _item_hash(w)
    return TombDigest(tombs, "rows", rows_sum), TombDigest(tombs, "winners", winners_sum)


class _Running:
    """A replay's tombstone digests, kept up to date as its store grows:
    each new tombstone adds its row and makes itself the winner of its
    content hash and key (the replay's newest always wins), taking the
    place of the one before it. O(new tombstones) per :meth:`digests`, so
    a checkpoint costs O(its own tombstones), not O(the log's), on the
    replay's side."""

    def __init__(self) -> None:
        self.store: Any = None
        self.done = 0
        self.rows = 0
        self.winners = 0

    def digests(self, tombs: Any) -> tuple[TombDigest, TombDigest]:
        store = tombs._store
        n = tombs._n
        if store is None:
            return TombDigest(tombs, "rows", 0), TombDigest(tombs, "winners", 0)
        if store is not self.store or n < self.done:  # a new store: start again
            self.store, self.done, self.rows, self.winners = store, 0, 0, 0
        for p in range(self.done, n):
            t = store.tomb(p)
            self.rows += _item_hash(tuple(t))
            self.winners += _item_hash(("id", t.id))  # found by its id
            for field, value, newest in (
                ("hash", t.content_hash, store.newest_hash),
                ("key", t.key, store.newest_key),
            ):
                if value is None:
                    continue
                before = newest(value, p)
                if before >= 0:
                    self.winners -= _item_hash((field, value, store.id_at(before)))
                self.winners += _item_hash((field, value, t.id))
        self.done = n
        self.rows %= _DIGEST_MOD
        self.winners %= _DIGEST_MOD
        return TombDigest(tombs, "rows", self.rows), TombDigest(tombs, "winners", self.winners)


def state_fields(st: Any, running: _Running | None = None) -> dict[str, Any]:
    """The recoverable state of ``st`` (a :class:`Buffer` or its state, or an object
    with the same fields copied from one) as comparable values, by field
    (what a checkpoint holds, intents aside). O(live) memory (the
    tombstones are :class:`TombDigest` values) and O(live + tombstones)
    time, or O(live + new tombstones) with the ``running`` digests of a
    replay; reads spilled tombstones back through the buffer's log."""
    if not isinstance(st, SimpleNamespace):
        st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    head = st.head
    tombs = head.tombs
    rows, winners = tomb_digests(tombs) if running is None else running.digests(tombs)
    groups = [g for _, _, g in st.staged]
    groups.extend(st.applying.values())
    return {
        "version": head.number,
        "next_key": head.next_key,
        "live": [
            (s.entry.id, durable_dict(st, s.entry), s.key, s.changed)
            for s in sorted(head.live.values(), key=lambda s: s.key)
        ],
        "marks": sorted(tuple(m) for m in head.marks.values()),
        "tombstones": rows,
        "tombstone winners": winners,
        "groups": sorted(
            (g.gid, g.ids, g.grace, g.staged, g.reason, g.actor, g.turn, tuple(sorted(g.retracted)))
            for g in groups
        ),
        "immutable": sorted(st.immutable_hashes.items()),
        "protected": sorted((i, q) for i, q in st.protected_at.items() if i in head.live),
        "counts": sorted((k, v) for k, v in st.counts.items() if v),
        "refusals": sorted((r.value, v) for r, v in st.refusals.items() if v),
    }


def _first_difference(claimed: Any, replayed: Any) -> str:
    """The first item where two field values differ, for people."""
    if isinstance(claimed, TombDigest) and isinstance(replayed, TombDigest):
        mine, theirs = claimed.buckets(), replayed.buckets()
        bucket = next((b for b in range(_BUCKETS) if mine[b] != theirs[b]), None)
        if bucket is None:  # pragma: no cover - equal sums, unequal counts: impossible
            return f"the checkpoint has {claimed.count} tombstones, the replay {replayed.count}"
        claimed, replayed = claimed.items_in(bucket), replayed.items_in(bucket)
    if isinstance(claimed, list) and isinstance(replayed, list):
        a, b = set(map(repr, claimed)), set(map(repr, replayed))
        extra, missing = sorted(a - b), sorted(b - a)
        if missing:
            return f"the replay has {missing[0][:200]}, the checkpoint does not"
        if extra:
            return f"the checkpoint has {extra[0][:200]}, the replay does not"
        return "the same items in another order"
    return f"the checkpoint says {claimed!r}, the replay {replayed!r}"


def compare(claimed: dict[str, Any], replayed: dict[str, Any], seq: int) -> Disagreement | None:
    """The first field (in :func:`state_fields` order) where two states differ."""
    for name, want in replayed.items():
        got = claimed.get(name)
        if got != want:
            return Disagreement(seq, name, _first_difference(got, want))
    return None


class RemovalStore(Protocol):
    """Where a stream-only verify keeps the removal records it has seen, to
    read each tombstone back from its record (tombs.py), as a durable
    buffer reads its sink: ``keep`` a removal record (reduced to its
    tombstone list), ``read_range`` records by seq (a seq that is not a
    removal is :class:`LogFormatError`)."""

    def keep(self, rec: LogRecord) -> None: ...

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]: ...


class _Removals:
    """A :class:`RemovalStore` in memory (O(tombstones): for callers that
    give none, e.g. tests over a list of records)."""

    def __init__(self) -> None:
        self.by_seq: dict[int, LogRecord] = {}

    def keep(self, rec: LogRecord) -> None:
        self.by_seq[rec.seq] = rec

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        out = []
        for s in range(start, stop):
            rec = self.by_seq.get(s)
            if rec is None:
                raise LogFormatError(f"the tombstone index points at record {s}, no removal")
            out.append(rec)
        return out


def _claimed(
    rec: LogRecord,
    read: Callable[[int, int], Sequence[LogRecord]],
    new: Callable[[], BufferState | HasState],
) -> dict[str, Any] | Disagreement:
    """The state checkpoint ``rec`` claims, restored (into ``new()``, its
    spilled tombstones read through ``read``) as recovery restores it."""
    try:
        state = verify_checkpoint(rec)
    except LogFormatError as exc:
        return Disagreement(rec.seq, "sha256", str(exc))
    if "protected" not in state:
        state = {**state, "protected": []}
    owner = new()  # held while its state is restored: its parts reach it weakly
    restored = state_of(owner)
    restored.records.reader = read
    try:
        _restore(restored, rec, state)
        return state_fields(restored)
    except Exception as exc:  # any failure to restore it is the finding
        return Disagreement(rec.seq, "state", f"cannot be restored: {exc!r}")


def verify_records(
    records: Iterable[LogRecord],
    new: Callable[[], BufferState | HasState],
    *,
    into: BufferState | HasState | None = None,
    reader: Callable[[int, int], Sequence[LogRecord]] | None = None,
    removals: RemovalStore | None = None,
) -> VerifyResult:
    """Replay ``records`` (a whole log, in order, streamed) and compare every
    checkpoint with the state replayed up to it. Returns the counts and the
    first :class:`Disagreement` (None if every checkpoint agrees). ``new``
    makes a fresh, sinkless buffer (``Buffer``: the core imports no class
    above it); ``into``: the fresh scratch buffer to replay into (the caller
    compares its final state; default ``new()``); ``reader``: the log's
    ``read_range`` (a readable sink), or else ``removals``: a
    :class:`RemovalStore` that keeps the removal records seen (default: in
    memory). Either way the replayed tombstones leave memory as a durable
    buffer's do, read back from their records when looked up or compared.
    Raises :class:`LogFormatError` if the records themselves cannot be
    replayed. See the module docstring for memory and time; cancellation is
    not a concern (synchronous, touches only its own scratch buffers)."""
    owner = new() if into is None else into  # held: its parts reach it weakly
    scratch = state_of(owner)
    store: RemovalStore | None = None
    read: Callable[[int, int], Sequence[LogRecord]]
    if reader is None:
        store = _Removals() if removals is None else removals
        read = store.read_range
    else:
        read = reader
    scratch.records.reader = read
    pending: list[LogRecord] = []
    total = 0
    checked = 0
    started = False
    before: LogRecord | None = None  # the record before ``rec``: a checkpoint's anchor
    running = _Running()  # the replay's tombstone digests

    def flush() -> None:
        nonlocal started
        if not pending:
            return
        if not started:
            replay_log(scratch, pending)  # a compacted log starts from its base
            started = True
        else:
            replay(scratch, pending)
        held = len(scratch.records)
        scratch.head.tombs.spill(held)  # their records are readable back
        scratch.records.trim(held, 0)  # memory: the state only
        pending.clear()

    for rec in records:
        total += 1
        if store is not None and rec.op == "remove" and rec.detail.get("tombstones"):
            # only what a tombstone index reads back (tombs.py)
            store.keep(rec._replace(detail={"tombstones": rec.detail["tombstones"]}))
        if rec.op == CHECKPOINT_OP and not (rec.seq == 0 and _compacted(rec)):
            flush()
            claimed = _claimed(rec, read, new)
            if isinstance(claimed, Disagreement):
                return VerifyResult(total, checked, claimed)
            try:
                check_anchor(before, rec)  # recovery would not use it
            except LogFormatError as exc:
                return VerifyResult(total, checked, Disagreement(rec.seq, "anchor", str(exc)))
            found = compare(claimed, state_fields(scratch, running), rec.seq)
            del claimed  # its restored store: not held through the next chunk
            if found is not None:
                return VerifyResult(total, checked, found)
            checked += 1
            # compared: the replay reads only its op and counters, so the
            # chunk holds it without its state (O(live + tombstone index))
            rec = _without_state(rec)
        pending.append(rec)
        before = rec
        if len(pending) >= CHUNK:
            flush()
    flush()
    return VerifyResult(total, checked, None)


def _without_state(rec: LogRecord) -> LogRecord:
    """Checkpoint ``rec`` without its ``state`` (the rest of its detail
    kept: what the replay counts). O(1) in the state's size."""
    if "state" not in rec.detail:
        return rec
    return rec._replace(detail={k: v for k, v in rec.detail.items() if k != "state"})


def _compacted(rec: LogRecord) -> bool:
    state = rec.detail.get("state")
    return isinstance(state, dict) and state.get("compacted_from") is not None


def read_sink(read: Any, total: int) -> Iterable[LogRecord]:
    """The records ``0 .. total - 1`` of a readable sink (``read_range``),
    a chunk at a time."""
    for start in range(0, total, CHUNK):
        stop = min(start + CHUNK, total)
        yield from check_read(read(start, stop), start, stop)


def verify_buffer(
    st: BufferState, new: Callable[[], HasState], unlogged_text: Callable[[], bool]
) -> int:
    """``Buffer.verify()`` on the buffer whose state is ``st`` (``new``
    makes a fresh, sinkless buffer; ``unlogged_text``: whether an open
    stream has text no record holds). Replays every durable record through
    :func:`verify_records`, then — if nothing was written since the read
    began — compares ``st`` with the replay's state. Returns the number of
    checkpoints compared; raises :class:`LogFormatError` naming the first
    disagreement, :class:`InvalidArgument` without a readable sink;
    changes nothing. Holds the write lock only to take the head (a
    reference) and copy the small tables, O(live); reads the sink outside
    it."""
    sink = st.sink
    if not isinstance(sink, ReadableSink):
        raise InvalidArgument("verify() needs a log that can be read back")
    total = st.synced
    scratch = new()
    result = verify_records(
        read_sink(sink.read_range, total), new, into=scratch, reader=sink.read_range
    )
    if result.disagreement is not None:
        raise LogFormatError(result.disagreement.message())
    replayed = state_fields(scratch)
    with st.write_lock:
        # the state as of now, by reference (a Version never changes) and
        # small copies: O(live ids); the comparison below reads the sink
        # for spilled tombstones, so it runs after the lock is released
        # (an open stream's text that no record holds is not in the replay)
        same = len(st.records) == total and not unlogged_text()
        mine = SimpleNamespace(
            streams=dict(st.streams),
            head=st.head,
            staged=list(st.staged),
            applying=dict(st.applying),
            immutable_hashes=dict(st.immutable_hashes),
            protected_at=dict(st.protected_at),
            counts=Counter(st.counts),
            refusals=Counter(st.refusals),
        )
    if same:
        found = compare(state_fields(mine), replayed, total)
        if found is not None:
            raise LogFormatError(
                f"this buffer disagrees with the replay of its {total} records: "
                f"{found.field}: {found.detail}"
            )
    return result.checkpoints
