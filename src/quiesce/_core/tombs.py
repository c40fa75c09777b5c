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
import binascii
import hashlib
import itertools
import os
import sys
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    Sequence,
    ValuesView,
)
from typing import Any

from .entry import Kind
from .errors import InvalidArgument, LogFormatError, QuiesceError
from .log import Records, check_read, materialize
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
#: the format of an exported index (1, unnamed: CRC-32 hashes, one index
#: each; 2: its runs a JSON list of ``[start, seq]`` pairs, still read; 3:
#: its runs packed, :func:`_pack_runs`)
INDEX_FORMAT = 3
#: the formats :meth:`TombStore.imported` reads
_READ_FORMATS = (2, INDEX_FORMAT)
#: most index generations a checkpoint may hold (the sizes double: 2**40 slots)
_MAX_GENS = 40
#: base64 characters of an exported index decoded at a time (a multiple of
#: 32: 24 bytes, whole 4- and 8-byte slots per piece)
_B64_PIECE = 1 << 16
#: most prefetched tombstones a store keeps (see TombStore.prefetch)
_RESOLVED_MOST = 256


def _pack_runs(starts: array[int], seqs: array[int]) -> str:
    """The runs of an exported index (format 3): base64 of the little-endian
    int64s ``start, seq`` of each run, in order, one string (a JSON list of
    pairs, format 2, decodes to a Python list and two ints per removal
    record: about 13 bytes per tombstone while a checkpoint is held, issue
    21). O(runs) at C speed."""
    packed = array("q", bytes(16 * len(starts)))
    packed[0::2] = starts
    packed[1::2] = seqs
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack_runs(runs: object) -> tuple[array[int], array[int]]:
    """The starts and seqs :func:`_pack_runs` wrote, or
    :class:`LogFormatError` if ``runs`` is not base64 of a whole, non-empty
    number of int64 pairs (their order is checked by the caller). O(runs)."""
    if type(runs) is not str:
        raise LogFormatError("a checkpoint's tombstone runs are malformed")
    if not runs:
        raise LogFormatError("a checkpoint's tombstone store has no tombstones or runs")
    try:
        raw = binascii.a2b_base64(runs, strict_mode=True)
    except (ValueError, binascii.Error) as exc:
        raise LogFormatError(f"a checkpoint's tombstone runs are not base64: {exc}") from exc
    if not raw or len(raw) % 16:
        raise LogFormatError("a checkpoint's tombstone runs are malformed")
    packed = array("q", raw)
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        packed.byteswap()
    return packed[0::2], packed[1::2]


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _dec(b: bytes | bytearray) -> str:
    return b.decode("utf-8", "surrogatepass")


#: bytes of a store's hash key (kept in its checkpoints)
_KEY_BYTES = 16


def _hasher(key: bytes) -> Any:
    """A keyed BLAKE2b of 8-byte digests: copy it, feed it a string's bytes.
    Keyed and non-linear (CRC-32, the old hash, is linear: colliding ids
    were easy to craft, issue 21), and the same in every process given the
    key, so an index can be written into a checkpoint with its key."""
    return hashlib.blake2b(digest_size=8, key=key)


def _keyed(base: Any, s: str) -> int:
    """The 64-bit keyed hash of ``s`` (``base``: :func:`_hasher`). About 0.5 µs."""
    h = base.copy()
    h.update(s.encode("utf-8", "surrogatepass"))
    return int.from_bytes(h.digest(), "little")


_M64 = (1 << 64) - 1


def _mix_words(key: bytes) -> tuple[int, int, int]:
    """Three 64-bit words from a store key (BLAKE2b of it): an XOR mask and
    two odd multipliers for :func:`_mixed`."""
    d = hashlib.blake2b(key, digest_size=24, person=b"quiesce-mix").digest()
    a, b, c = (int.from_bytes(d[i : i + 8], "little") for i in (0, 8, 16))
    return a, b | 1, c | 1


def _mixed(v: int, words: tuple[int, int, int]) -> int:
    """A keyed, non-linear mix of the 64-bit ``v``: XOR, multiply, swap the
    halves, multiply, swap again, so every output bit depends on every input
    bit and on the key (a multiply alone leaves the low bits depending only
    on low bits: a writer who brute-forces contents with equal low hash
    bits would fill one slot's cluster). For content hashes only: a writer
    cannot choose SHA-256 bits, only search for them."""
    a, b, c = words
    p = ((v ^ a) * b) & _M64
    p = ((p >> 32 | p << 32) & _M64) * c & _M64
    return (p >> 32 | p << 32) & _M64


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


