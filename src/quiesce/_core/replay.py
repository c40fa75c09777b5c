"""Recovery: rebuild a buffer's state from its edit log.

Every record that published a version carries its full effect (entries with
their order keys, marks, staged groups, tombstones, rewrites, moves), so the
head is rebuilt exactly by applying the records in ``seq`` order to one draft.
Refusals and escalations change no state; they are replayed into the
in-memory log and the counters only. Staged removals that were not applied
come back staged. O(records · log n).

Invariant 4 is checked on the way: a removal record that tombstones an entry
of a protected kind is refused (:class:`LogFormatError`) unless it lists the
id as ``retracted`` and the tombstone's actor is ``"host"`` — the host's
explicit retraction (:mod:`.edit`), the one exception; an edit record claims
``retracted`` ids only as a host plan with an override.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .draft import Draft as _Draft
from .edit import HOST_ACTOR
from .entry import Entry, Kind
from .errors import LogFormatError
from .grace import Group as _Group
from .policy import IMMUTABLE_KINDS, PROTECTED_KINDS
from .publish import count_record as _count
from .records import FORMAT, LogRecord, Mark, Tombstone

if TYPE_CHECKING:
    from .buffer import Buffer

__all__ = ["replay"]


def _tomb(d: dict[str, Any]) -> Tombstone:
    return Tombstone(
        d["id"],
        d["content_hash"],
        d["reason"],
        d["turn"],
        d["actor"],
        d["version"],
        None if d.get("kind") is None else Kind(d["kind"]),
        d.get("key"),
    )


def _retracted(rec: LogRecord, index: int) -> list[str]:
    """The ids an applied edit record retracts: only a host plan with an
    override may (edit.py); anything else claiming it is refused."""
    ids = rec.detail.get("retracted")
    if not ids:
        return []
    plan = rec.detail.get("plan") or {}
    if rec.actor != HOST_ACTOR or plan.get("override") is None:
        raise LogFormatError(
            f"log record {index} retracts {ids!r} but is not a host plan with an override"
        )
    return list(ids)


def replay(buf: Buffer, records: Sequence[LogRecord]) -> None:
    """Load ``records`` into ``buf``: a new, empty buffer, or one whose log
    they continue (a replica following a shared log; call under its write
    lock). The head is replaced once, only if the records publish a version.
    Raises :class:`LogFormatError` for a record from a newer format or out of
    order."""

    draft = _Draft(buf._head)
    number = buf._head.number
    groups: dict[int, _Group] = {g.gid: g for _, _, g in buf._staged}
    for index, rec in enumerate(records, len(buf._records)):
        if rec.format > FORMAT:
            raise LogFormatError(
                f"log record {index} has format {rec.format}; this quiesce reads up to {FORMAT}"
            )
        if rec.seq != index:
            raise LogFormatError(f"log record {index} has seq {rec.seq}: the log has a gap")
        op, det, v = rec.op, rec.detail, rec.version
        try:
            if op == "append":
                assert v is not None
                entry = Entry.from_dict(det["entry"])
                draft.add(entry, float(det["key"]), v)
                if entry.kind in IMMUTABLE_KINDS:
                    buf._immutable_hashes[entry.id] = entry.content_hash
            elif op == "mark":
                assert v is not None
                i = rec.ids[0]
                draft.marks[i] = Mark(i, rec.reason or "", rec.turn, v)
            elif op in ("prune", "edit"):
                if op == "edit" and rec.outcome != "applied":
                    pass
                else:
                    assert v is not None or not det.get("marks")
                    for new in det.get("rewrites", ()):
                        entry = Entry.from_dict(new)
                        draft.replace(entry, v if v is not None else number)
                    for ins in det.get("inserted", ()):
                        entry = Entry.from_dict(ins["entry"])
                        draft.add(entry, float(ins["key"]), v if v is not None else number)
                        if entry.kind in IMMUTABLE_KINDS:
                            buf._immutable_hashes[entry.id] = entry.content_hash
                    placed = det.get("placed")  # present after a renumbering
                    for i, key in det.get("keys", {}).items():
                        touch = placed is None or i in placed
                        draft.set_key(i, float(key), v if v is not None else number, touch=touch)
                    for i, reason, turn in det.get("marks", ()):
                        draft.marks[i] = Mark(i, reason, turn, v if v is not None else number)
                    retracted = frozenset(_retracted(rec, index))
                    for gid, ids, grace, staged in det.get("staged", ()):
                        groups[gid] = _Group(
                            gid,
                            tuple(ids),
                            grace,
                            staged,
                            rec.reason or "",
                            rec.actor,
                            rec.turn,
                            retracted.intersection(ids),
                        )
            elif op == "remove":
                retracted = frozenset(det.get("retracted", ()))
                for t in det.get("tombstones", ()):
                    tomb = _tomb(t)
                    kind = tomb.kind
                    if (
                        kind is not None
                        and kind in PROTECTED_KINDS
                        and (tomb.id not in retracted or tomb.actor != HOST_ACTOR)
                    ):
                        raise LogFormatError(
                            f"log record {index} removes protected {tomb.id!r} "
                            f"({kind.name}) without a host retraction (invariant 4)"
                        )
                    draft.remove(tomb)
                    buf._immutable_hashes.pop(tomb.id, None)
                for gid in det.get("gids", ()):
                    groups.pop(gid, None)
            elif op in ("refuse", "escalate", "tombstone", "checkpoint"):
                pass  # a checkpoint changes no state (checkpoint.py)
            else:
                raise LogFormatError(f"log record {index} has unknown op {op!r}")
        except LogFormatError:
            raise
        except (KeyError, TypeError, ValueError, AssertionError) as exc:
            raise LogFormatError(f"log record {index} ({op}) is malformed: {exc!r}") from exc
        if v is not None:
            if v <= number:
                raise LogFormatError(f"log record {index} publishes version {v} after {number}")
            number = v
        buf._records.append(rec)
        _count(buf, rec)
    if number != buf._head.number:
        buf._head = draft.finish(number)
    head = buf._head
    buf._unmarked_new.clear()
    buf._unmarked = {
        i
        for i, slot in head.live.items()
        if i not in head.marks and slot.entry.kind not in IMMUTABLE_KINDS
    }
    buf._staged.clear()
    buf._staged_ids.clear()
    for g in groups.values():
        for i in g.ids:
            buf._staged_ids[i] = g
        heapq.heappush(buf._staged, (g.grace, g.gid, g))
    buf._gids = itertools.count(max(groups, default=0) + 1 + len(buf._records))
