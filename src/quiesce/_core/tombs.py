"""Tombstones: one compact, append-only store shared by every version of a buffer.

What it keeps true (issue 13): tombstones stay forever, and every version
sees exactly the tombstones written up to it, but memory holds *no Python
object per tombstone*. A buffer's tombstones live in one
:class:`TombStore`: packed columns (``bytearray`` and ``array``) in the
order they were written, and three open-addressing hash indexes over them
(id, content hash, key) whose slots are 4 bytes: a position and an 8-bit tag.
A version's :class:`Tombs` is ``(store, count)``: its tombstones are the
first ``count`` of the store. Tombstones are only ever added, and versions
of one buffer form one line, so a version's set is a prefix; publishing a
new tombstone appends to the store and makes a new ``(store, count + 1)``,
O(1) amortized, never a copy.

About 50 bytes per tombstone for the columns (the id, a 16-hex-digit
content hash packed to 8 bytes, interned reason and actor, turn, version,
kind) plus 12-24 bytes of index slots (id and content hash; keys only for
tombstones with a key). With a durable sink the columns of tombstones whose
records are durable leave memory (:meth:`TombStore.spill`) and only the
index slots stay; a spilled tombstone is read back from its log record. The
garbage collector sees a handful of objects whatever the count (a full
collection does not grow with history).

"Deleted" and "never existed" stay distinguishable: ``id in tombs`` is
exact. A :class:`~.records.Tombstone` is built on each read (an equal, new
object each time; nothing relies on identity).

Threads: the store is changed only under the owning buffer's write lock.
Readers never lock: a column is only appended to (or cut above every
published count, below), an index slot is one array store, and a grown
index (or the columns after a spill) is built aside and swapped in by one
attribute store, so a reader sees the old object or the new, each holding
every published tombstone. Every match is verified against the stored data and the
reader's ``count``, so a stale slot is never a wrong answer.

A draft that is dropped after adding tombstones (a refused edit) leaves
them past the head's count; the next ``add`` from the head cuts them off
(:meth:`TombStore.truncate`) before appending, so a store only ever holds
one line of history past the head.
"""

from __future__ import annotations

import base64
import itertools
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from .entry import Kind
from .errors import LogFormatError, QuiesceError
from .log import materialize
from .records import Tombstone

__all__ = ["EMPTY_TOMBS", "TombStore", "Tombs"]

_KINDS: tuple[Kind, ...] = tuple(Kind)
_KIND_CODE: dict[Kind, int] = {k: i for i, k in enumerate(_KINDS)}
_KIND_BY_VALUE: dict[str, Kind] = {k.value: k for k in _KINDS}
_NO_KIND = 255
#: turn / version ``None`` in their int64 columns
_NONE = -(1 << 63)
#: smallest index size (slots); an index grows when 2/3 full
_MIN_SLOTS = 16
#: fewest tombstones a spill drops (so its O(kept) copy is amortized O(1))
SPILL_LEAST = 1024


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _dec(b: bytes | bytearray) -> str:
    return b.decode("utf-8", "surrogatepass")


_crc32 = zlib.crc32


def _shash(s: str) -> int:
    """A hash of ``s`` that every process computes alike (``hash()`` of a
    str is salted per process), so an index can be written into a
    checkpoint and used by the process that recovers from it: 64 bits, the
    CRC-32 of its UTF-8 bytes (low: the slot) and of those bytes reversed
    (high: the tag). About 0.2 µs."""
    b = s.encode("utf-8", "surrogatepass")
    return _crc32(b) | (_crc32(b[::-1]) << 32)


def _chash(h: str) -> int:
    """The stable hash of a content hash: a string of 16 hex digits
    (what ``Entry.content_hash`` is) is already a hash, its value is used;
    any other string goes through :func:`_shash`."""
    if len(h) == 16:
        try:
            return int(h, 16)
        except ValueError:
            pass
    return _shash(h)


def _packed_hash(h: str) -> bytes | None:
    """The 8 bytes of a 16-lowercase-hex-digit content hash, or ``None`` for
    any other string (stored as is, in the store's ``odd`` map)."""
    if len(h) == 16:
        try:
            b = bytes.fromhex(h)
        except ValueError:
            return None
        if b.hex() == h:
            return b
    return None


def _shift_for(n: int) -> int:
    """The position bits of an index built over ``n`` tombstones: room for
    twice as many (an index is rebuilt when a position passes its limit),
    at least 16; past 24, 8-byte slots (32)."""
    bits = max(16, (2 * n + 2).bit_length())
    return bits if bits <= 24 else 32