def _lane_counts(data: bytes, width: int, tomb: int) -> tuple[int, int]:
    """``(slots that are not 0, slots equal to tomb)`` of the little-endian
    ``width``-byte slots in ``data``: exact, what two ``array.count`` passes
    give, without a Python int per slot (``array.count`` boxes every slot).
    Each byte column (``data[k::width]``) is turned into 0/1 bytes by one
    ``bytes.translate`` (1 where it differs from 0, or from the tomb's byte
    ``k``); the columns are OR-ed as big ints, so a slot's byte is 1 where
    any of its bytes differs, and ``int.bit_count`` counts them. O(len(data))
    at C speed."""
    lanes = len(data) // width
    differ_zero = 0
    differ_tomb = 0
    for k in range(width):
        column = data[k::width]
        differ_zero |= int.from_bytes(column.translate(_DIFFERS[0]), "little")
        differ_tomb |= int.from_bytes(
            column.translate(_DIFFERS[(tomb >> (8 * k)) & 0xFF]), "little"
        )
    return differ_zero.bit_count(), lanes - differ_tomb.bit_count()


#: _DIFFERS[b]: a translate table mapping byte b to 0 and every other byte to 1
_DIFFERS: tuple[bytes, ...] = tuple(bytes(int(x != b) for x in range(256)) for b in range(256))


