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
* ``marks``: id → :class:`Mark`, for live entries only. A version published
  by the mark fast path leaves it unset: it holds its place in a run of
  marks (:class:`MarkSeg`) and builds the map on first read (see
  :meth:`Version.__getattr__` and "Runs of marks" below).
* ``tombs``: the :class:`~.tombs.Tombs` of this version: a prefix of the
  buffer's compact, append-only tombstone store (by id, content hash, key).
* ``referrers``: target id → Map of live ids that cite it; makes "is this
  entry cited by a survivor?" O(referrers) instead of O(n).

Each version's ordered view (:class:`View`) is built once, at first use, and
cached (a version is immutable, so the cache never goes stale): the live
entries in window order in chunks of about :data:`CHUNK`, with their keys and
each chunk's last key, so a position is found by bisection, O(log n). The
view is built *incrementally* when it can be (issue 13): a version made by an
append, a mark, removals or a small edit records its parent and the change
(:meth:`Version.derive`), and its view is the nearest cached ancestor's with
those changes applied — copying only the chunks they touch and the chunk
index, O(n / CHUNK + CHUNK) per entry placed — instead of an O(n log n)
sort. :meth:`Version.entries` concatenates the chunks into one flat tuple
on first use (C-level, but a reference taken per entry: about as costly as
one pass over them); iterating a snapshot chains the chunks instead when
that tuple is not built yet (:meth:`Version.iter_entries`), so the first
iteration after a write is one pass, not a copy and a pass. Chains are
bounded (:data:`MAX_CHAIN` versions; a longer one, or a change that
reorders wholesale, sorts again), and a
version drops its parent link once its view is built, so old versions are
never kept alive for long by their children.

Runs of marks (issue 24). ``mark_stale`` does no persistent-map work: the
mark is appended to the head's :class:`MarkSeg`, a segment of at most
:data:`SEG` marks of a run (consecutive marks with no other write between
them), and the new version records the segment and how many of its marks it
holds. A segment's ``start`` map (the marks before its first mark) is built
once, from the segment before it, when first needed, and a version's map
from its segment's ``start`` or the highest prefix of the segment built so
far: reading any version costs at most :data:`SEG` sets (one mutation) plus,
once per segment, the :data:`SEG` sets that build a start no read had built
yet. So reading versions of a run of ``R`` marks in *any* order costs at
most ``R + SEG * reads`` sets in all (eager maps: ``R`` persistent sets on
the write path), never ``R`` per read. Segments are chained backwards only
until their start is built; a built segment is dropped with the last
version that refers to it, so memory is the live versions' segments (their
marks and at most two maps each, structure-shared with every other version)
plus the marks of an unread chain.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Set
from itertools import chain
from typing import TYPE_CHECKING, Any, NamedTuple

from immutables import Map

from .entry import Entry
from .records import Mark
from .tombs import EMPTY_TOMBS, Tombs

__all__ = [
    "CHUNK",
    "EMPTY_MAP",
    "EMPTY_TOMBS",
    "MAX_CHAIN",
    "PATCH_MAX",
    "REPLACE",
    "SEG",
    "MarkSeg",
    "Slot",
    "Tombs",
    "Version",
    "View",
]

#: Longest chain of uncached versions a view is derived through; a longer
#: one sorts (and bounds the old versions a child keeps alive).
MAX_CHAIN = 64

#: ``Version._delta`` kinds: the order is the parent's (marks), plus one
#: entry at the end (an append), minus some ids (removals), or a small
#: patch: slots taken out by their old keys, slots put in at their new keys
#: (moves, summaries, rewrites, a few removals), or entries replaced in
#: place at their keys (a stream's writes, :mod:`.stream`: ``payload`` is a
#: dict key -> entry; consecutive writes fold into one such delta, so a run
#: of writes never lengthens the chain).
SAME, ADD, REMOVE, PATCH, REPLACE = 0, 1, 2, 3, 4

#: Entries per chunk of a version's ordered view (a chunk grows to twice
#: this before it splits).
CHUNK = 512

#: Most slots a PATCH delta moves (each is one C-level memmove of the view);
#: a bigger change sorts, or filters for removals only.
PATCH_MAX = 32

EMPTY_MAP: Map[str, None] = Map()

#: Marks per :class:`MarkSeg`: the most sets (one mutation) that building a
#: version's marks map costs beyond building its segment's start once.
SEG = 32


