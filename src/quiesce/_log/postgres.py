"""``PostgresLog``: the edit log in PostgreSQL, shared by every process that names the buffer.

What it keeps true:

1. The stored log of a buffer only grows: rows are inserted in ``seq`` order
   with no gap, and nothing stored is ever changed or removed. Triggers refuse
   ``UPDATE``, ``DELETE`` and ``TRUNCATE``, and an ``INSERT`` whose ``seq`` is
   not exactly the next one, *in the database*, for every client.
2. A batch is all or nothing: ``write(batch)`` is one transaction (a ``COPY``
   of the records, one ``pg_notify`` carrying the last ``seq``, ``COMMIT``).
   After a crash of the client or the server, every batch whose ``write``
   returned is recovered, and no row of any other batch is visible.
3. Writes are fenced by epoch and by writer. ``quiesce_writer`` holds the
   buffer's writer lease (used by :func:`quiesce.open_shared_buffer`); every
   inserted row carries the writer's epoch and the insert trigger refuses it
   unless it is the current one, holding a share lock on the lease row until
   ``COMMIT`` so a takeover waits for a batch in flight. A writer that lost
   the lease cannot add a record after its successor's first, whatever its
   clock says. When the lease row holds a writer token for its epoch (the
   SHA-256 of a secret the sequencer drew at takeover), the trigger also
   refuses a row from any session that has not set that secret
   (``quiesce.writer_token``): a foreign client that copies the current
   epoch and the next seq gets an error (SQLSTATE ``QF002``), and the log,
   which every replica follows, never holds its row.
4. A schema or record written by a newer quiesce is refused with
   :class:`LogFormatError` on open, before anything is written.

Schema (its SQL text is in :mod:`._postgres_sql`; created on first use in
the connection's ``search_path`` schema by :mod:`._postgres_conn`, which
also connects;
``buffer_id`` lets many buffers share the tables)::

    quiesce_meta    (key PK, value)                    -- schema, format
    quiesce_log     (buffer_id, seq, writer_epoch, format, op, version,
                     record text,                      -- the source of truth
                     PRIMARY KEY (buffer_id, seq))
    quiesce_writer  (buffer_id PK, epoch, holder, lease_until, token, token_epoch)
    quiesce_member  (buffer_id, member_id PK..., incarnation, lease_until,
                     horizon, applied_seq, info)
    quiesce_request (buffer_id, request_id PK..., member_id, op, args,
                     result, applied_seq)

``record`` is the same ASCII JSON as the SQLite and JSONL sinks write
(``_format``); it is stored as ``text``, not ``jsonb``, because ``jsonb``
refuses ``\\u0000`` and lone surrogates, which the buffer accepts. ``op``,
``version`` and ``format`` repeat it for people and SQL.

Connections: two synchronous psycopg 3 connections, each under a lock of
its own, used from whichever thread flushes or reads (the runtime flushes
from worker threads, so the sink works under asyncio and trio alike). The
*writer's* carries every batch's transaction (and the writer token); the
*reader's* (opened on the first read, autocommit, read-only) carries
:meth:`~PostgresLog.read_range`, :meth:`~PostgresLog.read_from`,
:meth:`~PostgresLog.read_containing` and :meth:`~PostgresLog.checkpoints`.
So a read never waits for a batch in flight (a flush stuck on the
server, a slow ``COMMIT``) and a batch never waits for a read (a long
``buf.log`` page): neither holds the other's lock. A read sees the rows
committed when its statement starts — every record a ``write`` returned
for — and none of a batch still open. A failed write rolls back, marks
the connection broken, and the next write reconnects and re-reads where
the log ends (a ``COMMIT`` that reached the server but whose reply was lost
is not written twice); a failed read does the same on the reader's. A DSN
that cannot connect raises :class:`LogWriteError` carrying the server's
message, with no driver traceback chained.

Checkpoints and recovery (issue 13's, on PostgreSQL). A ``PostgresLog`` is a
``CheckpointSink``: ``Buffer(log=PostgresLog(...))`` writes a checkpoint
record every ``checkpoint_every`` records and on ``flush(checkpoint=True)``,
in the same transaction as the records before it (all or nothing, like any
batch). Recovery asks a partial index (``quiesce_log_checkpoints`` on
``(buffer_id, seq) WHERE op = 'checkpoint'``) for the checkpoints, reads the
newest one and the records after it by the primary key ``(buffer_id, seq)``,
and nothing else: opening costs O(log n + checkpoints + tail) rows on the
server, not O(records) (:attr:`PostgresLog.rows_read` counts the rows this
object fetched). A checkpoint that fails its SHA-256 or disagrees with the
records after it is skipped with a warning on the ``quiesce.checkpoint``
logger and the one before it is tried, then a full replay
(``quiesce._core.checkpoint.recover``): never a wrong state. (A row that is
not even JSON is damage to the log itself: the older checkpoints' tails and
the full replay hold it too, so the log is refused with
:class:`LogFormatError` naming it.) Older
records stay readable through ``buf.log``, fetched lazily by
:meth:`PostgresLog.read_range` (the buffer keeps only a short tail in
memory).

The newer-format check on open reads only the rows from the newest
checkpoint on (by the primary key): every record before it was read by the
writer of that checkpoint, which refuses newer formats itself (a writer that
lost its place reconnects, and reconnecting repeats this check).
"""

