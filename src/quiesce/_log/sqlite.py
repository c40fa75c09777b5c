"""``SQLiteLog``: the embedded durable edit-log sink (standard-library ``sqlite3``).

Schema (file layout :data:`SQLITE_FORMAT`, holding records of format
:data:`~quiesce._core.records.FORMAT`; the file's ``PRAGMA application_id``
is ``0x51554945`` — ASCII ``QUIE`` — and its ``PRAGMA user_version`` is the
layout)::

    quiesce_meta(key TEXT PRIMARY KEY, value TEXT)   -- format, created, writer
    quiesce_log(seq INTEGER PRIMARY KEY,              -- 0, 1, 2, ... no gap
                record TEXT CHECK (json_valid(record)),
                crc INTEGER NOT NULL,                 -- layout 2: CRC-32 of seq and record
                format, time, op, version, ids,       -- generated from record,
                actor, reason, turn, outcome)         -- for people and SQL

``record`` is the source of truth (see ``_format``: ASCII JSON, exact for any
string); ``crc`` is :func:`record_crc` of the row's ``seq`` and ``record``,
so a record damaged on disk (a flipped bit SQLite's own checks miss) is
refused, as a JSONL batch's CRC is. The other columns are
*virtual generated columns* (``json_extract`` of the record, SQLite >= 3.31):
they cost nothing to write, cannot disagree with the record, and let a
person query the log with the ``sqlite3`` shell
(``SELECT seq, op, ids, reason FROM quiesce_log WHERE op = 'remove'``).

Triggers make the log append-only *in the database*: an ``UPDATE`` or
``DELETE`` on either table is aborted, and an ``INSERT`` whose ``seq`` is not
exactly the next one is aborted (so ``INSERT OR REPLACE`` and upserts cannot
rewrite history either, and two buffers writing one file fail loudly instead
of interleaving). No caller, the buffer included, can change or remove a
record through SQL. (A trigger cannot stop ``DROP TABLE`` or deleting the
file; that is the file system's job.)

Group commit. The database runs in WAL mode with ``synchronous=FULL``: one
``write(batch)`` is one ``BEGIN IMMEDIATE`` … ``COMMIT`` — one transaction,
one WAL sync — however many records it holds (:attr:`SQLiteLog.commits`
counts them). The buffer calls ``write`` only from ``flush()`` and before
publishing a removal, so ``append`` and ``mark_stale`` never wait for a disk.

After a crash (SIGKILL, power loss) at any moment, SQLite's WAL recovery
leaves exactly the transactions that committed: every batch whose ``write``
returned is there, a batch whose ``write`` did not return is there entirely
or not at all.

Faults. A failed ``write`` (I/O error, disk full, a read-only file) rolls its
transaction back and raises; the buffer turns that into
:class:`LogWriteError`, keeps the records pending and retries on the next
``flush()``. The next write reconnects first (a connection that found its
file read-only stays read-only) and re-reads where the log ends, so a
``COMMIT`` that failed after reaching the disk is not written twice.

Opening. A missing or empty file becomes a new log: it is built beside the
path and moved into place, so a log file is never half-initialized. An
existing file must be a quiesce log of a format this code reads; otherwise
opening raises :class:`LogFormatError` after reading only its 100-byte
header, and nothing is written to it. A log holding a record of a newer
format is refused too: that check probes a partial index of the records
above format 1 (``quiesce_log_formats``, empty in practice), O(log n); a
file written before the index is scanned once and then given it on its
first writable open (never a file that is refused). One writer per file: a
``SQLiteLog`` holds an exclusive ``flock`` on the database file for its life
(as :class:`~quiesce.JsonlLog` does), and a second one — in this or another
process — raises :class:`~quiesce.LogLocked` on open. (Without it two
writers each re-read where the log ends after a refused insert and could
skip their own records as "already stored".) ``flock`` and SQLite's own
POSIX locks do not interact; the lock's descriptor is closed only after the
connection, because closing any descriptor of a file drops the process's
POSIX locks on it.

Layout 1 (files written by quiesce 0.1.0, no ``crc`` column) is read and
appended to as layout 1: its records have no checksum, so they are trusted
as SQLite returns them (still validated field by field and replayed
against every invariant). A new file is always layout 2. Nothing migrates a
file in place: the log is append-only, and a migrated file could no longer be
opened by 0.1.0.

Damage. Recovery (:meth:`SQLiteLog.load`, :func:`read_sqlite`) first runs
``PRAGMA quick_check`` (every page and cell accounted for, O(file size)),
then checks each row's checksum, type and ``seq``; every ``sqlite3`` error
and every decoding error on the way is raised as :class:`LogFormatError`. A
damaged file therefore recovers exactly or is refused — never a prefix,
never a different record. (A fuzz test flips single bits over real files.)
After a crash the file may have a write-ahead log (``<path>-wal``) that no
checkpoint has folded in yet. SQLite's WAL recovery stops at the first frame
whose checksum fails and drops the rest silently — right for a torn write,
wrong for a flipped bit with committed transactions behind it. Opening
therefore checks the WAL first (:func:`~._wal._check_wal`, O(WAL size)): damage
followed by the commit of a later transaction cannot come from a crash and
is refused; damage in the last transaction is a torn write and that
transaction is dropped, as a JSONL log drops a torn last batch.

Parts: the tables, triggers and the checks that a file is a quiesce log are
:mod:`._sqlite_schema`; the WAL verifier is :mod:`._wal`; the registry of
the files this process holds (and the probe for another writer) is
:mod:`._file_locks`. This module is the sink and the streaming reads.

Prior art: SQLite's own WAL documentation ("How To Corrupt An SQLite
Database File", "Write-Ahead Logging"), PostgreSQL's group commit
(``commit_delay``), append-only audit tables guarded by triggers.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence

from .._core.errors import InvalidArgument, InvalidType, LogFormatError, LogLocked
from .._core.log import check_read
from .._core.records import LogRecord
from ._file_locks import _HELD, _HELD_LOCK, _held_fd, _writer_active
from ._format import (
    check_sequence,
    decode_json,
    decode_record,
    encode_batch,
    lock_exclusive,
    log_path,
    records_before,
    sniff,
)
from ._sink import SinkBase
from ._sqlite_schema import (
    _CHECKPOINTS,
    _INSERT,
    _SELECT,
    SQLITE_FORMAT,
    _check_header,
    _check_pages,
    _check_schema,
    _create,
    _ensure_checkpoint_index,
    _ensure_format_index,
    _refused_if_damaged,
    record_crc,
)
from ._stored import already_stored
from ._wal import _check_wal

__all__ = ["SQLITE_FORMAT", "SQLiteLog", "read_sqlite", "record_crc", "stream_sqlite"]


def _decode_rows(rows: Sequence[tuple[object, ...]], path: str, first: int = 0) -> list[LogRecord]:
    """Check and decode rows ``(seq, record[, crc])`` read from ``first`` on.
    Raises :class:`LogFormatError` naming the first bad row. O(size)."""
    records = []
    for index, row in enumerate(rows, first):
        seq, text = row[0], row[1]
        where = f"{path}: record {seq}"
        if seq != index or type(seq) is not int:
            raise LogFormatError(f"{path}: record {index} has seq {seq!r} (a gap or a repeat)")
        if type(text) is not str:
            raise LogFormatError(f"{where} is not text")
        if len(row) > 2 and (type(row[2]) is not int or row[2] != record_crc(seq, text)):
            raise LogFormatError(f"{where} fails its checksum (damaged)")
        try:
            obj = decode_json(text)
        except ValueError as exc:
            raise LogFormatError(f"{where} is not valid JSON") from exc
        rec = decode_record(obj, where)
        if rec.seq != seq:
            raise LogFormatError(f"{where} says it is seq {rec.seq}")
        records.append(rec)
    if first == 0:
        check_sequence(records, path)
    return records


def _read_rows(
    conn: sqlite3.Connection, layout: int, path: str, first: int = 0, stop: int | None = None
) -> list[LogRecord]:
    """Records ``first`` to ``stop`` (exclusive; ``None``: the end), checked."""
    where = " WHERE seq >= ?" + ("" if stop is None else " AND seq < ?")
    args = (first,) if stop is None else (first, stop)
    with _refused_if_damaged(path):
        rows = conn.execute(_SELECT[layout] + where + " ORDER BY seq", args).fetchall()
    return _decode_rows(rows, path, first)


def read_sqlite(path: str | os.PathLike[str]) -> tuple[int, list[LogRecord]]:
    """The format and records of a SQLite log, read through a read-only
    connection (for ``quiesce inspect``; never writes, never creates).
    Raises :class:`LogFormatError` like :class:`SQLiteLog`."""
    layout, records = stream_sqlite(path)
    return layout, list(records)


#: records a streaming read fetches per query
_STREAM_CHUNK = 2048


def stream_pages(
    page: Callable[[int, int], Iterable[tuple[object, ...]]], where: str, start: int, size: int
) -> Iterator[LogRecord]:
    """The records from ``start`` on, read in keyset pages: ``page(first,
    size)`` returns at most ``size`` rows ``(seq, record[, crc])`` with
    ``seq >= first``, in ``seq`` order (one indexed query: ``WHERE seq >=
    first ORDER BY seq LIMIT size``). Each page is checked as
    :func:`_decode_rows` checks it, from the seq it must start at, so a
    missing row is found wherever it falls (the page after it starts one
    seq late), also at a page's end; a page shorter than ``size`` is the
    end of the log. (A range page ``first <= seq < first + size`` could not
    tell a gap at its end from the end of the log.) Memory: one raw row
    (``page`` may step a cursor; a list of rows is read as it is), each
    row decoded only when it is due and dropped as it is (issue 21: a
    page decoded whole held ``size`` decoded records, checkpoints among
    them, besides the rows, for as long as the consumer took over any of
    them); a page's records are all yielded
    before the next page is asked for. Shared by :func:`stream_sqlite`
    and the PostgreSQL log's ``stream_postgres``."""
    first = start
    while True:
        count = 0
        for row in page(first, size):  # a cursor: one raw row at a time
            (rec,) = _decode_rows((row,), where, first + count)
            del row
            count += 1
            yield rec
        if count < size:
            return
        first += size


