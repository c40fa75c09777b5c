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

Memory: the replayed state plus one chunk of records (the scratch
buffer's in-memory log is cut after each chunk). Given the log's
``read_range`` (``Buffer.verify()``), the replayed tombstones leave memory
as a durable buffer's do (their index slots stay, 10-17 bytes each): the
same bound as the buffer's own. From a stream alone (``quiesce verify``)
the tombstones stay in memory, with the removal records' tombstone lists a
checkpoint's index reads back: O(tombstones), a few hundred bytes each —
the one part that grows with history. Each comparison also lists every
tombstone of both sides (:func:`state_fields`): O(tombstones) for the
moment it runs. Time: O(records · log n) to replay plus O(state) per
checkpoint.

A compacted log (``quiesce compact``) starts from its base checkpoint
(seq 0): its history is in SRC, so it is the replay's starting point —
checked for its claims (:mod:`.claims`), not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

from .checkpoint import CHECKPOINT_OP, _restore, check_anchor, replay_log, verify_checkpoint
from .errors import LogFormatError
from .log import check_read
from .records import LogRecord
from .replay import replay
from .state import state_of
from .stream import durable_dict

if TYPE_CHECKING:
    from .state import BufferState, HasState

__all__ = ["Disagreement", "VerifyResult", "state_fields", "verify_records"]

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


def state_fields(st: Any) -> dict[str, Any]:
    """The recoverable state of ``st`` (a :class:`Buffer`, or an object
    with the same fields copied from one) as comparable values, by field
    (what a checkpoint holds, intents aside). O(live + tombstones); reads
    spilled tombstones back through the buffer's log."""
    if not isinstance(st, SimpleNamespace):
        st = state_of(st)
    head = st.head
    tombs = head.tombs
    tomb_list = list(tombs.values())
    winners = sorted(
        (t.id, tombs.by_hash[t.content_hash].id, None if t.key is None else tombs.by_key[t.key].id)
        for t in tomb_list
    )
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
        "tombstones": sorted(tuple(t) for t in tomb_list),
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


class _Removals:
    """The removal records seen so far, as a ``read_range`` for a
    checkpoint's tombstone index (tombs.py reads each tombstone back from
    its record): a seq that is not a removal is an error."""

    def __init__(self) -> None:
        self.by_seq: dict[int, LogRecord] = {}

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
    restored = state_of(new())
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
) -> VerifyResult:
    """Replay ``records`` (a whole log, in order, streamed) and compare every
    checkpoint with the state replayed up to it. Returns the counts and the
    first :class:`Disagreement` (None if every checkpoint agrees). ``new``
    makes a fresh, sinkless buffer (``Buffer``: the core imports no class
    above it); ``into``: the fresh scratch buffer to replay into (the caller
    compares its final state; default ``new()``); ``reader``: the log's
    ``read_range`` (a readable sink): the replayed tombstones then leave
    memory as a durable buffer's do, read back from their records when
    compared; without one the removal records' tombstones are kept. Raises
    :class:`LogFormatError` if the records themselves cannot be replayed.
    See the module docstring for memory and time; cancellation is not a
    concern (synchronous, touches only its own scratch buffers)."""
    scratch = state_of(new() if into is None else into)
    removals = _Removals()
    read = removals.read_range if reader is None else reader
    scratch.records.reader = reader
    pending: list[LogRecord] = []
    total = 0
    checked = 0
    started = False
    before: LogRecord | None = None  # the record before ``rec``: a checkpoint's anchor

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
        if reader is not None:
            scratch.head.tombs.spill(held)  # their records are in the log
        scratch.records.trim(held, 0)  # memory: the state only
        pending.clear()

    for rec in records:
        total += 1
        if reader is None and rec.op == "remove" and rec.detail.get("tombstones"):
            # only what a tombstone index reads back (tombs.py)
            removals.by_seq[rec.seq] = rec._replace(detail={"tombstones": rec.detail["tombstones"]})
        if rec.op == CHECKPOINT_OP and not (rec.seq == 0 and _compacted(rec)):
            flush()
            claimed = _claimed(rec, read, new)
            if isinstance(claimed, Disagreement):
                return VerifyResult(total, checked, claimed)
            try:
                check_anchor(before, rec)  # recovery would not use it
            except LogFormatError as exc:
                return VerifyResult(total, checked, Disagreement(rec.seq, "anchor", str(exc)))
            found = compare(claimed, state_fields(scratch), rec.seq)
            if found is not None:
                return VerifyResult(total, checked, found)
            checked += 1
        pending.append(rec)
        before = rec
        if len(pending) >= CHUNK:
            flush()
    flush()
    return VerifyResult(total, checked, None)


def _compacted(rec: LogRecord) -> bool:
    state = rec.detail.get("state")
    return isinstance(state, dict) and state.get("compacted_from") is not None


def read_sink(read: Any, total: int) -> Iterable[LogRecord]:
    """The records ``0 .. total - 1`` of a readable sink (``read_range``),
    a chunk at a time."""
    for start in range(0, total, CHUNK):
        stop = min(start + CHUNK, total)
        yield from check_read(read(start, stop), start, stop)
