"""The schema of a SQLite log: the tables and triggers quiesce writes, the
checks that a file is one, and how a new file is built.

What it keeps true:

* A file is read as a quiesce log only if its header, its
  ``application_id`` (``0x51554945``, ASCII ``QUIE``), its layout
  (``PRAGMA user_version``, :data:`SQLITE_FORMAT` or older), its
  ``sqlite_master`` rows (compared with what :func:`_create` writes, the two
  optional indexes aside) and its newest record format are ones this code
  reads; anything else raises :class:`LogFormatError`, and the header check
  (:func:`_check_header`) reads only 100 bytes, before SQLite opens the file,
  so nothing is written to a refused file.
* Every ``sqlite3`` and decoding error of a read surfaces as
  :class:`LogFormatError` (:func:`_refused_if_damaged`), never raw.
* A new log is built beside its path and moved into place (:func:`_create`):
  a log file is never half-initialized.
* Nothing migrates a file in place. Layout 1 (quiesce 0.1.0, no ``crc``
  column) is read and appended to as layout 1; the two partial indexes
  (checkpoint rows, records above format 1) are the only thing added to an
  older file, on its first writable open, and only after it passed the
  format check.

Costs: :func:`_check_header` O(1); :func:`_check_schema` O(log n) with the
format index, O(n) once without it; :func:`_check_pages` O(file size)
(``PRAGMA quick_check``). The sink that uses all this is
:mod:`quiesce._log.sqlite`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import zlib
from collections.abc import Iterator

from .._core.errors import LogFormatError
from .._core.records import FORMAT
from ._file_locks import _held_fd
from ._format import APPLICATION_ID, SQLITE_MAGIC, check_log_format, install, sniff, temp_name

#: The SQLite file layout a new log gets (``PRAGMA user_version``): 2 adds
#: the per-record ``crc`` column; 1 (quiesce 0.1.0) is still read and written.
SQLITE_FORMAT = 2

_CRC_COLUMN = "    crc     INTEGER NOT NULL,\n"
_SCHEMA = f"""
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SQLITE_FORMAT};
CREATE TABLE quiesce_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE quiesce_log (
    seq     INTEGER PRIMARY KEY,
    record  TEXT    NOT NULL CHECK (json_valid(record)),
{_CRC_COLUMN}    format  INTEGER GENERATED ALWAYS AS (json_extract(record, '$.format')) VIRTUAL,
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

_INSERT = {
    1: "INSERT INTO quiesce_log (seq, record) VALUES (?, ?)",
    2: "INSERT INTO quiesce_log (seq, record, crc) VALUES (?, ?, ?)",
}
_SELECT = {
    1: "SELECT seq, record FROM quiesce_log",
    2: "SELECT seq, record, crc FROM quiesce_log",
}

#: A partial index of the checkpoint rows (issue 13): recovery finds the
#: newest checkpoint without scanning the log. Built once, on the first
#: writable open of a log that lacks it (one pass over older files).
_CHECKPOINT_INDEX = (
    "CREATE INDEX IF NOT EXISTS quiesce_log_checkpoints ON quiesce_log (seq) "
    "WHERE op = 'checkpoint'"
)
_CHECKPOINTS = "SELECT seq FROM quiesce_log WHERE op = 'checkpoint' AND seq < ? ORDER BY seq"


#: A partial index of the records of a format above 1 (issue 13): the open's
#: format check ("no record newer than this code reads") is one O(log n)
#: probe of it instead of a scan of every record. It holds no row while every
#: record is format 1, so it costs a log nothing to keep. Built once, on the
#: first writable open of a log that lacks it, after that file's records
#: passed the check by a scan (so a refused file is never written to).
_FORMAT_INDEX = (
    "CREATE INDEX IF NOT EXISTS quiesce_log_formats ON quiesce_log (format) WHERE format > 1"
)
_NEWEST_FORMAT = "SELECT MAX(format) FROM quiesce_log WHERE format > 1"


def _has_format_index(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'quiesce_log_formats'"
    ).fetchone()
    return row is not None


def _ensure_format_index(conn: sqlite3.Connection) -> None:
    """Create the format index if missing (a read-only file keeps working
    without it: its open then scans)."""
    try:
        conn.execute(_FORMAT_INDEX)
    except sqlite3.OperationalError:
        pass  # read-only or locked: the format check scans


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
    held = _held_fd(path)
    if held is not None:
        header = os.pread(held, 100, 0)
    else:
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
    _check_layout(path, int.from_bytes(header[60:64], "big"))


def _check_layout(path: str, layout: object) -> int:
    """The file layout (``user_version``), if this code reads it."""
    if type(layout) is not int or layout < 1:
        raise LogFormatError(f"{path} has no valid quiesce layout version ({layout!r})")
    check_log_format(path, layout, SQLITE_FORMAT)
    return layout


@contextlib.contextmanager
def _refused_if_damaged(path: str) -> Iterator[None]:
    """Every ``sqlite3`` and decoding error of a read as :class:`LogFormatError`.
    ``MemoryError`` too: ``sqlite3`` raises it for ``SQLITE_NOMEM``, which a
    damaged schema page produces (found by the atheris harness)."""
    try:
        yield
    except (sqlite3.Error, UnicodeError, OverflowError) as exc:
        raise LogFormatError(f"{path} is damaged or not a quiesce edit log: {exc}") from exc
    except MemoryError as exc:
        raise LogFormatError(
            f"{path} is damaged or not a quiesce edit log: SQLite ran out of memory reading it"
        ) from exc


def _check_schema(conn: sqlite3.Connection, path: str) -> int:
    """The same checks as the header, through SQLite (a WAL may hold a newer
    header), plus the tables and the newest record format. Returns the
    layout. Call under :func:`_refused_if_damaged`."""
    app = conn.execute("PRAGMA application_id").fetchone()[0]
    if app != APPLICATION_ID:
        raise LogFormatError(f"{path} is a SQLite database but not a quiesce edit log")
    layout = _check_layout(path, conn.execute("PRAGMA user_version").fetchone()[0])
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"quiesce_log", "quiesce_meta"} <= tables:
        raise LogFormatError(f"{path} has a quiesce header but no quiesce_log table")
    # The newest record format: one probe of the format index when the file
    # has it, O(log n); else a scan of every record, O(n) (a file written
    # before the index, or a read-only one; _connect then adds the index).
    if _has_format_index(conn):
        newest = conn.execute(_NEWEST_FORMAT).fetchone()[0]
    else:
        newest = conn.execute("SELECT MAX(format) FROM quiesce_log").fetchone()[0]
    if newest is not None:
        if type(newest) is not int:
            raise LogFormatError(f"{path} holds a record with an invalid format field")
        check_log_format(path, newest)
    return layout


