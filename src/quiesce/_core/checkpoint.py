"""Checkpoints: a log record holding the whole recoverable state (issue 13).

What it keeps true: a checkpoint record (op ``"checkpoint"``, seq ``s``)
holds exactly the state a full replay of records ``0 .. s - 1`` builds — the
head's live entries in window order with their order keys, marks, the
tombstones, staged removal groups, the immutable-bytes table and the
statistics counters — plus a SHA-256 checksum over that state's canonical
JSON. The tombstones are kept as the tombstone store's three indexes and the
runs of log records holding them (``tomb_index``, a few bytes per tombstone:
the tombstones themselves are read back from those records) when the buffer
can read its log back; otherwise every tombstone is listed, with the
re-admission winners by content hash and key. It publishes no version
and changes no state when replayed: nothing is ever deleted from the log, a
checkpoint is one more record.

Every checkpoint the engine writes comes right after its **anchor** (op
``"anchor"``, seq ``s - 1``, issue 21): a record that changes nothing and
carries the checkpoint's SHA-256, written by the same call, in the same
batch. A checkpoint is only used if the record before it is its anchor:
whoever rewrites a checkpoint record (or writes one of their own at the end
of the log) without also writing the record before it is caught at load by
one record read, whatever field they changed — a dropped protected entry,
negative result, mark or queued removal, a lying counter or order key. The
anchor is the checkpoint's claim made *before* the checkpoint existed; a
checkpoint's own checksum is no such claim (anyone can recompute it). What
an attacker who writes the anchor too can fake is what
:mod:`.claims` cannot see (see there); only a full replay
(:mod:`.verify`, which also checks every anchor) proves a log.

Recovery (:func:`recover`) starts from the newest checkpoint whose checksum
and anchor hold, restores its state and replays only the records after it. A
checkpoint that fails its checksum or its anchor, or disagrees with the records after it
(the tail does not replay onto it, or the result fails the invariant
checker), is skipped with a warning on the ``logging`` logger
``"quiesce.checkpoint"``, and the one before it is tried; with none left,
the caller replays the whole log. A state that fails ``check_buffer`` is
never kept. Cost: O(live + index slots + tail · log n) instead of
O(records · log n); the index slots are copied at C speed.

The staged groups' intent records (``intents``, gid -> seq) are kept in the
checkpoint for people reading it; like a full replay, recovery does not
restore them (a recovered group logs a new intent when it comes due).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import heapq
import itertools
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .check import check_buffer
from .claims import check_claims
from .draft import Draft
from .entry import Entry, check_body, check_int
from .errors import LogFormatError
from .grace import Group
from .log import ReadableSink, Records, check_read
from .records import LogRecord, Mark, Refusal, Tombstone
from .replay import replay
from .state import BufferState, HasState, state_of
from .stream_replay import durable_dict, reopen, stream_header
from .version import Tombs, Version
from .wire import Op, anchor_record, checkpoint_record, parse_anchor, parse_checkpoint

__all__ = [
    "ANCHOR_OP",
    "CHECKPOINT_OP",
    "DEFAULT_CHECKPOINT_EVERY",
    "CheckpointSink",
    "append_checkpoint",
    "build_checkpoint",
    "check_anchor",
    "check_checkpoint_every",
    "checkpoint_digest",
    "checkpoint_records",
    "checkpoint_state",
    "compacted_records",
    "describe_checkpoint",
    "gc_paused",
    "recover",
    "replay_log",
    "verify_checkpoint",
]

#: The op of a checkpoint record.
CHECKPOINT_OP = Op.CHECKPOINT.value

#: The op of a checkpoint's anchor: the record right before it, carrying
#: its SHA-256 (changes nothing when replayed).
ANCHOR_OP = Op.ANCHOR.value

#: Records between automatic checkpoints (``Buffer(checkpoint_every=...)``;
#: 0 turns them off). A checkpoint costs O(live + tombstones) to build and
#: store; every 10,000 records it is a small share of the log.
DEFAULT_CHECKPOINT_EVERY = 10_000

_log = logging.getLogger("quiesce.checkpoint")


def check_checkpoint_every(value: object) -> int:
    """``value`` as a ``checkpoint_every`` setting (records between automatic
    checkpoints, 0: off), by :func:`~.entry.check_int`: :class:`InvalidType` if it is not an int,
    :class:`InvalidArgument` if negative or past 64 bits."""
    return check_int(value, "checkpoint_every")


@runtime_checkable
class CheckpointSink(ReadableSink, Protocol):
    """A readable sink that can find its checkpoint records without reading
    the log (optional). ``checkpoints()`` returns the number of durable
    records and the seqs of the checkpoint records among them, ascending.
    SQLite asks an index on ``op``; JSONL notes them while opening."""

    def checkpoints(self) -> tuple[int, Sequence[int]]: ...


def _canonical(value: object) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


#: a string at least this long is hashed in pieces, not encoded whole (a
#: checkpoint's index slots: base64, O(tombstones))
_BIG = 4096
#: characters of a long string hashed at a time
_PIECE = 1 << 16
#: containers of at most this many items, this deep, are walked by
#: :func:`_feed` (the state, its ``tomb_index`` and its generations);
#: anything else is encoded whole
_WALK_ITEMS = 64
_WALK_DEPTH = 4
#: the bytes canonical JSON writes as they are (``ensure_ascii``): printable
#: ASCII but ``"`` and ``\\``
_VERBATIM = bytes(b for b in range(0x20, 0x7F) if b not in b'"\\')


def _feed(h: Any, value: object, depth: int = 0) -> None:
    """Feed ``h`` (a hashlib object) exactly the bytes of
    ``_canonical(value)``, without building them whole: small dicts (str
    keys) and lists near the top are walked (``{`` sorted ``"key":value``
    ``,``-separated ``}``, as ``json.dumps`` writes them with these
    separators), a long ASCII string is fed a piece at a time (a piece of
    verbatim characters as it is, any other through ``json.dumps``:
    escaping is per character), and everything else is encoded whole.
    Which branch is taken changes the memory, never the bytes: O(state)
    time, transient memory O(:data:`_PIECE` + the largest value encoded
    whole) instead of two copies of the whole text (issue 21)."""
    if depth < _WALK_DEPTH and type(value) is dict and len(value) <= _WALK_ITEMS:
        if all(type(k) is str for k in value):
            h.update(b"{")
            for n, k in enumerate(sorted(value)):
                if n:
                    h.update(b",")
                h.update(_canonical(k))
                h.update(b":")
                _feed(h, value[k], depth + 1)
            h.update(b"}")
            return
    elif depth < _WALK_DEPTH and type(value) is list and len(value) <= _WALK_ITEMS:
        h.update(b"[")
        for n, item in enumerate(value):
            if n:
                h.update(b",")
            _feed(h, item, depth + 1)
        h.update(b"]")
        return
    elif type(value) is str and len(value) >= _BIG and value.isascii():
        h.update(b'"')
        for at in range(0, len(value), _PIECE):
            piece = value[at : at + _PIECE]
            raw = piece.encode("ascii")
            if raw.translate(None, _VERBATIM):  # a character JSON escapes
                raw = _canonical(piece)[1:-1]
            h.update(raw)
        h.update(b'"')
        return
    h.update(_canonical(value))


def _digest(state: dict[str, Any]) -> str:
    """The SHA-256 of ``_canonical(state)``, fed in pieces (:func:`_feed`).
    Raises what ``json.dumps`` raises for a value it cannot encode."""
    h = hashlib.sha256()
    _feed(h, state)
    return h.hexdigest()


def checkpoint_state(st: BufferState | HasState, *, listed: bool = False) -> dict[str, Any]:
    """The state a checkpoint holds (call under the write lock; every value
    JSON-able). When every tombstone is in a log record the buffer can read
    back (a readable sink), the checkpoint keeps the tombstone store's
    indexes and where each run of tombstones is (``tomb_index``,
    :meth:`Tombs.export`: a few bytes per tombstone, none read); otherwise,
    or with ``listed``, it lists every tombstone (``tombstones``, in writing
    order, with the ``by_hash`` / ``by_key`` winners). ``records`` is the
    checkpoint's own seq: one past the anchor that goes first, at
    ``len(st.records)``. O(live + staged + index slots), or
    O(tombstones) when listed."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    head = st.head
    tombs = head.tombs
    slots = sorted(head.live.values(), key=lambda s: s.key)
    exported = None
    if not listed and st.records.reader is not None:
        exported = tombs.export()
    tomb_state = {"tomb_index": exported} if exported is not None else _listed_tombs(tombs)
    groups = [g for _, _, g in st.staged]
    groups.extend(st.applying.values())
    groups.sort(key=lambda g: g.gid)
    return {
        "records": len(st.records) + 1,  # the anchor goes first
        "version": head.number,
        "next_key": head.next_key,
        # an open stream: its logged prefix (stream.py), as a replay gives it
        "live": [[durable_dict(st, s.entry), s.key, s.changed] for s in slots],
        "marks": sorted([m.id, m.reason, m.turn, m.version] for m in head.marks.values()),
        **tomb_state,
        "groups": [
            [g.gid, list(g.ids), g.grace, g.staged, g.reason, g.actor, g.turn, sorted(g.retracted)]
            for g in groups
        ],
        "intents": sorted([gid, seq] for gid, seq in st.intents.items()),
        "immutable": sorted([i, h] for i, h in st.immutable_hashes.items()),
        # the record that wrote each live protected or sealed entry (claims.py)
        "protected": sorted([i, q] for i, q in st.protected_at.items() if i in head.live),
        "counts": sorted([k, v] for k, v in st.counts.items()),
        "refusals": sorted([r.value, v] for r, v in st.refusals.items()),
    }


