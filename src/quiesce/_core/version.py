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

Iterating a version builds its ordered view once, at first use, and caches
the tuple of entries (and the parallel tuple of order keys) on the version (a
version is immutable, so the cache never goes stale): iteration is then as
cheap as iterating a tuple. The view is built *incrementally* when it can be
(issue 13): a version made by an append, a mark or removals records its
parent and the change (:meth:`Version.derive`), and its view is the nearest
cached ancestor's view with those changes applied — a tuple concatenation
(C-level, ~1 ns per entry) for appends, one filtering pass for removals —
instead of an O(n log n) sort. Chains are bounded (:data:`MAX_CHAIN`
versions; a longer one, or a change that reorders, sorts again), and a
version drops its parent link once its view is built, so old versions are
never kept alive for long by their children.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, NamedTuple

from immutables import Map

from .entry import Entry
from .records import Mark, Tombstone

__all__ = ["EMPTY_MAP", "MAX_CHAIN", "PATCH_MAX", "Slot", "Tombs", "Version"]

#: Longest chain of uncached versions a view is derived through; a longer
#: one sorts (and bounds the old versions a child keeps alive).
MAX_CHAIN = 64

#: ``Version._delta`` kinds: the order is the parent's (marks), plus one
#: entry at the end (an append), minus some ids (removals), or a small
#: patch: slots taken out by their old keys, slots put in at their new keys
#: (moves, summaries, rewrites, a few removals).
SAME, ADD, REMOVE, PATCH = 0, 1, 2, 3

#: Most slots a PATCH delta moves (each is one C-level memmove of the view);
#: a bigger change sorts, or filters for removals only.
PATCH_MAX = 32

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

    __slots__ = (
        "_base",
        "_delta",
        "_depth",
        "_entries",
        "_keys",
        "live",
        "marks",
        "next_key",
        "number",
        "referrers",
        "tombs",
    )

    number: int
    live: Map[str, Slot]
    marks: Map[str, Mark]
    tombs: Tombs
    referrers: Map[str, Map[str, None]]
    next_key: float
    _entries: tuple[Entry, ...] | None
    _keys: tuple[float, ...] | None
    _base: Version | None  #: the version this one's view is derived from
    _delta: tuple[Any, ...] | None  #: (kind, payload): the change from _base
    _depth: int  #: uncached versions on the chain down to a cached one

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
        self._keys = None
        self._base = None
        self._delta = None
        self._depth = 0

    def derive(self, base: Version, kind: int, payload: Any = None) -> None:
        """Record that this (new, unpublished) version's order is ``base``'s
        changed by ``(kind, payload)``: ``SAME`` (marks only), ``ADD``
        (``payload`` = (entry, key), appended at the end), ``REMOVE``
        (``payload`` = a set of removed ids) or ``PATCH`` (``payload`` =
        (old keys taken out, ((entry, key), ...) put in)). O(1). Ignored when
        the chain would grow past :data:`MAX_CHAIN` (the view then sorts)."""
        if base._entries is not None:
            depth = 1
        else:
            depth = getattr(base, "_depth", 0) + 1
            if getattr(base, "_base", None) is None or depth > MAX_CHAIN:
                return
        self._base = base
        self._delta = (kind, payload)
        self._depth = depth

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
        new._keys = getattr(self, "_keys", None)
        new._base = None
        new._delta = None
        new._depth = 0
        if self._entries is None:
            new.derive(self, SAME)
        return new

    # -- reading --------------------------------------------------------

    def entries(self) -> tuple[Entry, ...]:
        """Live entries in window order; built once per version, then O(1).
        Building is O(n) C-level work when the version derives from a cached
        one by appends and marks, one O(n) pass per removal step, else an
        O(n log n) sort."""
        cached = self._entries
        if cached is None:
            cached = self._build()[0]
        return cached

    def keys(self) -> tuple[float, ...]:
        """The order keys of :meth:`entries`, in window order (ascending)."""
        keys = getattr(self, "_keys", None)  # a version made field by field may lack it
        if keys is None:
            keys = self._build()[1]
        return keys

    def index_of_key(self, key: float) -> int:
        """The window position of the live slot with order ``key`` (or where
        it would go). O(log n) once the view is built."""
        return bisect_left(self.keys(), key)

    def _build(self) -> tuple[tuple[Entry, ...], tuple[float, ...]]:
        built = self._derived()
        if built is None:
            slots = sorted(self.live.values(), key=_slot_key)
            built = (tuple(s.entry for s in slots), tuple(s.key for s in slots))
        # keys first: a reader that sees _entries set finds _keys set too
        self._keys = built[1]
        self._entries = built[0]
        self._base = None  # never keep an old version alive once built
        self._delta = None
        return built

    def _derived(self) -> tuple[tuple[Entry, ...], tuple[float, ...]] | None:
        """The view from the nearest cached ancestor and the changes since,
        or ``None`` (no chain: sort instead)."""
        chain: list[tuple[Any, ...]] = []
        v: Version | None = self
        while v is not None and v._entries is None:
            delta = getattr(v, "_delta", None)
            if delta is None:
                return None
            chain.append(delta)
            v = getattr(v, "_base", None)
        if v is None:
            return None
        entries, keys = v._entries, getattr(v, "_keys", None)
        if entries is None or keys is None:  # pragma: no cover - a racing build
            return None
        added_e: list[Entry] = []
        added_k: list[float] = []
        for kind, payload in reversed(chain):
            if kind == ADD:
                added_e.append(payload[0])
                added_k.append(payload[1])
            elif kind == REMOVE:
                if added_e:
                    entries, keys = entries + tuple(added_e), keys + tuple(added_k)
                    added_e, added_k = [], []
                pairs = [(e, k) for e, k in zip(entries, keys, strict=True) if e.id not in payload]
                entries = tuple(e for e, _ in pairs)
                keys = tuple(k for _, k in pairs)
            elif kind == PATCH:
                if added_e:
                    entries, keys = entries + tuple(added_e), keys + tuple(added_k)
                    added_e, added_k = [], []
                patched = _patch(entries, keys, payload)
                if patched is None:  # pragma: no cover - a key not where it should be
                    return None
                entries, keys = patched
        if added_e:
            entries, keys = entries + tuple(added_e), keys + tuple(added_k)
        return entries, keys

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


def _patch(
    entries: tuple[Entry, ...], keys: tuple[float, ...], payload: Any
) -> tuple[tuple[Entry, ...], tuple[float, ...]] | None:
    """``entries``/``keys`` with the slots at ``payload[0]``'s keys taken out
    and ``payload[1]``'s (entry, key) pairs put in at their keys' places.
    O(n) C-level copying plus O(log n) per slot; ``None`` if an old key is
    not in the view (never, for a payload a Draft made)."""
    out_keys, put = payload
    es, ks = list(entries), list(keys)
    for k in out_keys:
        i = bisect_left(ks, k)
        if i == len(ks) or ks[i] != k:
            return None
        del es[i]
        del ks[i]
    for e, k in put:
        i = bisect_left(ks, k)
        es.insert(i, e)
        ks.insert(i, k)
    return tuple(es), tuple(ks)


def _slot_key(slot: Slot) -> float:
    return slot.key
