"""``JsonlLog``: a durable edit-log sink in a plain text file, one record a line.

Format (version :data:`~quiesce._core.records.FORMAT`), ASCII JSON lines:

* line 1, the header: ``{"quiesce":"edit-log","format":1,"created":<UNIX time>}``;
* then batches: one line per record (:meth:`LogRecord.to_dict`, see
  ``_format``), followed by one **commit line**
  ``{"commit":<seq of the batch's last record>,"n":<records>,"crc":<CRC-32>}``
  where the CRC-32 covers the batch's record lines, newlines included.

A batch is one ``write`` call of the buffer (a ``flush()`` or a removal):
its bytes are written with one ``pwrite`` at the end of the committed data
and then ``fsync``-ed, and only then does ``write`` return. Recovery trusts a
record only if a matching commit line follows it, so a batch is atomic.

What holds after a crash (SIGKILL, or power loss) at any moment: the file
holds every batch whose ``write`` returned, and possibly a **torn tail** — a
partial batch, a half line, zeroed blocks, or a last batch whose commit line
reached the disk before one of its records did (no ordering inside one write
before ``fsync``; the CRC catches it). The torn tail is ignored on load, never
misread, and it is truncated before the next batch is written, so later
records are never stored behind garbage. Damage followed by a *second*
commit line cannot come from a crash (the writer never writes past a batch
it has not synced): opening raises :class:`LogFormatError` instead. The one
case that cannot be told apart — bit rot inside the very last batch — is
treated as a torn tail (that batch is dropped and ``torn_bytes`` says so).

Faults. If writing or syncing a batch fails (``EIO``, ``ENOSPC``, a file
that became read-only), the sink truncates the file back to its committed
end and raises; the buffer turns that into :class:`LogWriteError`, keeps the
records pending and retries them on the next ``flush()``. If even the
truncation fails, the next write truncates first. A read-only file opens
(it can be recovered and inspected); writes to it raise until it becomes
writable again.

Invariants: the committed part of the file only grows; records are stored in
``seq`` order with no gap (``write`` refuses a batch that does not continue
the log); only one ``JsonlLog`` object writes a file at a time (an exclusive
``flock`` for the object's life; a second opener gets :class:`~quiesce.LogLocked`,
a :class:`~quiesce.QuiesceError` and a ``BlockingIOError``).

Any content is safe to open: a line is parsed by :func:`~._format.decode_json`
(any nesting depth, never ``RecursionError``) and every record is checked
field by field, so a torn tail is skipped whatever it holds and damage is
reported as :class:`LogFormatError`. A batch whose commit line matches it
(CRC and count) was written whole, so an invalid record inside it is refused
rather than taken for a torn tail.

Opening costs what the live window costs, not what history costs (issue 13):
it decodes no record. Each committed batch is checked at C speed (its commit
line, CRC-32, line count, and every line's record prefix ``{"format":F,
"seq":N,``, first and last ``seq``) and noted in a batch index (first seq
and offset, 16 bytes a batch); checkpoint records are found by their line
prefix. From the first batch that does not pass, the rest of the file is
decoded line by line as before, so a torn tail, damage followed by committed
data and a newer-format record behave exactly as they always did. A record
in a batch that passed is decoded and checked when it is read (recovery
reads the newest checkpoint and the records after it; ``buf.log`` reads
older ones through the index), and an invalid one is refused then. Open
cost: O(file size) byte work in C, O(batches) Python steps, no per-record
object.

Opening a file that is not a quiesce log, or a log from a newer format,
raises :class:`LogFormatError` and writes nothing. A missing or empty file is
created as a new log (built beside it and moved into place, so a log file is
never half-initialized).

Prior art: write-ahead logs with commit records (ARIES, SQLite's WAL frames
with their commit markers), and ``git``'s lock-then-rename creation.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import weakref
import zlib
from bisect import bisect_right
from collections.abc import Generator, Iterator, Sequence

from .._core.errors import LogFormatError
from .._core.log import check_read
from .._core.records import LogRecord
from ._format import (
    decode_json,
    decode_record,
    encode_batch,
    install,
    lock_exclusive,
    log_path,
    records_before,
    sniff,
    temp_name,
)
from ._jsonl_scan import COMMIT_PREFIX, JsonlContents, header_line, open_fd, pread_all, scan
from ._sink import SinkBase

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]

__all__ = ["JsonlContents", "JsonlLog", "read_jsonl", "stream_jsonl"]

_READ_ONLY_ERRNOS = frozenset((errno.EACCES, errno.EPERM, errno.EROFS))


def read_jsonl(path: str | os.PathLike[str]) -> JsonlContents:
    """Read a JSONL log without opening it for writing (for ``quiesce
    inspect``). Raises :class:`LogFormatError` like :class:`JsonlLog`."""
    p = log_path(path, "JSONL log")
    with open(p, "rb") as f:
        data = f.read()
    return scan(data, p)


def _create(path: str) -> None:
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, header_line())
        os.fsync(fd)
    finally:
        os.close(fd)
    install(tmp, path)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


class JsonlLog(SinkBase):
    """A durable, append-only edit-log sink in a JSONL file (see the module
    docstring for the format and what holds after a crash).

    ``JsonlLog(path)`` opens or creates the log; ``Buffer(log=JsonlLog(path))``
    recovers the buffer from it. Opening checks every batch's CRC and shape
    at C speed and decodes nothing but commit lines (records are decoded
    when read): O(size) byte work, O(batches) Python steps. ``write`` is one
    ``pwrite`` + one ``fsync`` per batch, however many records. Thread-safe.
    Use it as a context manager or call :meth:`close`.
    """

    _SINK = "JsonlLog"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = -1
        self._path = log_path(path, "JsonlLog")
        #: serialises writers (held through pwrite and fsync)
        self._lock = threading.Lock()
        #: guards the descriptor and the batch index (issue 21): readers take
        #: only this one, which a writer holds just to publish a committed
        #: batch, never across its fsync, so a read never waits on a write
        self._index_lock = threading.Lock()
        self._commits = 0
        kind = sniff(self._path) if os.path.exists(self._path) else "empty"
        if kind == "sqlite":
            raise LogFormatError(f"{self._path} is a SQLite database; open it with SQLiteLog")
        if kind == "empty":
            _create(self._path)
        self._read_only = False
        try:
            fd = os.open(self._path, os.O_RDWR)
        except OSError as exc:
            if not _is_read_only(exc):
                raise
            fd = os.open(self._path, os.O_RDONLY)
            self._read_only = True
        try:
            lock_exclusive(fd, self._path, "JsonlLog")
            opened = open_fd(fd, self._path)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._next_seq = opened.next_seq
        #: seqs of the checkpoint records (noted on open and on write)
        self._checkpoints = opened.checkpoints
        #: the batch index: first seq and file offset of each committed batch
        self._starts = opened.starts
        self._offsets = opened.offsets
        self._size = opened.committed_size
        # bytes after the committed end (a torn tail) are truncated before the next write
        self._dirty = opened.torn_bytes > 0
        #: bytes of torn tail found (and ignored) when the file was opened
        self.torn_bytes = opened.torn_bytes

    # -- LogSink ----------------------------------------------------------

    def load(self) -> Sequence[LogRecord]:
        """The committed records in ``seq`` order (a torn tail is left out),
        decoded and checked line by line (:func:`scan`). O(size)."""
        with self._lock:
            self._check_open()
            data = pread_all(self._fd, self._size)
        return scan(data, self._path).records

    # -- reading back (ReadableSink, issue 13) -----------------------------

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        """Records ``start`` .. ``stop - 1`` (the ``ReadableSink`` method, see
        ``quiesce._core.log``), read from the file through the batch index
        built while opening (first seq and offset of each committed batch,
        16 bytes a batch) and extended by each write: a bisection, then one
        streaming read from the batch holding ``start``. O(log batches + the
        bytes read). Every record read is decoded and its ``seq`` checked: a
        missing or damaged one raises :class:`LogFormatError`, never another
        record. Never waits on a write's ``fsync``: it takes only the index
        lock, and reads committed bytes only (below the index's end)."""
        if start >= stop:
            return []
        with self._index_lock:
            if self._fd < 0:
                # Closed: read read-only (a buffer's log stays readable after
                # its sink is closed): the open's checks (O(file size) in C),
                # then only the records asked for are decoded.
                stream = stream_jsonl(self._path, start)[2]
                return check_read(records_before(stream, stop), start, stop)
            if start < 0 or stop > self._next_seq:
                raise LogFormatError(
                    f"{self._path}: records {start}..{stop - 1} asked, the log holds "
                    f"{self._next_seq}: a record has gone missing"
                )
            slot = bisect_right(self._starts, start) - 1
            if slot < 0:
                raise LogFormatError(f"{self._path}: record {start} is not in the file")
            out: list[LogRecord] = []
            lines = _record_lines(self._fd, self._starts[slot], self._offsets[slot], self._size)
            for seq, offset, line in lines:
                if seq >= start:
                    held = [line]
                    del line  # only ``held`` has it: dropped once decoded to text
                    out.append(_decode_line(self._path, seq, offset, held))
                    if len(out) == stop - start:
                        break
        return check_read(out, start, stop)

    def checkpoints(self) -> tuple[int, Sequence[int]]:
        """The number of committed records and the seqs of the checkpoint
        records, ascending (the ``CheckpointSink`` method, see
        ``quiesce._core.checkpoint``), noted while opening and writing. O(1)
        plus the copy."""
        with self._index_lock:
            self._check_open()
            return self._next_seq, list(self._checkpoints)

    def write(self, records: Sequence[LogRecord]) -> None:
        """Append ``records`` as one batch and ``fsync``: when this returns
        they are durable; when it raises, none of them will be recovered.

        Each record is encoded on its own: if one cannot be, the records
        before it are written as the batch and a ``ValueError`` names it.
        Raises ``ValueError`` for a batch that does not continue the log (a gap
        or a repeat), ``OSError`` for an I/O failure (the file is truncated
        back to its committed end), ``PermissionError`` for a read-only file.
        """
        if not records:
            return
        lines, failure = encode_batch(records)
        records = records[: len(lines)]
        expected = records[-1].seq + 1
        batch = ("\n".join(lines) + "\n").encode("ascii")
        commit = {"commit": records[-1].seq, "n": len(records), "crc": zlib.crc32(batch)}
        data = batch + (json.dumps(commit, separators=(",", ":")) + "\n").encode("ascii")
        with self._lock:
            self._check_open()
            if records[0].seq != self._next_seq:
                raise ValueError(
                    f"batch starts at seq {records[0].seq} but the log holds {self._next_seq} "
                    f"records"
                )
            if self._read_only:
                with self._index_lock:
                    self._reopen_writable()
            fd = self._fd
            if self._dirty:
                # Durably gone before new bytes go where it was: a torn tail
                # and a new torn batch must never mix after a power cut.
                os.ftruncate(fd, self._size)
                os.fsync(fd)
                self._dirty = False
            try:
                _pwrite_all(fd, data, self._size)
                os.fsync(fd)
            except BaseException:
                self._dirty = True
                try:
                    os.ftruncate(fd, self._size)
                    os.fsync(fd)
                    self._dirty = False
                except OSError:
                    pass  # the next write truncates first; recovery ignores it anyway
                raise
            with self._index_lock:  # committed: publish the batch to readers
                self._starts.append(records[0].seq)
                self._offsets.append(self._size)
                self._size += len(data)
                self._next_seq = expected
                self._commits += 1
                self._checkpoints.extend(r.seq for r in records if r.op == "checkpoint")
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Release the file and its lock. Idempotent; ``write`` after it raises."""
        with self._lock, self._index_lock:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                os.close(fd)

    def __del__(self) -> None:
        # Like a file object: a forgotten log releases its descriptor and lock.
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            self._fd = -1
            os.close(fd)

    # -- extras -----------------------------------------------------------

    @property
    def path(self) -> str:
        """The log file's path."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._fd < 0

    def _place(self) -> str:
        return repr(self._path)

    def _check_open(self) -> None:
        if self._fd < 0:
            raise ValueError(f"JsonlLog {self._path!r} is closed")

    def _reopen_writable(self) -> None:
        """A read-only file may have become writable: swap in a writable
        descriptor (keeping the lock), or raise ``PermissionError``."""
        try:
            fd = os.open(self._path, os.O_RDWR)
        except OSError as exc:
            raise PermissionError(exc.errno, f"edit log {self._path} is read-only") from exc
        if fcntl is not None:
            # Move the lock from the read-only descriptor to the new one.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BaseException:
                os.close(fd)
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = fd
        self._read_only = False


_READ_CHUNK = 1 << 20


def _lines(fd: int, pos: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` of each complete line of ``fd`` from ``pos`` to
    ``end``, read in chunks (streaming: memory is one chunk plus one line)."""
    data = b""
    base = pos  # file offset of data[0]
    i = 0
    while True:
        nl = data.find(b"\n", i)
        if nl < 0:
            if pos >= end:
                return
            chunk = os.pread(fd, min(_READ_CHUNK, end - pos), pos)
            if not chunk:
                return
            data = data[i:] + chunk
            base += i
            i = 0
            pos += len(chunk)
            continue
        line = data[i:nl]
        at = base + i
        i = nl + 1
        if 2 * len(line) > len(data):
            # a long line (a checkpoint's): the buffer holding it is not
            # kept while the consumer decodes it (issue 21); the rest of
            # the buffer, shorter than the line, is copied once
            data = data[i:]
            base += i
            i = 0
        held = [line]
        del line  # held by the consumer only, not by this suspended frame
        yield at, held.pop()


def _record_lines(fd: int, seq: int, pos: int, end: int) -> Iterator[tuple[int, int, bytes]]:
    """``(seq, offset, line)`` of each record line of ``fd`` from ``pos`` (the
    start of the batch whose first record is ``seq``) to ``end``, commit
    lines skipped, undecoded. Streaming, like :func:`_lines`."""
    for offset, line in _lines(fd, pos, end):
        if not line.startswith(COMMIT_PREFIX):
            held = [line]
            del line  # not held by this suspended frame (see _lines)
            yield seq, offset, held.pop()
            seq += 1


def _decode_line(path: str, seq: int, offset: int, held: list[bytes]) -> LogRecord:
    """The record on the line ``held`` holds (its one item: record ``seq``,
    at byte ``offset``), decoded and checked field by field;
    :class:`LogFormatError` naming it if it is not valid JSON (or not UTF-8)
    or not a valid record. The line is taken out of ``held`` and dropped
    once it is text, before the text is parsed: a caller that holds it
    only through ``held`` keeps the line's bytes, its text and the parsed
    record at once never, only two of them (a checkpoint's line is
    O(tombstones): issue 21). O(line)."""
    where = f"{path}: record {seq} (byte {offset})"
    try:
        text = held.pop().decode("utf-8")
        obj = decode_json(text)
    except ValueError:
        raise LogFormatError(f"{where} is not valid JSON") from None
    return decode_record(obj, where)


def _lock_shared(fd: int) -> bool:
    """Take a shared ``flock`` on ``fd`` without waiting; False if a writer
    holds the file (or there are no advisory locks)."""
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _is_read_only(exc: OSError) -> bool:
    return exc.errno in _READ_ONLY_ERRNOS


def stream_jsonl(
    path: str | os.PathLike[str], start: int = 0
) -> tuple[int, int, Generator[LogRecord, None, None]]:
    """A JSONL log read without opening it for writing and without holding
    its records (for ``quiesce inspect``, and reading back from a closed
    sink): its format, the bytes of torn tail, and an iterator over its
    committed records from ``start`` on, decoded and checked one at a time
    (the batch index finds the batch holding ``start``; the lines before it
    in that batch are skipped undecoded). Opening checks the whole file as
    :class:`JsonlLog` does (raises :class:`LogFormatError` alike); iterating
    raises it for a record that does not decode or is out of sequence.
    Memory: O(batches) for the index plus one read chunk, whatever the log's
    length. The descriptor is closed when the iterator ends or is
    discarded."""
    p = log_path(path, "JSONL log")
    fd = os.open(p, os.O_RDONLY)
    try:
        # A shared lock while the file is scanned keeps writers out, so it
        # may be mapped; a live writer holds its exclusive lock, and the
        # file is then read whole instead (a writer opening during the scan
        # gets LogLocked, as against any other holder).
        shared = _lock_shared(fd)
        try:
            opened = open_fd(fd, p, may_map=shared)
        finally:
            if shared:
                fcntl.flock(fd, fcntl.LOCK_UN)
    except BaseException:
        os.close(fd)
        raise

    def records() -> Generator[LogRecord, None, None]:
        try:
            slot = max(bisect_right(opened.starts, start) - 1, 0)
            if slot >= len(opened.offsets):
                return
            read = first = opened.starts[slot]
            for seq, offset, line in _record_lines(
                fd, first, opened.offsets[slot], opened.committed_size
            ):
                if seq >= start:
                    held = [line]
                    del line  # only ``held`` has it: dropped once decoded to text
                    rec = _decode_line(p, seq, offset, held)
                    if rec.seq != seq:
                        raise LogFormatError(f"{p}: record {seq} (byte {offset}) has seq {rec.seq}")
                    yield rec
                read = seq + 1
            if read != opened.next_seq:
                raise LogFormatError(f"{p}: {read} records read, {opened.next_seq} committed")
        finally:
            release()

    stream = records()
    # closes the descriptor once: when the iterator ends, or when it is
    # discarded (even never started, when its own ``finally`` never runs)
    release = weakref.finalize(stream, os.close, fd)
    return opened.format, opened.torn_bytes, stream
