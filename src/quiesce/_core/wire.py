"""The edit log's record schema: every op, its builder and its parser.

What this module keeps true:

- **One home per record kind.** :class:`Op` names every operation a
  format-1 record may carry. For each kind there is one builder (the only
  code that writes its ``detail`` keys) and one parser (the only code that
  reads them back, checking their types): the engine, recovery
  (:mod:`.replay`), checkpoints, the shared buffer, ``quiesce.testing`` and
  ``quiesce inspect`` go through these. ``quiesce._log`` only turns records
  into bytes and back.
- **The bytes do not change.** A builder makes exactly the record the
  engine wrote before this module existed (same keys, same order), so old
  logs open and new logs read the same (the log-format tests and the
  committed fixtures hold it).
- **A parser refuses, never crashes.** A detail field of the wrong type or
  shape raises :class:`LogFormatError` naming the record (``log record
  <seq> (<op>): ...``), never ``KeyError``/``TypeError``. A parser checks
  shapes only; whether the history is possible (an id is live, a version
  follows) is :mod:`.replay`'s job.
- **The fast paths stay compact.** ``mark_stale`` and ``append`` store a
  plain tuple (see :mod:`.log`); :func:`mark_record` and
  :func:`append_record` are the functions that expand it, at most once,
  when the record is first read.

Every builder takes the record's ``seq`` and wall-clock time ``at`` first
and is O(size of the detail); every parser is O(size of the detail). No
function here takes a lock, does I/O or keeps state, so cancellation
cannot leave anything half done.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from .entry import Entry
from .errors import LogFormatError
from .records import Escalation, EscalationKind, LogRecord, Override, Refusal, Tombstone

__all__ = [
    "KEY_LIMIT",
    "OPS",
    "Append",
    "Change",
    "Escalate",
    "Op",
    "Refuse",
    "Remove",
    "StreamFinish",
    "StreamText",
    "anchor_record",
    "append_record",
    "checkpoint_record",
    "edit_record",
    "edit_refused_record",
    "escalate_record",
    "escalation_record",
    "intent_record",
    "mark_record",
    "order_key",
    "parse_anchor",
    "parse_append",
    "parse_change",
    "parse_checkpoint",
    "parse_escalate",
    "parse_intent",
    "parse_mark",
    "parse_refuse",
    "parse_remove",
    "parse_stream_finish",
    "parse_stream_open",
    "parse_stream_text",
    "prune_record",
    "refuse_record",
    "remove_record",
    "staged_rows",
    "stream_finish_record",
    "stream_open_record",
    "stream_text_record",
]


class Op(enum.StrEnum):
    """Every operation a format-1 record may name (``LogRecord.op``).

    A record stores the plain ``str`` value (``Op.MARK.value``), so the
    bytes on disk are the op's name; ``Op(rec.op)`` turns it back and
    ``rec.op == Op.MARK`` compares equal either way."""

    APPEND = "append"  #: one entry added (``Buffer.append``/``extend``)
    MARK = "mark"  #: one entry marked stale (``mark_stale``)
    PRUNE = "prune"  #: a prune request: marks and staged groups
    EDIT = "edit"  #: an edit plan, applied (a version) or refused (none)
    TOMBSTONE = "tombstone"  #: a removal intent: the tombstones, before the removal
    REMOVE = "remove"  #: staged groups removed at their grace point
    REFUSE = "refuse"  #: a refused re-admission
    ESCALATE = "escalate"  #: an escalation to the supervisor
    CHECKPOINT = "checkpoint"  #: the whole state at one seq
    STREAM_OPEN = "stream_open"  #: a streamed entry opened
    STREAM_TEXT = "stream_text"  #: text a stream received since its last record
    STREAM_CLOSE = "stream_close"  #: a stream closed: the entry final
    STREAM_ABORT = "stream_abort"  #: a stream aborted: its prefix kept, marked
    ANCHOR = "anchor"  #: the checksum of the checkpoint that follows it


#: Every op name, in :class:`Op` order (what ``_log`` accepts on read).
OPS: tuple[str, ...] = tuple(op.value for op in Op)

_APPEND = Op.APPEND.value
_MARK = Op.MARK.value
_APPLIED = "applied"
_EMPTY_DETAIL: Mapping[str, Any] = MappingProxyType({})

#: Order keys stay far below 2**53, where ``key + 1`` still exceeds ``key``
#: (the engine's keys count appends; midpoints lie between them).
KEY_LIMIT = 2.0**52


# ---------------------------------------------------------------------------
# Field checks shared by the parsers


def _fail(rec: LogRecord, message: str) -> LogFormatError:
    return LogFormatError(f"log record {rec.seq} ({rec.op}): {message}")


def _malformed(rec: LogRecord, exc: BaseException) -> LogFormatError:
    return LogFormatError(f"log record {rec.seq} ({rec.op}) is malformed: {exc!r}")


def _get(rec: LogRecord, name: str) -> Any:
    try:
        return rec.detail[name]
    except KeyError:
        raise _malformed(rec, KeyError(name)) from None


def _list(rec: LogRecord, name: str, default: object = ()) -> list[Any]:
    value = rec.detail.get(name, [] if default == () else default)
    if not isinstance(value, list):
        raise _fail(rec, f"{name} is not a list")
    return value


def _opt_turn(value: object) -> bool:
    return value is None or (type(value) is int and value >= 0)


def _opt_str(value: object) -> bool:
    return value is None or type(value) is str


def order_key(rec: LogRecord, value: object) -> float:
    """An order key as stored: a finite number (never a string, a bool,
    NaN) of magnitude below :data:`KEY_LIMIT`; else :class:`LogFormatError`
    naming ``rec``. O(1)."""
    if not (type(value) in (int, float) and math.isfinite(value)):  # type: ignore[arg-type]
        raise _fail(rec, f"order key {value!r} is not a finite number")
    key = float(value)  # type: ignore[arg-type]
    if abs(key) >= KEY_LIMIT:
        raise _fail(rec, f"order key {value!r} is out of range")
    return key


def _entry(rec: LogRecord, value: object) -> Entry:
    if not isinstance(value, dict):
        raise _malformed(rec, TypeError(f"an entry is not an object: {type(value).__name__}"))
    try:
        return Entry.from_dict(value)
    except LogFormatError:
        raise
    except Exception as exc:  # Entry's own checks
        raise _malformed(rec, exc) from exc


def _one_id(rec: LogRecord, what: str = "it names") -> str:
    if len(rec.ids) != 1:
        raise _fail(rec, f"{what} {len(rec.ids)} ids, not one")
    return rec.ids[0]


def _tombs(rec: LogRecord, items: Iterable[Any]) -> list[Tombstone]:
    out = []
    for d in items:
        try:
            out.append(Tombstone.from_dict(d))
        except LogFormatError as exc:
            raise _fail(rec, str(exc)) from None
    return out


# ---------------------------------------------------------------------------
# append


class Append(NamedTuple):
    """What an ``append`` record says."""

    entry: Entry
    key: float
    #: the rest of a batch (``Buffer.extend``): the same version as the first
    batch: bool
    #: the override that let the entry in (``{"reason", "turn"}``), if any
    override: Mapping[str, Any] | None


def append_record(
    seq: int,
    entry: Entry,
    key: float,
    version: int,
    at: float,
    batch: bool = False,
    override: Override | None = None,
    overridden: bool = False,
) -> LogRecord:
    """The record of appending ``entry`` at order ``key`` in ``version``.

    Positional order is the compact form's (``(append_record, entry, key,
    version, at)``, see :mod:`.log`): the append fast path stores that tuple
    and this builds the record when it is first read. ``batch``: not the
    first entry of an ``extend`` batch. ``override``: the logged permission
    (the record's ``reason``; ``overridden`` when it let matching content
    in, which the counters read)."""
    detail: dict[str, Any] = {"entry": entry.to_dict(), "key": key}
    if batch:
        detail["batch"] = True
    if override is None:
        return LogRecord(
            seq, at, _APPEND, version, (entry.id,), None, None, entry.turn, _APPLIED, detail
        )
    detail["override"] = {"reason": override.reason, "turn": override.turn}
    outcome = "overridden" if overridden else _APPLIED
    return LogRecord(
        seq, at, _APPEND, version, (entry.id,), None, override.reason, entry.turn, outcome, detail
    )


def parse_append(rec: LogRecord) -> Append:
    """The entry, key, batch flag and override of an ``append`` record."""
    det = rec.detail
    entry = _entry(rec, _get(rec, "entry"))
    key = order_key(rec, _get(rec, "key"))
    override = det.get("override")
    if override is not None and not isinstance(override, dict):
        raise _fail(rec, "its override is not an object")
    return Append(entry, key, det.get("batch") is True, override)


# ---------------------------------------------------------------------------
# mark


def mark_record(
    seq: int, entry_id: str, reason: str, turn: int | None, version: int, at: float
) -> LogRecord:
    """The record of a compact mark ``(entry_id, reason, turn, version,
    at)`` (``mark_stale``'s fast path stores that tuple: atomic values only,
    so the garbage collector stops tracking it). Its detail is empty: ids,
    reason, turn and version say it all."""
    return LogRecord(
        seq, at, _MARK, version, (entry_id,), None, reason, turn, _APPLIED, _EMPTY_DETAIL
    )


def parse_mark(rec: LogRecord) -> tuple[str, str, int | None]:
    """The id, reason and turn of a ``mark`` record."""
    i = _one_id(rec, "a mark names")
    return i, rec.reason or "", rec.turn


# ---------------------------------------------------------------------------
# prune and edit (the records that mark, stage and change entries)


class Change(NamedTuple):
    """What a ``prune`` or applied ``edit`` record changes (a prune carries
    marks and staged groups only)."""

    rewrites: list[Entry]
    #: summaries placed: (entry, order key)
    inserted: list[tuple[Entry, float]]
    #: new order keys by id
    keys: dict[str, float]
    #: after a renumbering: the ids whose place changed (None: every id in keys)
    placed: frozenset[str] | None
    #: (id, reason, turn)
    marks: list[tuple[Any, Any, Any]]
    #: (gid, ids, grace version, staged version), types checked by replay
    staged: list[tuple[Any, tuple[Any, ...], Any, Any]]
    #: ids the host retracts (any kind)
    retracted: list[str]


def staged_rows(groups: Iterable[Any]) -> list[list[Any]]:
    """The ``staged`` detail of groups (``grace.Group``): ``[[gid, ids,
    grace, staged]]``."""
    return [[g.gid, list(g.ids), g.grace, g.staged] for g in groups]


def prune_record(
    seq: int,
    at: float,
    version: int | None,
    ids: tuple[str, ...],
    *,
    actor: str | None,
    reason: str | None,
    turn: int | None,
    outcome: str,
    marks: list[list[Any]],
    staged: list[list[Any]],
    outcomes: Mapping[str, Any],
) -> LogRecord:
    """The record of a prune request: new ``marks`` ``[[id, reason,
    turn]]``, ``staged`` groups (:func:`staged_rows`) and each id's
    :class:`~.records.Outcome` (``refusals`` derived from them)."""
    detail = {
        "marks": marks,
        "staged": staged,
        "outcomes": {
            i: [o.status.value, None if o.refusal is None else o.refusal.value]
            for i, o in outcomes.items()
        },
        "refusals": [o.refusal.value for o in outcomes.values() if o.refusal is not None],
    }
    return LogRecord(seq, at, Op.PRUNE.value, version, ids, actor, reason, turn, outcome, detail)


def edit_record(
    seq: int,
    at: float,
    version: int,
    ids: tuple[str, ...],
    *,
    plan: Any,
    rewrites: list[Entry],
    marks_kept: Mapping[str, int],
    inserted: list[dict[str, Any]],
    keys: Mapping[str, float],
    placed: Iterable[str] | None,
    marks: list[list[Any]],
    staged: list[list[Any]],
    rationale: list[dict[str, Any]],
    readmission_overridden: bool,
    retracted: Iterable[str] | None,
) -> LogRecord:
    """The record of an applied :class:`~.plan.EditPlan` (``plan``): its
    rewrites, the summaries ``inserted`` (``{"entry", "key"}``), the new
    order ``keys`` (after a renumbering every live id, of which only the
    ``placed`` ones moved), new ``marks`` and ``staged`` groups, the
    rationale's bytes (kept outside the window) and the host's
    ``retracted`` ids."""
    detail: dict[str, Any] = {
        "plan": plan.to_dict(),
        "rewrites": [e.to_dict() for e in rewrites],
        # a rewrite keeps the entry's mark, which judged the earlier
        # content: the mark's version predates this one
        **({"marks_kept": dict(marks_kept)} if marks_kept else {}),
        "inserted": inserted,
        "keys": dict(keys),
        **({} if placed is None else {"placed": sorted(placed)}),
        "marks": marks,
        "staged": staged,
        "rationale": rationale,
        "refusals": [],
        # the override let content matching a tombstone back in
        **({"readmission_overridden": True} if readmission_overridden else {}),
        # the host's explicit retraction (any kind)
        **({"retracted": list(retracted)} if retracted else {}),
    }
    return LogRecord(
        seq, at, Op.EDIT.value, version, ids, plan.actor, plan.reason, plan.turn, _APPLIED, detail
    )


def edit_refused_record(
    seq: int,
    at: float,
    ids: tuple[str, ...],
    *,
    plan: Any,
    refusals: Sequence[Refusal],
    why: list[str],
    rationale: list[dict[str, Any]],
) -> LogRecord:
    """The record of a refused plan (no version): the refusals, the
    distinct reasons ``why``, the rationale's bytes, the escalation kind."""
    detail = {
        "plan": plan.to_dict(),
        "refusals": [r.value for r in refusals],
        "why": why,
        "rationale": rationale,
        "escalation": EscalationKind.REFUSED_EDIT.value,
    }
    return LogRecord(
        seq, at, Op.EDIT.value, None, ids, plan.actor, plan.reason, plan.turn, "refused", detail
    )