def stream_sqlite(
    path: str | os.PathLike[str], start: int = 0
) -> tuple[int, Generator[LogRecord, None, None]]:
    """The layout of a SQLite log and an iterator over its records from
    ``start`` on, read through a read-only connection in pages of
    :data:`_STREAM_CHUNK` rows (:func:`stream_pages`: one indexed query
    each): memory holds one page, whatever the log's length. The file's pages and schema are
    checked first (``PRAGMA quick_check``, O(file size)); each record is
    checked as :func:`read_sqlite` checks it. Raises :class:`LogFormatError`
    like :class:`SQLiteLog`, on the call or while iterating. The connection
    is closed when the iterator ends or is discarded."""
    p = log_path(path, "SQLite log")
    _check_header(p)
    # A live writer's WAL is not a crash's leftover (and a file this process
    # holds must not be opened and closed again: see _HELD).
    if _held_fd(p) is None and not _writer_active(p):
        _check_wal(p)
    uri = "file:" + urllib.parse.quote(os.path.abspath(p)) + "?mode=ro"
    with _refused_if_damaged(p):
        conn = sqlite3.connect(uri, uri=True)
    try:
        with _refused_if_damaged(p):
            layout = _check_schema(conn, p)
            _check_pages(conn, p)
    except BaseException:
        conn.close()
        raise

    query = _SELECT[layout] + " WHERE seq >= ? ORDER BY seq LIMIT ?"

    def page(first: int, size: int) -> Iterator[tuple[object, ...]]:
        # stepped row by row (not fetchall): a page's raw rows are not all
        # held, only the one being decoded (each checkpoint row carries the
        # tombstone index, O(tombstones): issue 21), and not by this frame
        # while it is suspended (the consumer holds it, then drops it)
        with _refused_if_damaged(p):
            cursor = conn.execute(query, (first, size))
        while True:
            with _refused_if_damaged(p):
                row = cursor.fetchone()
            if row is None:
                return
            held = [row]
            del row  # this frame holds no row while the consumer decodes it
            yield held.pop()

    def records() -> Generator[LogRecord, None, None]:
        try:
            yield from stream_pages(page, p, start, _STREAM_CHUNK)
        finally:
            conn.close()

    return layout, records()