class _Index:
    """An open-addressing multimap from a string's stable hash (:func:`_shash`,
    :func:`_chash`: the same in every process) to store
    positions. A slot is one int: ``position + 1`` in its low ``shift`` bits
    (16-24 in 4-byte slots, enough for twice the store's size when the index
    was built; 32 in 8-byte slots once a store passes 2**23 tombstones) and
    the hash's top bits in the rest as a tag (8-16 bits; 32), so a slot is
    written by one store and a lookup reads a tombstone back (verifies it)
    for about one in 2**tag slots it passes. 0 is an empty slot. Linear
    probing; never deletes (a stale slot is skipped by verification). Load
    at most 2/3."""

    __slots__ = ("limit", "mask", "shift", "slots", "tag_shift", "used")

    def __init__(self, size: int, shift: int) -> None:
        assert 16 <= shift <= 24 or shift == 32
        self.shift = shift
        wide = shift == 32
        self.slots = array("Q" if wide else "I", bytes((8 if wide else 4) * size))
        self.tag_shift = 64 - (64 if wide else 32) + shift  #: h >> tag_shift is the tag
        self.limit = (1 << shift) - 1  #: the largest position + 1 a slot holds
        self.mask = size - 1
        self.used = 0

    def full(self) -> bool:
        return 3 * (self.used + 1) > 2 * (self.mask + 1)

    def dump(self) -> list[Any]:
        """``[slots, shift, used, base64 of the slots, little-endian]``: what
        a checkpoint keeps of this index (its hashes are stable, so it holds
        in any process). O(slots), at C speed."""
        slots = self.slots
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            slots = array(slots.typecode, slots)
            slots.byteswap()
        raw = base64.b64encode(slots.tobytes()).decode("ascii")
        return [self.mask + 1, self.shift, self.used, raw]

    @classmethod
    def load(cls, d: object, n: int) -> _Index:
        """The index :meth:`dump` wrote, checked against its own counts and
        (its positions must reach) ``n``; :class:`LogFormatError` otherwise.
        O(slots), at C speed."""
        if not (type(d) is list and len(d) == 4):
            raise LogFormatError("a checkpoint's tombstone index is not [size, shift, used, slots]")
        size, shift, used, raw = d
        if not (
            type(size) is int
            and size >= _MIN_SLOTS
            and size & (size - 1) == 0
            and type(shift) is int
            and (16 <= shift <= 24 or shift == 32)
            and type(used) is int
            and used >= 0
            and 3 * used <= 2 * size
            and type(raw) is str
        ):
            raise LogFormatError("a checkpoint's tombstone index has a malformed header")
        index = cls(_MIN_SLOTS, shift)
        if n > index.limit:
            raise LogFormatError("a checkpoint's tombstone index is too narrow for its tombstones")
        try:
            data = base64.b64decode(raw.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError) as exc:
            raise LogFormatError(f"a checkpoint's tombstone index is not base64: {exc}") from exc
        slots = array(index.slots.typecode)
        if len(data) != size * slots.itemsize:
            raise LogFormatError("a checkpoint's tombstone index has the wrong length")
        slots.frombytes(data)
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            slots.byteswap()
        index.slots = slots
        index.mask = size - 1
        index.used = used
        return index

    def put(self, h: int, pos: int) -> None:
        mask = self.mask
        slots = self.slots
        i = h & mask
        while slots[i]:
            i = (i + 1) & mask
        slots[i] = ((h >> self.tag_shift) << self.shift) | (pos + 1)
        self.used += 1

    def candidates(self, h: int, count: int) -> Iterator[int]:
        """Positions below ``count`` whose slot tag matches ``h`` (verify them)."""
        mask = self.mask
        slots = self.slots
        shift = self.shift
        low = self.limit
        tag = h >> self.tag_shift
        i = h & mask
        while True:
            v = slots[i]
            if not v:
                return
            p = v & low
            if p <= count and v >> shift == tag:
                yield p - 1
            i = (i + 1) & mask


