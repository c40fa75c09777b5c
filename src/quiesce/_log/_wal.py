"""The write-ahead-log verifier of a SQLite log: a flipped bit in ``<path>-wal``
is refused, not recovered around.

What it keeps true: :func:`_check_wal` raises :class:`LogFormatError` for a
write-ahead log whose damage is followed by the commit of a later
transaction (that cannot come from a crash), and returns for a clean WAL, a
missing one or damage confined to the last transaction (a torn write, which
SQLite's own recovery then drops, as a JSONL log drops a torn last batch).
It only reads: nothing here opens the database through SQLite, so it is safe
to call before the file is trusted and under the log's ``flock``.

Why it is needed: SQLite's WAL recovery keeps the frames up to the first one
whose cumulative checksum fails and drops the rest silently — right for a
torn write, wrong for a flipped bit with committed transactions behind it:
the log would recover a prefix of itself without a word.

Cost: O(WAL size), one pass per byte order (the magic that names the order
may itself be the damage). Prior art: SQLite's "Write-Ahead Logging" and
"WAL-mode File Format" documents (the checksum is theirs, reimplemented).
"""

from __future__ import annotations

import struct

from .._core.errors import LogFormatError

_WAL_MAGICS = {0x377F0682: "<", 0x377F0683: ">"}  # checksum word order


def _wal_sum(data: bytes, order: str, s0: int, s1: int) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes) seeded with
    ``(s0, s1)``."""
    for x0, x1 in struct.iter_unpack(order + "II", data):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


def _wal_damage(wal: bytes, page_size: int, order: str) -> int | None:
    """Where SQLite would stop reading ``wal`` (the index of the first frame
    that fails its checksum, -1 for the header) if committed transactions
    follow that point, else ``None``.

    SQLite's WAL recovery keeps the frames up to the first one whose
    cumulative checksum fails and drops the rest silently: right for a torn
    write, wrong for a flipped bit with committed transactions behind it.
    A frame after the damage is checked *locally* (its checksum seeded with
    its predecessor's stored or recomputed one, its salts the header's). A
    crash can tear only the transaction being written, so damage followed by
    the commit frames of another transaction cannot be a torn write (as a
    JSONL commit line after damage cannot). The damaged frame's own commit
    mark decides how many commits must follow (one after a damaged commit
    frame, two otherwise): a flip that clears that mark itself can still pass
    for a torn last transaction. O(WAL size)."""
    if len(wal) < 32:
        return None
    magic, version, _size, _ckpt, salt1, salt2, c0, c1 = struct.unpack(">8I", wal[:32])
    header_sum = _wal_sum(wal[:24], order, 0, 0)
    header_ok = _WAL_MAGICS.get(magic) == order and version == 3007000 and header_sum == (c0, c1)
    bad: int | None = None if header_ok else -1
    need = 1  # commit frames after the damage that prove it is not a torn tail
    found = 0
    # The stored checksum of the previous frame, and the one computed over
    # it: they differ only at the damaged frame, and either may be the true
    # one (the flip hit its data, or its stored checksum).
    prev_stored, prev_computed = (c0, c1), header_sum
    frame = 24 + page_size
    for k, off in enumerate(range(32, len(wal) - frame + 1, frame)):
        pgno, db_size, s1, s2, f0, f1 = struct.unpack(">6I", wal[off : off + 24])
        data = wal[off : off + 8] + wal[off + 24 : off + frame]
        computed = _wal_sum(data, order, *prev_stored)
        local = (s1, s2) == (salt1, salt2) and pgno > 0
        if local and computed != (f0, f1):
            local = prev_computed != prev_stored and _wal_sum(data, order, *prev_computed) == (
                f0,
                f1,
            )
        if bad is None:
            if not local:
                bad, need = k, 1 if db_size else 2
        elif local and db_size:
            found += 1
            if found >= need:
                return bad
        prev_stored, prev_computed = (f0, f1), computed
    return None


def _check_wal(path: str) -> None:
    """Refuse a log whose write-ahead log (``<path>-wal``, present after a
    crash) is damaged before committed transactions: SQLite would recover a
    prefix silently. Reads only; O(WAL size)."""
    try:
        with open(path + "-wal", "rb") as f:
            wal = f.read()
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        return
    page_size = int.from_bytes(head[16:18], "big") if len(head) >= 18 else 0
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512:
        return  # the database header is refused on its own
    for order in ("<", ">"):  # both: the magic that says which may be the damage
        at = _wal_damage(wal, page_size, order)
        if at is not None:
            where = "its header" if at < 0 else f"frame {at}"
            raise LogFormatError(
                f"{path} is damaged: its write-ahead log fails its checksum at {where} "
                f"and committed transactions follow (not a torn write)"
            )