class _Index:
    """An open-addressing multimap from a string's keyed hash (:func:`_keyed`
    with the store's key: the same in every process that has the key) to
    store positions. A slot is one int: ``position + 1`` in its low ``shift``
    bits (16-24 in 4-byte slots, enough for twice the store's size when the
    index was built; 32 in 8-byte slots once a store passes 2**23
    tombstones) and the hash's top bits in the rest as a tag (8-16 bits;
    32), so a slot is written by one store and a lookup verifies a candidate
    (reads its tombstone's id, hash or key) for about one in 2**tag slots it
    passes. 0 is an empty slot; :attr:`dead` (tag all ones, position 0) is a
    slot whose tombstone was cut off (:meth:`TombStore.truncate`): probing
    goes on past it and it matches nothing. Linear probing. Load (live and
    dead slots) at most 2/3, so every probe sequence ends at an empty slot
    within ``size`` steps.

    ``first`` is the lowest position ever put in (an index whose positions
    are all held in memory can be rebuilt bigger; one reaching a spilled
    position cannot without a disk, so it is kept as it is and a new one
    starts, see :meth:`TombStore._grown`)."""

    __slots__ = ("dead", "first", "limit", "mask", "shift", "slots", "tag_shift", "used")

    def __init__(self, size: int, shift: int, first: int = 1 << 62) -> None:
        assert 16 <= shift <= 24 or shift == 32
        self.shift = shift
        wide = shift == 32
        self.slots = array("Q" if wide else "I", bytes((8 if wide else 4) * size))
        self.tag_shift = 64 - (64 if wide else 32) + shift  #: h >> tag_shift is the tag
        self.limit = (1 << shift) - 1  #: the largest position + 1 a slot holds
        self.mask = size - 1
        self.used = 0  #: live slots
        self.dead = 0  #: slots of cut-off tombstones
        self.first = first

    @property
    def tomb(self) -> int:
        """The value of a dead slot: every tag bit set, position 0."""
        return ((1 << (64 if self.shift == 32 else 32)) - 1) ^ self.limit

    def full(self) -> bool:
        return 3 * (self.used + self.dead + 1) > 2 * (self.mask + 1)

    def dump(self) -> list[Any]:
        """``[slots, shift, used, dead, base64 of the slots, little-endian]``:
        what a checkpoint keeps of this index (with the store's key its
        hashes hold in any process). O(slots), at C speed."""
        slots = self.slots
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            slots = array(slots.typecode, slots)
            slots.byteswap()
        raw = base64.b64encode(slots.tobytes()).decode("ascii")
        return [self.mask + 1, self.shift, self.used, self.dead, raw]

    @classmethod
    def load(cls, d: object, n: int) -> _Index:
        """The index :meth:`dump` wrote, checked against itself before it is
        used: its header, its length, and its slot counts (the live slots
        are ``used``, the dead ones ``dead``, and at least a third are
        empty, so no probe sequence runs forever: an index with every slot
        non-zero made recovery probe forever, issue 21); its positions must
        fit a store of ``n``. :class:`LogFormatError` otherwise. O(slots), at
        C speed."""
        if not (type(d) is list and len(d) == 5):
            raise LogFormatError(
                "a checkpoint's tombstone index is not [size, shift, used, dead, slots]"
            )
        size, shift, used, dead, raw = d
        if not (
            type(size) is int
            and _MIN_SLOTS <= size <= 1 << 40
            and size & (size - 1) == 0
            and type(shift) is int
            and (16 <= shift <= 24 or shift == 32)
            and type(used) is int
            and type(dead) is int
            and used >= 0
            and dead >= 0
            and 3 * (used + dead) <= 2 * size
            and type(raw) is str
        ):
            raise LogFormatError("a checkpoint's tombstone index has a malformed header")
        index = cls(_MIN_SLOTS, shift, first=0)  # its positions may all be spilled
        if n > index.limit:
            raise LogFormatError("a checkpoint's tombstone index is too narrow for its tombstones")
        width = index.slots.itemsize
        nbytes = size * width
        # base64 of nbytes bytes: 4 characters per 3 bytes, padded at the end only
        if len(raw) != 4 * -(-nbytes // 3) or raw.find("=", 0, len(raw) - 2) != -1:
            raise LogFormatError("a checkpoint's tombstone index has the wrong length")
        # decoded a piece at a time straight into the slots (no copy of the
        # whole text or of its bytes), each piece counted as it goes
        slots = array(index.slots.typecode, [0]) * size
        view = memoryview(slots).cast("B")
        nonzero = tombs = 0
        at = 0
        try:
            for start in range(0, len(raw), _B64_PIECE):
                data = binascii.a2b_base64(raw[start : start + _B64_PIECE], strict_mode=True)
                view[at : at + len(data)] = data
                at += len(data)
                z, t = _lane_counts(data, width, index.tomb)
                nonzero += z
                tombs += t
        except (ValueError, binascii.Error) as exc:
            raise LogFormatError(f"a checkpoint's tombstone index is not base64: {exc}") from exc
        finally:
            view.release()
        if at != nbytes:
            raise LogFormatError("a checkpoint's tombstone index has the wrong length")
        if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
            slots.byteswap()
        if nonzero != used + dead or tombs != dead:
            raise LogFormatError(
                "a checkpoint's tombstone index holds other slot counts than it says"
            )
        index.slots = slots
        index.mask = size - 1
        index.used = used
        index.dead = dead
        return index

    def put(self, h: int, pos: int) -> None:
        mask = self.mask
        slots = self.slots
        i = h & mask
        while slots[i]:
            i = (i + 1) & mask
        slots[i] = ((h >> self.tag_shift) << self.shift) | (pos + 1)
        self.used += 1
        if pos < self.first:
            self.first = pos

    def kill(self, h: int, pos: int) -> bool:
        """Make the slot of ``pos`` (put with hash ``h``) dead, if it is here.
        A reader probing past it still goes on (the slot stays non-zero)."""
        mask = self.mask
        slots = self.slots
        want = ((h >> self.tag_shift) << self.shift) | (pos + 1)
        i = h & mask
        for _ in range(mask + 1):
            v = slots[i]
            if not v:
                return False
            if v == want:
                slots[i] = self.tomb
                self.used -= 1
                self.dead += 1
                return True
            i = (i + 1) & mask
        return False

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
            if p and p <= count and v >> shift == tag:
                yield p - 1
            i = (i + 1) & mask


def _probe(
    gens: tuple[_Index, ...],
    h: int,
    count: int,
    value_at: Callable[[int], str | None],
    value: str,
    first: bool = False,
) -> int:
    """The newest position below ``count`` whose slot tag matches ``h`` in
    ``gens`` (newest generation first: a match in one beats every older one)
    and whose stored value (``value_at``) is ``value``, or -1; ``first``:
    the first verified match (ids are tombstoned once). One probe sequence
    per generation walked inline, ending at its first empty slot (load at
    most 2/3: expected O(1) slots, at most ``size``). Reads only; a slot
    written meanwhile is verified like any other."""
    best = -1
    for index in gens:
        slots = index.slots
        mask = index.mask
        shift = index.shift
        tag = h >> index.tag_shift
        i = h & mask
        v = slots[i]
        while v:
            # the tag first: it rules out all but about one in 2**tag slots,
            # so a slot it rules out costs one shift and one compare
            if v >> shift == tag:
                p = v & index.limit
                if p and p <= count and p > best + 1 and value_at(p - 1) == value:
                    best = p - 1
                    if first:
                        return best
            i = (i + 1) & mask
            v = slots[i]
        if best >= 0:
            return best
    return best


class _Cols:
    """The packed columns of positions ``base`` .. ``base + len - 1``
    (``id_end`` / ``key_end`` are offsets into this object's blobs;
    ``key_pos`` holds absolute positions; ``reason`` / ``actor`` index
    ``strs``, this object's own table of interned strings, so a spill
    drops the strings only spilled tombstones used, issue 21)."""

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
        "str_ix",
        "strs",
        "turn",
        "version",
    )

    def __init__(self, base: int) -> None:
        self.base = base
        self.strs: list[str | None] = [None]  # interned reasons and actors
        self.str_ix: dict[str | None, int] = {None: 0}
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

    def intern(self, s: str | None) -> int:
        """The index of ``s`` in :attr:`strs`, added if new (writer only;
        a reader sees a list that only grows)."""
        ix = self.str_ix.get(s)
        if ix is None:
            ix = len(self.strs)
            self.strs.append(s)
            self.str_ix[s] = ix
        return ix


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
        "_hasher",
        "_held",
        "_held_lock",
        "_key",
        "_located",
        "_mix",
        "_records",
        "_resolved",
        "_seg_seq",
        "_seg_start",
        "n",
    )

    def __init__(self, key: bytes | None = None) -> None:
        self.n = 0
        self._cols = _Cols(0)
        #: the hash key: random per store, kept in its checkpoints
        self._key = os.urandom(_KEY_BYTES) if key is None else key
        self._hasher = _hasher(self._key)
        #: the content-hash mixer's three words (odd multipliers), from the key
        self._mix = _mix_words(self._key)
        # each index is a tuple of generations, newest first (see _grown);
        # only the newest takes new slots; one attribute store swaps a tuple
        self._by_id: tuple[_Index, ...] = (_Index(_MIN_SLOTS, 16),)
        self._by_hash: tuple[_Index, ...] = (_Index(_MIN_SLOTS, 16),)
        self._by_key: tuple[_Index, ...] = (_Index(_MIN_SLOTS, 16),)
        # runs of positions and the log record holding each (see locate)
        self._seg_start = array("q")
        self._seg_seq = array("q")
        self._located = 0  # positions 0 .. _located - 1 are located (-1: a gap, never spill)
        self._records: Any = None  # the owner's Records (log.py), to read spilled ones back
        self._cache: tuple[int, list[Any]] = (-1, [])
        #: spilled tombstones read back ahead of a write (prefetch): position -> dict
        self._resolved: dict[int, dict[str, Any]] = {}
        #: positions a prefetch holds until its lookups ran (never evicted), by count
        self._held: dict[int, int] = {}
        self._held_lock = threading.Lock()  # guards _held and the _resolved swap

    def _h(self, s: str) -> int:
        """The store's keyed 64-bit hash of ``s`` (:func:`_keyed`)."""
        h = self._hasher.copy()
        h.update(s.encode("utf-8", "surrogatepass"))
        return int.from_bytes(h.digest(), "little")

    def _hc(self, s: str) -> int:
        """The store's keyed 64-bit hash of a content hash: one of 16 hex
        digits (``Entry.content_hash``: SHA-256 bits the writer cannot pick)
        goes through a keyed mix of its value (:func:`_mixed`, ~0.3 µs, no
        BLAKE2b); any other string through :meth:`_h`."""
        if len(s) == 16:
            try:
                v = int(s, 16)
            except ValueError:
                pass
            else:
                return _mixed(v, self._mix)
        return self._h(s)

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
        strs = c.strs
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
        d = self._resolved.get(p)
        if d is not None:
            return d
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

    def append(self, t: Tombstone) -> None:
        """Write ``t`` at position ``n``. Amortized O(1) (an index that is
        2/3 full doubles: O(held), rarely; never a disk, see :meth:`_grown`).

        All or nothing (issue 21): every value is checked and encoded, and
        every index that must grow has grown, before the first column is
        written; a failure while writing (a ``MemoryError``) cuts the
        columns back. So a removal that fails leaves the store as it was,
        and :class:`InvalidArgument` says which value the columns cannot
        hold (a turn or version outside int64, a kind that is not a
        :class:`Kind`)."""
        p = self.n
        if p >= 0xFFFFFFFE:  # pragma: no cover - 4e9 tombstones
            raise OverflowError("a buffer holds at most 4,294,967,294 tombstones")
        for name, v in (("turn", t.turn), ("version", t.version)):
            if v is not None and (type(v) is not int or not _NONE < v < 1 << 63):
                raise InvalidArgument(
                    f"tombstone {t.id!r}: its {name} {v!r} does not fit a 64-bit column"
                )
        turn = _NONE if t.turn is None else t.turn
        version = _NONE if t.version is None else t.version
        kind = _NO_KIND if t.kind is None else _KIND_CODE.get(t.kind)
        if kind is None:
            raise InvalidArgument(f"tombstone {t.id!r}: {t.kind!r} is not a Kind")
        if type(t.id) is not str or type(t.content_hash) is not str:
            raise InvalidArgument(f"tombstone {t.id!r}: its id and content hash must be str")
        if not (t.key is None or type(t.key) is str):
            raise InvalidArgument(f"tombstone {t.id!r}: its key must be a str or None")
        if not (type(t.reason) is str and (t.actor is None or type(t.actor) is str)):
            raise InvalidArgument(f"tombstone {t.id!r}: its reason and actor must be str")
        id_b = _enc(t.id)
        key_b = None if t.key is None else _enc(t.key)
        packed = _packed_hash(t.content_hash)
        h_id, h_hash = self._h(t.id), self._hc(t.content_hash)
        h_key = None if t.key is None else self._h(t.key)
        reason, actor = self._cols.intern(t.reason), self._cols.intern(t.actor)
        # grow first: a new index is built aside and swapped in whole
        if self._by_id[0].full() or p >= self._by_id[0].limit:
            self._by_id = self._grown(self._by_id, "id")
        if self._by_hash[0].full() or p >= self._by_hash[0].limit:
            self._by_hash = self._grown(self._by_hash, "hash")
        if h_key is not None and (self._by_key[0].full() or p >= self._by_key[0].limit):
            self._by_key = self._grown(self._by_key, "key")
        c = self._cols
        sizes = (len(c.id_blob), len(c.hash8), len(c.key_blob), len(c.key_pos), len(c.kind))
        try:
            c.id_blob += id_b
            c.id_end.append(len(c.id_blob))
            if packed is None:
                c.odd[p] = t.content_hash
                packed = bytes(8)
            c.hash8 += packed
            c.reason.append(reason)
            c.actor.append(actor)
            c.turn.append(turn)
            c.version.append(version)
            c.kind.append(kind)
            if key_b is not None:
                c.key_blob += key_b
                c.key_end.append(len(c.key_blob))
                c.key_pos.append(p)
        except BaseException:
            self._cut_columns(c, p - c.base, sizes)
            c.odd.pop(p, None)
            raise
        self.n = p + 1  # the columns hold p before any index points at it
        self._by_id[0].put(h_id, p)
        self._by_hash[0].put(h_hash, p)
        if h_key is not None:
            self._by_key[0].put(h_key, p)

    @staticmethod
    def _cut_columns(c: _Cols, q: int, sizes: tuple[int, int, int, int, int]) -> None:
        """Cut every column of ``c`` back to ``q`` rows (the blobs and the key
        columns to ``sizes``): undo a half-written append."""
        id_len, hash_len, key_len, keys, _kinds = sizes
        del c.id_blob[id_len:]
        del c.hash8[hash_len:]
        del c.key_blob[key_len:]
        del c.key_pos[keys:]
        del c.key_end[keys:]
        for col in (c.id_end, c.reason, c.actor, c.turn, c.version):
            del col[q:]
        del c.kind[q:]

    def extend_empty(self, ts: list[Tombstone]) -> None:
        """Write ``ts`` into this empty store at once (recovery from a
        checkpoint): the same store as appending them one by one, built
        column by column with the indexes sized once. O(len(ts)). All or
        nothing: a tombstone the columns cannot hold raises
        :class:`InvalidArgument` before anything is written."""
        assert self.n == 0 and not self._seg_start
        for t in ts:
            for v in (t.turn, t.version):
                if v is not None and (type(v) is not int or not _NONE < v < 1 << 63):
                    raise InvalidArgument(f"tombstone {t.id!r}: {v!r} does not fit a 64-bit column")
            if t.kind is not None and t.kind not in _KIND_CODE:
                raise InvalidArgument(f"tombstone {t.id!r}: {t.kind!r} is not a Kind")
        n = len(ts)
        c = _Cols(0)
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
        intern = c.intern
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
        shift = _shift_for(n)

        def sized(count: int) -> _Index:
            size = _MIN_SLOTS
            while 3 * (count + 1) > 2 * size:
                size *= 2
            return _Index(size, shift)

        by_id, by_hash, by_key = sized(n), sized(n), sized(len(keyed))
        h = self._h
        put_id, put_hash = by_id.put, by_hash.put
        for p, t in enumerate(ts):
            put_id(h(t.id), p)
            put_hash(self._hc(t.content_hash), p)
        for p, k in keyed:
            by_key.put(h(k), p)
        self._cols = c
        self.n = n
        self._by_id, self._by_hash, self._by_key = (by_id,), (by_hash,), (by_key,)

    def _grown(self, gens: tuple[_Index, ...], field: str) -> tuple[_Index, ...]:
        """``gens`` with room for position ``n`` (before it is written), the
        new tuple built aside (readers see the old one or the new, both
        holding every published tombstone). Never reads a disk (issue 21:
        regrowing once read every spilled tombstone back under the write
        lock): if every position the newest index holds is in memory, it is
        rebuilt twice as big (O(its positions)); else it is kept as it is,
        never to take more, and a new, empty one twice as big starts. The
        sizes double, so a store holds O(log n) indexes; lookups ask each.
        ``field``: ``"id"``, ``"hash"`` or ``"key"``."""
        active = gens[0]
        size = 2 * (active.mask + 1) if active.full() else active.mask + 1
        shift = _shift_for(self.n + 1)
        if active.first >= self._cols.base:
            new = _Index(size, shift)
            h = self._h
            start = min(active.first, self.n)
            if field == "key":
                c = self._cols
                for j in range(bisect_left(c.key_pos, start), len(c.key_pos)):
                    q = c.key_pos[j]
                    k = self.key_at(q)
                    assert k is not None
                    new.put(h(k), q)
            else:
                value_at = self.id_at if field == "id" else self.hash_at
                hv = h if field == "id" else self._hc
                for q in range(start, self.n):
                    new.put(hv(value_at(q)), q)
            return (new, *gens[1:])
        return (_Index(size, shift), *gens)

    def truncate(self, n: int) -> None:
        """Forget positions ``n`` and above (a dropped draft's tombstones;
        no published version counts them). Their index slots are made dead
        (:meth:`_Index.kill`: no slot points past the store, so a
        checkpoint's slot counts agree with its tombstone count). O(cut)."""
        if n >= self.n:
            return
        c = self._cols
        assert n >= c.base, "a spilled tombstone is published"
        h = self._h
        for q in range(n, self.n):
            hid, hh, k = h(self.id_at(q)), self._hc(self.hash_at(q)), self.key_at(q)
            any(ix.kill(hid, q) for ix in self._by_id)
            any(ix.kill(hh, q) for ix in self._by_hash)
            if k is not None:
                hk = h(k)
                any(ix.kill(hk, q) for ix in self._by_key)
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
        # the kept tombstones' strings only, renumbered (the table goes with
        # the columns: a reader holding the old columns reads the old table)
        reason, actor = old.reason[q:], old.actor[q:]
        keep = sorted({0, *reason, *actor})
        renumber = {o: k for k, o in enumerate(keep)}
        new.strs = [old.strs[o] for o in keep]
        new.str_ix = {v: k for k, v in enumerate(new.strs)}
        new.reason = array("I", [renumber[o] for o in reason])
        new.actor = array("I", [renumber[o] for o in actor])
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
        located in a log record (else ``None``): the format (``"v"``,
        :data:`INDEX_FORMAT`), the count, the runs (packed,
        :func:`_pack_runs`), the hash key and the three indexes as they are
        (each a list of ``_Index.dump``, newest first). No tombstone is
        read: O(slots) at C speed, about 6-18 bytes per tombstone (base64)."""
        if self.n == 0 or self._located != self.n or self._records is None:
            return None
        return {
            "v": INDEX_FORMAT,
            "n": self.n,
            "runs": _pack_runs(self._seg_start, self._seg_seq),
            "key": base64.b64encode(self._key).decode("ascii"),
            "by_id": [ix.dump() for ix in self._by_id],
            "by_hash": [ix.dump() for ix in self._by_hash],
            "by_key": [ix.dump() for ix in self._by_key],
        }

    @classmethod
    def imported(cls, d: object, before: int, records: Any) -> TombStore:
        """The store :meth:`export` wrote, every tombstone spilled (read back
        from its record, below seq ``before``, through ``records``).

        Checked before anything is used (issue 21: a checkpoint is a claim):
        its shape; each index's own slot counts and probe bound
        (:meth:`_Index.load`); that the live slots of the id and the
        content-hash indexes are exactly one per tombstone (a zeroed slot
        made a pruned id re-appendable without an ``Override``); and, read
        back through ``records``, that the newest run's record holds the
        tombstones the count says (the count cannot drop the newest).
        :class:`LogFormatError` otherwise, and the caller falls back. An
        index of the old CRC-32 format (no ``"v"``) is refused the same way:
        recovery falls back to an older checkpoint or a full replay, which
        rebuilds the index from the records. What open does not check is
        where each slot sits (that needs every tombstone read back:
        :meth:`check_index`). O(slots) at C speed, plus one record read."""
        if not (type(d) is dict and {"n", "runs", "by_id", "by_hash", "by_key"} <= d.keys()):
            raise LogFormatError("a checkpoint's tombstone store is malformed")
        fmt = d.get("v")
        if type(fmt) is not int or fmt not in _READ_FORMATS or type(d.get("key")) is not str:
            raise LogFormatError(
                "a checkpoint's tombstone index is of an older format (CRC-32 hashes): "
                "rebuilt from the records"
            )
        n, runs = d["n"], d["runs"]
        if not (type(n) is int and n > 0):
            raise LogFormatError("a checkpoint's tombstone store has no tombstones or runs")
        starts: Sequence[int]
        seqs: Sequence[int]
        if fmt == 2:  # the runs as a list of [start, seq] pairs
            if not (type(runs) is list and runs):
                raise LogFormatError("a checkpoint's tombstone store has no tombstones or runs")
            if not all(type(r) is list and len(r) == 2 for r in runs):
                raise LogFormatError("a checkpoint's tombstone runs are malformed")
            starts = [r[0] for r in runs]
            seqs = [r[1] for r in runs]
            if not all(type(x) is int for x in (*starts, *seqs)):
                raise LogFormatError("a checkpoint's tombstone runs are out of order")
        else:
            starts, seqs = _unpack_runs(runs)
        if not (
            starts[0] == 0
            and all(a < b for a, b in itertools.pairwise(starts))
            and starts[-1] < n
            and all(a < b for a, b in itertools.pairwise(seqs))
            and seqs[0] >= 0
            and seqs[-1] < before
        ):
            raise LogFormatError("a checkpoint's tombstone runs are out of order")
        try:
            key = base64.b64decode(d["key"].encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError) as exc:
            raise LogFormatError(f"a checkpoint's tombstone index key is bad: {exc}") from exc
        if len(key) != _KEY_BYTES:
            raise LogFormatError("a checkpoint's tombstone index key has the wrong length")
        gens = []
        for name in ("by_id", "by_hash", "by_key"):
            dumps = d[name]
            if not (type(dumps) is list and 1 <= len(dumps) <= _MAX_GENS):
                raise LogFormatError(f"a checkpoint's tombstone index {name} is malformed")
            gens.append(tuple(_Index.load(x, 0) for x in dumps))
        by_id, by_hash, by_key = gens
        if sum(ix.used for ix in by_id) != n or sum(ix.used for ix in by_hash) != n:
            raise LogFormatError(
                "a checkpoint's tombstone index does not hold one slot per tombstone"
            )
        if sum(ix.used for ix in by_key) > n:
            raise LogFormatError("a checkpoint's tombstone key index holds too many slots")
        store = cls(key)
        store._by_id, store._by_hash, store._by_key = by_id, by_hash, by_key
        store.n = n
        store._cols = _Cols(n)  # every tombstone spilled: read back from its record
        store._seg_start = starts if type(starts) is array else array("q", starts)
        store._seg_seq = seqs if type(seqs) is array else array("q", seqs)
        store._located = n
        store._records = records
        reader = records.reader if type(records) is Records else None
        if reader is not None:  # the newest run's record holds the newest tombstones
            seq = seqs[-1]
            try:
                (rec,) = check_read(reader(seq, seq + 1), seq, seq + 1)
            except QuiesceError:
                raise
            except Exception as exc:  # a closed sink, an OS error
                raise LogFormatError(f"log record {seq} cannot be read back: {exc!r}") from exc
            got = rec.detail.get("tombstones") if rec.op == "remove" else None
            if not isinstance(got, list) or len(got) != n - starts[-1]:
                raise LogFormatError(
                    f"a checkpoint says {n} tombstones, but log record {seq} does not hold "
                    f"the {n - starts[-1]} from position {starts[-1]}"
                )
            store._cache = (seq, got)
        return store

    def check_index(self, count: int) -> None:
        """Raise :class:`LogFormatError` unless every tombstone below
        ``count`` is found through the indexes (its id, content hash and
        key each lead to it or to a newer one with the same value). Reads
        every spilled tombstone back: O(count) reads, for ``verify`` and
        checks, never a fast path."""
        for p in range(count):
            i, h, k = self.id_at(p), self.hash_at(p), self.key_at(p)
            if (
                self.find_id(i, count) != p
                or self.newest_hash(h, count) < p
                or (k is not None and self.newest_key(k, count) < p)
            ):
                raise LogFormatError(f"tombstone {p} ({i!r}) is not found through the index")

    # -- finding ---------------------------------------------------------------

    def find_id(self, entry_id: str, count: int) -> int:
        """The position of ``entry_id``'s tombstone below ``count``, or -1.
        O(1) expected per index generation (O(log n) of them once spilled)."""
        return _probe(self._by_id, self._h(entry_id), count, self.id_at, entry_id, True)

    def newest_hash(self, content_hash: str, count: int) -> int:
        """The newest position below ``count`` with this content hash, or -1."""
        return _probe(self._by_hash, self._hc(content_hash), count, self.hash_at, content_hash)

    def newest_key(self, key: str, count: int) -> int:
        """The newest position below ``count`` with this key, or -1."""
        return _probe(self._by_key, self._h(key), count, self.key_at, key)

    def lookup(
        self, entry_id: str, content_hash: str, key: str | None, count: int
    ) -> tuple[int, int]:
        """The admission check of one entry in one pass: ``(find_id(entry_id),
        match)`` where ``match`` is :meth:`newest_hash` of ``content_hash``,
        else (no tombstone has that hash) :meth:`newest_key` of ``key``, else
        -1 -- what ``entry_id in tombs`` and :meth:`Tombs.matching` answer,
        with each value hashed once, the hasher and the generations bound
        once and every probe sequence walked inline (no generator per
        generation; an absent value costs one hash and one run of slots per
        generation). The key is hashed only when the content hash missed.
        O(1) expected per index generation; lock-free like every read (a
        stale slot is verified against the columns and ``count``)."""
        hasher = self._hasher
        hb = hasher.copy()
        hb.update(entry_id.encode("utf-8", "surrogatepass"))
        found = _probe(
            self._by_id, int.from_bytes(hb.digest(), "little"), count, self.id_at, entry_id, True
        )
        match = _probe(self._by_hash, self._hc(content_hash), count, self.hash_at, content_hash)
        if match < 0 and key is not None:
            hb = hasher.copy()
            hb.update(key.encode("utf-8", "surrogatepass"))
            match = _probe(
                self._by_key, int.from_bytes(hb.digest(), "little"), count, self.key_at, key
            )
        return found, match

    def candidates(self, ids: Iterable[str], values: Iterable[str]) -> list[int]:
        """The spilled positions a lookup of these ids, content hashes or
        keys (``values``) would read back: their tags match. From memory,
        lock-free. O(1) expected each."""
        base = self._cols.base
        out: list[int] = []
        if base == 0:
            return out
        ids, values = list(ids), list(values)
        n = self.n
        for gens, keys, h in (
            (self._by_id, ids, self._h),
            (self._by_hash, values, self._hc),
            (self._by_key, values, self._h),
        ):
            for k in keys:
                hk = h(k)
                for index in gens:
                    out.extend(p for p in index.candidates(hk, n) if p < base)
        return out

    def prefetch(self, ids: Iterable[str], values: Iterable[str]) -> Prefetched:
        """Read back, *before* the owner's write lock is taken, every spilled
        tombstone a lookup of these ids, content hashes or keys would read
        (issue 21: the re-admission guard and ``mark_stale`` read the sink
        under the write lock). The lookups under the lock then find them in
        memory. The positions stay *held* — never evicted by another
        thread's prefetch — until the returned :class:`Prefetched` is
        released (after the lookups ran); past :data:`_RESOLVED_MOST` kept,
        a prefetch evicts every position nobody holds. A read that fails is
        left to the lookup (which raises). O(candidates) reads, none when
        nothing matches a tag. Thread-safe: a small lock guards the holds
        and the swap of the resolved table, never a read."""
        want = self.candidates(ids, values)
        if not want:
            return _NOTHING_HELD
        with self._held_lock:
            held = self._held
            for p in want:
                held[p] = held.get(p, 0) + 1
            known = self._resolved
        got: dict[int, dict[str, Any]] = {}
        for p in want:
            if p not in known:
                try:
                    got[p] = self._raw(p)
                except QuiesceError:
                    pass
        with self._held_lock:
            resolved = self._resolved
            if len(resolved) + len(got) > _RESOLVED_MOST:
                held = self._held
                resolved = {p: d for p, d in resolved.items() if p in held}
            else:
                resolved = dict(resolved)
            resolved.update(got)
            self._resolved = resolved  # one store: a reader sees the old dict or the new
        return Prefetched(self, want)

    def release(self, positions: Iterable[int]) -> None:
        """Stop holding ``positions`` (one hold each, see :meth:`prefetch`)."""
        with self._held_lock:
            held = self._held
            for p in positions:
                left = held.get(p, 0) - 1
                if left > 0:
                    held[p] = left
                else:
                    held.pop(p, None)


class Prefetched:
    """The positions one :meth:`TombStore.prefetch` holds in memory until
    :meth:`release` (idempotent; call it after the write lock is left, also
    on error)."""

    __slots__ = ("_positions", "_store")

    def __init__(self, store: TombStore | None, positions: list[int]) -> None:
        self._store = store
        self._positions = positions

    def release(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store.release(self._positions)


_NOTHING_HELD = Prefetched(None, [])


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

    @property
    def spilled(self) -> bool:
        """Whether some of these tombstones are spilled (read back from the
        sink when asked for). O(1)."""
        store = self._store
        return store is not None and store._cols.base > 0

    def prefetch(self, ids: Iterable[str], values: Iterable[str] = ()) -> Prefetched:
        """Read back the spilled tombstones that lookups of these ids and
        content hashes or keys (``values``) will verify, so that those
        lookups, made later under the owner's write lock, find them in
        memory (see :meth:`TombStore.prefetch`). Call it *outside* the write
        lock, and release the result once the lookups ran. Nothing is read
        for a store with nothing spilled."""
        store = self._store
        if store is not None and store._cols.base:
            return store.prefetch(ids, values)
        return _NOTHING_HELD

    def check_index(self) -> None:
        """Raise :class:`LogFormatError` unless every tombstone is found
        through the store's indexes (see :meth:`TombStore.check_index`;
        reads every spilled tombstone back)."""
        if self._store is not None:
            self._store.check_index(self._n)

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

    def admission(
        self, entry_id: str, content_hash: str, key: str | None
    ) -> tuple[Tombstone | None, Tombstone | None]:
        """``(self.get(entry_id), self.matching(content_hash, key))`` in one
        pass over the store (:meth:`TombStore.lookup`): what admitting an
        entry asks. A tombstone is built only for a hit. O(1) expected."""
        store = self._store
        if store is None or not self._n:
            return None, None
        found, match = store.lookup(entry_id, content_hash, key, self._n)
        return (
            None if found < 0 else store.tomb(found),
            None if match < 0 else store.tomb(match),
        )

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