class MarkSeg:
    """A segment of a run of marks published one by one by the mark fast
    path. Version ``k`` of the segment (``Version._mk == k``) holds
    ``start`` with ``marks[:k]`` set.

    Invariants: ``marks`` is append-only, at most :data:`SEG` long, its ids
    distinct and not in ``start``, and only the segment's last version
    appends (under the buffer's write lock), so a reader of any version
    reads a fixed prefix while the head appends (no lock). ``start`` is the
    marks map before the first mark, or ``None`` until built; then ``prev``
    is the segment before (full, :data:`SEG` marks), and ``start`` is
    ``prev``'s start with all its marks set. ``start`` is set before
    ``prev`` is cleared, so ``start is None and prev is None`` never holds.
    ``built`` is ``(k, start + marks[:k])`` for the highest ``k`` built so
    far (``(0, None)`` while ``start`` is unbuilt); each store is one
    atomic assignment of a correct value, so racing builders (worker
    threads read pinned versions) can only both be right. Every build is a
    pure function of immutable maps and a fixed prefix of ``marks``: two
    threads building the same version get equal maps."""

    __slots__ = ("built", "marks", "prev", "start")

    def __init__(self, start: Map[str, Mark] | None, prev: MarkSeg | None) -> None:
        self.start = start
        self.prev = prev
        self.marks: list[Mark] = []
        self.built: tuple[int, Map[str, Mark] | None] = (0, start)

    def prefix(self, k: int) -> Map[str, Mark]:
        """``start`` with ``marks[:k]`` set: at most :data:`SEG` sets (from
        the highest built prefix at or below ``k``, else from ``start``),
        plus :meth:`start_map`'s once-per-segment cost. Cached in ``built``
        when ``k`` is the highest so far."""
        bk, m = self.built
        if bk > k or m is None:
            bk, m = 0, self.start_map()
        if bk == k:
            return m
        m = _apply(m, self.marks[bk:k])
        if k > self.built[0]:
            self.built = (k, m)  # one store: a racing reader sees old or new
        return m

    def start_map(self) -> Map[str, Mark]:
        """``start``, built if need be: walks back to the nearest segment
        whose start is built, then builds each start after it in turn from
        its predecessor's full prefix (at most :data:`SEG` sets each, none
        if a read built that prefix), storing it and dropping the link back.
        A segment's start is built at most once (twice if two threads race),
        so over any reads the walks cost O(segments) and the sets at most
        the run's length."""
        m = self.start
        if m is not None:
            return m
        chain: list[MarkSeg] = []
        s = self
        while True:
            m = s.start
            if m is not None:
                break
            p = s.prev
            if p is None:  # built by another thread since: start is set
                m = s.start
                assert m is not None
                break
            chain.append(s)
            s = p
        for t in reversed(chain):  # t.prev is s
            m = s.prefix(list.__len__(s.marks))
            t.start = m  # start first, then the link: see the invariants
            t.prev = None
            s = t
        return m


def _apply(m: Map[str, Mark], marks: list[Mark]) -> Map[str, Mark]:
    """``m`` with ``marks`` set: one ``set`` for one mark, else one mutation
    (cheaper per set than separate ``set`` calls). O(len(marks) log n)."""
    if list.__len__(marks) == 1:
        mark = marks[0]
        return m.set(mark.id, mark)
    mut = m.mutate()
    for mark in marks:
        mut[mark.id] = mark
    return mut.finish()


def next_seg(head: Version) -> MarkSeg:
    """The segment a mark made on ``head`` joins when it cannot join
    ``head``'s own (the mark fast path's check: ``head`` in no run, not its
    segment's last version, or its segment full): a new segment chained to a
    full one ``head`` ends, else a new run based on ``head``'s marks (read,
    so built if ``head`` is a run's version). O(1) but for that read."""
    seg = head._mseg
    if seg is not None and head._mk == list.__len__(seg.marks) == SEG:
        return MarkSeg(None, seg)
    return MarkSeg(head.marks, None)


class Slot(NamedTuple):
    """A live entry in a version: the entry, its order key, its last change."""

    entry: Entry
    key: float
    changed: int


