"""Immutable versions of a buffer, on persistent maps.

A :class:`Version` is never mutated once published. Publishing a change makes
a new ``Version`` that shares every unchanged map with its parent
(``immutables.Map``, the HAMT behind ``contextvars``), so a change costs
O(log n) — one or a few ``Map.set`` calls — never a copy.

Layout, chosen so that the hottest write (a mark) touches the fewest maps:

* ``live``: id → :class:`Slot` (entry, order key, version it last changed).
  Window order is the order of the slots' keys (floats: appends take
  ``next_key``; a move or a summary takes the midpoint of its neighbours, and
  the keys are renumbered in the rare case the gap is exhausted).
* ``marks``: id → :class:`Mark`, for live entries only.
* ``tombs``: the :class:`Tombs` of this version (by id, by content hash, by key).
* ``referrers``: target id → Map of live ids that cite it; makes "is this
  entry cited by a survivor?" O(referrers) instead of O(n).

Iterating a version sorts the live slots once, at first use, and caches the
tuple of entries on the version (a version is immutable, so the cache never
goes stale): iteration is then as cheap as iterating a tuple.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from immutables import Map

from .entry import Entry
from .records import Mark, Tombstone

__all__ = ["EMPTY_MAP", "Slot", "Tombs", "Version"]

EMPTY_MAP: Map[str, None] = Map()


class Slot(NamedTuple):
    """A live entry in a version: the entry, its order key, its last change."""

    entry: Entry
    key: float
    changed: int


class Tombs(NamedTuple):
    """A version's tombstones and the indexes re-admission checks use."""

    by_id: Map[str, Tombstone]
    by_hash: Map[str, Tombstone]
    by_key: Map[str, Tombstone]

    def add(self, tomb: Tombstone) -> Tombs:
        by_key = self.by_key if tomb.key is None else self.by_key.set(tomb.key, tomb)
        return Tombs(
            self.by_id.set(tomb.id, tomb), self.by_hash.set(tomb.content_hash, tomb), by_key
        )

    def matching(self, content_hash: str, key: str | None) -> Tombstone | None:
        """The tombstone whose content hash or key matches, if any. O(log n)."""
        tomb = self.by_hash.get(content_hash)
        if tomb is None and key is not None:
            tomb = self.by_key.get(key)
        return tomb


EMPTY_TOMBS = Tombs(Map(), Map(), Map())


class Version:
    """One published, immutable state of a buffer. See the module docstring."""

    __slots__ = ("_entries", "live", "marks", "next_key", "number", "referrers", "tombs")

    number: int
    live: Map[str, Slot]
    marks: Map[str, Mark]
    tombs: Tombs
    referrers: Map[str, Map[str, None]]
    next_key: float
    _entries: tuple[Entry, ...] | None

    def __init__(
        self,
        number: int,
        live: Map[str, Slot],
        marks: Map[str, Mark],
        tombs: Tombs,
        referrers: Map[str, Map[str, None]],
        next_key: float,
    ) -> None:
        self.number = number
        self.live = live
        self.marks = marks
        self.tombs = tombs
        self.referrers = referrers
        self.next_key = next_key
        self._entries = None

    @classmethod
    def empty(cls) -> Version:
        return cls(0, Map(), Map(), EMPTY_TOMBS, Map(), 0.0)

    def with_marks(self, number: int, marks: Map[str, Mark]) -> Version:
        """The mark fast path's constructor: only ``marks`` changes. O(1)."""
        new = Version.__new__(Version)
        new.number = number
        new.live = self.live
        new.marks = marks
        new.tombs = self.tombs
        new.referrers = self.referrers
        new.next_key = self.next_key
        # Marks do not change order or content: the entries tuple is shared.
        new._entries = self._entries
        return new

    # -- reading --------------------------------------------------------

    def entries(self) -> tuple[Entry, ...]:
        """Live entries in window order; O(n log n) once per version, then O(1)."""
        cached = self._entries
        if cached is None:
            slots = sorted(self.live.values(), key=_slot_key)
            cached = self._entries = tuple(s.entry for s in slots)
        return cached

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self.live)

    def ordered_ids(self) -> list[str]:
        """Live ids in window order (a fresh list the caller may edit)."""
        return [e.id for e in self.entries()]

    def cited_by(self, target: str) -> Map[str, None]:
        """Live ids citing ``target``. O(log n)."""
        return self.referrers.get(target, EMPTY_MAP)

    def __repr__(self) -> str:
        return (
            f"<Version {self.number}: {len(self.live)} live, {len(self.marks)} marked, "
            f"{len(self.tombs.by_id)} tombstones>"
        )


def _slot_key(slot: Slot) -> float:
    return slot.key