def parse_change(rec: LogRecord) -> Change:
    """What a ``prune`` or applied ``edit`` record changes, its fields'
    shapes checked (entries through :meth:`Entry.from_dict`, keys through
    :func:`order_key`)."""
    det = rec.detail
    rewrites = [_entry(rec, e) for e in _list(rec, "rewrites")]
    inserted = []
    for ins in _list(rec, "inserted"):
        if not isinstance(ins, dict):
            raise _fail(rec, "an inserted entry is not an object")
        inserted.append((_entry(rec, _get_in(rec, ins, "entry")), order_key(rec, ins.get("key"))))
    placed_list = det.get("placed")  # present after a renumbering
    placed = None if placed_list is None else frozenset(_list(rec, "placed"))
    moved = det.get("keys", {})
    if not isinstance(moved, dict):
        raise _fail(rec, "keys is not an object")
    keys = {i: order_key(rec, k) for i, k in moved.items()}
    marks = []
    for mark in _list(rec, "marks"):
        if not isinstance(mark, list) or len(mark) != 3:
            raise _malformed(rec, ValueError(f"a mark is not [id, reason, turn]: {mark!r}"))
        marks.append((mark[0], mark[1], mark[2]))
    staged = []
    for row in _list(rec, "staged"):
        if not isinstance(row, list) or len(row) != 4:
            raise _malformed(rec, ValueError(f"a staged group is not 4 fields: {row!r}"))
        gid, ids, grace, at = row
        if not isinstance(ids, list):
            raise _fail(rec, "a staged group's ids is not a list")
        staged.append((gid, tuple(ids), grace, at))
    retracted = det.get("retracted") or []
    if not isinstance(retracted, list) or not all(type(i) is str for i in retracted):
        raise _fail(rec, "retracted is not a list of ids")
    return Change(rewrites, inserted, keys, placed, marks, staged, retracted)


