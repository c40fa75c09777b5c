"""The records of what was not done: a refused re-admission (``refuse``) and
an escalation to the supervisor (``escalate``).

What this module keeps true: neither record publishes a version; a
``refuse`` carries the tombstone the request matched, an ``escalate`` its
kind and JSON-ready data. O(size of the detail).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..records import LogRecord, Refusal, Tombstone
from .fields import Op, fail, field, tombstones_field

__all__ = [
    "Escalate",
    "Refuse",
    "escalate_record",
    "parse_escalate",
    "parse_refuse",
    "refuse_record",
]


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
    request = rec.detail.get("request", "append")  # only appends are refused so far
    if type(request) is not str:
        raise fail(rec, "its request is not a string")
    return Refuse(request, tombstones_field(rec, [field(rec, "tombstone")])[0])


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
    detail = {"kind": kind, "data": data}
    return LogRecord(seq, at, Op.ESCALATE.value, None, ids, None, esc_detail, None, kind, detail)


def parse_escalate(rec: LogRecord) -> Escalate:
    """The kind and data of an ``escalate`` record."""
    kind = rec.detail.get("kind", rec.outcome)
    data = rec.detail.get("data", {})
    if type(kind) is not str or not isinstance(data, dict):
        raise fail(rec, "its kind or data has the wrong type")
    return Escalate(kind, data)