def _listed_tombs(tombs: Tombs) -> dict[str, Any]:
    """Every tombstone, in writing order, with the log records holding them
    (tombs.py) and the newest of each content hash and key (as in
    ``Tombs.matching``). One pass; old ones are read back from the log."""
    tomb_list = list(tombs.by_id.values())
    by_hash: dict[str, str] = {}
    by_key: dict[str, str] = {}
    for t in tomb_list:
        by_hash[t.content_hash] = t.id
        if t.key is not None:
            by_key[t.key] = t.id
    return {
        "tombstones": [t.to_dict() for t in tomb_list],
        "tomb_runs": tombs.runs(),
        "by_hash": sorted([h, i] for h, i in by_hash.items()),
        "by_key": sorted([k, i] for k, i in by_key.items()),
    }


def build_checkpoint(st: BufferState | HasState, at: float) -> tuple[LogRecord, LogRecord]:
    """The anchor and checkpoint records for the current state, seqs
    ``len(st.records)`` and the next (call under the write lock, then
    append both, in order, in one batch)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    state = checkpoint_state(st)
    return checkpoint_records(state, _digest(state), at)


def checkpoint_records(
    state: dict[str, Any], digest: str, at: float
) -> tuple[LogRecord, LogRecord]:
    """The anchor and checkpoint records of a ``state`` built earlier, with
    its :func:`checkpoint_digest` (computed outside the write lock); append
    them only if the log has not grown since (``state["records"] - 1``
    records held)."""
    seq = state["records"]
    return anchor_record(seq - 1, at, digest), _record(state, at, digest)


def checkpoint_digest(state: dict[str, Any]) -> str:
    """The SHA-256 a checkpoint of ``state`` (and its anchor) carries, over
    its canonical JSON. O(state); needs no lock: a state holds only values
    built for it."""
    return _digest(state)


def _record(state: dict[str, Any], at: float, digest: str | None = None) -> LogRecord:
    """The checkpoint record of ``state`` (seq ``state["records"]``),
    checksummed (``digest``: :func:`checkpoint_digest` of it, if done)."""
    digest = _digest(state) if digest is None else digest
    return checkpoint_record(state["records"], at, digest, state)


def check_anchor(anchor: LogRecord | None, rec: LogRecord) -> None:
    """Raise :class:`LogFormatError` unless ``anchor`` (the record before
    checkpoint ``rec``; None: there is none) is its anchor: op
    :data:`ANCHOR_OP` carrying the checkpoint's SHA-256. O(1)."""
    if anchor is None or anchor.op != ANCHOR_OP:
        raise LogFormatError(f"checkpoint {rec.seq} has no anchor record before it")
    if parse_anchor(anchor) != rec.detail.get("sha256"):
        raise LogFormatError(
            f"checkpoint {rec.seq} is not the one its anchor (record {anchor.seq}) announced"
        )


