"""The records of a removal: the ``tombstone`` intent and the ``remove``.

What this module keeps true: the intent carries the tombstones a removal
will write (their version not known yet: ``null``) and is durable before
the removal is published; the ``remove`` record carries them with their
version, the groups it settles and what was refused. Both parse into one
:class:`Remove`. O(tombstones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..records import LogRecord, Refusal, Tombstone
from .fields import Op, fail, list_field, tombstones_field

__all__ = ["Remove", "intent_record", "parse_intent", "parse_remove", "remove_record"]


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
    tombs = tombstones_field(rec, list_field(rec, "tombstones"))
    retracted = frozenset(list_field(rec, "retracted"))
    gids = list_field(rec, "gids")
    if not all(type(g) is int for g in gids):
        raise fail(rec, "a group id is not an int")
    refused = rec.detail.get("refused", {})
    if not isinstance(refused, dict):
        raise fail(rec, "refused is not an object")
    return Remove(tombs, gids, retracted, refused)
