"""The records of one entry's arrival and its mark: ``append`` and ``mark``.

What this module keeps true: these are the records of the two fast paths,
which store a compact tuple (see :mod:`..log`); :func:`append_record` and
:func:`mark_record` take that tuple's fields in its order and build the
record the engine always wrote, byte for byte, at most once, when it is
first read. O(size of the entry).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..entry import Entry
from ..records import LogRecord, Override
from .fields import APPLIED, EMPTY_DETAIL, Op, entry_field, fail, field, one_id, order_key

__all__ = ["Append", "append_record", "mark_record", "parse_append", "parse_mark"]


_APPEND = Op.APPEND.value
_MARK = Op.MARK.value


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
            seq, at, _APPEND, version, (entry.id,), None, None, entry.turn, APPLIED, detail
        )
    detail["override"] = {"reason": override.reason, "turn": override.turn}
    outcome = "overridden" if overridden else APPLIED
    return LogRecord(
        seq, at, _APPEND, version, (entry.id,), None, override.reason, entry.turn, outcome, detail
    )


def parse_append(rec: LogRecord) -> Append:
    """The entry, key, batch flag and override of an ``append`` record."""
    det = rec.detail
    entry = entry_field(rec, field(rec, "entry"))
    key = order_key(rec, field(rec, "key"))
    override = det.get("override")
    if override is not None and not isinstance(override, dict):
        raise fail(rec, "its override is not an object")
    return Append(entry, key, det.get("batch") is True, override)


def mark_record(
    seq: int, entry_id: str, reason: str, turn: int | None, version: int, at: float
) -> LogRecord:
    """The record of a compact mark ``(entry_id, reason, turn, version,
    at)`` (``mark_stale``'s fast path stores that tuple: atomic values only,
    so the garbage collector stops tracking it). Its detail is empty: ids,
    reason, turn and version say it all."""
    return LogRecord(
        seq, at, _MARK, version, (entry_id,), None, reason, turn, APPLIED, EMPTY_DETAIL
    )


def parse_mark(rec: LogRecord) -> tuple[str, str, int | None]:
    """The id, reason and turn of a ``mark`` record."""
    i = one_id(rec, "a mark names")
    return i, rec.reason or "", rec.turn