def _get_in(rec: LogRecord, obj: Mapping[str, Any], name: str) -> Any:
    try:
        return obj[name]
    except KeyError:
        raise _malformed(rec, KeyError(name)) from None


# ---------------------------------------------------------------------------
# tombstone (a removal intent) and remove


class Remove(NamedTuple):
    """What a ``remove`` (or ``tombstone`` intent) record says."""

    tombstones: list[Tombstone]
    #: the staged groups it settles
    gids: list[int]
    #: ids the host retracted (protected kinds allowed)
    retracted: frozenset[str]
    #: refused ids → refusal value
    refused: Mapping[str, str]


def intent_record(
    seq: int, at: float, ids: tuple[str, ...], gids: list[int], tombs: list[Tombstone]
) -> LogRecord:
    """The removal intent: the tombstones ``groups`` would write (their
    version not known yet: ``null``), made durable before the removal."""
    detail = {"gids": gids, "tombstones": [t.to_dict() | {"version": None} for t in tombs]}
    return LogRecord(
        seq, at, Op.TOMBSTONE.value, None, ids, None, "removal intent", None, "intent", detail
    )


def parse_intent(rec: LogRecord) -> Remove:
    """The tombstones (version ``None``) and groups of an intent record."""
    return _remove(rec)


def remove_record(
    seq: int,
    at: float,
    version: int | None,
    ids: tuple[str, ...],
    *,
    actor: str | None,
    reason: str,
    outcome: str,
    gids: list[int],
    tombs: list[Tombstone],
    refused: Mapping[str, Refusal],
    intent: int | None,
    retracted: list[str],
) -> LogRecord:
    """The record of removing staged groups: their ``tombs`` (none: a
    removal of nothing, no version), what was ``refused``, the ``intent``
    record's seq, the host's ``retracted`` ids."""
    detail = {
        "gids": gids,
        "tombstones": [t.to_dict() for t in tombs],
        "refused": {i: r.value for i, r in refused.items()},
        "refusals": [r.value for r in refused.values()],
        **({} if intent is None else {"intent": intent}),
        **({"retracted": retracted} if retracted else {}),
    }
    return LogRecord(seq, at, Op.REMOVE.value, version, ids, actor, reason, None, outcome, detail)