class Version:
    """One published, immutable state of a buffer. See the module docstring."""

    __slots__ = (
        "_base",
        "_delta",
        "_depth",
        "_entries",
        "_mk",
        "_mseg",
        "_view",
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
    _entries: tuple[Entry, ...] | None  #: the flat view, built from _view on demand
    _view: View | None  #: the chunked ordered view
    _base: Version | None  #: the version this one's view is derived from
    _delta: tuple[Any, ...] | None  #: (kind, payload): the change from _base
    _depth: int  #: uncached versions on the chain down to a cached one
    _mseg: MarkSeg | None  #: the run segment this version's marks end in
    _mk: int  #: how many of _mseg's marks this version holds (set with _mseg)

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
        self._view = None
        self._base = None
        self._delta = None
        self._depth = 0
        self._mseg = None

    if not TYPE_CHECKING:  # (so mypy still checks every other attribute)

        def __getattr__(self, name: str) -> Any:
            """Called only for a slot left unset. ``marks`` of a version of a
            run of marks (:class:`MarkSeg`): built on first read,
            ``self._mseg.prefix(self._mk)``, and stored in the slot, so every
            later read is a plain slot read (the pin and read paths pay
            nothing for the laziness). ``_mseg`` of a version made without
            one is ``None`` (in no run)."""
            if name == "marks":
                seg = self._mseg
                if seg is not None:
                    marks = seg.prefix(self._mk)
                    self.marks = marks  # one store: racing builders agree
                    return marks
            elif name == "_mseg":
                return None
            raise AttributeError(name)

    def derive(self, base: Version, kind: int, payload: Any = None) -> None:
        """Record that this (new, unpublished) version's order is ``base``'s
        changed by ``(kind, payload)``: ``SAME`` (marks only), ``REPLACE``
        (``payload`` = {key: entry}, entries replaced in place), ``ADD``
        (``payload`` = (entry, key), appended at the end), ``REMOVE``
        (``payload`` = a set of removed ids) or ``PATCH`` (``payload`` =
        (old keys taken out, ((entry, key), ...) put in)). O(1). Ignored when
        the chain would grow past :data:`MAX_CHAIN` (the view then sorts)."""
        if getattr(base, "_view", None) is not None:
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
        # Marks do not change order or content: the views are shared.
        new._entries = self._entries
        new._view = view = getattr(self, "_view", None)
        new._base = None
        new._delta = None
        new._depth = 0
        new._mseg = None
        if view is None:
            new.derive(self, SAME)
        return new

    # -- reading --------------------------------------------------------

    def entries(self) -> tuple[Entry, ...]:
        """Live entries in window order, as one tuple; built once per version
        (O(n) C-level copying of the chunked view), then O(1)."""
        cached = self._entries
        if cached is None:
            chunks = self.view().entries
            cached = chunks[0] if len(chunks) == 1 else tuple(chain.from_iterable(chunks))
            self._entries = cached
        return cached

    def iter_entries(self) -> Iterator[Entry]:
        """An iterator over the live entries in window order: over the flat
        tuple of :meth:`entries` if it is built, else over the view's chunks
        chained, without building it (the view is immutable, so the two
        yield the same entries). O(1) to start once the view is built,
        O(1) per entry."""
        cached = self._entries
        if cached is not None:
            return iter(cached)
        chunks = self.view().entries
        return iter(chunks[0]) if len(chunks) == 1 else chain.from_iterable(chunks)

    def keys(self) -> tuple[float, ...]:
        """The order keys of :meth:`entries`, in window order (ascending)."""
        return tuple(chain.from_iterable(self.view().keys))

    def view(self) -> View:
        """The chunked ordered view: built once per version, derived from the
        nearest cached ancestor's when it can be (see the module docstring),
        else sorted. Deriving costs O(n / CHUNK + CHUNK) per appended, moved
        or patched entry, one O(n) pass per removal step."""
        view = getattr(self, "_view", None)
        if view is None:
            view = self._derived()
            if view is None:
                slots = sorted(self.live.values(), key=_slot_key)
                view = _chunked([s.entry for s in slots], [s.key for s in slots])
            self._view = view
            self._base = None  # never keep an old version alive once built
            self._delta = None
        return view

    def key_before(self, hi: float, skip: Set[str]) -> float | None:
        """The greatest order key below ``hi`` of a live entry whose id is not
        in ``skip``, or ``None``. O(log n + the skipped entries it passes)."""
        view = self.view()
        maxes, ekeys, ents = view.maxes, view.keys, view.entries
        c = bisect_left(maxes, hi)
        if c == len(maxes):
            c -= 1
            i = len(ekeys[c]) - 1 if c >= 0 else -1
        else:
            i = bisect_left(ekeys[c], hi) - 1
        while c >= 0:
            chunk = ents[c]
            while i >= 0:
                if chunk[i].id not in skip:
                    return ekeys[c][i]
                i -= 1
            c -= 1
            if c >= 0:
                i = len(ekeys[c]) - 1
        return None

    def _derived(self) -> View | None:
        """The view from the nearest cached ancestor and the changes since,
        or ``None`` (no chain: sort instead)."""
        deltas: list[tuple[Any, ...]] = []
        v: Version | None = self
        while v is not None and getattr(v, "_view", None) is None:
            delta = getattr(v, "_delta", None)
            if delta is None:
                return None
            deltas.append(delta)
            v = getattr(v, "_base", None)
        if v is None:
            return None
        base = v._view
        if base is None:  # pragma: no cover - a racing build
            return None
        work = _Work(base)
        for kind, payload in reversed(deltas):
            if kind == ADD:
                work.put(payload[0], payload[1])
            elif kind == REMOVE:
                work.remove_ids(payload)
            elif kind == REPLACE:
                for k, e in payload.items():
                    if not work.replace(k, e):  # pragma: no cover - keys of live slots
                        return None
            elif kind == PATCH:
                out_keys, put = payload
                for k in out_keys:
                    if not work.take(k):  # pragma: no cover - never, for a Draft's payload
                        return None
                for e, k in put:
                    work.put(e, k)
        return work.freeze()

    def __iter__(self) -> Iterator[Entry]:
        return self.iter_entries()

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


class View(NamedTuple):
    """A version's window order in chunks of about :data:`CHUNK` entries:
    ``entries[c]`` and ``keys[c]`` are the c-th chunk's entries and their
    (ascending) order keys; ``maxes[c]`` is its last key. A change copies the
    chunks it touches and the chunk index, never the whole window."""

    entries: tuple[tuple[Entry, ...], ...]
    keys: tuple[tuple[float, ...], ...]
    maxes: tuple[float, ...]


def _chunked(entries: list[Entry], keys: list[float]) -> View:
    es = tuple(tuple(entries[i : i + CHUNK]) for i in range(0, len(entries), CHUNK))
    ks = tuple(tuple(keys[i : i + CHUNK]) for i in range(0, len(keys), CHUNK))
    return View(es, ks, tuple(k[-1] for k in ks))


class _Work:
    """A view being changed: chunk lists copied on first touch."""

    __slots__ = ("entries", "keys", "maxes", "touched")

    def __init__(self, view: View) -> None:
        self.entries: list[Any] = list(view.entries)
        self.keys: list[Any] = list(view.keys)
        self.maxes: list[float] = list(view.maxes)
        self.touched: set[int] = set()

    def _own(self, c: int) -> None:
        if c not in self.touched:
            self.entries[c] = list(self.entries[c])
            self.keys[c] = list(self.keys[c])
            self.touched.add(c)

    def put(self, entry: Entry, key: float) -> None:
        maxes = self.maxes
        if not maxes:
            self.entries.append([entry])
            self.keys.append([key])
            maxes.append(key)
            self.touched = {0}
            return
        c = bisect_left(maxes, key)
        if c == len(maxes):
            c -= 1
        self._own(c)
        ks = self.keys[c]
        i = bisect_left(ks, key)
        ks.insert(i, key)
        self.entries[c].insert(i, entry)
        maxes[c] = ks[-1]
        if len(ks) > 2 * CHUNK:  # split, keeping every chunk near CHUNK
            self.touched = {t + (t > c) for t in self.touched} | {c + 1}
            self.entries[c + 1 : c + 1] = [self.entries[c][CHUNK:]]
            self.keys[c + 1 : c + 1] = [ks[CHUNK:]]
            del self.entries[c][CHUNK:]
            del ks[CHUNK:]
            maxes[c : c + 1] = [ks[-1], self.keys[c + 1][-1]]

    def _owned_slot(self, key: float) -> tuple[int, int] | None:
        """(chunk, index) of the entry at ``key``, its chunk made this
        view's own, or ``None`` if no entry has that key. O(log n), plus one
        chunk copy on its first touch."""
        c = bisect_left(self.maxes, key)
        if c == len(self.maxes):
            return None
        i = bisect_left(self.keys[c], key)
        if i == len(self.keys[c]) or self.keys[c][i] != key:
            return None
        self._own(c)
        return c, i

    def replace(self, key: float, entry: Entry) -> bool:
        """Put ``entry`` in the place of the entry at ``key``. O(log n), plus
        one chunk copy on its first touch."""
        found = self._owned_slot(key)
        if found is None:
            return False
        c, i = found
        self.entries[c][i] = entry
        return True

    def take(self, key: float) -> bool:
        """Drop the entry at ``key`` (a chunk left empty goes). O(log n +
        CHUNK), plus one chunk copy on its first touch."""
        found = self._owned_slot(key)
        if found is None:
            return False
        c, i = found
        maxes = self.maxes
        del self.keys[c][i]
        del self.entries[c][i]
        if self.keys[c]:
            maxes[c] = self.keys[c][-1]
        else:
            del self.keys[c], self.entries[c], maxes[c]
            self.touched = {t - (t > c) for t in self.touched if t != c}
        return True

    def remove_ids(self, ids: Set[str]) -> None:
        es: list[Entry] = []
        ks: list[float] = []
        for ce, ck in zip(self.entries, self.keys, strict=True):
            for e, k in zip(ce, ck, strict=True):
                if e.id not in ids:
                    es.append(e)
                    ks.append(k)
        view = _chunked(es, ks)
        self.entries, self.keys, self.maxes = list(view.entries), list(view.keys), list(view.maxes)
        self.touched = set()

    def freeze(self) -> View:
        return View(
            tuple(tuple(e) if i in self.touched else e for i, e in enumerate(self.entries)),
            tuple(tuple(k) if i in self.touched else k for i, k in enumerate(self.keys)),
            tuple(self.maxes),
        )


def _slot_key(slot: Slot) -> float:
    return slot.key