def verify_checkpoint(rec: LogRecord) -> dict[str, Any]:
    """The state of checkpoint record ``rec``, if its checksum holds and it
    names its own seq; otherwise :class:`LogFormatError`."""
    state, want = parse_checkpoint(rec)
    try:
        got = _digest(state)
    except (TypeError, ValueError) as exc:
        raise LogFormatError(f"checkpoint {rec.seq} holds a value JSON cannot encode") from exc
    if got != want:
        raise LogFormatError(f"checkpoint {rec.seq} fails its checksum")
    if state.get("records") != rec.seq:
        raise LogFormatError(f"checkpoint {rec.seq} says it follows {state.get('records')} records")
    return state


def _tombstones(items: object) -> dict[str, Tombstone]:
    """The checkpoint's tombstones by id, each through
    :meth:`Tombstone.from_dict` (about 1 µs each; it names what is wrong).
    Raises ``TypeError`` or ``LogFormatError`` for a malformed list.
    O(tombstones)."""
    if type(items) is not list:
        raise TypeError("the tombstones are not a list")
    out: dict[str, Tombstone] = {}
    for d in items:
        t = Tombstone.from_dict(d)
        out[t.id] = t
    return out


def restore_tombs(state: dict[str, Any]) -> tuple[Tombs, bool]:
    """The tombstones of a checkpoint ``state``, written again in its order
    when that makes each ``by_hash`` / ``by_key`` winner the newest of its
    hash or key (checkpoints list them in writing order); otherwise (an
    older checkpoint, sorted by id) in the order that does: older first, the
    winners last within one version. Returns the tombstones and whether the
    checkpoint's order was kept. A state whose winners cannot all be
    honoured raises :class:`LogFormatError`, so recovery falls back to an
    earlier checkpoint. O(tombstones)."""
    by_id = _tombstones(state["tombstones"])
    if len(by_id) != len(state["tombstones"]):
        raise LogFormatError("a checkpoint lists a tombstone id twice")
    tombs = list(by_id.values())
    win_hash = {h: i for h, i in state["by_hash"]}
    win_key = {k: i for k, i in state["by_key"]}

    def honoured(order: list[Any]) -> bool:
        # written in this order, the last of each hash (key) is the newest
        return {t.content_hash: t.id for t in order} == win_hash and {
            t.key: t.id for t in order if t.key is not None
        } == win_key

    if honoured(tombs):
        return Tombs.of(tombs), True

    def order(item: tuple[int, Any]) -> tuple[int, int, int]:
        index, t = item
        wins = (win_hash.get(t.content_hash) == t.id) + (
            t.key is not None and win_key.get(t.key) == t.id
        )
        return (-1 if t.version is None else t.version, wins, index)

    again = [t for _, t in sorted(enumerate(tombs), key=order)]
    if not honoured(again):
        raise LogFormatError("a checkpoint's tombstone indexes disagree with its tombstones")
    return Tombs.of(again), False