def parse_remove(rec: LogRecord) -> Remove:
    """The tombstones, groups, retracted and refused ids of a ``remove``
    record, their types checked."""
    return _remove(rec)


def _remove(rec: LogRecord) -> Remove:
    tombs = _tombs(rec, _list(rec, "tombstones"))
    retracted = frozenset(_list(rec, "retracted"))
    gids = _list(rec, "gids")
    if not all(type(g) is int for g in gids):
        raise _fail(rec, "a group id is not an int")
    refused = rec.detail.get("refused", {})
    if not isinstance(refused, dict):
        raise _fail(rec, "refused is not an object")
    return Remove(tombs, gids, retracted, refused)


# ---------------------------------------------------------------------------
# refuse and escalate


class Refuse(NamedTuple):
    """What a ``refuse`` record says: the request and the tombstone it hit."""

    request: str
    tombstone: Tombstone


def refuse_record(
    seq: int, at: float, entry_id: str, turn: int | None, tomb: Tombstone
) -> LogRecord:
    """The record of a refused re-admission of ``entry_id`` (it matches
    ``tomb``; the request was an append)."""
    detail = {
        "request": "append",
        "tombstone": tomb.to_dict(),
        "refusals": [Refusal.READMISSION.value],
    }
    return LogRecord(
        seq,
        at,
        Op.REFUSE.value,
        None,
        (entry_id,),
        None,
        "re-admission of tombstoned content",
        turn,
        Refusal.READMISSION.value,
        detail,
    )


