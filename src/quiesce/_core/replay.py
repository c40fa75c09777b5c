"""Recovery: rebuild a buffer's state from its edit log.

Every record that published a version carries its full effect (entries with
their order keys, marks, staged groups, tombstones, rewrites, moves), so the
head is rebuilt exactly by applying the records in ``seq`` order to one draft.
Refusals and escalations change no state; they are replayed into the
in-memory log and the counters only. Staged removals that were not applied
come back staged. O(records · log n).

A log is untrusted input (a file can be damaged, or crafted with valid
checksums). Replay therefore checks every record against the invariants
*before* applying it, and raises :class:`LogFormatError` naming the record
(``log record <seq> (<op>): ...``) for any history the engine cannot have
written: a version that does not follow the previous one; an entry appended
again while live or after its tombstone; a reference to an entry that is not
live; an order key that is not a finite number below 2**52 in magnitude, or
is held by another live entry; a mark on an entry that is not live, already
marked or immutable; a rewrite of an immutable entry; a tombstone for an entry that is not live, is
protected (a constraint, an instruction, a negative result, a prohibition),
is still cited by an entry that stays live, or whose hash, kind or key
differ from the entry's; a staged removal of an entry that is not live and
marked; a change carried by a record that publishes no version. Any other
failure while decoding a record's detail (a missing key, a value of the wrong
type, ``Entry``'s own checks) is a :class:`LogFormatError` for that record
too — never a bare ``KeyError``, ``TypeError``, ``IndexError`` or
``OverflowError``. What replay accepts recovers to a buffer that passes
``Buffer._check()`` (a fuzz test holds it to that), and every log the engine
writes is accepted (a property test over random histories).

Invariant 4 is checked on the way: a removal record that tombstones an entry
of a protected kind is refused (:class:`LogFormatError`) unless it lists the
id as ``retracted`` and the tombstone's actor is ``"host"`` — the host's
explicit retraction (:mod:`.edit`), the one exception; an edit record claims
``retracted`` ids only as a host plan with an override.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .draft import Draft as _Draft
from .entry import Entry, Kind
from .errors import LogFormatError
from .grace import Group as _Group
from .ledger import guarded, note_written
from .policy import IMMUTABLE_KINDS, PROTECTED_KINDS
from .publish import count_record as _count
from .records import FORMAT, HOST_ACTOR, LogRecord, Mark
from .state import BufferState, HasState, state_of
from .stream_replay import reopen, reopen_entry, replay_finish, replay_text, stream_header
from .version import Slot
from .wire import (
    Change,
    parse_append,
    parse_change,
    parse_mark,
    parse_remove,
    parse_stream_finish,
    parse_stream_open,
    parse_stream_text,
)

__all__ = ["replay"]


class _Invalid(Exception):
    """A record describes a history the engine cannot have written (replay
    turns it into a :class:`LogFormatError` naming the record)."""


def _require(ok: object, message: str) -> None:
    if not ok:
        raise _Invalid(message)


def _opt_turn(value: object) -> bool:
    return value is None or (type(value) is int and value >= 0)


def _retracted(rec: LogRecord, change: Change, index: int) -> list[str]:
    """The ids an applied edit record retracts: only a host plan with an
    override may (edit.py); anything else claiming it is refused."""
    ids = change.retracted
    if not ids:
        return []
    if rec.actor != HOST_ACTOR or change.plan.get("override") is None:
        raise LogFormatError(
            f"log record {index} retracts {ids!r} but is not a host plan with an override"
        )
    return list(ids)


class _Keys:
    """The live entries' order keys, to refuse a key two entries would share.
    Built from the draft when replay starts: O(live entries)."""

    def __init__(self, draft: _Draft) -> None:
        self.owner: dict[float, str] = {slot.key: i for i, slot in draft.base.live.items()}

    def take(self, key: float, entry_id: str) -> None:
        holder = self.owner.get(key)
        _require(holder is None, f"order key {key!r} of {entry_id!r} is held by {holder!r}")
        self.owner[key] = entry_id

    def move(self, draft: _Draft, changes: Mapping[str, float]) -> None:
        """Re-key several live entries at once (a renumbering may swap keys)."""
        for i in changes:
            del self.owner[draft.live[i].key]
        for i, key in changes.items():
            self.take(key, i)

    def drop(self, key: float) -> None:
        self.owner.pop(key, None)


def _live(draft: _Draft, i: object, what: str) -> Slot:
    """The live slot of ``i``, or :class:`_Invalid` ("<i> is <what> but not live")."""
    slot = draft.live.get(i) if type(i) is str else None
    if slot is None:
        raise _Invalid(f"{i!r} is {what} but not live")
    return slot


def _check_new(draft: _Draft, entry: Entry) -> None:
    """``entry`` may be added: its id is new, its refs are live."""
    _require(entry.id not in draft.live, f"{entry.id!r} is added while live")
    _require(entry.id not in draft.tombs.by_id, f"{entry.id!r} is added again after its tombstone")
    for ref in entry.refs:
        _require(ref in draft.live, f"{entry.id!r} cites {ref!r}, which is not live")


def _kinds_of(draft: _Draft, i: object, retracted: frozenset[str]) -> frozenset[Kind]:
    """The kind of ``i`` when the host retracts it (it may then be marked
    whatever its kind), else nothing."""
    slot = draft.live.get(i) if type(i) is str and i in retracted else None
    return frozenset() if slot is None else frozenset({slot.entry.kind})


def _check_markable(draft: _Draft, i: object, immutable: frozenset[Kind]) -> None:
    slot = _live(draft, i, "marked")
    _require(slot.entry.kind not in immutable, f"immutable {i!r} is marked")
    _require(i not in draft.marks, f"{i!r} is marked again")


def _publishes(v: int | None, number: int, streaming: bool = False) -> int:
    """The version a record that changes the head publishes: the next one;
    while a stream is open (``streaming``), any later one (its writes
    published the versions between, their text logged coalesced)."""
    _require(v is not None, "it changes the head but publishes no version")
    assert v is not None
    if streaming:
        _require(v > number, f"it publishes version {v} after {number}")
    else:
        _require(v == number + 1, f"it publishes version {v} after {number}")
    return v


def _list(value: object, what: str) -> Iterable[Any]:
    _require(isinstance(value, list), f"{what} is not a list")
    return value  # type: ignore[return-value]


def replay(st: BufferState | HasState, records: Sequence[LogRecord]) -> None:
    """Load ``records`` into ``st``: a new, empty buffer, or one whose log
    they continue (a replica following a shared log; call under its write
    lock), checking each record against the invariants first. The head is
    replaced once, only if the records publish a version. Raises
    :class:`LogFormatError` naming the first record from a newer format, out
    of order, malformed or impossible (see the module docstring); a new
    ``st`` must then be discarded. O(records · log n + live entries)."""
    st, _owner = state_of(st), st  # the owner held: its parts reach it weakly
    draft = _Draft(st.head)
    number = st.head.number
    groups: dict[int, _Group] = {g.gid: g for _, _, g in st.staged}
    keys = _Keys(draft)
    batch_at: int | None = None  # the version of the append record just read
    streams = st.streams  # the open streams (stream.py), as the records leave them
    for index, rec in enumerate(records, len(st.records)):
        if rec.format > FORMAT:
            raise LogFormatError(
                f"log record {index} has format {rec.format}; this quiesce reads up to {FORMAT}"
            )
        if rec.seq != index:
            raise LogFormatError(f"log record {index} has seq {rec.seq}: the log has a gap")
        op, det, v = rec.op, rec.detail, rec.version
        try:
            _require(v is None or type(v) is int, f"version {v!r} is not an int")
            if op == "append":
                entry, key, batch, _override = parse_append(rec)
                if batch and batch_at is not None and v == batch_at:
                    pass  # the rest of a batch (Buffer.extend): the same version
                else:
                    v = _publishes(v, number, bool(streams))
                _check_new(draft, entry)
                keys.take(key, entry.id)
                draft.add(entry, key, v)
                if entry.kind in IMMUTABLE_KINDS:
                    st.immutable_hashes[entry.id] = entry.content_hash
                if guarded(entry):
                    st.protected_at[entry.id] = rec.seq  # claims.py: its record
            elif op == "mark":
                v = _publishes(v, number, bool(streams))
                i, reason, turn = parse_mark(rec)
                _check_markable(draft, i, IMMUTABLE_KINDS)
                draft.marks[i] = Mark(i, reason, turn, v)
            elif op in ("prune", "edit"):
                if op == "edit" and rec.outcome != "applied":
                    _require(v is None, "a refused edit publishes a version")
                else:
                    change = parse_change(rec)
                    changes = op == "edit" or bool(change.marks)
                    n = _publishes(v, number, bool(streams)) if changes else number
                    _require(changes or v is None, "it publishes a version but changes nothing")
                    for entry in change.rewrites:
                        old = _live(draft, entry.id, "rewritten")
                        _require(
                            old.entry.kind not in IMMUTABLE_KINDS
                            and entry.kind not in IMMUTABLE_KINDS,
                            f"immutable {entry.id!r} is rewritten",
                        )
                        for ref in entry.refs:
                            _require(ref in draft.live, f"{entry.id!r} cites {ref!r}, not live")
                        draft.replace(entry, n)
                        note_written(st.protected_at, rec.seq, (entry,))
                    for entry, key in change.inserted:
                        _check_new(draft, entry)
                        keys.take(key, entry.id)
                        draft.add(entry, key, n)
                        if entry.kind in IMMUTABLE_KINDS:
                            st.immutable_hashes[entry.id] = entry.content_hash
                        note_written(st.protected_at, rec.seq, (entry,))
                    placed = change.placed  # present after a renumbering
                    new_keys = change.keys
                    for i in new_keys:
                        _live(draft, i, "moved")
                    keys.move(draft, new_keys)
                    for i, key in new_keys.items():
                        touch = placed is None or i in placed
                        draft.set_key(i, key, n, touch=touch)
                    retracted = frozenset(_retracted(rec, change, index))
                    for i, reason, turn in change.marks:
                        # only the host's retraction marks an immutable entry
                        _check_markable(draft, i, IMMUTABLE_KINDS - _kinds_of(draft, i, retracted))
                        _require(type(reason) is str and _opt_turn(turn), f"mark of {i!r} is bad")
                        draft.marks[i] = Mark(i, reason, turn, n)
                    for gid, ids, grace, staged in change.staged:
                        _require(
                            type(gid) is int and gid not in groups,
                            f"staged group {gid!r} is not a new group id",
                        )
                        for i in ids:
                            _require(
                                type(i) is str and i in draft.marks,
                                f"{i!r} is staged but not live and marked",
                            )
                        _require(
                            type(grace) is int
                            and type(staged) is int
                            and 0 <= grace <= n
                            and 0 <= staged <= n,
                            f"staged group {gid} has grace {grace!r}, staged {staged!r}",
                        )
                        groups[gid] = _Group(
                            gid,
                            ids,
                            grace,
                            staged,
                            rec.reason or "",
                            rec.actor,
                            rec.turn,
                            retracted.intersection(ids),
                        )
            elif op == "remove":
                tombs, gids, retracted, _refused = parse_remove(rec)
                if tombs:
                    n = _publishes(v, number, bool(streams))
                else:
                    _require(v is None, "a removal of nothing publishes a version")
                located = len(draft.tombs)
                for t in tombs:
                    slot = _live(draft, t.id, "removed")
                    e = slot.entry
                    _require(
                        e.kind not in PROTECTED_KINDS
                        or (t.id in retracted and t.actor == HOST_ACTOR),
                        f"protected {t.id!r} is removed",  # invariant 4: only a host retraction
                    )
                    _require(
                        t.content_hash == e.content_hash and t.kind is e.kind and t.key == e.key,
                        f"the tombstone of {t.id!r} does not match the entry",
                    )
                    _require(t.version == n, f"the tombstone of {t.id!r} has version {t.version}")
                    keys.drop(slot.key)
                    draft.remove(t)
                    st.immutable_hashes.pop(t.id, None)
                    st.protected_at.pop(t.id, None)
                draft.tombs.locate(located, rec.seq, st.records)  # tombs.py: spill
                for t in tombs:
                    cited = draft.referrers.get(t.id)
                    if cited:
                        raise _Invalid(f"{t.id!r} is removed while {next(iter(cited))!r} cites it")
                for gid in gids:
                    groups.pop(gid, None)
            elif op == "stream_open":
                v = _publishes(v, number, bool(streams))
                header_dict, key = parse_stream_open(rec)
                header = stream_header(header_dict)
                _check_new(draft, header)
                keys.take(key, header.id)
                draft.add(reopen(st, header, key, ""), key, v)
            elif op == "stream_text":
                _require(v is None, "a stream_text record publishes a version")
                text = parse_stream_text(rec)
                w = streams.get(text.id)
                _require(w is not None, f"{text.id!r} is not an open stream")
                assert w is not None
                through = text.through
                _require(
                    through >= draft.live[w.id].changed,
                    f"its text is through version {through!r}",
                )
                replay_text(w, text.offset, text.text, text.writes)
                number = max(number, through)
                draft.replace(reopen_entry(w), through)
            elif op in ("stream_close", "stream_abort"):
                v = _publishes(v, number, bool(streams))
                finish = parse_stream_finish(rec)
                w = streams.pop(finish.id, None)
                _require(w is not None, f"{finish.id!r} is not an open stream")
                assert w is not None
                aborted = finish.aborted
                final = replay_finish(w, det, aborted)
                draft.replace(final, v)
                if finish.mark:
                    _check_markable(draft, w.id, IMMUTABLE_KINDS)
                    _require(type(rec.reason) is str and rec.reason, "an abort without a reason")
                    draft.marks[w.id] = Mark(w.id, rec.reason or "", rec.turn, v)
                else:
                    _require(not aborted or w.id in draft.marks, f"aborted {w.id!r} is unmarked")
                if guarded(final):
                    st.protected_at[w.id] = rec.seq  # claims.py: its close carries it
            elif op in ("refuse", "escalate", "tombstone", "checkpoint", "anchor"):
                _require(v is None, f"a {op} record publishes a version")  # checkpoint.py
            else:
                raise _Invalid(f"unknown op {op!r}")
            _count(st, rec)
        except LogFormatError:
            raise
        except _Invalid as exc:
            raise LogFormatError(f"log record {index} ({op}): {exc}") from None
        except Exception as exc:  # KeyError, TypeError, Entry's own checks, ...
            raise LogFormatError(f"log record {index} ({op}) is malformed: {exc!r}") from exc
        if v is not None:
            number = v
        batch_at = v if op == "append" else None
        st.records.append(rec)
    for g in groups.values():
        for i in g.ids:
            if i in draft.live and i not in draft.marks:  # pragma: no cover - marks stay
                raise LogFormatError(f"staged {i!r} of group {g.gid} is live but not marked")
    if number != st.head.number:
        st.head = draft.finish(number)
    head = st.head
    st.unmarked_new.clear()
    st.unmarked = {
        i
        for i, slot in head.live.items()
        if i not in head.marks and slot.entry.kind not in IMMUTABLE_KINDS
    }
    st.staged.clear()
    st.staged_ids.clear()
    for g in groups.values():
        for i in g.ids:
            st.staged_ids[i] = g
        heapq.heappush(st.staged, (g.grace, g.gid, g))
    st.gids = itertools.count(max(groups, default=0) + 1 + len(st.records))