class SQLiteLog(SinkBase):
    """A durable, append-only edit-log sink in a SQLite database (see the
    module docstring for the schema and what holds after a crash).

    ``SQLiteLog(path)`` opens or creates the log (the header, a few pragmas,
    and the newest record format: one probe of a partial index, O(log n),
    after a one-time scan of a file written before that index);
    ``Buffer(log=SQLiteLog(path))`` recovers the buffer from it. ``timeout``
    is how long a write waits for another connection's lock.
    ``write`` is one transaction per batch. Thread-safe (the buffer flushes
    from worker threads). One ``SQLiteLog`` per file at a time: a second one
    raises :class:`~quiesce.LogLocked`. Use it as a context manager or call
    :meth:`close`.
    """

    _SINK = "SQLiteLog"

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        self._conn: sqlite3.Connection | None = None
        self._lock_fd = -1
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidType(f"timeout must be a number of seconds, not {type(timeout).__name__}")
        if not math.isfinite(timeout) or timeout < 0:
            raise InvalidArgument(f"timeout must be finite and >= 0, not {timeout!r}")
        self._path = log_path(path, "SQLiteLog")
        self._timeout = float(timeout)
        self._lock = threading.Lock()
        #: read_range's own connection (opened on first use) and its lock
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._commits = 0
        with _HELD_LOCK:
            # A file this process holds is refused before it is opened again:
            # closing a second descriptor would drop the holder's POSIX locks.
            if _held_fd(self._path) is not None:
                raise LogLocked(
                    f"{self._path} is open by another SQLiteLog (in this or another process): "
                    f"one writer per log file"
                )
            if not os.path.exists(self._path) or sniff(self._path) == "empty":
                _create(self._path)
            _check_header(self._path)
            try:
                fd = os.open(self._path, os.O_RDWR)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                fd = os.open(self._path, os.O_RDONLY)  # a read-only file still opens
            try:
                lock_exclusive(fd, self._path, "SQLiteLog")
                _check_wal(self._path)  # under the lock: no writer is changing it
            except BaseException:
                os.close(fd)
                raise
            st = os.fstat(fd)
            self._held_key = (st.st_dev, st.st_ino)
            _HELD[self._held_key] = fd
            self._lock_fd = fd
        try:
            self._conn = self._connect()
        except BaseException:
            self.close()
            raise
        self._broken = False

    def _connect(self) -> sqlite3.Connection:
        with _refused_if_damaged(self._path):
            conn = sqlite3.connect(
                self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        try:
            with _refused_if_damaged(self._path):
                self._layout = _check_schema(conn, self._path)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                (next_seq,) = conn.execute(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log"
                ).fetchone()
            if type(next_seq) is not int:
                raise LogFormatError(f"{self._path}: the log's last seq is not an integer")
            self._next_seq = next_seq
            with _refused_if_damaged(self._path):  # building an index reads the table
                _ensure_format_index(conn)
                _ensure_checkpoint_index(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- LogSink ----------------------------------------------------------

    def load(self) -> Sequence[LogRecord]:
        """Every record in ``seq`` order, after ``PRAGMA quick_check`` and each
        record's checksum. O(file size). Raises :class:`LogFormatError` for a
        damaged file or a damaged or newer-format record (never a raw
        ``sqlite3`` or decoding error)."""
        with self._lock:
            conn = self._open_conn()
            with _refused_if_damaged(self._path):
                _check_pages(conn, self._path)
            return _read_rows(conn, self._layout, self._path)

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        """Records ``start`` .. ``stop - 1`` (the ``ReadableSink`` method, see
        ``quiesce._core.log``): one indexed range query on ``seq``, O(log
        records + the records read). Raises :class:`LogFormatError` if any of
        them is missing or damaged (never returns another record)."""
        if start >= stop:
            return []
        # Its own connection and lock (issue 21): a read never waits for this
        # log's writer, which may sit in a commit for ``timeout`` seconds
        # while another connection holds the database (WAL: a reader needs
        # no lock a writer holds). The records read are durable, so the
        # committed snapshot it reads holds them.
        with self._read_lock:
            conn = self._reader
            if conn is None and self._conn is not None:
                try:
                    with _refused_if_damaged(self._path):
                        conn = sqlite3.connect(
                            self._path,
                            timeout=self._timeout,
                            isolation_level=None,
                            check_same_thread=False,
                        )
                except sqlite3.Error:
                    conn = None
                self._reader = conn
            if conn is not None:
                try:
                    records = _read_rows(conn, self._layout, self._path, start, stop)
                except sqlite3.ProgrammingError:  # closed meanwhile: read as below
                    conn = None
                else:
                    return check_read(records, start, stop)
        with self._lock:
            if self._conn is None:
                # Closed: read through a read-only connection (a buffer's log
                # stays readable after its sink is closed): the file's checks
                # (O(file size)), then one range query.
                stream = stream_sqlite(self._path, start)[1]
                return check_read(records_before(stream, stop), start, stop)
            records = _read_rows(self._conn, self._layout, self._path, start, stop)
        return check_read(records, start, stop)

    def checkpoints(self) -> tuple[int, Sequence[int]]:
        """The number of durable records and the seqs of the checkpoint
        records, ascending (the ``CheckpointSink`` method, see
        ``quiesce._core.checkpoint``): one query on the partial index of
        checkpoint rows, O(log records + checkpoints)."""
        with self._lock:
            conn = self._open_conn()
            # the open no longer reads every page: damage may show here first
            with _refused_if_damaged(self._path):
                total = conn.execute(
                    "SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log"
                ).fetchone()[0]
                seqs = [r[0] for r in conn.execute(_CHECKPOINTS, (total,))]
        if type(total) is not int or not all(type(s) is int for s in seqs):
            raise LogFormatError(f"{self._path}: the log's seqs are not integers (damaged)")
        return total, seqs

    def write(self, records: Sequence[LogRecord]) -> None:
        """Insert ``records`` in one transaction and commit: when this returns
        they are durable; when it raises, none of them are stored.

        Each record is encoded on its own (:func:`~._format.encode_batch`):
        if one cannot be, the records before it are committed and a
        ``ValueError`` names it. Raises ``ValueError`` for a batch that does
        not continue the log or whose records are stored already with other
        contents (compared whole), ``sqlite3.Error`` for a database failure
        (rolled back).
        """
        if not records:
            return
        texts, failure = encode_batch(records)
        with self._lock:
            conn = self._open_conn()
            if self._broken:
                conn = self._reconnect()
            skip = self._already_stored(conn, records[: len(texts)], texts)
            first = records[0].seq
            rows: list[tuple[object, ...]] = [
                (seq, t) if self._layout == 1 else (seq, t, record_crc(seq, t))
                for seq, t in enumerate(texts[skip:], first + skip)
            ]
            if rows:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    conn.executemany(_INSERT[self._layout], rows)
                    conn.execute("COMMIT")
                except BaseException:
                    self._broken = True
                    try:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # the reconnect on the next write discards the transaction
                    raise
                self._next_seq = first + len(texts)
                self._commits += 1
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Close the connection, then release the file's lock. Idempotent;
        ``write`` after it raises."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        with self._read_lock:  # (taken after _lock, never the other way round)
            reader, self._reader = self._reader, None
            if reader is not None:
                reader.close()
        fd, self._lock_fd = self._lock_fd, -1
        if fd >= 0:
            with _HELD_LOCK:
                _HELD.pop(self._held_key, None)
                os.close(fd)  # after the connection: this drops the process's POSIX locks

    def __del__(self) -> None:
        # Like a file object: a forgotten log releases its connection and lock.
        if getattr(self, "_lock_fd", -1) >= 0:
            with contextlib.suppress(Exception):
                self._release()

    # -- extras -----------------------------------------------------------

    @property
    def path(self) -> str:
        """The log file's path."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def _place(self) -> str:
        return repr(self._path)

    # -- internals --------------------------------------------------------

    def _open_conn(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise ValueError(f"SQLiteLog {self._path!r} is closed")
        return conn

    def _reconnect(self) -> sqlite3.Connection:
        """After a failed write: a fresh connection (the old one may have
        opened the file read-only) and a fresh idea of where the log ends."""
        old, self._conn = self._conn, None
        if old is not None:
            try:
                old.close()
            except sqlite3.Error:  # pragma: no cover - closing a broken connection
                pass
        self._conn = self._connect()
        self._broken = False
        return self._conn

    def _already_stored(
        self, conn: sqlite3.Connection, records: Sequence[LogRecord], texts: Sequence[str]
    ) -> int:
        """How many leading records of the batch are stored already (a COMMIT
        that reported failure but reached the disk): :func:`already_stored`."""

        def read(start: int, stop: int) -> list[str]:
            with _refused_if_damaged(self._path):
                rows = conn.execute(
                    "SELECT seq, record FROM quiesce_log WHERE seq >= ? AND seq < ? ORDER BY seq",
                    (start, stop),
                ).fetchall()
            return [row[1] for row in rows]

        return already_stored(records[0].seq, self._next_seq, texts, read)


def _identity(rec: LogRecord) -> tuple[object, ...]:
    """A few fields of a record. Kept for callers of 0.1.0's retry; NOT a
    test of sameness (two different records can share it): compare the
    encoded records whole, as :meth:`SQLiteLog._already_stored` does."""
    return (rec.seq, rec.op, rec.version, tuple(rec.ids), rec.outcome)