class _Cols:
    """The packed columns of positions ``base`` .. ``base + len - 1``
    (``id_end`` / ``key_end`` are offsets into this object's blobs;
    ``key_pos`` holds absolute positions)."""

    __slots__ = (
        "actor",
        "base",
        "hash8",
        "id_blob",
        "id_end",
        "key_blob",
        "key_end",
        "key_pos",
        "kind",
        "odd",
        "reason",
        "turn",
        "version",
    )

    def __init__(self, base: int) -> None:
        self.base = base
        self.id_blob = bytearray()
        self.id_end = array("q")
        self.hash8 = bytearray()
        self.odd: dict[int, str] = {}  # position -> a content hash that is not 16 hex digits
        self.reason = array("I")
        self.actor = array("I")
        self.turn = array("q")
        self.version = array("q")
        self.kind = bytearray()
        self.key_pos = array("q")  # positions holding a key (ascending)
        self.key_end = array("q")
        self.key_blob = bytearray()


class TombStore:
    """Every tombstone a buffer wrote, in writing order. See the module
    docstring. Positions are 0-based; ``n`` tombstones are written.

    Spilling (durable sinks): the buffer tells the store which log record
    holds each run of tombstones (:meth:`locate`: a ``remove`` record, in
    the order of its ``detail["tombstones"]``); once those records are
    durable, :meth:`spill` drops the columns of that prefix from memory and
    keeps only the index slots (about 10-17 bytes per tombstone). A spilled
    tombstone is read back from its record (``records.read``) and checked:
    a missing or wrong record raises :class:`LogFormatError`, never another
    tombstone."""

    __slots__ = (
        "_by_hash",
        "_by_id",
        "_by_key",
        "_cache",
        "_cols",
        "_located",
        "_records",
        "_seg_seq",
        "_seg_start",
        "_str_ix",
        "_strs",
        "n",
    )

    def __init__(self) -> None:
        self.n = 0
        self._cols = _Cols(0)
        self._strs: list[str | None] = [None]  # interned reasons and actors
        self._str_ix: dict[str | None, int] = {None: 0}
        self._by_id = _Index(_MIN_SLOTS, 16)
        self._by_hash = _Index(_MIN_SLOTS, 16)
        self._by_key = _Index(_MIN_SLOTS, 16)
        # runs of positions and the log record holding each (see locate)
        self._seg_start = array("q")
        self._seg_seq = array("q")
        self._located = 0  # positions 0 .. _located - 1 are located (-1: a gap, never spill)
        self._records: Any = None  # the owner's Records (log.py), to read spilled ones back
        self._cache: tuple[int, list[Any]] = (-1, [])

    @property
    def held(self) -> int:
        """Tombstones whose columns are in memory (the rest are spilled)."""
        return self.n - self._cols.base

    # -- columns --------------------------------------------------------------

    def id_at(self, p: int) -> str:
        c = self._cols
        q = p - c.base
        if q < 0:
            return self._raw(p)["id"]  # type: ignore[no-any-return]
        end = c.id_end
        return _dec(c.id_blob[(end[q - 1] if q else 0) : end[q]])

    def hash_at(self, p: int) -> str:
        c = self._cols
        q = p - c.base
        if q < 0:
            return self._raw(p)["content_hash"]  # type: ignore[no-any-return]
        odd = c.odd
        if odd and p in odd:
            return odd[p]
        return c.hash8[8 * q : 8 * q + 8].hex()

    def key_at(self, p: int) -> str | None:
        c = self._cols
        if p < c.base:
            return self._raw(p).get("key")
        kpos = c.key_pos
        j = bisect_left(kpos, p)
        if j == len(kpos) or kpos[j] != p:
            return None
        end = c.key_end
        return _dec(c.key_blob[(end[j - 1] if j else 0) : end[j]])

    def tomb(self, p: int) -> Tombstone:
        """The tombstone at position ``p``, built (or read back). O(log keys)."""
        c = self._cols
        q = p - c.base
        if q < 0:
            return self._load(p)
        turn = c.turn[q]
        version = c.version[q]
        kind = c.kind[q]
        strs = self._strs
        return Tombstone(
            self.id_at(p),
            self.hash_at(p),
            strs[c.reason[q]],  # type: ignore[arg-type]
            None if turn == _NONE else turn,
            strs[c.actor[q]],
            None if version == _NONE else version,  # type: ignore[arg-type]
            None if kind == _NO_KIND else _KINDS[kind],
            self.key_at(p),
        )

    def _raw(self, p: int) -> dict[str, Any]:
        """The JSON-ready dict of spilled tombstone ``p``, read back from its
        record and checked (the last record read is cached, so reading in
        order reads each record once). Raises :class:`LogFormatError` if the
        record is gone, is not a removal, or does not hold it intact."""
        j = bisect_right(self._seg_start, p) - 1
        seq = self._seg_seq[j]
        cached_seq, raw = self._cache
        if cached_seq != seq:
            try:
                rec = materialize(self._records, seq)
            except QuiesceError:
                raise
            except Exception as exc:  # a closed sink, an OS error
                raise LogFormatError(
                    f"tombstone {p} is in log record {seq}, which cannot be read back: {exc!r}"
                ) from exc
            got = rec.detail.get("tombstones") if rec.op == "remove" else None
            if not isinstance(got, list):
                raise LogFormatError(
                    f"log record {seq} should hold tombstone {p}, but is a {rec.op!r} record"
                )
            raw = got
            self._cache = (seq, raw)
        i = p - self._seg_start[j]
        d = raw[i] if 0 <= i < len(raw) else None
        if (
            not isinstance(d, dict)
            or type(d.get("id")) is not str
            or type(d.get("content_hash")) is not str
            or not (d.get("key") is None or type(d.get("key")) is str)
        ):
            raise LogFormatError(f"log record {seq} does not hold tombstone {p} intact")
        return d

    def _load(self, p: int) -> Tombstone:
        """A spilled tombstone, read back (see :meth:`_raw`) and checked."""
        d = self._raw(p)
        turn, actor, version, kind = d.get("turn"), d.get("actor"), d.get("version"), d.get("kind")
        reason = d.get("reason")
        if not (
            type(reason) is str
            and (turn is None or (type(turn) is int and turn >= 0))
            and (actor is None or type(actor) is str)
            and (version is None or type(version) is int)
            and (kind is None or (type(kind) is str and kind in _KIND_BY_VALUE))
        ):
            raise LogFormatError(f"spilled tombstone {p} is malformed in its record")
        return Tombstone(
            d["id"],
            d["content_hash"],
            reason,
            turn,
            actor,
            version,  # type: ignore[arg-type]  # (None: as replay's decoder allows)
            None if kind is None else _KIND_BY_VALUE[kind],
            d.get("key"),
        )

    # -- writing (under the owner's write lock) --------------------------------

    def _intern(self, s: str | None) -> int:
        ix = self._str_ix.get(s)
        if ix is None:
            ix = len(self._strs)
            self._strs.append(s)
            self._str_ix[s] = ix
        return ix

    def append(self, t: Tombstone) -> None:
        """Write ``t`` at position ``n``. Amortized O(1) (an index that is
        2/3 full doubles: O(n), rarely)."""
        p = self.n
        if p >= 0xFFFFFFFE:  # pragma: no cover - 4e9 tombstones
            raise OverflowError("a buffer holds at most 4,294,967,294 tombstones")
        c = self._cols
        c.id_blob += _enc(t.id)
        c.id_end.append(len(c.id_blob))
        packed = _packed_hash(t.content_hash)
        if packed is None:
            c.odd[p] = t.content_hash
            packed = bytes(8)
        c.hash8 += packed
        c.reason.append(self._intern(t.reason))
        c.actor.append(self._intern(t.actor))
        c.turn.append(_NONE if t.turn is None else t.turn)
        c.version.append(_NONE if t.version is None else t.version)
        c.kind.append(_NO_KIND if t.kind is None else _KIND_CODE[t.kind])
        if t.key is not None:
            c.key_blob += _enc(t.key)
            c.key_end.append(len(c.key_blob))
            c.key_pos.append(p)
        self.n = p + 1  # the columns hold p before any index points at it
        if self._by_id.full() or self._by_hash.full() or p >= self._by_id.limit:
            self._grow(key=False)
        self._by_id.put(_shash(t.id), p)
        self._by_hash.put(_chash(t.content_hash), p)
        if t.key is not None:
            if self._by_key.full() or p >= self._by_key.limit:
                self._grow(key=True)
            self._by_key.put(_shash(t.key), p)

    def extend_empty(self, ts: list[Tombstone]) -> None:
        """Write ``ts`` into this empty store at once (recovery from a
        checkpoint): the same store as appending them one by one, built
        column by column with the indexes sized once. O(len(ts))."""
        assert self.n == 0 and not self._seg_start
        n = len(ts)
        c = self._cols
        ids = [_enc(t.id) for t in ts]
        c.id_blob = bytearray(b"".join(ids))
        c.id_end = array("q", itertools.accumulate(map(len, ids)))
        hashes = []
        for p, t in enumerate(ts):
            packed = _packed_hash(t.content_hash)
            if packed is None:
                c.odd[p] = t.content_hash
                packed = bytes(8)
            hashes.append(packed)
        c.hash8 = bytearray(b"".join(hashes))
        intern = self._intern
        c.reason = array("I", [intern(t.reason) for t in ts])
        c.actor = array("I", [intern(t.actor) for t in ts])
        c.turn = array("q", [_NONE if t.turn is None else t.turn for t in ts])
        c.version = array("q", [_NONE if t.version is None else t.version for t in ts])
        c.kind = bytearray(_NO_KIND if t.kind is None else _KIND_CODE[t.kind] for t in ts)
        keyed = [(p, t.key) for p, t in enumerate(ts) if t.key is not None]
        keys = [_enc(k) for _, k in keyed]
        c.key_pos = array("q", [p for p, _ in keyed])
        c.key_end = array("q", itertools.accumulate(map(len, keys)))
        c.key_blob = bytearray(b"".join(keys))
        self.n = n
        shift = _shift_for(n)

        def sized(count: int) -> _Index:
            size = _MIN_SLOTS
            while 3 * (count + 1) > 2 * size:
                size *= 2
            return _Index(size, shift)

        by_id, by_hash, by_key = sized(n), sized(n), sized(len(keyed))
        put_id, put_hash = by_id.put, by_hash.put
        for p, t in enumerate(ts):
            put_id(_shash(t.id), p)
            put_hash(_chash(t.content_hash), p)
        for p, k in keyed:
            by_key.put(_shash(k), p)
        self._by_id, self._by_hash, self._by_key = by_id, by_hash, by_key

    def _grow(self, *, key: bool) -> None:
        """Double the id and content-hash indexes (``key``: the key index)
        over positions ``0 .. n - 2`` (``n - 1`` is put in by the caller):
        O(n), the spilled ones read back in order, each record once. Each
        new index is built aside, then swapped in by one store (readers see
        the old one or the new, both holding every published tombstone)."""
        upto = self.n - 1
        shift = _shift_for(self.n)
        if key:
            by_key = _Index(2 * (self._by_key.mask + 1), shift)
            for p in range(upto):
                k = self.key_at(p)
                if k is not None:
                    by_key.put(_shash(k), p)
            self._by_key = by_key
            return
        by_id = _Index(2 * (self._by_id.mask + 1), shift)
        by_hash = _Index(2 * (self._by_hash.mask + 1), shift)
        for p in range(upto):
            by_id.put(_shash(self.id_at(p)), p)
            by_hash.put(_chash(self.hash_at(p)), p)
        self._by_id = by_id
        self._by_hash = by_hash

    def truncate(self, n: int) -> None:
        """Forget positions ``n`` and above (a dropped draft's tombstones;
        no published version counts them). Index slots pointing there stay,
        and are skipped (verification compares the stored data)."""
        if n >= self.n:
            return
        c = self._cols
        assert n >= c.base, "a spilled tombstone is published"
        self.n = n
        q = n - c.base
        end = c.id_end
        del c.id_blob[(end[q - 1] if q else 0) :]
        del end[q:]
        del c.hash8[8 * q :]
        for p in [p for p in c.odd if p >= n]:
            del c.odd[p]
        for col in (c.reason, c.actor, c.turn, c.version):
            del col[q:]
        del c.kind[q:]
        j = bisect_left(c.key_pos, n)
        kend = c.key_end
        del c.key_blob[(kend[j - 1] if j else 0) :]
        del kend[j:]
        del c.key_pos[j:]
        j = bisect_left(self._seg_start, n)
        del self._seg_start[j:]
        del self._seg_seq[j:]
        if self._located > n:
            self._located = n

    def locate(self, start: int, seq: int, records: Any) -> None:
        """Positions ``start`` .. ``n - 1`` are the tombstones of log record
        ``seq`` (a ``remove`` record, in its order), read back through
        ``records`` (a :class:`~.log.Records`) once spilled. Runs must come in
        order, with no gap; a gap stops spilling for good (what follows is
        kept in memory)."""
        if start >= self.n:
            return
        if self._located != start or (len(self._seg_seq) and seq <= self._seg_seq[-1]):
            self._located = -1
            return
        self._records = records
        self._seg_start.append(start)
        self._seg_seq.append(seq)
        self._located = self.n

    def spill(self, durable: int) -> int:
        """Drop from memory the columns of the located tombstones whose
        records are below seq ``durable`` (durable, readable back), if at
        least :data:`SPILL_LEAST` would go. Returns how many went. O(what stays): a new
        column object is built and swapped in (readers holding the old one
        still read it)."""
        if self._located <= 0 or self._records is None:
            return 0
        j = bisect_left(self._seg_seq, durable)
        cut = self._located if j == len(self._seg_seq) else self._seg_start[j]
        old = self._cols
        if cut - old.base < SPILL_LEAST:
            return 0
        new = _Cols(cut)
        q = cut - old.base
        lo = old.id_end[q - 1] if q else 0
        new.id_blob = old.id_blob[lo:]
        new.id_end = array("q", (e - lo for e in old.id_end[q:]))
        new.hash8 = old.hash8[8 * q :]
        new.odd = {p: h for p, h in old.odd.items() if p >= cut}
        new.reason = old.reason[q:]
        new.actor = old.actor[q:]
        new.turn = old.turn[q:]
        new.version = old.version[q:]
        new.kind = old.kind[q:]
        k = bisect_left(old.key_pos, cut)
        klo = old.key_end[k - 1] if k else 0
        new.key_pos = old.key_pos[k:]
        new.key_end = array("q", (e - klo for e in old.key_end[k:]))
        new.key_blob = old.key_blob[klo:]
        self._cols = new  # one store: a reader sees the old columns or the new
        return cut - old.base

    # -- checkpoints ------------------------------------------------------------

    def export(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of this store when every tombstone is
        located in a log record (else ``None``): the count, the runs and the
        three indexes as they are (``_Index.dump``). No tombstone is read:
        O(slots) at C speed, about 6-18 bytes per tombstone (base64)."""
        if self.n == 0 or self._located != self.n or self._records is None:
            return None
        return {
            "n": self.n,
            "runs": [[a, b] for a, b in zip(self._seg_start, self._seg_seq, strict=True)],
            "by_id": self._by_id.dump(),
            "by_hash": self._by_hash.dump(),
            "by_key": self._by_key.dump(),
        }

    @classmethod
    def imported(cls, d: object, before: int, records: Any) -> TombStore:
        """The store :meth:`export` wrote, every tombstone spilled (read back
        from its record, below seq ``before``, through ``records``). Checks
        its shape (:class:`LogFormatError`); the checkpoint's checksum
        vouches for the rest, and every lookup is verified against the
        record it reads. O(slots) at C speed."""
        if not (type(d) is dict and {"n", "runs", "by_id", "by_hash", "by_key"} <= d.keys()):
            raise LogFormatError("a checkpoint's tombstone store is malformed")
        n, runs = d["n"], d["runs"]
        if not (type(n) is int and n > 0 and type(runs) is list and runs):
            raise LogFormatError("a checkpoint's tombstone store has no tombstones or runs")
        if not all(type(r) is list and len(r) == 2 for r in runs):
            raise LogFormatError("a checkpoint's tombstone runs are malformed")
        starts = [r[0] for r in runs]
        seqs = [r[1] for r in runs]
        if not (
            all(type(x) is int for x in starts + seqs)
            and starts[0] == 0
            and all(a < b for a, b in itertools.pairwise(starts))
            and starts[-1] < n
            and all(a < b for a, b in itertools.pairwise(seqs))
            and seqs[0] >= 0
            and seqs[-1] < before
        ):
            raise LogFormatError("a checkpoint's tombstone runs are out of order")
        store = cls()
        store._by_id = _Index.load(d["by_id"], n)
        store._by_hash = _Index.load(d["by_hash"], n)
        store._by_key = _Index.load(d["by_key"], 0)  # keyed ones can all be older
        if store._by_id.used < n or store._by_hash.used < n:
            raise LogFormatError("a checkpoint's tombstone index misses tombstones")
        store.n = n
        store._cols = _Cols(n)  # every tombstone spilled: read back from its record
        store._seg_start = array("q", starts)
        store._seg_seq = array("q", seqs)
        store._located = n
        store._records = records
        return store

    # -- finding ---------------------------------------------------------------

    def find_id(self, entry_id: str, count: int) -> int:
        """The position of ``entry_id``'s tombstone below ``count``, or -1.
        O(1) expected."""
        for p in self._by_id.candidates(_shash(entry_id), count):
            if self.id_at(p) == entry_id:
                return p
        return -1

    def newest_hash(self, content_hash: str, count: int) -> int:
        """The newest position below ``count`` with this content hash, or -1."""
        best = -1
        for p in self._by_hash.candidates(_chash(content_hash), count):
            if p > best and self.hash_at(p) == content_hash:
                best = p
        return best

    def newest_key(self, key: str, count: int) -> int:
        """The newest position below ``count`` with this key, or -1."""
        best = -1
        for p in self._by_key.candidates(_shash(key), count):
            if p > best and self.key_at(p) == key:
                best = p
        return best


class Tombs(Mapping[str, Tombstone]):
    """A version's tombstones: the first ``count`` of a :class:`TombStore`,
    as a read-only mapping id → :class:`~.records.Tombstone` (in writing
    order), with the re-admission lookups. Immutable; ``add`` returns a new
    one. Lookups O(1) expected; iteration O(count)."""

    __slots__ = ("_n", "_store")

    def __init__(self, store: TombStore | None, count: int) -> None:
        self._store = store
        self._n = count

    @classmethod
    def of(cls, tombs: Iterable[Tombstone]) -> Tombs:
        """Tombs holding ``tombs`` in this order (a new store). O(len)."""
        ts = list(tombs)
        if not ts:
            return EMPTY_TOMBS
        store = TombStore()
        store.extend_empty(ts)
        return cls(store, len(ts))

    # -- the pre-issue-13 names ----------------------------------------------

    @property
    def by_id(self) -> Tombs:
        """This mapping itself (id → tombstone)."""
        return self

    @property
    def by_hash(self) -> _Newest:
        """Content hash → the newest tombstone with it (read-only)."""
        return _Newest(self, "hash")

    @property
    def by_key(self) -> _Newest:
        """Key → the newest tombstone with it (read-only)."""
        return _Newest(self, "key")

    # -- writing ----------------------------------------------------------------

    def add(self, tomb: Tombstone) -> Tombs:
        """These tombstones and ``tomb`` (call under the owner's write lock).
        Amortized O(1)."""
        store = self._store
        if store is None:
            store = TombStore()
        elif store.n != self._n:
            store.truncate(self._n)
        store.append(tomb)
        return Tombs(store, self._n + 1)

    def locate(self, start: int, seq: int, records: Any) -> None:
        """Tombstones ``start`` .. ``len - 1`` are held by log record ``seq``
        (see :meth:`TombStore.locate`; call under the owner's write lock)."""
        store = self._store
        if store is not None and store.n == self._n:
            store.locate(start, seq, records)

    def spill(self, durable: int) -> int:
        """Drop from memory the columns of the tombstones whose records are
        durable below seq ``durable`` (see :meth:`TombStore.spill`; call
        under the owner's write lock). Returns how many went."""
        store = self._store
        if store is None or store.n != self._n:
            return 0
        records = store._records
        if records is None or getattr(records, "reader", None) is None:
            return 0  # nothing to read them back from
        return store.spill(durable)

    def runs(self) -> list[list[int]]:
        """``[[first position, record seq], ...]`` of every tombstone when
        all are located (a checkpoint keeps them, see :meth:`relocate`),
        else ``[]``. O(runs)."""
        store = self._store
        if store is None or store.n != self._n or store._located != self._n:
            return []
        return [[a, b] for a, b in zip(store._seg_start, store._seg_seq, strict=True)]

    def relocate(self, runs: list[list[int]], before: int, records: Any) -> bool:
        """Locate every tombstone from a checkpoint's ``runs`` (of records
        below seq ``before``), if they are well-formed: starts ascending from
        0, seqs ascending. Returns whether they were taken."""
        store = self._store
        if store is None or store._seg_start or not runs:
            return False
        starts = [r[0] for r in runs]
        seqs = [r[1] for r in runs]
        ok = (
            all(type(x) is int for x in starts + seqs)
            and starts[0] == 0
            and all(a < b for a, b in itertools.pairwise(starts))
            and starts[-1] < self._n
            and all(a < b for a, b in itertools.pairwise(seqs))
            and seqs[0] >= 0
            and seqs[-1] < before
        )
        if ok:
            store._seg_start.extend(starts)
            store._seg_seq.extend(seqs)
            store._located = self._n
            store._records = records
        return ok

    def export(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of these tombstones, if every one is in a
        log record it can be read back from (see :meth:`TombStore.export`),
        else ``None`` (the checkpoint lists them). O(index slots)."""
        store = self._store
        if store is None or store.n != self._n:
            return None
        return store.export()

    @classmethod
    def imported(cls, d: object, before: int, records: Any) -> Tombs:
        """The tombstones :meth:`export` wrote (see :meth:`TombStore.imported`)."""
        store = TombStore.imported(d, before, records)
        return cls(store, store.n)

    # -- reading ----------------------------------------------------------------

    def matching(self, content_hash: str, key: str | None) -> Tombstone | None:
        """The newest tombstone whose content hash matches, else the newest
        whose key matches, else ``None``. O(1) expected."""
        store = self._store
        if store is None:
            return None
        p = store.newest_hash(content_hash, self._n)
        if p < 0 and key is not None:
            p = store.newest_key(key, self._n)
        return None if p < 0 else store.tomb(p)

    def __getitem__(self, entry_id: str) -> Tombstone:
        store = self._store
        if store is not None and type(entry_id) is str:
            p = store.find_id(entry_id, self._n)
            if p >= 0:
                return store.tomb(p)
        raise KeyError(entry_id)

    def get(self, entry_id: str, default: Tombstone | None = None) -> Tombstone | None:  # type: ignore[override]
        store = self._store
        if store is not None and type(entry_id) is str:
            p = store.find_id(entry_id, self._n)
            if p >= 0:
                return store.tomb(p)
        return default

    def __contains__(self, entry_id: object) -> bool:
        store = self._store
        return store is not None and type(entry_id) is str and store.find_id(entry_id, self._n) >= 0

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[str]:
        store = self._store
        if store is not None:
            for p in range(self._n):
                yield store.id_at(p)

    def in_order(self) -> Iterator[Tombstone]:
        """The tombstones, oldest first."""
        store = self._store
        if store is not None:
            for p in range(self._n):
                yield store.tomb(p)

    def keys(self) -> KeysView[str]:
        return KeysView(self)

    def values(self) -> ValuesView[Tombstone]:
        return _Values(self)

    def items(self) -> ItemsView[str, Tombstone]:
        return _Items(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Tombs):
            return (
                self._n == other._n
                and dict(self.items()) == dict(other.items())
                and _winners(self, "hash") == _winners(other, "hash")
                and _winners(self, "key") == _winners(other, "key")
            )
        return Mapping.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Tombs: {self._n}>"


class _Values(ValuesView[Tombstone]):
    _mapping: Tombs

    def __iter__(self) -> Iterator[Tombstone]:
        return self._mapping.in_order()


class _Items(ItemsView[str, Tombstone]):
    _mapping: Tombs

    def __iter__(self) -> Iterator[tuple[str, Tombstone]]:
        for t in self._mapping.in_order():
            yield t.id, t


class _Newest(Mapping[str, Tombstone]):
    """Content hash (or key) → the newest tombstone with it, in ``tombs``."""

    __slots__ = ("_field", "_tombs")

    def __init__(self, tombs: Tombs, field: str) -> None:
        self._tombs = tombs
        self._field = field

    def _find(self, k: object) -> int:
        store = self._tombs._store
        if store is None or type(k) is not str:
            return -1
        if self._field == "hash":
            return store.newest_hash(k, self._tombs._n)
        return store.newest_key(k, self._tombs._n)

    def __getitem__(self, k: str) -> Tombstone:
        p = self._find(k)
        if p < 0:
            raise KeyError(k)
        store = self._tombs._store
        assert store is not None
        return store.tomb(p)

    def __contains__(self, k: object) -> bool:
        return self._find(k) >= 0

    def _winners(self) -> dict[str, int]:
        return _positions(self._tombs, self._field)

    def __iter__(self) -> Iterator[str]:
        return iter(self._winners())

    def __len__(self) -> int:
        return len(self._winners())

    def items(self) -> ItemsView[str, Tombstone]:
        return _NewestItems(self)


class _NewestItems(ItemsView[str, Tombstone]):
    _mapping: _Newest

    def __iter__(self) -> Iterator[tuple[str, Tombstone]]:
        store = self._mapping._tombs._store
        for k, p in self._mapping._winners().items():
            assert store is not None
            yield k, store.tomb(p)


def _positions(tombs: Tombs, field: str) -> dict[str, int]:
    """Content hash (or key) → position of the newest tombstone with it. O(count)."""
    store = tombs._store
    out: dict[str, int] = {}
    if store is None:
        return out
    if field == "hash":
        for p in range(tombs._n):
            out[store.hash_at(p)] = p
    else:
        for p in range(tombs._n):
            k = store.key_at(p)
            if k is not None:
                out[k] = p
    return out


def _winners(tombs: Tombs, field: str) -> dict[str, str]:
    store = tombs._store
    if store is None:
        return {}
    return {k: store.id_at(p) for k, p in _positions(tombs, field).items()}


EMPTY_TOMBS = Tombs(None, 0)