def parse_refuse(rec: LogRecord) -> Refuse:
    """The request and tombstone of a ``refuse`` record."""
    request = _get(rec, "request")
    if type(request) is not str:
        raise _fail(rec, "its request is not a string")
    return Refuse(request, _tombs(rec, [_get(rec, "tombstone")])[0])


class Escalate(NamedTuple):
    """What an ``escalate`` record says."""

    kind: str
    data: Mapping[str, Any]


def escalate_record(
    seq: int, at: float, ids: tuple[str, ...], esc_detail: str, kind: str, data: Mapping[str, Any]
) -> LogRecord:
    """The record of an escalation of ``kind`` (an
    :class:`~.records.EscalationKind` value), its human ``esc_detail`` as
    the reason and its JSON-ready ``data``."""
    return LogRecord(
        seq,
        at,
        Op.ESCALATE.value,
        None,
        ids,
        None,
        esc_detail,
        None,
        kind,
        {"kind": kind, "data": data},
    )


def escalation_record(seq: int, at: float, ids: tuple[str, ...], esc: Escalation) -> LogRecord:
    """:func:`escalate_record` of an :class:`~.records.Escalation`."""
    return escalate_record(seq, at, ids, esc.detail, esc.kind.value, dict(esc.data))


def parse_escalate(rec: LogRecord) -> Escalate:
    """The kind and data of an ``escalate`` record."""
    kind = rec.detail.get("kind", rec.outcome)
    data = rec.detail.get("data", {})
    if type(kind) is not str or not isinstance(data, dict):
        raise _fail(rec, "its kind or data has the wrong type")
    return Escalate(kind, data)