from __future__ import annotations

import hashlib
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .._core.errors import InvalidArgument, InvalidType, LogFormatError, LogWriteError
from .._core.log import check_read
from .._core.records import FORMAT, LogRecord
from ._format import encode_batch
from ._postgres_conn import (  # psycopg from there: a missing driver names the extra
    check_buffer_id,
    check_meta,
    connect,
    ensure_schema,
    psycopg,
    redacted,
    server_message,
)
from ._postgres_sql import (
    _CHECKPOINTS,
    _COPY,
    _NEWEST_FORMAT,
    _NOT_NEXT,
    _SELECT,
    _SELECT_CONTAINING,
    _SELECT_RANGE,
    FENCED_SQLSTATE,
    FOREIGN_SQLSTATE,
    SCHEMA,
)
from ._sink import SinkBase
from ._stored import already_stored
from .sqlite import _decode_rows, stream_pages

__all__ = [
    "SCHEMA",
    "LogDiverged",
    "PostgresLog",
    "WriterFenced",
    "connect",
    "ensure_schema",
    "read_postgres",
    "stream_postgres",
]


class WriterFenced(LogWriteError):
    """A write by a writer whose epoch is no longer the buffer's current one:
    another process took the writer lease. Nothing of the batch is stored."""


class LogDiverged(WriterFenced, ValueError):
    """The stored log holds, at a seq this writer is about to write, a record
    it did not write (another writer, or a foreign client that got past the
    fences): this writer is no longer the log's only author and must stop
    writing (a shared buffer's sequencer steps down and rebuilds from the
    log). Nothing of the batch is stored."""


def read_postgres(uri: str, *, timeout: float = 10.0) -> tuple[int, list[LogRecord]]:
    """The format and every record of one buffer's log, in memory (see
    :func:`stream_postgres`, which this lists)."""
    fmt, records = stream_postgres(uri, timeout=timeout)
    return fmt, list(records)


#: rows a streaming read fetches per query
_STREAM_CHUNK = 2048

#: one keyset page of a buffer's log, with the ``format`` column beside the record
_SELECT_PAGE = (
    "SELECT seq, record, format FROM quiesce_log WHERE buffer_id = %s AND seq >= %s "
    "ORDER BY seq LIMIT %s"
)


