"""The shared buffer's SQL and its control connection.

What it keeps true: leases live on the database clock (``now()``) only;
a lease is taken only when expired (``_TAKE_LEASE``), renewed only by its
holder of the same epoch; a member's (re)join and a removal's horizon
check are ordered by one advisory lock (``_UPSERT_MEMBER`` /
``_HORIZON_CHECK``); a result is stored once (``result IS NULL``), and a
late one only while its epoch still holds the lease. :class:`_Control`
runs one statement at a time on one connection, reconnecting after a
failure, and turns every failure into :class:`LogWriteError`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .._core.errors import LogWriteError
from .._log.postgres import connect

# The token is the SHA-256 of the new sequencer's secret writer token, for
# the new epoch: the insert trigger refuses rows of other sessions.
_TAKE_LEASE = """
INSERT INTO quiesce_writer (buffer_id, epoch, holder, lease_until, token, token_epoch)
VALUES (%(b)s, 1, %(h)s, now() + %(l)s * interval '1 second', %(t)s, 1)
ON CONFLICT (buffer_id) DO UPDATE
    SET epoch = quiesce_writer.epoch + 1, holder = excluded.holder,
        lease_until = excluded.lease_until, token = excluded.token,
        token_epoch = quiesce_writer.epoch + 1
    WHERE quiesce_writer.lease_until < now()
RETURNING epoch
"""


# Ends the sessions of an *expired* lease holder that are inside a
# transaction (a paused or cut-off sequencer's open batch: its row locks on
# the lease and request rows, its uncommitted log rows and its advisory lock
# would hold the takeover back; a stalled COPY is not ended by any timeout).
# Sessions are found by their application_name (_app_name); the lease row is
# read without a lock. Safe: an expired holder's open batch could not commit
# after the takeover anyway (the fence), and it never acknowledged it.
_END_EXPIRED_HOLDER = """
SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a
JOIN quiesce_writer w ON w.buffer_id = %(b)s AND w.lease_until < now() AND w.holder <> %(h)s
WHERE a.application_name
        = 'quiesce ' || left(encode(sha256(convert_to(w.holder, 'UTF8')), 'hex'), 16)
  AND a.xact_start IS NOT NULL AND a.pid <> pg_backend_pid()
"""


_RENEW_LEASE = """
UPDATE quiesce_writer SET lease_until = now() + %(l)s * interval '1 second'
WHERE buffer_id = %(b)s AND epoch = %(e)s AND holder = %(h)s
RETURNING epoch
"""


_RELEASE_LEASE = """
UPDATE quiesce_writer SET lease_until = now() - interval '1 second'
WHERE buffer_id = %(b)s AND epoch = %(e)s AND holder = %(h)s
"""


# The advisory lock orders a member's (re)join against a removal's horizon
# check (_HORIZON_CHECK): a member that joins after the check reads the log
# only after the removal's intent committed.
_UPSERT_MEMBER = """
WITH joining AS (SELECT pg_advisory_xact_lock(hashtext('quiesce member ' || %(b)s)))
INSERT INTO quiesce_member
    (buffer_id, member_id, incarnation, lease_until, horizon, applied_seq, info)
SELECT %(b)s, %(m)s, %(i)s, now() + %(l)s * interval '1 second', %(hz)s, %(a)s, %(info)s
FROM joining
ON CONFLICT (buffer_id, member_id) DO UPDATE
    SET incarnation = excluded.incarnation, lease_until = excluded.lease_until,
        horizon = excluded.horizon, applied_seq = excluded.applied_seq, info = excluded.info
"""


_HORIZON_CHECK = """
WITH checking AS (SELECT pg_advisory_xact_lock_shared(hashtext('quiesce member ' || %(b)s)))
SELECT min(horizon) FROM quiesce_member, checking
WHERE buffer_id = %(b)s AND member_id <> %(m)s AND lease_until > now()
"""


_LEAVE = "DELETE FROM quiesce_member WHERE buffer_id = %(b)s AND member_id = %(m)s"


_LIVE_MEMBERS = """
SELECT member_id FROM quiesce_member WHERE buffer_id = %(b)s AND lease_until > now()
"""
_FLOOR = """
SELECT min(horizon), count(*) FROM quiesce_member
WHERE buffer_id = %(b)s AND member_id <> %(m)s AND lease_until > now()
"""


_HOLDERS = """
SELECT member_id, horizon, info FROM quiesce_member
WHERE buffer_id = %(b)s AND member_id <> %(m)s AND lease_until > now() AND horizon < %(g)s
ORDER BY horizon LIMIT 5
"""


_ENQUEUE = """
WITH queued AS (
    INSERT INTO quiesce_request (buffer_id, request_id, member_id, op, args)
    VALUES (%(b)s, %(r)s, %(m)s, %(op)s, %(args)s) RETURNING 1
)
SELECT pg_notify(%(ch)s, %(r)s) FROM queued
"""


_OPEN_REQUESTS = """
SELECT request_id, member_id, op, args FROM quiesce_request
WHERE buffer_id = %(b)s AND result IS NULL ORDER BY created, request_id LIMIT 500
"""


_STORE_RESULT = """
UPDATE quiesce_request SET result = %(res)s, applied_seq = %(a)s
WHERE buffer_id = %(b)s AND request_id = %(r)s AND result IS NULL
"""


_STORE_RESULT_FENCED = """
WITH stored AS (
    UPDATE quiesce_request SET result = %(res)s, applied_seq = %(a)s
    WHERE buffer_id = %(b)s AND request_id = %(r)s AND result IS NULL
      AND EXISTS (SELECT 1 FROM quiesce_writer WHERE buffer_id = %(b)s AND epoch = %(e)s)
    RETURNING 1
)
SELECT pg_notify(%(ch)s, '') FROM stored
"""


_RESULTS = """
SELECT request_id, result, applied_seq FROM quiesce_request
WHERE buffer_id = %(b)s AND request_id = ANY(%(ids)s) AND result IS NOT NULL
"""


class _Control:
    """The control connection (leases, members, requests): one sync psycopg
    connection used under a lock from worker threads; reconnects after a
    failure. Every failure is a :class:`LogWriteError` with the server's words."""

    def __init__(self, dsn: str, timeout: float, application_name: str | None = None) -> None:
        self._dsn = dsn
        self._timeout = timeout
        self._application_name = application_name
        self._lock = threading.Lock()
        self._conn: Any = None
        self.connected = False
        self.last_contact: float | None = None

    def run(
        self, sql: str, params: dict[str, Any], *, lock_timeout: float | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit). With ``lock_timeout`` (seconds) it
        runs in a transaction of its own that gives up waiting for a lock
        after that long (the server's ``lock_timeout``)."""
        import psycopg

        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(
                        self._dsn, timeout=self._timeout, application_name=self._application_name
                    )
                    self._conn.execute(f"SET statement_timeout = {int(self._timeout * 1000)}")
                if lock_timeout is None:
                    cur = self._conn.execute(sql, params)
                    rows = cur.fetchall() if cur.description is not None else []
                else:
                    with self._conn.transaction():
                        ms = max(1, int(lock_timeout * 1000))
                        self._conn.execute(f"SET LOCAL lock_timeout = {ms}")
                        cur = self._conn.execute(sql, params)
                        rows = cur.fetchall() if cur.description is not None else []
            except psycopg.Error as exc:
                self.connected = False
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
                raise LogWriteError(f"PostgreSQL: {str(exc).strip()}") from None
            except LogWriteError:
                self.connected = False
                raise
            self.connected = True
            self.last_contact = time.monotonic()
            return rows

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