# ---------------------------------------------------------------------------
# streams


def stream_open_record(seq: int, at: float, version: int, header: Entry, key: float) -> LogRecord:
    """The record of opening a stream: its ``header`` (empty body) and key."""
    return LogRecord(
        seq,
        at,
        Op.STREAM_OPEN.value,
        version,
        (header.id,),
        None,
        None,
        header.turn,
        _APPLIED,
        {"entry": header.to_dict(), "key": key},
    )


def parse_stream_open(rec: LogRecord) -> tuple[dict[str, Any], float]:
    """The header (its JSON form: :func:`.stream.stream_header` builds it)
    and the order key of a ``stream_open`` record."""
    header = _get(rec, "entry")
    if not isinstance(header, dict):
        raise _malformed(rec, TypeError("the stream header is not an object"))
    if header.get("body", "") != "":
        raise _fail(rec, "a stream opens with a body")
    return header, order_key(rec, _get(rec, "key"))


class StreamText(NamedTuple):
    """What a ``stream_text`` record says."""

    id: str
    offset: int
    text: str
    #: the version of the stream's last write it holds
    through: int
    #: versions the stream's writes published since its last record
    writes: int


def stream_text_record(
    seq: int, at: float, entry_id: str, offset: int, text: str, through: int, writes: int
) -> LogRecord:
    """The record of the text a stream received since its last record
    (``offset`` characters were logged before; ``through`` the version of
    its last write)."""
    return LogRecord(
        seq,
        at,
        Op.STREAM_TEXT.value,
        None,
        (entry_id,),
        None,
        None,
        None,
        _APPLIED,
        {"offset": offset, "text": text, "through": through, "writes": writes},
    )