def stream_postgres(
    uri: str, start: int = 0, *, timeout: float = 10.0
) -> tuple[int, Generator[LogRecord, None, None]]:
    """The format of one buffer's log and an iterator over its records from
    ``start`` on, for ``quiesce inspect`` (reads only; never creates tables).
    The buffer is the ``buffer_id`` query parameter of ``uri``, or the only
    buffer in the log.

    The records are read through a connection of the stream's own, in keyset
    pages of :data:`_STREAM_CHUNK` rows (``seq >= first ORDER BY seq LIMIT``:
    one primary-key range each, O(log n + page) on the server; see
    :func:`~.sqlite.stream_pages`), each row checked as the other logs check
    theirs (its seq, a gap anywhere, its JSON and fields), and its record's
    format against the row's ``format`` column: memory holds one page,
    whatever the log's length. The format is the newest ``format`` column of
    the buffer's rows (one aggregate on the server), so it equals the newest
    record format of a log that streams without error. The log only grows,
    so a page read later sees the rows of an earlier one unchanged; rows
    committed while the stream runs may be included.

    Raises :class:`LogFormatError` (no quiesce tables, unknown or ambiguous
    buffer, no records, newer schema; while iterating, a damaged or
    newer-format record or a gap) or :class:`LogWriteError` (cannot connect,
    or the server fails a query, with its message). The connection is closed
    when the iterator ends or is discarded (even never started)."""
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    wanted = [v for k, v in query if k == "buffer_id"]
    dsn = urllib.parse.urlunsplit(
        parts._replace(query=urllib.parse.urlencode([(k, v) for k, v in query if k != "buffer_id"]))
    )
    where = redacted(dsn)
    conn = connect(dsn, timeout=timeout)
    try:
        try:
            exists = conn.execute("SELECT to_regclass('quiesce_meta') IS NOT NULL").fetchone()
            if not (exists and exists[0]):
                raise LogFormatError(f"{where} holds no quiesce edit log (no quiesce_meta table)")
            check_meta(conn, where)
            if wanted:
                buffer_id = wanted[-1]
            else:
                ids = [r[0] for r in conn.execute("SELECT DISTINCT buffer_id FROM quiesce_log")]
                if len(ids) != 1:
                    raise LogFormatError(
                        f"{where} holds {len(ids)} buffers; name one with ?buffer_id=… "
                        f"({', '.join(sorted(ids)[:10])})"
                    )
                buffer_id = ids[0]
            newest = conn.execute(
                "SELECT MAX(format) FROM quiesce_log WHERE buffer_id = %s", (buffer_id,)
            ).fetchone()
        except psycopg.Error as exc:
            raise LogWriteError(f"{where}: {server_message(exc)}") from None
        if newest is None or newest[0] is None:
            raise LogFormatError(f"{where} has no records for buffer {buffer_id!r}")
    except BaseException:
        conn.close()
        raise
    fmt = int(newest[0])
    named = f"{where} buffer {buffer_id!r}"
    # the format column of the current page's rows, by seq: stream_pages
    # yields a page's records before it asks for the next
    formats: dict[int, int] = {}

    def page(first: int, size: int) -> list[tuple[object, ...]]:
        try:
            rows = conn.execute(_SELECT_PAGE, (buffer_id, first, size)).fetchall()
        except psycopg.Error as exc:
            raise LogWriteError(f"{named}: {server_message(exc)}") from None
        formats.clear()
        formats.update((row[0], row[2]) for row in rows)
        return [(row[0], row[1]) for row in rows]

    def records() -> Generator[LogRecord, None, None]:
        try:
            for rec in stream_pages(page, named, start, _STREAM_CHUNK):
                if formats[rec.seq] != rec.format:
                    raise LogFormatError(
                        f"{named}: record {rec.seq} is format {rec.format}, "
                        f"its row says {formats[rec.seq]}"
                    )
                yield rec
        finally:
            release()

    stream = records()
    # closes the connection once: when the iterator ends, or when it is
    # discarded (even never started, when its own ``finally`` never runs)
    release = weakref.finalize(stream, conn.close)
    return fmt, stream