def _restore(st: BufferState, rec: LogRecord, state: dict[str, Any]) -> None:
    """Make ``st`` (fresh) hold ``state``, with the log ending at ``rec``."""
    draft = Draft(Version.empty())
    for entry_d, key, changed in state["live"]:
        if entry_d.get("streaming") is True:  # an open stream's logged prefix
            header = stream_header(entry_d)
            entry: Entry = reopen(st, header, float(key), check_body(entry_d["body"]))
        else:
            entry = Entry.from_dict(entry_d)
        draft.add(entry, float(key), int(changed))
    draft.next_key = float(state["next_key"])
    for i, reason, turn, version in state["marks"]:
        draft.marks[i] = Mark(i, reason, turn, version)
    if "tomb_index" in state:
        # the store's indexes; every tombstone is read back from its record
        if st.records.reader is None or state.get("compacted_from") is not None:
            raise LogFormatError("its tombstones are in log records this buffer cannot read")
        draft.tombs = Tombs.imported(state["tomb_index"], rec.seq, st.records)
    else:
        tombs, in_order = restore_tombs(state)
        runs = state.get("tomb_runs")
        if in_order and isinstance(runs, list) and state.get("compacted_from") is None:
            # where each tombstone's record is, so they can leave memory (tombs.py)
            tombs.relocate(runs, rec.seq, st.records)
        draft.tombs = tombs
    st.head = draft.finish(int(state["version"]))
    # a compacted log (``quiesce compact``) starts at this checkpoint: the
    # records it summarises are not in this log (check.py allows for it)
    st.compacted = state.get("compacted_from") is not None
    st.immutable_hashes = {i: h for i, h in state["immutable"]}
    st.protected_at = {i: q for i, q in state.get("protected", ())}
    st.counts = Counter({k: v for k, v in state["counts"]})
    st.refusals = Counter({Refusal(r): v for r, v in state["refusals"]})
    st.staged = []
    st.staged_ids = {}
    for gid, ids, grace, staged, reason, actor, turn, retracted in state["groups"]:
        g = Group(gid, tuple(ids), grace, staged, reason, actor, turn, frozenset(retracted))
        heapq.heappush(st.staged, (g.grace, g.gid, g))
    records = st.records
    assert type(records) is Records
    records.first = rec.seq
    records.append(rec)


