"""Recovery: rebuild a buffer's state from its edit log.

Every record that published a version carries its full effect (entries with
their order keys, marks, staged groups, tombstones, rewrites, moves), so the
head is rebuilt exactly by applying the records in ``seq`` order to one draft.
Refusals and escalations change no state; they are replayed into the
in-memory log and the counters only. Staged removals that were not applied
come back staged. O(records · log n).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .draft import Draft as _Draft
from .entry import Entry, Kind
from .errors import LogFormatError
from .grace import Group as _Group
from .policy import IMMUTABLE_KINDS
from .publish import count_record as _count
from .records import FORMAT, LogRecord, Mark, Tombstone
from .version import Version

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


def replay(buf: Buffer, records: Sequence[LogRecord]) -> None:
    """Load ``records`` into the (new, empty) ``buf``. Raises
    :class:`LogFormatError` for a record from a newer format or out of order."""

    draft = _Draft(Version.empty())
    number = 0
    groups: dict[int, _Group] = {}
    for index, rec in enumerate(records):
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
                    for gid, ids, grace, staged in det.get("staged", ()):
                        groups[gid] = _Group(
                            gid, tuple(ids), grace, staged, rec.reason or "", rec.actor, rec.turn
                        )
            elif op == "remove":
                for t in det.get("tombstones", ()):
                    draft.remove(_tomb(t))
                for gid in det.get("gids", ()):
                    groups.pop(gid, None)
            elif op in ("refuse", "escalate", "tombstone"):
                pass
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
    buf._head = head = draft.finish(number)
    buf._unmarked = {
        i
        for i, slot in head.live.items()
        if i not in head.marks and slot.entry.kind not in IMMUTABLE_KINDS
    }
    for g in groups.values():
        for i in g.ids:
            buf._staged_ids[i] = g
        heapq.heappush(buf._staged, (g.grace, g.gid, g))
    buf._gids = itertools.count(max(groups, default=0) + 1 + len(records))
