"""``SQLiteLog``: the embedded durable edit-log sink (standard-library ``sqlite3``).

Schema (format :data:`~quiesce._core.records.FORMAT`; the file's
``PRAGMA application_id`` is ``0x51554945`` — ASCII ``QUIE`` — and its
``PRAGMA user_version`` is the format)::

    quiesce_meta(key TEXT PRIMARY KEY, value TEXT)   -- format, created, writer
    quiesce_log(seq INTEGER PRIMARY KEY,              -- 0, 1, 2, ... no gap
                record TEXT CHECK (json_valid(record)),
                format, time, op, version, ids,       -- generated from record,
                actor, reason, turn, outcome)         -- for people and SQL

``record`` is the only stored field and the source of truth (see
``_format``: ASCII JSON, exact for any string). The other columns are
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
header, and nothing is written to it.

Prior art: SQLite's own WAL documentation ("How To Corrupt An SQLite
Database File", "Write-Ahead Logging"), PostgreSQL's group commit
(``commit_delay``), append-only audit tables guarded by triggers.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Sequence
from types import TracebackType

from .._core.errors import LogFormatError
from .._core.log import check_read
from .._core.records import FORMAT, LogRecord
from ._format import (
    APPLICATION_ID,
    SQLITE_MAGIC,
    check_log_format,
    check_sequence,
    decode_record,
    encode_record,
    install,
    sniff,
    temp_name,
)

__all__ = ["SQLiteLog", "read_sqlite"]

_SCHEMA = f"""
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {FORMAT};
CREATE TABLE quiesce_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE quiesce_log (
    seq     INTEGER PRIMARY KEY,
    record  TEXT    NOT NULL CHECK (json_valid(record)),
    format  INTEGER GENERATED ALWAYS AS (json_extract(record, '$.format')) VIRTUAL,
    time    REAL    GENERATED ALWAYS AS (json_extract(record, '$.time')) VIRTUAL,
    op      TEXT    GENERATED ALWAYS AS (json_extract(record, '$.op')) VIRTUAL,
    version INTEGER GENERATED ALWAYS AS (json_extract(record, '$.version')) VIRTUAL,
    ids     TEXT    GENERATED ALWAYS AS (json_extract(record, '$.ids')) VIRTUAL,
    actor   TEXT    GENERATED ALWAYS AS (json_extract(record, '$.actor')) VIRTUAL,
    reason  TEXT    GENERATED ALWAYS AS (json_extract(record, '$.reason')) VIRTUAL,
    turn    INTEGER GENERATED ALWAYS AS (json_extract(record, '$.turn')) VIRTUAL,
    outcome TEXT    GENERATED ALWAYS AS (json_extract(record, '$.outcome')) VIRTUAL
);
CREATE TRIGGER quiesce_log_no_update BEFORE UPDATE ON quiesce_log
BEGIN SELECT RAISE(ABORT, 'quiesce_log is append-only: UPDATE refused'); END;
CREATE TRIGGER quiesce_log_no_delete BEFORE DELETE ON quiesce_log
BEGIN SELECT RAISE(ABORT, 'quiesce_log is append-only: DELETE refused'); END;
CREATE TRIGGER quiesce_log_in_order BEFORE INSERT ON quiesce_log
WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log)
BEGIN SELECT RAISE(ABORT, 'quiesce_log is append-only: seq must be the next one'); END;
CREATE TRIGGER quiesce_meta_no_update BEFORE UPDATE ON quiesce_meta
BEGIN SELECT RAISE(ABORT, 'quiesce_meta is read-only: UPDATE refused'); END;
CREATE TRIGGER quiesce_meta_no_delete BEFORE DELETE ON quiesce_meta
BEGIN SELECT RAISE(ABORT, 'quiesce_meta is read-only: DELETE refused'); END;
"""

_INSERT = "INSERT INTO quiesce_log (seq, record) VALUES (?, ?)"

#: A partial index of the checkpoint rows (issue 13): recovery finds the
#: newest checkpoint without scanning the log. Built once, on the first
#: writable open of a log that lacks it (one pass over older files).
_CHECKPOINT_INDEX = (
    "CREATE INDEX IF NOT EXISTS quiesce_log_checkpoints ON quiesce_log (seq) "
    "WHERE op = 'checkpoint'"
)
_CHECKPOINTS = "SELECT seq FROM quiesce_log WHERE op = 'checkpoint' AND seq < ? ORDER BY seq"


def _ensure_checkpoint_index(conn: sqlite3.Connection) -> None:
    """Create the checkpoint index if missing (a read-only file keeps
    working without it: the query then scans)."""
    try:
        conn.execute(_CHECKPOINT_INDEX)
    except sqlite3.OperationalError:
        pass  # read-only or locked: checkpoints() still answers, by a scan


#: Generated columns (SQLite 3.31) and the JSON functions are required.
_MIN_SQLITE = (3, 31, 0)


def _check_header(path: str) -> None:
    """Refuse a non-quiesce or newer-format file from its header bytes alone
    (before SQLite opens it, so nothing can be written to it)."""
    with open(path, "rb") as f:
        header = f.read(100)
    if not header.startswith(SQLITE_MAGIC):
        if sniff(path) == "jsonl":
            raise LogFormatError(f"{path} is a JSONL edit log; open it with JsonlLog")
        raise LogFormatError(f"{path} is not a quiesce edit log")  # pragma: no cover - sniff raised
    if len(header) < 100:
        raise LogFormatError(f"{path} is a truncated SQLite file, not a quiesce edit log")
    app = int.from_bytes(header[68:72], "big")
    if app != APPLICATION_ID:
        raise LogFormatError(
            f"{path} is a SQLite database but not a quiesce edit log "
            f"(application_id {app:#x}, expected {APPLICATION_ID:#x})"
        )
    check_log_format(path, int.from_bytes(header[60:64], "big"))


def _check_schema(conn: sqlite3.Connection, path: str) -> None:
    """The same checks as the header, through SQLite (a WAL may hold a newer
    header), plus the tables and the newest record format."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    if app != APPLICATION_ID:
        raise LogFormatError(f"{path} is a SQLite database but not a quiesce edit log")
    check_log_format(path, conn.execute("PRAGMA user_version").fetchone()[0])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"quiesce_log", "quiesce_meta"} <= tables:
        raise LogFormatError(f"{path} has a quiesce header but no quiesce_log table")
    newest = conn.execute("SELECT MAX(format) FROM quiesce_log").fetchone()[0]
    if newest is not None:
        check_log_format(path, int(newest))