def _reset(st: BufferState) -> None:
    """Back to the state of a fresh buffer (after a rejected checkpoint)."""
    reader = st.records.reader
    st.records.clear()
    st.records.first = 0
    st.records.dropped = 0
    st.records.reader = reader
    st.head = Version.empty()
    st.streams = {}
    st.immutable_hashes = {}
    st.protected_at = {}
    st.counts = Counter()
    st.refusals = Counter()
    st.staged = []
    st.staged_ids = {}
    st.unmarked = set()
    st.unmarked_new = []
    st.gids = itertools.count(1)
    st.compacted = False


def _try(st: BufferState, sink: ReadableSink, seq: int, total: int) -> None:
    """Recover ``st`` from checkpoint ``seq`` and the tail; raises
    LogFormatError or AssertionError if the checkpoint cannot be used."""
    start = max(seq - 1, 0)
    got = check_read(sink.read_range(start, seq + 1), start, seq + 1)
    rec = got[-1]
    state = verify_checkpoint(rec)
    if not _is_compacted_base(rec):  # a compacted log's base has no record before it
        check_anchor(got[0] if seq else None, rec)  # the claim made before it was written
    check_claims(state, seq, sink.read_range)  # claims.py: before anything is applied
    try:
        _restore(st, rec, state)
    except Exception as exc:  # KeyError, TypeError, the tombstone decoder's own checks
        raise LogFormatError(f"checkpoint {seq} is malformed: {exc!r}") from exc
    tail = check_read(sink.read_range(seq + 1, total), seq + 1, total)
    replay(st, tail)
    # The invariant checker over the checkpoint and its tail only: the
    # records before it are treated like a retention cut (log.py), so the
    # check costs O(live + tail), not O(history).
    check_buffer(st, True, since=st.records.first)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk build (restoring a
    checkpoint allocates O(live + tombstones) tracked objects at once, and
    the collections they trigger walk the whole heap: measured 2-4x the
    build itself). Reference counting still frees everything; the collector
    is turned back on only if it was on, on any exit (so pauses nest: an
    inner one leaves it off, the outermost turns it back on). The first
    allocation after that runs a young collection over every object
    allocated meanwhile that is still alive: a caller that frees a bulk of
    them (``Buffer`` trimming the recovered tail) does so inside the pause."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def recover(st: BufferState | HasState, sink: CheckpointSink) -> bool:
    """Recover a fresh ``st`` from the newest usable checkpoint of ``sink``
    and the records after it. Returns False (``st`` left fresh) when there
    is none: the caller replays the whole log. Each rejected checkpoint is
    logged (warning) and the one before it tried. Runs with the cyclic
    collector paused (:func:`gc_paused`)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    with gc_paused():
        return _recover(st, sink)


def _recover(st: BufferState, sink: CheckpointSink) -> bool:
    total, seqs = sink.checkpoints()
    for seq in reversed(seqs):
        try:
            _try(st, sink, seq, total)
        except (LogFormatError, AssertionError) as exc:
            _log.warning(
                "skipping checkpoint %d of %r: %s; falling back to %s",
                seq,
                sink,
                exc or type(exc).__name__,
                "an older checkpoint" if seq != seqs[0] else "a full replay",
            )
            _reset(st)
            if seq == 0:  # a compacted log's base: nothing else holds its history
                raise LogFormatError(
                    f"{sink!r}: the checkpoint this compacted log starts from is unusable: {exc}"
                ) from exc
            continue
        return True
    return False


def _is_compacted_base(rec: LogRecord) -> bool:
    state = rec.detail.get("state") if rec.op == CHECKPOINT_OP else None
    return rec.seq == 0 and isinstance(state, dict) and state.get("compacted_from") is not None


def replay_log(st: BufferState | HasState, records: Sequence[LogRecord]) -> None:
    """Load a whole log into a fresh ``st``: :func:`replay`, except that a
    compacted log (its record 0 is the checkpoint ``quiesce compact``
    wrote) starts from that checkpoint's state. Raises
    :class:`LogFormatError` for a damaged one. Runs with the cyclic
    collector paused (:func:`gc_paused`)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    with gc_paused():
        _replay_log(st, records)


