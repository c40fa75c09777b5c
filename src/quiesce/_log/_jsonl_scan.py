"""Reading a JSONL log's bytes: the header, the batches, the torn tail.

What it keeps true (the format and the crash rules are in :mod:`.jsonl`'s
docstring): a record is trusted only when a matching commit line (CRC-32
and count) follows its batch; a torn tail is skipped, never misread;
damage followed by a second commit line, an invalid record inside a
committed batch and a newer format are refused with
:class:`LogFormatError`. :func:`open_scan` checks every committed batch at
C speed and decodes no record (O(file size) byte work, O(batches) Python
steps); :func:`scan` decodes and checks every line (O(size)). Pure
functions of the bytes given, except :func:`open_fd` and
:func:`pread_all`, which read a descriptor (blocking: never on the event
loop).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import time
import zlib
from array import array
from typing import NamedTuple

from .._core.errors import LogFormatError
from .._core.records import FORMAT, LogRecord
from ._format import JSONL_TAG, check_log_format, decode_json, decode_record

__all__ = [
    "CHECKPOINT_LINE",
    "CHECKPOINT_OP",
    "COMMIT_PREFIX",
    "RECORD_START",
    "Bytes",
    "JsonlContents",
    "Opened",
    "header_end",
    "header_line",
    "open_fd",
    "open_scan",
    "pread_all",
    "scan",
    "scan_from",
]

#: How a commit line starts (the record lines start with ``{"format":``).
COMMIT_PREFIX = b'{"commit":'

#: What the scanners read: the file's bytes, or a read-only map of them.
Bytes = bytes | mmap.mmap


class JsonlContents(NamedTuple):
    """What a JSONL log holds: its committed records, where the committed
    data ends, and how many bytes of torn tail follow it (ignored)."""

    format: int
    records: list[LogRecord]
    committed_size: int
    torn_bytes: int


def header_end(data: Bytes, path: str) -> tuple[int, int]:
    """The header line's format and where the records start. Raises
    :class:`LogFormatError` for a file that is not a quiesce log or is from
    a newer format."""
    end = data.find(b"\n")
    try:
        header = decode_json(data[:end] if end >= 0 else data[:])
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("quiesce") != JSONL_TAG or end < 0:
        raise LogFormatError(f"{path} is not a quiesce JSONL edit log (no header line)")
    fmt = header.get("format")
    if type(fmt) is not int or fmt < 1:
        raise LogFormatError(f"{path}: the header has no valid format field")
    check_log_format(path, fmt)
    return fmt, end + 1


def scan(data: Bytes, path: str) -> JsonlContents:
    """Parse a whole JSONL log. O(size). Raises :class:`LogFormatError` for a
    file that is not a quiesce log, is from a newer format, or is damaged
    before its last commit line."""
    fmt, start = header_end(data, path)
    records, committed_size = scan_from(data, path, start, 0, None)
    return JsonlContents(fmt, records, committed_size, len(data) - committed_size)


def scan_from(
    data: Bytes,
    path: str,
    start: int,
    first_seq: int,
    batches: list[tuple[int, int]] | None,
) -> tuple[list[LogRecord], int]:
    """Decode and check every line from ``start`` (a line start; the next
    record is ``first_seq``): the committed records and where the committed
    data ends. Notes ``(first seq, offset)`` of each committed batch in
    ``batches``. O(bytes from ``start``). Raises :class:`LogFormatError` for
    damage followed by a second commit line or an invalid record in a
    committed batch (see the module docstring)."""
    committed: list[LogRecord] = []
    pending: list[LogRecord] = []
    committed_size = batch_start = pos = start
    # The batch being read: its record lines, and the first of them that is
    # not a valid record. Whether that is damage or a torn tail is decided at
    # the commit line: if the batch's CRC and count match, the batch was
    # written whole, so an invalid record in it is refused (crafted or
    # written so); otherwise the batch is torn.
    batch_lines = 0
    batch_error: LogFormatError | None = None
    # The first failed commit, and how many commit lines were seen from it
    # on: the torn batch may own one; a second means that committed data
    # follows the damage, which no crash can produce.
    damaged: LogFormatError | None = None
    commits_since_damage = 0
    line_no = 1
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            break  # what is left has no newline: torn, whatever it looks like
        line_no += 1
        line_start, line = pos, data[pos:end]
        pos = end + 1
        where = f"{path}: line {line_no}"
        try:
            obj = decode_json(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "commit" in obj:
            if damaged is None:
                intact = (
                    type(obj.get("n")) is int
                    and obj["n"] == batch_lines
                    and type(obj.get("crc")) is int
                    and obj["crc"] == zlib.crc32(data[batch_start:line_start])
                )
                if intact and batch_error is not None:
                    raise LogFormatError(f"{batch_error} (in a committed batch)")
                last = pending[-1].seq if pending else None
                if intact and type(obj["commit"]) is type(last) and obj["commit"] == last:
                    if batches is not None:
                        batches.append((pending[0].seq, batch_start))
                    committed.extend(pending)
                    pending = []
                    batch_lines = 0
                    committed_size = batch_start = pos
                    continue
                damaged = batch_error or LogFormatError(
                    f"{where}: the commit does not match the {batch_lines} record(s) before it"
                )
            commits_since_damage += 1
            if commits_since_damage > 1:
                raise LogFormatError(f"{damaged}; committed data follows (not a torn tail)")
            continue
        if damaged is not None:
            continue
        batch_lines += 1
        if batch_error is not None:
            continue
        if isinstance(obj, dict) and type(obj.get("format")) is int and obj["format"] > FORMAT:
            decode_record(obj, where)  # a newer writer's record: raises, never skipped
        try:
            if obj is None:
                raise LogFormatError(f"{where} is not valid JSON")
            rec = decode_record(obj, where)
            expected = first_seq + len(committed) + len(pending)
            if rec.seq != expected:
                raise LogFormatError(f"{where} has seq {rec.seq}, expected {expected}")
        except LogFormatError as exc:
            batch_error = exc  # a torn tail, unless its commit line vouches for it
            continue
        pending.append(rec)
    return committed, committed_size


#: How every record line of this format starts (``LogRecord.to_dict``'s key
#: order, encoded by ``_format``): the open's fast path checks batches by it.
RECORD_START = b'{"format":%d,"seq":' % FORMAT
CHECKPOINT_LINE = re.compile(
    rb'\{"format":%d,"seq":(\d+),"time":[-+.0-9eE]+,"op":"checkpoint",' % FORMAT
)
CHECKPOINT_OP = b',"op":"checkpoint",'


class Opened(NamedTuple):
    """What opening a JSONL log learns without decoding its records."""

    format: int
    next_seq: int
    committed_size: int
    torn_bytes: int
    starts: array[int]  #: first seq of each committed batch, ascending
    offsets: array[int]  #: file offset of each committed batch
    checkpoints: list[int]  #: seqs of the checkpoint records


def open_scan(data: Bytes, path: str) -> Opened:
    """Open a JSONL log without decoding its records (issue 13): each
    committed batch is checked at C speed — its commit line parsed, its
    CRC-32 and line count compared, every line starting with this format's
    record prefix, its first and last ``seq`` read from those prefixes —
    and noted in a batch index (first seq, offset); checkpoint records are
    found by their line prefix. From the first batch that does not pass (a
    torn tail, damage, a record of another format, anything unusual), the
    rest is decoded and checked line by line exactly as :func:`scan` does,
    so a torn tail, damage followed by committed data, and a newer record
    behave as before. A record inside a batch that passed is decoded only
    when it is read (``read_range``, ``load``), and refused then if invalid.
    O(file size) byte work, O(batches) Python steps, no per-record objects."""
    fmt, pos = header_end(data, path)
    starts: array[int] = array("q")
    offsets: array[int] = array("q")
    checkpoints: list[int] = []
    seq = 0
    while True:
        c = data.find(b"\n" + COMMIT_PREFIX, pos - 1)
        if c < 0 or c + 1 <= pos:
            break
        cend = data.find(b"\n", c + 1)
        if cend < 0:
            break
        try:
            obj = decode_json(data[c + 1 : cend])
        except ValueError:
            break
        if not isinstance(obj, dict):
            break
        n, crc, last = obj.get("n"), obj.get("crc"), obj.get("commit")
        if type(n) is not int or type(crc) is not int or type(last) is not int or n < 1:
            break
        if last != seq + n - 1:
            break
        batch = data[pos : c + 1]
        if (
            batch.count(b"\n") != n
            or not batch.startswith(RECORD_START + b"%d," % seq)
            or batch.count(b"\n" + RECORD_START) != n - 1
            or not batch.startswith(
                RECORD_START + b"%d," % last, batch.rfind(b"\n", 0, len(batch) - 1) + 1
            )
            or zlib.crc32(batch) != crc
        ):
            break
        i = batch.find(CHECKPOINT_OP)
        while i >= 0:  # a checkpoint record's line starts with its prefix
            m = CHECKPOINT_LINE.match(batch, batch.rfind(b"\n", 0, i) + 1)
            if m is not None and m.end() == i + len(CHECKPOINT_OP):
                checkpoints.append(int(m.group(1)))
            i = batch.find(CHECKPOINT_OP, i + 1)
        starts.append(seq)
        offsets.append(pos)
        seq += n
        pos = cend + 1
    batches: list[tuple[int, int]] = []
    records, committed_size = scan_from(data, path, pos, seq, batches)
    for first, offset in batches:
        starts.append(first)
        offsets.append(offset)
    checkpoints.extend(r.seq for r in records if r.op == "checkpoint")
    return Opened(
        fmt,
        seq + len(records),
        committed_size,
        len(data) - committed_size,
        starts,
        offsets,
        checkpoints,
    )


def header_line() -> bytes:
    """A new log's first line: the tag, this format, the creation time."""
    obj = {"quiesce": JSONL_TAG, "format": FORMAT, "created": time.time()}
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("ascii")


def open_fd(fd: int, path: str, may_map: bool = True) -> Opened:
    """:func:`open_scan` of the file open on ``fd``, through a read-only
    memory map when ``may_map`` (the file is not copied into memory): only
    while a lock keeps every writer out, since a writer truncating a mapped
    file would crash the reader (``SIGBUS``); otherwise read whole."""
    size = os.fstat(fd).st_size
    if size == 0:
        return open_scan(b"", path)
    if not may_map:
        return open_scan(pread_all(fd, size), path)
    try:
        data = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # pragma: no cover - a file system without mmap
        return open_scan(pread_all(fd, size), path)
    try:
        return open_scan(data, path)
    finally:
        data.close()


def pread_all(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of ``fd`` (fewer if the file is shorter)."""
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 30), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