def _create(path: str) -> None:
    if sqlite3.sqlite_version_info < _MIN_SQLITE:  # pragma: no cover - Python 3.11 bundles newer
        raise RuntimeError(
            f"SQLiteLog needs SQLite {'.'.join(map(str, _MIN_SQLITE))} or newer "
            f"(generated columns); this Python has {sqlite3.sqlite_version}"
        )
    tmp = temp_name(path)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.executescript(_SCHEMA)
        conn.executemany(
            "INSERT INTO quiesce_meta (key, value) VALUES (?, ?)",
            [
                ("format", str(FORMAT)),
                ("created", repr(time.time())),
                ("writer", "quiesce"),
            ],
        )
        conn.execute("PRAGMA journal_mode = WAL")  # persistent: stored in the file header
    finally:
        conn.close()  # the last connection checkpoints the WAL into the file
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    install(tmp, path)


def _decode_rows(rows: Sequence[tuple[int, str]], path: str, first: int = 0) -> list[LogRecord]:
    records = []
    for seq, text in rows:
        where = f"{path}: record {seq}"
        try:
            obj = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise LogFormatError(f"{where} is not valid JSON") from exc
        rec = decode_record(obj, where)
        if rec.seq != seq:
            raise LogFormatError(f"{where} says it is seq {rec.seq}")
        records.append(rec)
    if first == 0:
        check_sequence(records, path)
    return records


