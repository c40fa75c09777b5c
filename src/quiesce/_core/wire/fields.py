"""What every record of the schema shares: :class:`Op`, and the field checks
the parsers are made of.

What this module keeps true: a check refuses with :class:`LogFormatError`
naming the record (``log record <seq> (<op>): ...``), never ``KeyError`` or
``TypeError``; :func:`order_key` admits only finite numbers below
:data:`KEY_LIMIT`. Every function is O(size of what it reads), keeps no
state and does no I/O.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from ..entry import Entry
from ..errors import LogFormatError
from ..records import LogRecord, Tombstone

__all__ = [
    "APPLIED",
    "EMPTY_DETAIL",
    "KEY_LIMIT",
    "OPS",
    "Op",
    "entry_field",
    "fail",
    "field",
    "field_in",
    "list_field",
    "malformed",
    "one_id",
    "order_key",
    "tombstones_field",
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

#: The outcome of a record that applied what it says.
APPLIED = "applied"
#: The detail of a record that needs none (shared, read-only).
EMPTY_DETAIL: Mapping[str, Any] = MappingProxyType({})

#: Order keys stay far below 2**53, where ``key + 1`` still exceeds ``key``
#: (the engine's keys count appends; midpoints lie between them).
KEY_LIMIT = 2.0**52


def fail(rec: LogRecord, message: str) -> LogFormatError:
    """The error naming ``rec`` for a field of the wrong type or shape."""
    return LogFormatError(f"log record {rec.seq} ({rec.op}): {message}")


def malformed(rec: LogRecord, exc: BaseException) -> LogFormatError:
    """The error naming ``rec`` for a field that is missing or refused (``exc``)."""
    return LogFormatError(f"log record {rec.seq} ({rec.op}) is malformed: {exc!r}")


def field(rec: LogRecord, name: str) -> Any:
    """The detail field ``name``, present (else :func:`malformed`). O(1)."""
    try:
        return rec.detail[name]
    except KeyError:
        raise malformed(rec, KeyError(name)) from None


def list_field(rec: LogRecord, name: str) -> list[Any]:
    """The detail field ``name`` as a list (absent: empty). O(1)."""
    value = rec.detail.get(name, [])
    if not isinstance(value, list):
        raise fail(rec, f"{name} is not a list")
    return value


def order_key(rec: LogRecord, value: object) -> float:
    """An order key as stored: a finite number (never a string, a bool,
    NaN) of magnitude below :data:`KEY_LIMIT`; else :class:`LogFormatError`
    naming ``rec``. O(1)."""
    if not (type(value) in (int, float) and math.isfinite(value)):  # type: ignore[arg-type]
        raise fail(rec, f"order key {value!r} is not a finite number")
    key = float(value)  # type: ignore[arg-type]
    if abs(key) >= KEY_LIMIT:
        raise fail(rec, f"order key {value!r} is out of range")
    return key


def entry_field(rec: LogRecord, value: object) -> Entry:
    """``value`` read back as an :class:`Entry` through its own checks. O(size)."""
    if not isinstance(value, dict):
        raise malformed(rec, TypeError(f"an entry is not an object: {type(value).__name__}"))
    try:
        return Entry.from_dict(value)
    except LogFormatError:
        raise
    except Exception as exc:  # Entry's own checks
        raise malformed(rec, exc) from exc


def one_id(rec: LogRecord, what: str = "it names") -> str:
    """The record's one id (a record about one entry names exactly one)."""
    if len(rec.ids) != 1:
        raise fail(rec, f"{what} {len(rec.ids)} ids, not one")
    return rec.ids[0]


def tombstones_field(rec: LogRecord, items: Iterable[Any]) -> list[Tombstone]:
    """``items`` read back as tombstones (:meth:`Tombstone.from_dict`). O(items)."""
    out = []
    for d in items:
        try:
            out.append(Tombstone.from_dict(d))
        except LogFormatError as exc:
            raise fail(rec, str(exc)) from None
    return out


def field_in(rec: LogRecord, obj: Mapping[str, Any], name: str) -> Any:
    """The field ``name`` of ``obj``, an object inside the detail. O(1)."""
    try:
        return obj[name]
    except KeyError:
        raise malformed(rec, KeyError(name)) from None