def parse_stream_text(rec: LogRecord) -> StreamText:
    """The id, offset, text, through and writes of a ``stream_text``
    record (offset and text are checked against the stream by
    :func:`.stream.replay_text`)."""
    i = _one_id(rec)
    through = _get(rec, "through")
    if type(through) is not int:
        raise _fail(rec, f"its text is through version {through!r}")
    return StreamText(
        i, _get(rec, "offset"), _get(rec, "text"), through, rec.detail.get("writes", 0)
    )


class StreamFinish(NamedTuple):
    """What a ``stream_close`` or ``stream_abort`` record says (the rest of
    its detail is read by :func:`.stream.replay_finish`)."""

    id: str
    aborted: bool
    #: an abort that marked the entry
    mark: bool


def stream_finish_record(
    seq: int,
    at: float,
    version: int,
    final: Entry,
    *,
    aborted: bool,
    reason: str | None,
    offset: int,
    text: str,
    writes: int,
    mark: bool,
    refusal: str | None,
) -> LogRecord:
    """The record of closing (or aborting) a stream into ``final``: the text
    not yet logged (from ``offset``), the content hash, the writes since the
    last record, the content and, for a sealed entry, the whole entry."""
    detail: dict[str, Any] = {
        "offset": offset,
        "text": text,
        "content_hash": final.content_hash,
        "writes": writes,
    }
    if final.content is not None:
        detail["content"] = final.to_dict()["content"]
    if final.sealed:
        # recovery checks a sealed entry byte for byte against the record
        # that wrote it (claims.py): this one carries it whole
        detail["entry"] = final.to_dict()
    if mark:
        detail["mark"] = True
    if refusal is not None:
        detail["refusals"] = [refusal]
    return LogRecord(
        seq,
        at,
        Op.STREAM_ABORT.value if aborted else Op.STREAM_CLOSE.value,
        version,
        (final.id,),
        None,
        reason,
        final.turn,
        "aborted" if aborted else _APPLIED,
        detail,
    )


def parse_stream_finish(rec: LogRecord) -> StreamFinish:
    """The id, whether aborted, and whether the abort marked the entry."""
    i = _one_id(rec)
    aborted = rec.op == Op.STREAM_ABORT.value
    return StreamFinish(i, aborted, aborted and bool(rec.detail.get("mark")))


# ---------------------------------------------------------------------------
# checkpoints


def anchor_record(seq: int, at: float, digest: str) -> LogRecord:
    """The anchor before a checkpoint: its SHA-256 ``digest``."""
    return LogRecord(
        seq, at, Op.ANCHOR.value, None, (), None, None, None, _APPLIED, {"sha256": digest}
    )


def parse_anchor(rec: LogRecord) -> str | None:
    """The SHA-256 an ``anchor`` record announces (``None``: it has none)."""
    digest = rec.detail.get("sha256")
    return digest if type(digest) is str else None


def checkpoint_record(seq: int, at: float, digest: str, state: dict[str, Any]) -> LogRecord:
    """The checkpoint record of ``state`` with its SHA-256 ``digest``."""
    return LogRecord(
        seq,
        at,
        Op.CHECKPOINT.value,
        None,
        (),
        None,
        None,
        None,
        _APPLIED,
        {"sha256": digest, "state": state},
    )


def parse_checkpoint(rec: LogRecord) -> tuple[dict[str, Any], str]:
    """The state and SHA-256 of a ``checkpoint`` record (unchecked against
    each other: :func:`.checkpoint.verify_checkpoint` does that), or
    :class:`LogFormatError` if either is missing."""
    if rec.op != Op.CHECKPOINT.value:
        raise LogFormatError(f"log record {rec.seq} is a {rec.op!r} record, not a checkpoint")
    state = rec.detail.get("state")
    want = rec.detail.get("sha256")
    if not isinstance(state, dict) or not isinstance(want, str):
        raise LogFormatError(f"checkpoint {rec.seq} has no state or checksum")
    return state, want