def read_sqlite(path: str | os.PathLike[str]) -> tuple[int, list[LogRecord]]:
    """The format and records of a SQLite log, read through a read-only
    connection (for ``quiesce inspect``; never writes, never creates).
    Raises :class:`LogFormatError` like :class:`SQLiteLog`."""
    p = os.fspath(path)
    _check_header(p)
    uri = "file:" + urllib.parse.quote(os.path.abspath(p)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        _check_schema(conn, p)
        fmt = int(conn.execute("PRAGMA user_version").fetchone()[0])
        rows = conn.execute("SELECT seq, record FROM quiesce_log ORDER BY seq").fetchall()
    finally:
        conn.close()
    return fmt, _decode_rows(rows, p)


class SQLiteLog:
    """A durable, append-only edit-log sink in a SQLite database (see the
    module docstring for the schema and what holds after a crash).

    ``SQLiteLog(path)`` opens or creates the log (the header, a few pragmas,
    and the newest record format: one pass in SQLite's C code);
    ``Buffer(log=SQLiteLog(path))`` recovers the buffer from it. ``timeout``
    is how long a write waits for another connection's lock.
    ``write`` is one transaction per batch. Thread-safe (the buffer flushes
    from worker threads). Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 5.0) -> None:
        self._path = os.fspath(path)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._commits = 0
        if not os.path.exists(self._path) or sniff(self._path) == "empty":
            _create(self._path)
        _check_header(self._path)
        self._conn: sqlite3.Connection | None = None
        self._conn = self._connect()
        self._broken = False

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path, timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            _check_schema(conn, self._path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self._next_seq = int(
                conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log").fetchone()[0]
            )
            _ensure_checkpoint_index(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- LogSink ----------------------------------------------------------

    def load(self) -> Sequence[LogRecord]:
        """Every record in ``seq`` order. O(records). Raises
        :class:`LogFormatError` for a damaged or newer-format record."""
        with self._lock:
            conn = self._open_conn()
            rows = conn.execute("SELECT seq, record FROM quiesce_log ORDER BY seq").fetchall()
        return _decode_rows(rows, self._path)

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        """Records ``start`` .. ``stop - 1`` (the ``ReadableSink`` method, see
        ``quiesce._core.log``): one indexed range query on ``seq``, O(log
        records + the records read). Raises :class:`LogFormatError` if any of
        them is missing or damaged (never returns another record)."""
        if start >= stop:
            return []
        with self._lock:
            conn = self._open_conn()
            rows = conn.execute(
                "SELECT seq, record FROM quiesce_log WHERE seq >= ? AND seq < ? ORDER BY seq",
                (start, stop),
            ).fetchall()
        return check_read(_decode_rows(rows, self._path, start), start, stop)

    def checkpoints(self) -> tuple[int, Sequence[int]]:
        """The number of durable records and the seqs of the checkpoint
        records, ascending (the ``CheckpointSink`` method, see
        ``quiesce._core.checkpoint``): one query on the partial index of
        checkpoint rows, O(log records + checkpoints)."""
        with self._lock:
            conn = self._open_conn()
            total = int(
                conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log").fetchone()[0]
            )
            seqs = [r[0] for r in conn.execute(_CHECKPOINTS, (total,))]
        return total, seqs

    def write(self, records: Sequence[LogRecord]) -> None:
        """Insert ``records`` in one transaction and commit: when this returns
        they are durable; when it raises, none of them are stored.

        Raises ``ValueError`` for a batch that does not continue the log,
        ``sqlite3.Error`` for a database failure (rolled back).
        """
        if not records:
            return
        expected = records[0].seq
        for rec in records:
            if rec.seq != expected:
                raise ValueError(f"batch is not contiguous: seq {rec.seq} where {expected} was due")
            expected += 1
        rows = [(rec.seq, encode_record(rec)) for rec in records]
        with self._lock:
            conn = self._open_conn()
            if self._broken:
                conn = self._reconnect()
            skip = self._already_stored(conn, records)
            rows = rows[skip:]
            if not rows:
                return
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_INSERT, rows)
                conn.execute("COMMIT")
            except BaseException:
                self._broken = True
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the reconnect on the next write discards the transaction
                raise
            self._next_seq = expected
            self._commits += 1

    def close(self) -> None:
        """Close the connection. Idempotent; ``write`` after it raises."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    # -- extras -----------------------------------------------------------

    @property
    def path(self) -> str:
        """The log file's path."""
        return self._path

    @property
    def commits(self) -> int:
        """Transactions committed by this object (one per ``write``)."""
        return self._commits

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def __enter__(self) -> SQLiteLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else f"{self._next_seq} records"
        return f"<SQLiteLog {self._path!r}: {state}>"

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

    def _already_stored(self, conn: sqlite3.Connection, records: Sequence[LogRecord]) -> int:
        """How many leading records of the batch are stored already (a COMMIT
        that reported failure but reached the disk). They must be the same
        records; anything else is a gap or a divergence and raises."""
        first = records[0].seq
        if first > self._next_seq:
            raise ValueError(
                f"batch starts at seq {first} but the log holds {self._next_seq} records"
            )
        skip = min(self._next_seq - first, len(records))
        if skip:
            rows = conn.execute(
                "SELECT seq, record FROM quiesce_log WHERE seq >= ? AND seq < ? ORDER BY seq",
                (first, first + skip),
            ).fetchall()
            stored = [_identity(r) for r in _decode_rows(rows, self._path, first)]
            if stored != [_identity(r) for r in records[:skip]]:
                raise ValueError(
                    f"records {first}..{first + skip - 1} are stored with different contents: "
                    f"the log and the buffer diverged"
                )
        return skip


def _identity(rec: LogRecord) -> tuple[object, ...]:
    return (rec.seq, rec.op, rec.version, tuple(rec.ids), rec.outcome)
