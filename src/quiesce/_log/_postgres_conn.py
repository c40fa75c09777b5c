"""Connecting to PostgreSQL and the quiesce schema on the server.

What it keeps true: a DSN that cannot connect raises :class:`LogWriteError`
carrying the server's own message (a malformed one
:class:`InvalidArgument`), never a chained driver traceback; the tables
are created once however many processes start together (under an advisory
lock), and a schema written by a newer quiesce is refused with
:class:`LogFormatError` before anything is written. A password never
appears in a message (:func:`redacted`). Blocking calls: run them off the
event loop, like every sink's I/O.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .._core.errors import InvalidArgument, InvalidType, LogFormatError, LogWriteError
from .._core.records import FORMAT
from ._postgres_sql import _CHECKPOINT_INDEX, _DDL, _WRITER_TOKEN_MIGRATION, SCHEMA

try:
    import psycopg
except ImportError as _exc:  # pragma: no cover - the extra is installed in dev
    raise ImportError(
        "PostgresLog needs psycopg 3: install quiesce with its PostgreSQL extra, "
        "pip install 'quiesce[postgres]'"
    ) from _exc

__all__ = [
    "check_buffer_id",
    "check_meta",
    "connect",
    "ensure_schema",
    "psycopg",  # the driver, imported here only, with the extra's name if missing
    "redacted",
    "server_message",
]


def server_message(exc: BaseException) -> str:
    """The server's (or libpq's) own words, without the driver's class name."""
    text = str(exc).strip()
    return text or type(exc).__name__


def connect(
    dsn: str, *, timeout: float, autocommit: bool = True, application_name: str | None = None
) -> psycopg.Connection[Any]:
    """A connection, or :class:`LogWriteError` with the server's message and
    no chained driver traceback. ``application_name`` (if given) names the
    session in ``pg_stat_activity`` (a shared buffer's members name theirs
    after the lease holder, so a successor can find a paused holder's)."""
    extra: dict[str, Any] = (
        {} if application_name is None else {"application_name": application_name}
    )
    try:
        conn = psycopg.connect(
            dsn, autocommit=autocommit, connect_timeout=max(1, round(timeout)), **extra
        )
    except psycopg.ProgrammingError as exc:  # a malformed DSN (libpq's parser)
        raise InvalidArgument(f"invalid PostgreSQL DSN: {server_message(exc)}") from None
    except psycopg.Error as exc:
        message = server_message(exc)
    except (ValueError, TypeError) as exc:  # a malformed DSN
        raise InvalidArgument(f"invalid PostgreSQL DSN: {exc}") from None
    else:
        return conn
    raise LogWriteError(f"cannot connect to PostgreSQL: {message}")


def check_meta(conn: psycopg.Connection[Any], where: str) -> None:
    """Refuse (:class:`LogFormatError`) tables of a newer schema, or none."""
    meta = dict(conn.execute("SELECT key, value FROM quiesce_meta").fetchall())
    schema = int(meta.get("schema", "0"))
    if schema > SCHEMA:
        raise LogFormatError(
            f"{where} holds quiesce tables of schema {schema}, written by a newer quiesce; "
            f"this quiesce knows schema {SCHEMA} (upgrade quiesce to use it)"
        )
    if schema < 1:
        raise LogFormatError(f"{where} has a quiesce_meta table but no quiesce schema version")


def ensure_schema(conn: psycopg.Connection[Any], where: str) -> None:
    """Create the tables in the current schema if they are missing (once, under
    an advisory lock, so processes starting together do not race), then refuse
    a newer schema with :class:`LogFormatError`. A schema-1 database without
    the checkpoint index gets it (once: later calls see it and take no lock).
    ``conn`` is in autocommit."""
    exists = conn.execute(
        "SELECT to_regclass('quiesce_meta') IS NOT NULL, "
        "to_regclass('quiesce_log_checkpoints') IS NOT NULL, "
        "COALESCE((SELECT position('QF002' in prosrc) > 0 FROM pg_proc "
        "WHERE oid = to_regproc('quiesce_log_insert')), false)"
    ).fetchone()
    if exists and exists[0] and not (exists[1] and exists[2]):
        check_meta(conn, where)  # a newer schema is refused before anything is created
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('quiesce schema'))")
            conn.execute(_CHECKPOINT_INDEX)
            conn.execute(_WRITER_TOKEN_MIGRATION)
    if not (exists and exists[0]):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('quiesce schema'))")
            # pg_tables through this statement's snapshot (to_regclass may use
            # a catalog cache that predates the lock)
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename = 'quiesce_meta')"
            ).fetchone()
            if not (row and row[0]):
                conn.execute(_DDL)
                conn.execute(
                    "INSERT INTO quiesce_meta (key, value) VALUES "
                    "('schema', %s), ('format', %s), ('writer', 'quiesce')",
                    (str(SCHEMA), str(FORMAT)),
                )
    check_meta(conn, where)


def check_buffer_id(buffer_id: object) -> str:
    """``buffer_id``, a str of 1 to 200 characters without NUL, or the error."""
    if not isinstance(buffer_id, str):
        raise InvalidType(f"buffer_id must be a str, not {type(buffer_id).__name__}")
    if not buffer_id or len(buffer_id) > 200 or "\x00" in buffer_id:
        raise InvalidArgument("buffer_id must be 1 to 200 characters, without NUL")
    return buffer_id


def redacted(dsn: str) -> str:
    """The DSN without a password, for messages and reprs."""
    try:
        parts = urllib.parse.urlsplit(dsn)
    except ValueError:
        return "<dsn>"
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