def _replay_log(st: BufferState, records: Sequence[LogRecord]) -> None:
    if records and _is_compacted_base(records[0]):
        rec = records[0]
        state = verify_checkpoint(rec)
        check_claims(state, 0, None)  # its history is elsewhere: no record vouches
        try:
            _restore(st, rec, state)
        except Exception as exc:  # KeyError, TypeError, the tombstone decoder's own checks
            raise LogFormatError(f"checkpoint 0 is malformed: {exc!r}") from exc
        replay(st, records[1:])
        return
    replay(st, records)


def compacted_records(st: BufferState | HasState, source: str, at: float) -> list[LogRecord]:
    """The records of a compacted copy of ``st``'s log: one checkpoint
    (seq 0) holding the current state, marked as compacted from ``source``
    (``len(st.log)`` records). O(live + tombstones)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    state = checkpoint_state(st, listed=True)  # their records are not carried over
    state["records"] = 0
    state["intents"] = []  # intent records are not carried over
    state["tomb_runs"] = []
    state["compacted_from"] = {"source": source, "records": len(st.records)}
    return [_record(state, at)]


def _tomb_count(state: dict[str, Any]) -> object:
    index = state.get("tomb_index")
    if isinstance(index, dict):
        return index.get("n")
    return len(state.get("tombstones", ()))


def describe_checkpoint(rec: LogRecord) -> str:
    """One line for people (``quiesce inspect``): what checkpoint ``rec``
    holds and whether its checksum holds."""
    try:
        state = verify_checkpoint(rec)
        status = "checksum ok"
    except LogFormatError as exc:
        raw = rec.detail.get("state")
        state = raw if isinstance(raw, dict) else {}
        status = f"DAMAGED ({exc})"
    try:
        parts = [
            f"v{state.get('version')}",
            f"{len(state.get('live', ()))} live",
            f"{len(state.get('marks', ()))} marked",
            f"{_tomb_count(state)} tombstones",
            f"{len(state.get('groups', ()))} staged",
        ]
    except TypeError:
        parts = ["unreadable state"]
    if state.get("compacted_from"):
        parts.append(f"compacted from {state['compacted_from'].get('records')} records")
    return ", ".join([*parts, status])


def append_checkpoint(st: BufferState, log_streams_locked: Callable[[], None]) -> None:
    """Append a checkpoint record of ``st``, right after its anchor
    (``flush()`` calls it; ``log_streams_locked`` logs the open streams'
    text, in the same hold of the write lock, so the state has no write
    that no record counts: claims.py). The state is built under the write
    lock (O(live + staged + tombstone index)); its checksum, most of the
    cost, is computed outside it, and the two records appended if nothing
    was appended meanwhile (else built again, all under the lock). Writers
    wait for the state only."""
    lock = st.write_lock
    lock.acquire()
    try:
        if st.streams:
            log_streams_locked()
        state = checkpoint_state(st)
    finally:
        lock.release()
    digest = checkpoint_digest(state)
    lock.acquire()
    try:
        if state["records"] == len(st.records) + 1:
            anchor, rec = checkpoint_records(state, digest, time.time())
        else:  # the log grew meanwhile: this state is not the head's
            if st.streams:
                log_streams_locked()
            anchor, rec = build_checkpoint(st, time.time())
        st.records.append(anchor)
        st.records.append(rec)
        st.checkpoint_due = rec.seq + 1 + st.checkpoint_every
    finally:
        lock.release()
