"""Drafts: a mutable working copy of a :class:`~.version.Version`.

What it keeps true: a draft's ``referrers`` index matches its ``live`` slots
after every method (each method updates both), ``next_key`` stays above
every order key it holds, and ``finish`` freezes the draft into a new,
immutable version without touching the one it started from (the maps are
``immutables.Map.mutate()`` copies). Used by every multi-part change and by
recovery (:mod:`.replay`). Each method is O(log n) per entry and ref.
"""

from __future__ import annotations

from .entry import Entry
from .records import Tombstone
from .version import EMPTY_MAP, Slot, Version

__all__ = ["Draft"]


class Draft:
    """A mutable working copy of a version (``Map.mutate()`` underneath), used
    by every multi-part change and by recovery. ``finish`` freezes it.
    """

    __slots__ = ("base", "live", "marks", "next_key", "referrers", "tombs")

    def __init__(self, base: Version) -> None:
        self.base = base
        self.live = base.live.mutate()
        self.marks = base.marks.mutate()
        self.tombs = base.tombs
        self.referrers = base.referrers.mutate()
        self.next_key = base.next_key

    def add(self, entry: Entry, key: float | None, number: int) -> float:
        if key is None:
            key = self.next_key
        if key >= self.next_key:
            self.next_key = float(int(key) + 1)
        self.live[entry.id] = Slot(entry, key, number)
        for ref in entry.refs:
            self.referrers[ref] = self.referrers.get(ref, EMPTY_MAP).set(entry.id, None)
        return key

    def _unlink(self, entry: Entry) -> None:
        for ref in entry.refs:
            cited = self.referrers.get(ref)
            if cited is None or entry.id not in cited:
                continue
            cited = cited.delete(entry.id)
            if len(cited):
                self.referrers[ref] = cited
            else:
                del self.referrers[ref]

    def replace(self, entry: Entry, number: int) -> None:
        old: Slot = self.live[entry.id]
        self._unlink(old.entry)
        self.live[entry.id] = Slot(entry, old.key, number)
        for ref in entry.refs:
            self.referrers[ref] = self.referrers.get(ref, EMPTY_MAP).set(entry.id, None)

    def set_key(self, entry_id: str, key: float, number: int, *, touch: bool = True) -> None:
        """Give ``entry_id`` a new order key; ``touch`` records the change as
        made at ``number`` (a renumbering alone is not a change to the entry)."""
        old: Slot = self.live[entry_id]
        self.live[entry_id] = Slot(old.entry, key, number if touch else old.changed)
        if key >= self.next_key:
            self.next_key = float(int(key) + 1)

    def remove(self, tomb: Tombstone) -> None:
        slot: Slot = self.live[tomb.id]
        self._unlink(slot.entry)
        del self.live[tomb.id]
        if tomb.id in self.marks:
            del self.marks[tomb.id]
        self.tombs = self.tombs.add(tomb)

    def finish(self, number: int) -> Version:
        return Version(
            number,
            self.live.finish(),
            self.marks.finish(),
            self.tombs,
            self.referrers.finish(),
            self.next_key,
        )