def _schema_of(layout: int) -> frozenset[tuple[object, ...]]:
    """The ``sqlite_master`` rows a log of ``layout`` holds, exactly as
    :func:`_create` (or quiesce 0.1.0, for layout 1) wrote them."""
    schema = _SCHEMA if layout == SQLITE_FORMAT else _SCHEMA.replace(_CRC_COLUMN, "")
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema)
        return frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    finally:
        conn.close()


_SCHEMAS = {layout: _schema_of(layout) for layout in range(1, SQLITE_FORMAT + 1)}


def _checkpoint_index_row() -> frozenset[tuple[object, ...]]:
    """The ``sqlite_master`` rows of the checkpoint and format indexes
    (issue 13), which a log may hold beside its schema (added on the first
    writable open)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(_SCHEMA)
        before = frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        conn.execute(_CHECKPOINT_INDEX)
        conn.execute(_FORMAT_INDEX)
        after = frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        return after - before
    finally:
        conn.close()


_CHECKPOINT_INDEX_ROW = _checkpoint_index_row()


def _check_pages(conn: sqlite3.Connection, path: str) -> None:
    """``PRAGMA quick_check`` and the schema, compared with what quiesce
    writes: a damaged page, cell or table definition is refused, not read
    around (a flipped cell count could hide the last records; a flipped
    ``PRIMARY KEY`` in the schema text would make every ``seq`` read as NULL
    and the log look empty). O(file size). Call under
    :func:`_refused_if_damaged`."""
    problems = [r[0] for r in conn.execute("PRAGMA quick_check").fetchmany(3)]
    if problems != ["ok"]:
        raise LogFormatError(f"{path} is damaged: {'; '.join(map(str, problems))}")
    layout = conn.execute("PRAGMA user_version").fetchone()[0]
    schema = frozenset(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
    schema -= _CHECKPOINT_INDEX_ROW  # present or not (checkpoints, format check: issue 13)
    if schema != _SCHEMAS.get(layout):
        raise LogFormatError(f"{path} is damaged: its schema is not a quiesce log's")


#: characters of a long record's text encoded at a time by :func:`record_crc`
_CRC_PIECE = 1 << 16


def record_crc(seq: int, text: str) -> int:
    """The layout-2 checksum of a row: CRC-32 of ``seq``, a newline and the
    record text (so a row moved to another ``seq`` fails too). A long text
    (a checkpoint's) is encoded a piece at a time into the running CRC
    (UTF-8 is per code point, so the pieces are the whole's bytes): no
    copy of the whole text (issue 21). O(len(text))."""
    crc = zlib.crc32(f"{seq}\n".encode("ascii"))
    for at in range(0, len(text), _CRC_PIECE):
        crc = zlib.crc32(text[at : at + _CRC_PIECE].encode("utf-8", "surrogatepass"), crc)
    return crc


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
        conn.execute(_FORMAT_INDEX)  # a new log has both indexes from the start
        conn.execute(_CHECKPOINT_INDEX)
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