class PostgresLog(SinkBase):
    """A durable, append-only edit-log sink in PostgreSQL (see the module
    docstring for the schema, the fence and what holds after a crash).

    ``PostgresLog(dsn, buffer_id)`` connects, creates the tables if needed and
    refuses a newer schema or record format; ``Buffer(log=PostgresLog(...))``
    recovers the buffer from the log. ``write`` is one transaction per batch
    (COPY, one NOTIFY, COMMIT). Thread-safe. ``timeout`` bounds connecting and
    each statement (seconds). Use it as a context manager or call
    :meth:`close`.

    ``writer_epoch`` is the epoch every row is stamped with: 0 for a buffer
    without a writer lease; :func:`quiesce.open_shared_buffer` sets it to the
    lease's epoch. A write refused by the fence raises :class:`WriterFenced`.
    ``writer_token`` (set by the same, with the epoch) is the secret whose
    SHA-256 the lease row holds: the session sets it before writing, and
    the insert trigger refuses a row of the current epoch from any session
    that did not (a foreign client). ``application_name`` names the
    session; ``idle_in_transaction_timeout`` (seconds) makes the server end
    a transaction this object left open that long (a paused process must
    not hold its locks for good).

    It is a ``CheckpointSink`` (and a ``ReadableSink``): the buffer writes
    checkpoints into it and recovers from the newest valid one and the
    records after it, reading nothing older (:meth:`checkpoints`,
    :meth:`read_range`); older records are fetched when ``buf.log`` is read.
    """

    _SINK = "PostgresLog"

    def __init__(
        self,
        dsn: str,
        buffer_id: str,
        *,
        timeout: float = 10.0,
        application_name: str | None = None,
        idle_in_transaction_timeout: float | None = None,
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidType(f"dsn must be a str, not {type(dsn).__name__}")
        self._buffer_id = check_buffer_id(buffer_id)
        if not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgument(f"timeout must be a positive number of seconds, not {timeout!r}")
        self._dsn = dsn
        self._timeout = float(timeout)
        self._application_name = application_name
        self._idle_timeout = idle_in_transaction_timeout
        self._lock = threading.Lock()
        self._commits = 0
        self._rows_read = 0
        self.writer_epoch = 0
        self.writer_token: str | None = None
        self._connections = 0  # connections made (which one has the token set)
        self._token_set: tuple[int, str] | None = None
        #: Called inside each write's transaction, after the COPY, with the
        #: cursor and the batch; may raise to abort the batch, and may return
        #: a function to call once the COMMIT succeeded (used by
        #: :func:`quiesce.open_shared_buffer` to store forwarded requests'
        #: results with their records and to re-check member horizons).
        self.before_commit: (
            Callable[[psycopg.Cursor[Any], Sequence[LogRecord]], Callable[[], None] | None] | None
        ) = None
        self._broken = False
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = None
        #: the reader's connection and its lock (see the module docstring):
        #: never held with ``_lock``, so reads and writes do not wait on each
        #: other; ``_seq_lock`` guards ``_next_seq`` (both advance it)
        self._read_lock = threading.Lock()
        self._read_conn: psycopg.Connection[Any] | None = None
        self._seq_lock = threading.Lock()
        self._conn = self._connect()
        self.channel = self._channel_name()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self._dsn, timeout=self._timeout, application_name=self._application_name)
        self._connections += 1
        try:
            conn.execute(f"SET statement_timeout = {int(self._timeout * 1000)}")
            if self._idle_timeout is not None:
                ms = max(1, int(self._idle_timeout * 1000))
                conn.execute(f"SET idle_in_transaction_session_timeout = {ms}")
            # "durable when write returns" needs the commit flushed to WAL,
            # whatever the server's default
            conn.execute("SET synchronous_commit = on")
            ensure_schema(conn, self.where)
            newest = conn.execute(_NEWEST_FORMAT, {"b": self._buffer_id}).fetchone()
            if newest and newest[0] is not None and newest[0] > FORMAT:
                raise LogFormatError(
                    f"{self.where} holds records of format {newest[0]}; this quiesce reads "
                    f"formats up to {FORMAT} (upgrade quiesce to read it)"
                )
            row = conn.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM quiesce_log WHERE buffer_id = %s",
                (self._buffer_id,),
            ).fetchone()
            self._next_seq = int(row[0]) if row else 0
        except psycopg.Error as exc:
            conn.close()
            raise LogWriteError(f"{self.where}: {server_message(exc)}") from None
        except BaseException:
            conn.close()
            raise
        return conn

    def _channel_name(self) -> str:
        conn = self._open_conn()
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = row[0] if row else ""
        digest = hashlib.sha1(f"{schema}\x00{self._buffer_id}".encode()).hexdigest()
        return f"quiesce_{digest[:40]}"

    # -- LogSink ----------------------------------------------------------

    def load(self) -> Sequence[LogRecord]:
        """Every record of the buffer in ``seq`` order (a full replay; the
        buffer calls it only when no checkpoint is usable). O(records).
        Raises :class:`LogFormatError` for a damaged or newer-format record."""
        return self.read_from(0)

    def read_from(self, seq: int) -> list[LogRecord]:
        """The stored records with ``seq >= seq``, in order (one query; from 0
        it also checks the log has no gap)."""
        rows = self._fetch(_SELECT, (self._buffer_id, seq))
        records = _decode_rows(rows, self.where, seq)
        if records:  # a follower's idea of where the log ends, for when it writes
            with self._seq_lock:
                self._next_seq = max(self._next_seq, records[-1].seq + 1)
        return records

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        """Records ``start`` .. ``stop - 1`` (the ``ReadableSink`` method, see
        ``quiesce._core.log``): one range query on the primary key, O(log n +
        the records read) on the server. Every row is decoded and its ``seq``
        checked: a missing or damaged record raises :class:`LogFormatError`,
        never another record. A lost connection is retried once (a read is
        idempotent), then raises :class:`LogWriteError`. After :meth:`close`
        it reads through a connection of its own (a buffer's log stays
        readable after its sink is closed)."""
        if start >= stop:
            return []
        rows = self._fetch(_SELECT_RANGE, (self._buffer_id, start, stop))
        return check_read(_decode_rows(rows, self.where, start), start, stop)

    def read_containing(self, start: int, stop: int, text: str) -> list[LogRecord]:
        """The records ``start`` .. ``stop - 1`` whose stored text contains
        ``text`` (a literal, not a pattern), in order: one range query on the
        primary key, filtered on the server, so only the matching rows cross
        the network. Each is decoded and checked as :meth:`read_range` does.
        O(log n + stop - start) on the server."""
        if start >= stop:
            return []
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._fetch(_SELECT_CONTAINING, (self._buffer_id, start, stop, pattern))
        return [rec for row in rows for rec in _decode_rows([row], self.where, int(row[0]))]

    def checkpoints(self) -> tuple[int, Sequence[int]]:
        """The number of stored records and the seqs of the checkpoint records
        among them, ascending (the ``CheckpointSink`` method, see
        ``quiesce._core.checkpoint``): one statement over the primary key's
        last entry and the partial checkpoint index, O(log n + checkpoints);
        no log row is read."""
        rows = self._fetch(_CHECKPOINTS, {"b": self._buffer_id}, count=False)
        total = next(int(r[0]) for r in rows if r[0] is not None)
        seqs = sorted(int(r[1]) for r in rows if r[1] is not None and r[1] < total)
        return total, seqs

    def write(self, records: Sequence[LogRecord]) -> None:
        """Store ``records`` in one transaction: COPY, one NOTIFY carrying the
        last ``seq``, COMMIT. When this returns they are durable; when it
        raises, none of them are stored (a lost COMMIT reply is detected on
        the next write). O(len(records)).

        Each record is encoded on its own: if one cannot be, the records
        before it are committed and a ``ValueError`` names it. Raises
        ``ValueError`` for a batch that does not continue the log,
        :class:`LogDiverged` (a ``ValueError`` and a :class:`WriterFenced`)
        if its leading records are stored already with other contents
        (compared whole, as encoded), :class:`WriterFenced` if the writer's
        epoch is not current or the trigger refused the session's writer
        token, and :class:`LogWriteError` for a database failure (rolled
        back).
        """
        if not records:
            return
        expected = records[0].seq
        for rec in records:
            if rec.seq != expected:
                raise ValueError(f"batch is not contiguous: seq {rec.seq} where {expected} was due")
            expected += 1
        texts, failure = encode_batch(records)
        records = records[: len(texts)]
        expected = records[0].seq + len(texts)
        with self._lock:
            conn = self._usable_conn()
            skip = self._already_stored(conn, records, texts)
            batch = records[skip:]
            if not batch:
                if failure is not None:
                    raise failure
                return
            bid, epoch, token = self._buffer_id, self.writer_epoch, self.writer_token
            try:
                if token is not None and self._token_set != (self._connections, token):
                    conn.execute("SELECT set_config('quiesce.writer_token', %s, false)", (token,))
                    self._token_set = (self._connections, token)
                with conn.transaction(), conn.cursor() as cur:
                    with cur.copy(_COPY) as copy:
                        for rec, text in zip(batch, texts[skip:], strict=True):
                            copy.write_row(
                                (bid, rec.seq, epoch, rec.format, rec.op, rec.version, text)
                            )
                    hook = self.before_commit
                    committed = None if hook is None else hook(cur, batch)
                    cur.execute("SELECT pg_notify(%s, %s)", (self.channel, str(expected - 1)))
            except psycopg.Error as exc:
                self._broken = True
                message = f"{self.where}: {server_message(exc)}"
                state = getattr(exc, "sqlstate", None)
                if state in (FENCED_SQLSTATE, FOREIGN_SQLSTATE):
                    raise WriterFenced(message) from None
                if _NOT_NEXT in message:
                    # the log ends elsewhere: read where, on a fresh
                    # connection; another record in our place is LogDiverged
                    self._already_stored(self._usable_conn(), records, texts)
                raise LogWriteError(message) from None
            with self._seq_lock:
                self._next_seq = max(self._next_seq, expected)
            self._commits += 1
            if committed is not None:
                committed()
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Close both connections. Idempotent; ``write`` after it raises
        (reads go on, through a connection of their own each)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
        with self._read_lock:
            conn, self._read_conn = self._read_conn, None
            if conn is not None:
                conn.close()

    # -- extras -----------------------------------------------------------

    @property
    def buffer_id(self) -> str:
        return self._buffer_id

    @property
    def dsn(self) -> str:
        return self._dsn

    @property
    def where(self) -> str:
        """The DSN (password hidden) and buffer, for messages."""
        return f"PostgreSQL {redacted(self._dsn)} buffer {self._buffer_id!r}"

    @property
    def next_seq(self) -> int:
        """The seq the next stored record will have, as this object last saw it."""
        return self._next_seq

    @property
    def rows_read(self) -> int:
        """Log rows this object fetched from the server (every read: recovery,
        ``buf.log``, catch-up, the retry check of a lost COMMIT)."""
        return self._rows_read

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _place(self) -> str:
        return f"{redacted(self._dsn)!r} {self._buffer_id!r}"

    # -- internals --------------------------------------------------------

    def _open_conn(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise LogWriteError(f"{self.where}: the log is closed")
        return self._usable_conn()

    def _usable_conn(self) -> psycopg.Connection[Any]:
        """The connection, replaced by a fresh one (and a fresh idea of where
        the log ends) after a failure; a failed reconnect is retried on the
        next call. Call under the lock."""
        if self._closed:
            raise LogWriteError(f"{self.where}: the log is closed")
        conn = self._conn
        if conn is None or self._broken or conn.closed:
            self._conn = None
            self._broken = True
            if conn is not None:
                try:
                    conn.close()
                except psycopg.Error:  # pragma: no cover - closing a dead connection
                    pass
            self._conn = conn = self._connect()
            self._broken = False
        return conn

    def _reader(self) -> psycopg.Connection[Any]:
        """The reader's connection, opened (or replaced after a failure) on
        demand: autocommit, read-only, the same statement timeout and session
        name as the writer's. Call under ``_read_lock``."""
        conn = self._read_conn
        if conn is not None and not conn.closed:
            return conn
        self._read_conn = None
        conn = connect(self._dsn, timeout=self._timeout, application_name=self._application_name)
        try:
            conn.execute(f"SET statement_timeout = {int(self._timeout * 1000)}")
            conn.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            conn.close()
            raise LogWriteError(f"{self.where}: {server_message(exc)}") from None
        self._read_conn = conn
        return conn

    def _fetch(
        self, query: str, params: Sequence[Any] | dict[str, Any], *, count: bool = True
    ) -> list[tuple[Any, ...]]:
        """Rows of a read-only ``query`` on the reader's connection, under
        ``_read_lock`` only: a batch in flight on the writer's connection
        neither delays it nor is delayed by it. A lost connection is retried
        once on a fresh one (reads are idempotent); any other failure
        raises :class:`LogWriteError` with the server's message. After
        :meth:`close`, a connection of its own, closed again."""
        for attempt in (1, 2):
            with self._read_lock:
                try:
                    if self._closed:
                        with connect(self._dsn, timeout=self._timeout) as own:
                            rows = own.execute(query, params).fetchall()
                    else:
                        rows = self._reader().execute(query, params).fetchall()
                except psycopg.Error as exc:
                    conn, self._read_conn = self._read_conn, None
                    if conn is not None:
                        try:
                            conn.close()
                        except psycopg.Error:  # pragma: no cover - closing a dead connection
                            pass
                    if attempt == 1 and isinstance(exc, psycopg.OperationalError):
                        continue
                    raise LogWriteError(f"{self.where}: {server_message(exc)}") from None
                if count:
                    with self._seq_lock:
                        self._rows_read += len(rows)
                return rows
        raise AssertionError("unreachable")  # pragma: no cover

    def _already_stored(
        self, conn: psycopg.Connection[Any], records: Sequence[LogRecord], texts: Sequence[str]
    ) -> int:
        """How many leading records of the batch are stored already (a COMMIT
        whose reply was lost): :func:`already_stored`; another record at a
        stored seq is :class:`LogDiverged`."""

        def read(start: int, stop: int) -> list[str]:
            try:
                rows = conn.execute(_SELECT_RANGE, (self._buffer_id, start, stop)).fetchall()
            except psycopg.Error as exc:
                self._broken = True
                raise LogWriteError(f"{self.where}: {server_message(exc)}") from None
            with self._seq_lock:
                self._rows_read += len(rows)
            return [row[1] for row in rows]

        return already_stored(records[0].seq, self._next_seq, texts, read, LogDiverged)
