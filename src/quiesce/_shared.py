"""``open_shared_buffer``: one buffer shared by processes on many hosts, through PostgreSQL.

What it keeps true across processes (each member is one
``open_shared_buffer`` context; the database is the only channel):

1. One writer at a time. The process holding the buffer's *writer lease*
   (``quiesce_writer``, expiring on the database clock) is the *sequencer*:
   it runs every operation on its local :class:`RuntimeBuffer` exactly as a
   single-process buffer does and group-commits the records to
   :class:`PostgresLog`, each row stamped with the lease's epoch. The insert
   trigger refuses a row of any other epoch, so a sequencer that lost its
   lease (paused, cut off) cannot add a record after its successor's first:
   the log stays one gap-free history. It also refuses a row of the current
   epoch from any session but the sequencer's sink (a per-epoch writer
   token: the lease row holds the SHA-256 of a secret drawn at takeover), so
   a foreign client's row never reaches the log that replicas follow; a row
   that got past the fences anyway (the trigger disabled) is found at the
   sequencer's next batch (:class:`~quiesce._log.postgres.LogDiverged`), and
   it steps down and rebuilds from the log instead of retrying for good.
2. Replicas follow the log. Every other member applies each batch it reads
   (``seq`` > what it has) to its local buffer as one new version with the
   sequencer's version number (``replay`` continuing the log); it is woken by
   ``NOTIFY`` and also catches up on a slow poll and after every reconnect
   (a ``NOTIFY`` is never replayed). Pins and snapshot reads are always local
   and never touch the network. A replica never applies a removal itself.
3. Writes are forwarded. A replica's ``append``, ``mark_stale``, ``prune`` and
   ``edit`` become rows of ``quiesce_request``; the sequencer applies each
   exactly once, in arrival order, and stores its result *in the same
   transaction* as the records it produced: while it applies a request it
   holds its buffer's flush lock until the result is queued, so no other
   flush can commit the records alone. A request row that cannot be
   applied — undecodable, nested too deep, too long, an integer beyond 64
   bits, or one whose application raises anything — gets that error as its
   result (:class:`InvalidArgument` for the first kinds) and the sequencer
   serves the next one: no row can stop the pump. The call returns the same report (or
   raises the same error) the sequencer's buffer gave, after the replica has
   applied those records locally (read-your-writes). A crash before that
   commit leaves neither the records nor the result, and the next sequencer
   applies the request. The one flush that can commit a request's records
   before its result exists is the request's own (a prune or edit publishing
   a due removal inline); so every record a request's application appends
   carries its id (``detail["request_id"]``), and a sequencer that finds an
   unanswered request's records in the log — its predecessor died in that
   window — stores the result derived from them instead of applying it
   again: the same report, except that a ``version`` the request did not
   publish itself is the newest one before its first record, and an edit's
   ``deferred`` omits ids another request had staged already.
4. Grace periods span processes. Each member publishes a *horizon* with its
   member lease: ``min(oldest local pin, local head version)`` (the head term
   covers a reader about to pin a version the member has not yet seen marked).
   The sequencer applies a removal of grace version ``g`` only when its own
   oldest pin and the smallest horizon among members with live leases are both
   ``>= g``: it reads the horizons on every heartbeat, and re-checks them
   inside the removal intent's own transaction, under an advisory lock that
   a member's registration also takes (a removal that fails the re-check is
   requeued, not published). A member joins with horizon 0 (holding every
   removal back) before it reads the log. A member whose lease expired is
   excluded. Its reads stop first: every read of a snapshot checks the
   member's own deadline (monotonic clock: last successful renewal *sent* +
   0.75 lease), independent of the heartbeat task and of any database call
   in flight, and raises :class:`LeaseLost` past it; the database keeps the
   lease until that renewal's execution + the whole lease, so a removal that
   stopped waiting for the member is published at least a quarter lease
   after its last read. Snapshots pinned before a loss stay void for good,
   and ``snapshot()`` raises until the member has re-joined (renewed, then
   caught up to the log: what was removed meanwhile is applied before it
   serves a read again). ``lease_lost_times`` records the deadlines, when
   reads stopped.
5. Failover. When the lease expires (the sequencer died, paused or was cut
   off), a replica takes it with epoch + 1, reads the log to its end, attaches
   the sink and serves, including requests the old sequencer had not
   answered. Nothing a paused holder keeps open holds the takeover back: the
   take waits at most a quarter lease for a lock, and when it cannot get
   one, ends the expired holder's sessions that are inside a transaction
   (every session of a member carries an ``application_name`` derived from
   its holder name); the sink's ``idle_in_transaction_session_timeout`` (half
   a lease) ends a batch left open even with no successor (a session
   stalled inside a ``COPY`` is not idle: only the successor ends that). A
   demoted sequencer drops what was not durable and rebuilds its local
   buffer from the log.

Leases live on the database clock (``now()``); a process never compares its
clock with another's. Every wait is bounded: a write that gets no answer
within ``timeout`` raises :class:`SharedWriteTimeout` (which says the request
may still be applied).

What does *not* hold across processes: a sequencer's own writes are
acknowledged when applied locally and durable only after ``flush()`` (as with
any sink; a forwarded write is durable when it returns); a forwarded request
that timed out may still be applied later (once).

Threads: each member has three psycopg connections (the sink, a control
connection for leases, members and requests, and a listener), all used from
worker threads (``anyio.to_thread``), so it runs on asyncio and trio alike.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.abc

from ._core import errors as _errors
from ._core.buffer import Snapshot
from ._core.checkpoint import DEFAULT_CHECKPOINT_EVERY, check_checkpoint_every, recover
from ._core.entry import Entry
from ._core.errors import InvalidArgument, InvalidType, LogWriteError, QuiesceError
from ._core.log import EditLog, _build_lock, build_compact
from ._core.pins import _NOT_ENTERED, _new_object
from ._core.plan import EditPlan, Move, Op, Prune, Rewrite, Summarize
from ._core.policy import Policy
from ._core.publish import tomb_to_dict
from ._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    LogRecord,
    Mark,
    Outcome,
    Override,
    PruneReport,
    Refusal,
    Stats,
    Status,
    Tombstone,
)
from ._core.replay import _tomb, replay
from ._core.tasks import task_name
from ._core.version import Version
from ._log._format import MAX_DEPTH, _too_deep, decode_json
from ._log.postgres import PostgresLog, WriterFenced, connect, ensure_schema
from ._runtime import RuntimeBuffer, open_buffer

_logger = logging.getLogger("quiesce.shared")

__all__ = ["LeaseLost", "SharedBuffer", "SharedStats", "SharedWriteTimeout", "open_shared_buffer"]


class LeaseLost(QuiesceError):
    """This member's lease expired (it paused or lost the database longer
    than the lease): other members no longer wait for its readers, so its
    snapshots are void until it has re-joined."""


class _LeasedSnapshot(Snapshot):
    """A shared member's snapshot: every read checks its member's own lease
    deadline (:meth:`SharedBuffer._check_read`) and raises
    :class:`LeaseLost` once it passed, or when the snapshot was pinned
    before a lease loss. Snapshot's layout plus one slot, the member."""

    __slots__ = ("_shared",)

    _shared: SharedBuffer

    def _v(self) -> Version:
        v = Snapshot._v(self)
        self._shared._check_read(self._since, v.number)
        return v


class SharedWriteTimeout(LogWriteError, TimeoutError):
    """A forwarded write got no answer within its timeout. The request stays
    queued and may still be applied by the sequencer."""


@dataclass(frozen=True, slots=True)
class SharedStats:
    """A frozen picture of one member (``local`` is its buffer's :class:`Stats`)."""

    member_id: str
    role: str  #: "sequencer" or "replica"
    epoch: int  #: the writer epoch this member last saw
    applied_seq: int  #: records applied locally (the next seq it will read)
    connected: bool  #: False once a database call failed, until one succeeds
    last_contact_age: float | None  #: seconds since the last successful database call
    lease_valid: bool
    members: int  #: live members the sequencer last counted (0 on replicas)
    grace_floor: int | None  #: smallest live horizon of the others (sequencer)
    forwarded: int  #: writes this member forwarded
    served: int  #: requests this member applied as sequencer
    failovers: int  #: times this member took the lease from another holder
    local: Stats
    #: the log's next seq as this member last heard (a NOTIFY or a read)
    log_seq: int = 0

    @property
    def lag(self) -> int:
        """Records of the log this member has heard of and not applied yet."""
        return max(0, self.log_seq - self.applied_seq)


_SEQUENCER = "sequencer"
_REPLICA = "replica"

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

#: The key, in a log record's ``detail``, naming the forwarded request whose
#: application appended the record (exactly-once; see ``_serve_batch``).
REQUEST_KEY = "request_id"
#: Requests whose stamped records a member remembers (oldest forgotten first):
#: only a request whose result was lost in a crash needs its records again,
#: and that is one of the last few the old sequencer applied.
_STAMPED_KEPT = 4_096
#: Records before a member's starting checkpoint it reads once for stamps.
_STAMP_LOOKBACK = 10_000
#: The detail fields of a stamped record that a derived result reads.
_DERIVED_FROM = frozenset(
    {"outcomes", "staged", "tombstones", "tombstone", "refusals", "why", "kind", "data"}
)
#: The records that decide a request, per operation (the first one present
#: holds what its result is derived from).
_DECIDING = {
    "append": ("append", "refuse"),
    "mark_stale": ("mark",),
    "prune": ("prune",),
    "edit": ("edit",),
    "escalate": ("escalate",),
}


# -- wire forms of the forwarded operations and their results ---------------


def _op_from_dict(d: dict[str, Any]) -> Op:
    kind = d["op"]
    if kind == "prune":
        return Prune(d["id"])
    if kind == "rewrite":
        refs = d["refs"]
        return Rewrite(d["id"], d["body"], None if refs is None else tuple(refs))
    if kind == "summarize":
        return Summarize(tuple(d["ids"]), Entry.from_dict(d["into"]))
    if kind == "move":
        return Move(d["id"], d["before"])
    raise InvalidArgument(f"unknown edit op {kind!r}")


def _override(d: dict[str, Any] | None) -> Override | None:
    return None if d is None else Override(d["reason"], d["turn"])


def _plan_from_dict(d: dict[str, Any]) -> EditPlan:
    return EditPlan(
        [_op_from_dict(o) for o in d["ops"]],
        reason=d["reason"],
        rationale=d["rationale"],
        actor=d["actor"],
        turn=d["turn"],
        base=d["base"],
        override=_override(d["override"]),
    )


def _escalation_to_dict(e: Escalation | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "kind": e.kind.value,
        "detail": e.detail,
        "refusals": [r.value for r in e.refusals],
        "version": e.version,
        "data": json.loads(json.dumps(dict(e.data), default=repr)),
    }


def _result_to_dict(op: str, value: Any) -> dict[str, Any]:
    if op == "append":
        return {"version": value}
    if op == "mark_stale":
        return {"mark": list(value)}
    if op == "prune":
        return {
            "version": value.version,
            "outcomes": [
                [i, o.status.value, None if o.refusal is None else o.refusal.value]
                for i, o in value.items()
            ],
        }
    if op == "escalate":
        out = _escalation_to_dict(value)
        assert out is not None
        return out
    assert op == "edit"
    return {
        "applied": value.applied,
        "refusals": [r.value for r in value.refusals],
        "escalation": _escalation_to_dict(value.escalation),
        "version": value.version,
        "removed": list(value.removed),
        "deferred": list(value.deferred),
    }


def _result_from_dict(op: str, d: dict[str, Any], plan: EditPlan | None) -> Any:
    if op == "append":
        return int(d["version"])
    if op == "mark_stale":
        i, reason, turn, version = d["mark"]
        return Mark(i, reason, turn, version)
    if op == "prune":
        return PruneReport(
            {i: Outcome(Status(s), None if r is None else Refusal(r)) for i, s, r in d["outcomes"]},
            d["version"],
        )
    if op == "escalate":
        return Escalation(
            EscalationKind(d["kind"]),
            d["detail"],
            None,
            tuple(Refusal(r) for r in d["refusals"]),
            d["version"],
            d["data"],
        )
    esc = d["escalation"]
    return EditReport(
        applied=d["applied"],
        refusals=tuple(Refusal(r) for r in d["refusals"]),
        escalation=None
        if esc is None
        else Escalation(
            EscalationKind(esc["kind"]),
            esc["detail"],
            plan,
            tuple(Refusal(r) for r in esc["refusals"]),
            esc["version"],
            esc["data"],
        ),
        version=d["version"],
        removed=tuple(d["removed"]),
        deferred=tuple(d["deferred"]),
    )


def _stamped(record: LogRecord, request_id: str) -> LogRecord:
    """``record`` with the forwarded request's id in its detail."""
    return record._replace(detail={**record.detail, REQUEST_KEY: request_id})


def _derive_result(
    op: str, args: dict[str, Any], records: list[LogRecord], version_before: Callable[[int], int]
) -> dict[str, Any] | None:
    """The result of request ``op(args)`` from the records its application
    appended (stamped with its id, in ``seq`` order), when that application
    is in the log but its result is not (the sequencer died in between): the
    report the caller would have got, except that a ``version`` the request
    itself did not publish is the newest one before its first record. None
    if the deciding record is not among them (then nothing was decided)."""
    deciding = next((r for r in records if r.op in _DECIDING[op]), None)
    if deciding is None:
        return None
    det = deciding.detail
    versions = [r.version for r in records if r.version is not None]
    version = max(versions) if versions else version_before(deciding.seq)
    removed = {t["id"] for r in records if r.op == "remove" for t in r.detail.get("tombstones", ())}
    if op == "append":
        if deciding.op == "refuse":
            tomb = det["tombstone"]
            return {
                "error": "ReadmissionRefused",
                "message": f"entry {deciding.ids[0]!r} matches tombstone of {tomb['id']!r} "
                f"(pruned at version {tomb['version']}: {tomb['reason']}); re-admission "
                f"needs an Override",
                "tombstone": tomb,
            }
        return {"version": deciding.version}
    if op == "mark_stale":
        return {"mark": [deciding.ids[0], deciding.reason, deciding.turn, deciding.version]}
    if op == "escalate":
        return {
            "kind": det["kind"],
            "detail": deciding.reason,
            "refusals": [],
            "version": version,
            "data": det.get("data", {}),
        }
    if op == "prune":
        decided = det.get("outcomes", {})
        outcomes = []
        for i in dict.fromkeys(args["ids"]):
            if i in decided:
                outcomes.append([i, *decided[i]])
            else:  # a candidate: removed by this request's own removal, or staged
                status = Status.PRUNED if i in removed else Status.DEFERRED
                outcomes.append([i, status.value, None])
        return {"version": version, "outcomes": outcomes}
    if deciding.outcome != "applied":
        refusals = list(det.get("refusals", ()))
        return {
            "applied": False,
            "refusals": refusals,
            "escalation": {
                "kind": EscalationKind.REFUSED_EDIT.value,
                "detail": "; ".join(det.get("why", ())),
                "refusals": refusals,
                "version": version,
                "data": {},
            },
            "version": version,
            "removed": [],
            "deferred": [],
        }
    plan = args["plan"]
    staged = {i for g in det.get("staged", ()) for i in g[1]}
    taken: dict[str, None] = {}
    for o in plan["ops"]:
        for i in [o["id"]] if o["op"] == "prune" else o["ids"] if o["op"] == "summarize" else []:
            if i in staged or i in removed:
                taken[i] = None
    return {
        "applied": True,
        "refusals": [],
        "escalation": None,
        "version": version,
        "removed": [i for i in taken if i in removed],
        "deferred": [i for i in taken if i not in removed],
    }


def _error_to_dict(exc: BaseException) -> dict[str, Any]:
    """The wire form of an error, with the tombstone (and ref) that
    ``EntryPruned``, ``ReadmissionRefused`` and ``DanglingReference`` carry."""
    d: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)}
    tomb = getattr(exc, "tombstone", None)
    if isinstance(tomb, Tombstone):
        d["tombstone"] = tomb_to_dict(tomb)
    if isinstance(exc, _errors.DanglingReference):
        d["ref"] = exc.ref
    return d


def _error_from_dict(d: dict[str, Any]) -> QuiesceError:
    """Invert :func:`_error_to_dict`: the same class, message and payload."""
    cls = getattr(_errors, str(d["error"]), None)
    if not (isinstance(cls, type) and issubclass(cls, QuiesceError)):
        cls = QuiesceError
    message = str(d["message"])
    tomb = d.get("tombstone")
    tombstone = None if tomb is None else _tomb(tomb)
    if issubclass(cls, _errors.DanglingReference):
        return cls(message, str(d.get("ref", "")), tombstone)
    if issubclass(cls, _errors.EntryPruned | _errors.ReadmissionRefused):
        return cls(message, tombstone)
    try:
        return cls(message)
    except TypeError:  # a class this version builds differently
        return QuiesceError(message)


#: The longest request row (its ``args`` text) the sequencer decodes; a
#: longer one is refused unread. Nesting is bounded as a log record's is
#: (``_log._format.MAX_DEPTH``).
MAX_REQUEST_CHARS = 16 * 2**20
#: Every integer a request carries fits the storage's 64-bit columns.
_INT64 = (-(2**63), 2**63 - 1)


def _decode_request(op: object, text: object) -> dict[str, Any]:
    """The arguments of one ``quiesce_request`` row, decoded with the log's
    limits and checked for shape: at most :data:`MAX_REQUEST_CHARS`
    characters, nested at most ``MAX_DEPTH`` deep (checked on the text before
    parsing, so a row nested 100k deep costs O(len) and no recursion), strict
    JSON, an object for a known operation, every integer within 64 bits.
    Raises :class:`InvalidArgument` naming what is wrong; never anything
    else. O(len(text))."""
    if op not in _DECIDING:
        raise InvalidArgument(f"unknown operation {str(op)[:80]!r}")
    if not isinstance(text, str):
        raise InvalidArgument(f"{op} request: args is not text")
    if len(text) > MAX_REQUEST_CHARS:
        raise InvalidArgument(
            f"{op} request: args of {len(text)} characters (at most {MAX_REQUEST_CHARS})"
        )
    if _too_deep(text):
        raise InvalidArgument(f"{op} request: args nest deeper than {MAX_DEPTH} levels")
    try:
        args = decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{op} request: args are not strict JSON ({exc})"[:300]) from None
    if not isinstance(args, dict):
        raise InvalidArgument(f"{op} request: args are not a JSON object")
    stack: list[Any] = [args]
    while stack:  # iterative: the depth is bounded, the width is not
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif type(value) is int and not _INT64[0] <= value <= _INT64[1]:
            raise InvalidArgument(
                f"{op} request: integer {str(value)[:40]} does not fit in 64 bits"
            )
    return args


def _check_seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidType(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not value > 0:
        raise InvalidArgument(f"{what} must be > 0, got {value!r}")
    return float(value)


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


class SharedBuffer:
    """One member of a buffer shared through PostgreSQL (made by
    :func:`open_shared_buffer`; see the module docstring for what holds).

    Reads are local and sync: ``snapshot()``, ``version``, ``head()``,
    ``oldest_pin()``, ``log``, ``stats()``. Writes are async and work in every
    member: on the sequencer they run on the local buffer (and return at
    once, like :class:`Buffer`'s); on a replica they are forwarded and return
    the sequencer's report once it is durable and applied locally. It is a
    :class:`~quiesce.AsyncBuffer` (``aappend``, ``aprune``, ``aedit``,
    ``aflush``, ``aescalate``, ``escalations()``, ``quiesce()``), so the
    integrations and :func:`~quiesce.run_pruner` take it as they take the
    buffer of ``open_buffer()``.
    """

    def __init__(
        self,
        dsn: str,
        buffer_id: str,
        *,
        policy: Policy | None,
        lease: float,
        timeout: float,
        poll: float,
        member_id: str | None,
        max_pin_age: float | None,
        flush_interval: float,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidType(f"dsn must be a str, not {type(dsn).__name__}")
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidType(f"policy must be a Policy, not {type(policy).__name__}")
        self._lease = _check_seconds(lease, "lease")
        self._timeout = _check_seconds(timeout, "timeout")
        self._poll = _check_seconds(poll, "poll")
        self._flush_interval = _check_seconds(flush_interval, "flush_interval")
        self._checkpoint_every = check_checkpoint_every(checkpoint_every)
        if member_id is None:
            member_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        elif not isinstance(member_id, str) or not member_id:
            raise InvalidArgument("member_id must be a non-empty str")
        self._dsn = dsn
        self._buffer_id = buffer_id
        self._policy = policy
        self._max_pin_age = max_pin_age
        self.member_id = member_id
        self._incarnation = uuid.uuid4().hex
        #: every session of this member is named so (pg_stat_activity), so
        #: a successor can end what it left open (_END_EXPIRED_HOLDER)
        self._app_name = "quiesce " + hashlib.sha256(self._holder.encode()).hexdigest()[:16]
        self._role = _REPLICA
        self._epoch = 0
        self._sink: PostgresLog | None = None
        self._ctl = _Control(dsn, self._timeout, self._app_name)
        self._local: RuntimeBuffer | None = None
        self._local_stop: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._applied = anyio.Event()  # replaced after every local apply
        self._role_lock = anyio.Lock()
        self._commit_lock = threading.Lock()  # request batches vs the flusher
        self._results: list[tuple[str, str, int]] = []  # (request_id, json, seq_after)
        self._results_lock = threading.Lock()
        #: (thread, request_id) while that thread applies a forwarded request
        self._serving: tuple[int, str] | None = None
        #: request_id -> the records its application appended (stamped with
        #: it), for the requests this member's local log holds, newest last
        self._stamped: dict[str, list[LogRecord]] = {}
        self._waiting: dict[str, tuple[str, EditPlan | None]] = {}
        self._answers: dict[str, tuple[str, int]] = {}
        self._answered = anyio.Event()
        self._member_valid_until = 0.0
        self._writer_valid_until = 0.0
        self._lease_lost: LeaseLost | None = None
        #: snapshots pinned (monotonic clock) at or before this are void: a
        #: loss or a re-join happened after them
        self._void_before = float("-inf")
        self._lease_guard = threading.Lock()
        self._members = 0
        self._floor: int | None = None
        self._held_alarmed: set[tuple[str, int]] = set()
        self._wake_pump = anyio.Event()
        self._closing = False
        self._needs_rebuild = False  # demoted with records that were not durable
        #: wall-clock moments this member counted its member lease lost
        #: (``quiesce.testing.MemberReport.lease_lost``)
        self.lease_lost_times: list[float] = []
        self._lost_records = 0  # records dropped at a demotion, not yet reported
        self.forwarded = 0
        self.served = 0
        self.failovers = 0
        self._log_seq = 0  # the log's next seq as last heard (NOTIFY payload or a read)
        self.request_channel = ""
        self._listen_conn: Any = None

    # -- reads (local, sync) --------------------------------------------------

    @property
    def local(self) -> RuntimeBuffer:
        """This member's local buffer (do not write to it on a replica)."""
        buf = self._local
        if buf is None:
            raise _errors.BufferClosed("the shared buffer is not open")
        return buf

    @property
    def role(self) -> str:
        """``"sequencer"`` or ``"replica"``."""
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def buffer_id(self) -> str:
        return self._buffer_id

    @property
    def version(self) -> int:
        return self.local.version

    @property
    def log(self) -> EditLog:
        return self.local.log

    def head(self) -> Any:
        return self.local.head()

    def snapshot(self) -> Snapshot:
        """A local snapshot (pinning never touches the network). Raises
        :class:`LeaseLost` while this member's lease is expired: the other
        members no longer wait for its readers."""
        lost = self._lease_lost
        local = self._local
        if lost is not None or local is None:
            raise lost or _errors.BufferClosed("the shared buffer is not open")
        if time.monotonic() > self._member_valid_until:
            self._note_lease_lost(self._member_valid_until)
            raise self._lease_lost or LeaseLost("this member's lease expired")
        # Buffer.snapshot(), written out for the subclass (the pin fast path)
        snap: _LeasedSnapshot = _new_object(_LeasedSnapshot)
        snap._shared = self
        snap._buffer = local
        snap._version = None
        snap._task = _NOT_ENTERED
        return snap

    def oldest_pin(self) -> int | None:
        return self.local.oldest_pin()

    def _check_read(self, since: float, number: int) -> None:
        """Raise :class:`LeaseLost` unless a snapshot pinned at ``since``
        (the local buffer's clock: ``time.monotonic``) may still be read: this member's lease
        deadline has not passed (checked here, on every read, against the
        monotonic clock: the heartbeat task and any database call in flight
        have no say), the lease is not lost, and the snapshot was not pinned
        before the last loss. O(1), no lock on the valid path, any thread.

        Why a read before the deadline is safe: the deadline is the moment
        the last successful renewal was *sent* plus 0.75 of the lease, and
        the database keeps the member's lease until the renewal's execution
        plus the whole lease; another member's removal that stopped waiting
        for this one (its lease expired on the database clock) is therefore
        published at least a quarter lease after this member's reads
        stopped."""
        if time.monotonic() > self._member_valid_until:
            self._note_lease_lost(self._member_valid_until)
        if self._lease_lost is not None or since <= self._void_before:
            raise LeaseLost(
                f"this snapshot (version {number}) was pinned when its member's lease "
                f"expired: other processes may have removed what it shows"
            )

    def _note_lease_lost(self, deadline: float) -> None:
        """Count the member lease lost at ``deadline`` (monotonic), once per
        loss, from whichever thread saw it first (a read, the heartbeat, a
        late renewal): from now on every read raises until the member has
        re-joined, and snapshots pinned until then stay void. Records, on the
        wall clock, when reads stopped (the deadline) for
        ``quiesce.testing.check_shared_history``."""
        if self._local is None:
            return  # not joined yet: nothing was served
        with self._lease_guard:
            if self._lease_lost is not None:
                return
            self._void_before = max(self._void_before, time.monotonic())
            self.lease_lost_times.append(time.time() - (time.monotonic() - deadline))
            self._lease_lost = LeaseLost(
                f"member {self.member_id} could not renew its lease within "
                f"{self._lease:g}s: its snapshots are void until it re-joins"
            )

    def staged(self) -> Any:
        return self.local.staged()

    def stats(self) -> SharedStats:
        ctl = self._ctl
        last = ctl.last_contact
        applied = len(self.local._records)
        return SharedStats(
            member_id=self.member_id,
            role=self._role,
            epoch=self._epoch,
            applied_seq=applied,
            connected=ctl.connected,
            last_contact_age=None if last is None else time.monotonic() - last,
            lease_valid=self._lease_lost is None and time.monotonic() < self._member_valid_until,
            members=self._members,
            grace_floor=self._floor,
            forwarded=self.forwarded,
            served=self.served,
            failovers=self.failovers,
            local=self.local.stats(),
            log_seq=max(self._log_seq, applied),
        )

    def _check(self) -> None:
        """The local buffer's invariants (docs/design.md), as :meth:`Buffer._check`."""
        self.local._check()

    # -- writes (async, forwarded on replicas) --------------------------------

    async def append(
        self, entry: Entry, *, override: Override | None = None, timeout: float | None = None
    ) -> int:
        """:meth:`Buffer.append` on the sequencer; returns the version."""
        if not isinstance(entry, Entry):
            raise InvalidType(f"entry must be an Entry, not {type(entry).__name__}")
        args = {
            "entry": entry.to_dict(),
            "override": None
            if override is None
            else {"reason": override.reason, "turn": override.turn},
        }
        return int(await self._write("append", args, timeout))

    async def mark_stale(
        self, entry_id: str, reason: str, *, turn: int | None = None, timeout: float | None = None
    ) -> Mark:
        """:meth:`Buffer.mark_stale` on the sequencer; returns the Mark."""
        result: Mark = await self._write(
            "mark_stale", {"id": entry_id, "reason": reason, "turn": turn}, timeout
        )
        return result

    async def prune(
        self,
        ids: Iterable[str],
        *,
        reason: str,
        actor: str | None = None,
        turn: int | None = None,
        timeout: float | None = None,
    ) -> PruneReport:
        """:meth:`Buffer.prune` on the sequencer; returns its report."""
        if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
            raise InvalidType(f"ids must be a collection of ids, not {type(ids).__name__}")
        args = {"ids": list(ids), "reason": reason, "actor": actor, "turn": turn}
        result: PruneReport = await self._write("prune", args, timeout)
        return result

    async def edit(self, plan: EditPlan, *, timeout: float | None = None) -> EditReport:
        """:meth:`Buffer.edit` on the sequencer; returns its report."""
        if not isinstance(plan, EditPlan):
            raise InvalidType(f"plan must be an EditPlan, not {type(plan).__name__}")
        result: EditReport = await self._write("edit", {"plan": plan.to_dict()}, timeout, plan)
        return result

    async def flush(self, *, checkpoint: bool = False) -> None:
        """On the sequencer: return once every change made before the call is
        durable (with ``checkpoint=True``, a checkpoint row of the head in the
        same commit). On a replica: an anyio checkpoint, nothing more (its
        forwarded writes are durable when they return). Raises :class:`LeaseLost` if this member, as
        sequencer, lost the lease while some of its writes were not yet
        durable (they were dropped), also when this flush found itself
        fenced (a successor's epoch, or another writer's record where its
        own go: it steps down): a flush that returns means every write it
        acknowledged before is in the log."""
        if self._role == _SEQUENCER:
            try:
                await anyio.to_thread.run_sync(self._flush, checkpoint)
            except WriterFenced:  # another writer's record is in the log: step down
                await self._demote("fenced")
        else:
            await anyio.lowlevel.checkpoint()
        lost, self._lost_records = self._lost_records, 0
        if lost:
            raise LeaseLost(
                f"this member lost the writer lease before {lost} of its records were "
                f"durable: those writes are not in the log"
            )

    async def wait_applied(self, version: int, *, timeout: float | None = None) -> None:
        """Return once the local head is at ``version`` or newer
        (read-your-writes after another member's write). Raises
        ``TimeoutError`` after ``timeout`` seconds (default: the buffer's)."""
        with anyio.fail_after(self._timeout if timeout is None else timeout):
            while self.local.version < version:
                await self._applied.wait()

    async def quiesce(self) -> None:
        """Apply every due removal now (sequencer); a checkpoint on a replica."""
        if self._role == _SEQUENCER:
            await self.local.quiesce()
        else:
            await anyio.lowlevel.checkpoint()

    # -- the AsyncBuffer face (quiesce.AsyncBuffer) ------------------------------
    #
    # The names code on the event loop uses for a RuntimeBuffer and a
    # SharedBuffer alike: the integrations and run_pruner take either.

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """The tombstones of the local head."""
        return self.local.tombstones

    async def aappend(
        self, entry: Entry, *, override: Override | None = None, timeout: float | None = None
    ) -> int:
        """:meth:`append` (the :class:`~quiesce.AsyncBuffer` name)."""
        return await self.append(entry, override=override, timeout=timeout)

    async def amark_stale(
        self, entry_id: str, reason: str, *, turn: int | None = None, timeout: float | None = None
    ) -> Mark:
        """:meth:`mark_stale` (the :class:`~quiesce.AsyncBuffer` name)."""
        return await self.mark_stale(entry_id, reason, turn=turn, timeout=timeout)

    async def aprune(
        self,
        ids: Iterable[str],
        *,
        reason: str,
        actor: str | None = None,
        turn: int | None = None,
        timeout: float | None = None,
    ) -> PruneReport:
        """:meth:`prune` (the :class:`~quiesce.AsyncBuffer` name)."""
        return await self.prune(ids, reason=reason, actor=actor, turn=turn, timeout=timeout)

    async def aedit(self, plan: EditPlan, *, timeout: float | None = None) -> EditReport:
        """:meth:`edit` (the :class:`~quiesce.AsyncBuffer` name)."""
        return await self.edit(plan, timeout=timeout)

    async def aflush(self, *, checkpoint: bool = False) -> None:
        """:meth:`flush` (the :class:`~quiesce.AsyncBuffer` name)."""
        await self.flush(checkpoint=checkpoint)

    async def aescalate(
        self,
        kind: EscalationKind,
        detail: str,
        *,
        data: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Escalation:
        """:meth:`Buffer.escalate` on the sequencer (logged there and
        delivered to its ``escalations()``); forwarded from a replica like
        every write. ``kind``, ``detail`` and ``data`` are checked here first
        (:class:`InvalidType`/:class:`InvalidArgument`, nothing sent)."""
        if type(kind) is not EscalationKind:
            raise InvalidType(f"kind must be an EscalationKind, not {type(kind).__name__}")
        if not isinstance(detail, str) or not detail:
            raise InvalidArgument("detail must be a non-empty str")
        if data is not None and not isinstance(data, Mapping):
            raise InvalidType(f"data must be a mapping, not {type(data).__name__}")
        try:
            wire = json.loads(json.dumps(dict(data or {}), allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgument(f"data cannot go to the log as JSON: {exc}") from None
        args = {"kind": kind.value, "detail": detail, "data": wire}
        result: Escalation = await self._write("escalate", args, timeout)
        return result

    def escalations(self) -> AsyncIterator[Escalation]:
        """The escalations of this member's local buffer (see
        :meth:`RuntimeBuffer.escalations`): on the sequencer every refusal and
        every escalation it logs, forwarded ones included; on a replica its
        own reader-age alarms (a forwarded edit's refusal comes back in its
        report). Ends when the local buffer is closed or rebuilt."""
        return self.local.escalations()

    def _apply_locally(self, op: str, args: dict[str, Any]) -> Any:
        """Run one operation on the local buffer (the sequencer's path)."""
        buf = self.local
        if op == "append":
            return buf.append(Entry.from_dict(args["entry"]), override=_override(args["override"]))
        if op == "mark_stale":
            return buf.mark_stale(args["id"], args["reason"], turn=args["turn"])
        if op == "prune":
            return buf.prune(
                args["ids"], reason=args["reason"], actor=args["actor"], turn=args["turn"]
            )
        if op == "edit":
            return buf.edit(_plan_from_dict(args["plan"]))
        if op == "escalate":
            return buf.escalate(EscalationKind(args["kind"]), args["detail"], data=args["data"])
        raise InvalidArgument(f"unknown operation {op!r}")

    async def _write(
        self, op: str, args: dict[str, Any], timeout: float | None, plan: EditPlan | None = None
    ) -> Any:
        limit = self._timeout if timeout is None else _check_seconds(timeout, "timeout")
        if self._role == _SEQUENCER:
            await anyio.lowlevel.checkpoint()
            if self._role == _SEQUENCER:  # still, after the checkpoint
                if op in ("append", "mark_stale", "escalate"):
                    return self._apply_locally(op, args)  # the sync fast paths
                return await anyio.to_thread.run_sync(self._apply_locally, op, args)
        return await self._forward(op, args, limit, plan)

    async def _forward(
        self, op: str, args: dict[str, Any], limit: float, plan: EditPlan | None
    ) -> Any:
        request_id = uuid.uuid4().hex
        self._waiting[request_id] = (op, plan)
        try:
            with anyio.move_on_after(limit) as scope:
                await anyio.to_thread.run_sync(
                    self._ctl.run,
                    _ENQUEUE,
                    {
                        "b": self._buffer_id,
                        "r": request_id,
                        "m": self.member_id,
                        "op": op,
                        "args": json.dumps(args),
                        "ch": self.request_channel,
                    },
                    abandon_on_cancel=True,  # a partition must not hold the caller
                )
                self.forwarded += 1
                while request_id not in self._answers:
                    self._wake_pump.set()
                    await self._answered.wait()
                text, applied_seq = self._answers.pop(request_id)
                while len(self.local._records) < applied_seq:
                    await self._applied.wait()
        finally:
            self._waiting.pop(request_id, None)
            self._answers.pop(request_id, None)
        if scope.cancelled_caught:
            raise SharedWriteTimeout(
                f"no answer to {op} request {request_id} within {limit:g}s "
                f"(the sequencer or the database is unreachable); it may still be applied"
            )
        result = json.loads(text)
        if "error" in result:
            raise _error_from_dict(result)
        return _result_from_dict(op, result, plan)

    # -- lifecycle ---------------------------------------------------------------

    async def _start(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._sink = await anyio.to_thread.run_sync(self._open_sink)
        self.request_channel = self._sink.channel + "_rq"
        # Join with horizon 0 before reading the log: no removal is applied
        # while this member might still pin a version from before it.
        await self._heartbeat_member(horizon=0)
        await self._host_local()
        try:
            await self._try_take_lease()
        except LogWriteError:
            pass  # e.g. a paused holder's batch held the lease row: the heartbeat retries
        if self._role == _REPLICA:
            await self._catch_up()
        tg.start_soon(self._heartbeat_loop)
        tg.start_soon(self._pump)
        tg.start_soon(self._flusher)

    def _open_sink(self) -> PostgresLog:
        sink = PostgresLog(
            self._dsn,
            self._buffer_id,
            timeout=self._timeout,
            application_name=self._app_name,
            # a batch left open by a paused process ends on the server
            idle_in_transaction_timeout=self._lease / 2,
        )
        assert sink._conn is not None
        ensure_schema(sink._conn, sink.where)
        sink.before_commit = self._before_commit
        return sink

    async def _host_local(self) -> None:
        """(Re)create the local buffer from the log, in its own host task (its
        ``open_buffer`` scheduler and alarm), as a replica."""
        old_stop = self._local_stop
        if old_stop is not None:
            old = self._local
            if old is not None:
                old._sink = None  # it never writes again
            old_stop.set()
        assert self._tg is not None and self._sink is not None
        stop = anyio.Event()
        self._local_stop = stop
        self._local = await self._tg.start(self._run_local, stop)
        self._signal_applied()

    async def _run_local(
        self, stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[Any]
    ) -> None:
        # pins are timed on the monotonic clock the lease deadlines use
        async with open_buffer(
            None,
            self._policy,
            max_pin_age=self._max_pin_age,
            flush_interval=self._flush_interval,
            clock=time.monotonic,
        ) as buf:
            buf._grace_floor = -1  # a replica never applies a removal itself
            self._install_stamping(buf)
            self._stamped = {}
            await self._db(self._load_local, buf)
            task_status.started(buf)
            await stop.wait()

    def _load_local(self, buf: RuntimeBuffer) -> None:
        """Fill the fresh local buffer (no one else sees it yet; in a worker
        thread): from the newest valid checkpoint and the records after it
        (a damaged one is skipped with a warning, checkpoint.py), else the
        whole log. The records before the checkpoint stay in the database
        only, counted as dropped from memory, as the retention drops them."""
        sink = self._sink
        assert sink is not None
        with buf._write_lock:
            if recover(buf, sink):
                buf._records.dropped = buf._records.first
                first = buf._records.first
                self._index_stamped(buf.log[first:])  # the tail, in memory
                # A request still open may have stamped records just before
                # the checkpoint (it rode on that request's inline flush and a
                # dead sequencer never stored the result; the result follows
                # within the same serve batch): fetch the stamped ones of a
                # bounded stretch before it, filtered on the server.
                if first and self._ctl.run(_OPEN_REQUESTS, {"b": self._buffer_id}):
                    start = max(0, first - _STAMP_LOOKBACK)
                    self._index_stamped(sink.read_containing(start, first, f'"{REQUEST_KEY}"'))
            else:
                records = sink.read_from(0)
                replay(buf, records)
                self._index_stamped(records)

    async def _close(self) -> None:
        self._closing = True
        with anyio.CancelScope(shield=True):
            if self._role == _SEQUENCER:
                try:
                    await anyio.to_thread.run_sync(self._flush)
                    await self._ctl_run(
                        _RELEASE_LEASE,
                        {"b": self._buffer_id, "e": self._epoch, "h": self._holder},
                    )
                except LogWriteError:
                    pass  # the lease expires by itself
            try:
                await self._ctl_run(_LEAVE, {"b": self._buffer_id, "m": self.member_id})
            except LogWriteError:
                pass
            if self._local is not None:
                self._local._sink = None
            if self._local_stop is not None:
                self._local_stop.set()
            self._ctl.close()
            if self._sink is not None:
                self._sink.close()
            conn = self._listen_conn
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    @property
    def _holder(self) -> str:
        return f"{self.member_id}/{self._incarnation}"

    async def _ctl_run(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = await self._db(self._ctl.run, sql, params)
        return rows

    async def _db(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, given up after ``timeout``: a
        database that stops answering (a partition: no error, no reply) fails
        the call with :class:`LogWriteError` instead of hanging the member.
        The abandoned thread finishes or fails on its own once the network
        answers again."""
        with anyio.move_on_after(self._timeout):
            return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
        self._ctl.connected = False
        raise LogWriteError(f"no answer from PostgreSQL within {self._timeout:g}s")

    # -- leases --------------------------------------------------------------

    def _horizon(self) -> int:
        buf = self.local
        oldest = buf.oldest_pin()
        head = buf.version
        return head if oldest is None else min(oldest, head)

    def _member_info(self) -> str:
        buf = self._local
        readers: list[list[Any]] = []
        if buf is not None:
            now = time.monotonic()  # the local buffer's pin clock
            with buf._pin_lock:
                pins = [(s._task, s._version, s._since) for s in buf._readers]
            pins.sort(key=lambda p: p[1].number if p[1] is not None else 0)
            for task, v, since in pins[:5]:
                if v is not None:
                    readers.append([task_name(task), v.number, round(now - since, 3)])
        info = {"pid": os.getpid(), "host": socket.gethostname(), "role": self._role}
        return json.dumps({**info, "readers": readers})

    async def _heartbeat_member(self, horizon: int | None = None) -> None:
        """Renew this member's lease, publishing its horizon. A renewal that
        returns after the old deadline first counts the loss (no read was
        served past the deadline, whoever noticed). After a loss it re-joins:
        it catches up to the log read after this renewal committed (every
        removal published while it was excluded is applied), then voids every
        snapshot pinned so far and serves reads again."""
        sent = time.monotonic()
        await self._ctl_run(
            _UPSERT_MEMBER,
            {
                "b": self._buffer_id,
                "m": self.member_id,
                "i": self._incarnation,
                "l": self._lease,
                "hz": self._horizon() if horizon is None else horizon,
                "a": len(self._local._records) if self._local is not None else 0,
                "info": self._member_info(),
            },
        )
        old = self._member_valid_until
        if time.monotonic() > old:
            self._note_lease_lost(old)
        self._member_valid_until = sent + self._lease * 0.75
        if self._lease_lost is not None:
            # Re-joined: published a horizon again, so the others wait for our
            # readers from now on; what they removed meanwhile is read first.
            if self._role == _REPLICA and self._local is not None:
                await self._catch_up()
            with self._lease_guard:
                self._void_before = max(self._void_before, time.monotonic())
                self._lease_lost = None

    async def _try_take_lease(self) -> bool:
        """Take the writer lease if it is free or expired. On success: read the
        log to its end, attach the sink stamped with the new epoch, serve."""
        async with self._role_lock:
            if self._role == _SEQUENCER or self._closing:
                return False
            sent = time.monotonic()
            token = secrets.token_hex(32)
            take = {
                "b": self._buffer_id,
                "h": self._holder,
                "l": self._lease,
                "t": hashlib.sha256(token.encode()).digest(),
            }
            try:
                # never wait long on a lock: a paused holder's open batch may
                # hold the lease row; end its sessions, then try again
                rows = await self._db(
                    partial(self._ctl.run, lock_timeout=self._lease / 4), _TAKE_LEASE, take
                )
            except LogWriteError:
                await self._ctl_run(_END_EXPIRED_HOLDER, {"b": self._buffer_id, "h": self._holder})
                raise
            if not rows:
                return False
            epoch = int(rows[0][0])
            self._writer_valid_until = sent + self._lease * 0.75
            if epoch > 1 or self._epoch:
                self.failovers += 1
            self._epoch = epoch
            await self._catch_up()
            sink = self._sink
            buf = self.local
            assert sink is not None
            with buf._write_lock:
                sink.writer_epoch = epoch
                sink.writer_token = token
                buf._synced = len(buf._records)
                buf._sink = sink
                # the sequencer writes checkpoints (every checkpoint_every
                # records) for members and successors to start from
                buf._checkpoints_ok = True
                buf._checkpoint_every = self._checkpoint_every
                buf._checkpoint_due = len(buf._records) + self._checkpoint_every
                buf._grace_floor = 0  # until the members' horizons are read
            self._role = _SEQUENCER
        await self._refresh_floor()
        self._wake_pump.set()
        return True

    async def _demote(self, why: str) -> None:
        """Lost the writer lease: drop what is not durable and become a replica
        rebuilt from the log."""
        async with self._role_lock:
            if self._role != _SEQUENCER:
                return
            self._role = _REPLICA
            buf = self.local
            with buf._write_lock:
                self._lost_records += buf.pending_records  # told by the next flush()
                buf._sink = None
                buf._grace_floor = -1
            with self._results_lock:
                self._results.clear()  # their records die with the local buffer
            self._needs_rebuild = True
            try:
                await self._rebuild()
            except LogWriteError:
                pass  # the pump retries; the diverged buffer is never followed

    async def _rebuild(self) -> None:
        if self._needs_rebuild:
            await self._host_local()
            self._needs_rebuild = False

    async def _heartbeat_loop(self) -> None:
        interval = min(self._lease / 4, 0.05 if self._lease <= 2 else self._lease / 8)
        last_member = 0.0
        last_horizon: int | None = None
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            if now > self._member_valid_until:
                self._note_lease_lost(self._member_valid_until)
            try:
                horizon = self._horizon()
                if horizon != last_horizon or now - last_member >= self._lease / 4:
                    await self._heartbeat_member()
                    last_member, last_horizon = now, horizon
                if self._role == _SEQUENCER:
                    if now - (self._writer_valid_until - self._lease * 0.75) >= self._lease / 4:
                        sent = time.monotonic()
                        rows = await self._ctl_run(
                            _RENEW_LEASE,
                            {
                                "b": self._buffer_id,
                                "e": self._epoch,
                                "h": self._holder,
                                "l": self._lease,
                            },
                        )
                        if not rows:
                            await self._demote("the lease was taken")
                            continue
                        self._writer_valid_until = sent + self._lease * 0.75
                    await self._refresh_floor()
                elif await self._try_take_lease():
                    continue
            except LogWriteError:
                pass  # stats().connected says so; the lease clocks decide
            if self._role == _SEQUENCER and time.monotonic() > self._writer_valid_until:
                await self._demote("the lease could not be renewed in time")

    async def _refresh_floor(self) -> None:
        rows = await self._ctl_run(_FLOOR, {"b": self._buffer_id, "m": self.member_id})
        floor, members = rows[0] if rows else (None, 0)
        self._members = int(members)
        self._floor = None if floor is None else int(floor)
        buf = self.local
        if self._role != _SEQUENCER:
            return
        buf._grace_floor = self._floor
        if buf.has_due():
            buf._signal_due()
        await self._escalate_holders(buf)

    async def _escalate_holders(self, buf: RuntimeBuffer) -> None:
        """A removal held back longer than ``max_pin_age`` by another member's
        reader is escalated once (READER_PINNED), naming the member, process
        and task."""
        grace = buf.next_grace()
        if grace is None or self._max_pin_age is None or self._floor is None:
            return
        if self._floor >= grace:
            return
        rows = await self._ctl_run(
            _HOLDERS, {"b": self._buffer_id, "m": self.member_id, "g": grace}
        )
        for member_id, horizon, info_text in rows:
            info = json.loads(info_text or "{}")
            for task, version, age in info.get("readers", []):
                if age <= self._max_pin_age or (member_id, version) in self._held_alarmed:
                    continue
                self._held_alarmed.add((member_id, version))
                buf.escalate(
                    EscalationKind.READER_PINNED,
                    f"reader {task!r} of member {member_id} (pid {info.get('pid')} on "
                    f"{info.get('host')}) has pinned version {version} for {age:.1f}s, "
                    f"holding back removals from grace version {grace}",
                    data={
                        "member": member_id,
                        "pid": info.get("pid"),
                        "host": info.get("host"),
                        "task": task,
                        "version": version,
                        "age": age,
                        "horizon": horizon,
                        "grace": grace,
                    },
                )

    # -- following and serving ---------------------------------------------------

    def _listen_once(self) -> bool:
        """Wait up to ``poll`` seconds for a notification (worker thread).
        Returns whether one came; reconnects and re-LISTENs after a failure."""
        import psycopg

        try:
            conn = self._listen_conn
            if conn is None or conn.closed:
                sink = self._sink
                assert sink is not None
                conn = connect(self._dsn, timeout=self._timeout, application_name=self._app_name)
                conn.execute(f'LISTEN "{sink.channel}"')
                conn.execute(f'LISTEN "{self.request_channel}"')
                self._listen_conn = conn
                return True  # (re)connected: catch up, a NOTIFY may have been missed
            got = False
            for note in conn.notifies(timeout=self._poll, stop_after=1):
                got = True
                sink = self._sink  # the payload is the last seq of the commit
                if sink is not None and note.channel == sink.channel and note.payload.isdigit():
                    self._log_seq = max(self._log_seq, int(note.payload) + 1)
            return got
        except (psycopg.Error, LogWriteError):
            conn, self._listen_conn = self._listen_conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            time.sleep(min(self._poll, 0.2))
            return True

    async def _pump(self) -> None:
        """Wake on NOTIFY, a local request, or the slow poll; then catch up
        (replica) or serve requests (sequencer)."""
        listening = False

        async def listen() -> None:
            nonlocal listening
            while True:
                listening = True
                await anyio.to_thread.run_sync(self._listen_once, abandon_on_cancel=True)
                self._wake_pump.set()

        assert self._tg is not None
        self._tg.start_soon(listen)
        while True:
            with anyio.move_on_after(self._poll):
                await self._wake_pump.wait()
            self._wake_pump = anyio.Event()
            try:
                if self._role == _SEQUENCER:
                    await self._serve()
                else:
                    await self._catch_up()
                if self._waiting:
                    await self._collect_answers()
            except LogWriteError:
                await anyio.sleep(min(self._poll, 0.05))
            except Exception:  # never let one bad row or batch stop the member
                _logger.exception("member %s: serving or catching up failed", self.member_id)
                await anyio.sleep(min(self._poll, 0.05))

    async def _catch_up(self) -> None:
        """Read the log past what is applied and apply it as one version."""
        if self._needs_rebuild:
            await self._rebuild()
        sink = self._sink
        buf = self.local
        assert sink is not None
        records = await self._db(sink.read_from, len(buf._records))
        if records:
            self._log_seq = max(self._log_seq, records[-1].seq + 1)
        if not records or self._role == _SEQUENCER:
            return
        with buf._write_lock:
            start = len(buf._records)
            fresh = [r for r in records if r.seq >= start]
            if fresh and fresh[0].seq == start:
                replay(buf, fresh)
                self._index_stamped(fresh)
        self._signal_applied()

    def _index_stamped(self, records: Iterable[LogRecord]) -> None:
        """Remember the records stamped with a forwarded request's id (from
        the log, or appended here). O(records); keeps the newest
        :data:`_STAMPED_KEPT` requests."""
        stamped = self._stamped
        for rec in records:
            request_id = rec.detail.get(REQUEST_KEY)
            if request_id is None:
                continue
            # only what _derive_result reads (not an appended entry's body)
            rec = rec._replace(detail={k: v for k, v in rec.detail.items() if k in _DERIVED_FROM})
            found = stamped.get(request_id)
            if found is None:
                stamped[request_id] = [rec]
                if len(stamped) > _STAMPED_KEPT:
                    del stamped[next(iter(stamped))]
            else:
                found.append(rec)

    def _install_stamping(self, buf: RuntimeBuffer) -> None:
        """Make the local buffer stamp every record that the thread applying a
        forwarded request appends through ``_append_record`` (all but the
        two fast paths, which :meth:`_stamp_tail` covers) with the request's
        id, before the record is visible to any flush. Its flush lock becomes
        re-entrant: the serving thread holds it while applying a request
        (:meth:`_apply_request`) and a prune or edit flushes inline."""
        buf._flush_lock = threading.RLock()  # type: ignore[assignment]
        append_record = buf._append_record

        def stamping(record: LogRecord) -> None:
            serving = self._serving
            if serving is not None and serving[0] == threading.get_ident():
                record = _stamped(record, serving[1])
                self._index_stamped((record,))
            append_record(record)

        buf._append_record = stamping  # type: ignore[method-assign]

    def _stamp_tail(self, buf: RuntimeBuffer, start: int, request_id: str) -> None:
        """Stamp the records from ``start`` on (the fast path's compact ones,
        built now) with ``request_id``. Call holding the buffer's write lock
        (no other writer appends) and flush lock (no flush has read them). A
        reader of ``log`` that built one of them in between keeps a record
        equal to the stored one but for the stamp. O(records stamped)."""
        records = buf._records
        with _build_lock:
            for seq in range(start, len(records)):
                local = seq - records.first
                rec = list.__getitem__(records, local)
                if type(rec) is tuple:  # compact (log.py): build it now
                    rec = build_compact(seq, rec)
                if REQUEST_KEY not in rec.detail:
                    rec = _stamped(rec, request_id)
                    self._index_stamped((rec,))
                list.__setitem__(records, local, rec)

    def _signal_applied(self) -> None:
        event, self._applied = self._applied, anyio.Event()
        event.set()

    async def _collect_answers(self) -> None:
        ids = list(self._waiting)
        if not ids:
            return
        rows = await self._ctl_run(_RESULTS, {"b": self._buffer_id, "ids": ids})
        for request_id, text, applied_seq in rows:
            self._answers[request_id] = (text, int(applied_seq or 0))
        if rows:
            if self._role == _REPLICA:
                await self._catch_up()
            event, self._answered = self._answered, anyio.Event()
            event.set()

    async def _serve(self) -> None:
        """Apply the open requests in arrival order, then commit their records
        and results in one transaction (the sink's ``before_commit``)."""
        if time.monotonic() > self._writer_valid_until:
            return  # not sure we still hold the lease: the heartbeat decides
        rows = await self._ctl_run(_OPEN_REQUESTS, {"b": self._buffer_id})
        if not rows:
            return
        try:
            await anyio.to_thread.run_sync(self._serve_batch, rows)
        except WriterFenced:
            await self._demote("fenced")
        self._signal_applied()

    def _serve_batch(self, rows: list[tuple[Any, ...]]) -> None:
        """Apply each open request exactly once (worker thread). A request
        whose stamped records this member's log already holds — applied by a
        sequencer that died before its result was stored, or by this one
        (rows read before its result committed) — is not applied again: its
        result is derived from those records (:func:`_derive_result`).

        One request never stops the pump: whatever decoding, checking,
        deriving or applying one raises (``RecursionError``,
        ``OverflowError``, anything but a failing sink) becomes that
        request's error result, and the next request is served."""
        with self._commit_lock:
            buf = self.local
            with self._results_lock:
                applied = {r[0] for r in self._results}  # applied, not yet committed
            for request_id, _member, op, args_text in rows:
                if request_id in applied:
                    continue
                try:
                    args = _decode_request(op, args_text)
                except QuiesceError as exc:
                    with self._results_lock:
                        self._results.append(
                            (request_id, json.dumps(_error_to_dict(exc)), len(buf._records))
                        )
                    continue
                done = self._stamped.get(request_id)
                derived = None
                if done is not None:
                    try:
                        derived = _derive_result(op, args, done, self._version_before)
                    except Exception:
                        derived = None  # malformed arguments: applied (and refused) as before
                if derived is not None:
                    assert done is not None
                    with self._results_lock:
                        self._results.append((request_id, json.dumps(derived), done[-1].seq + 1))
                    continue
                self._apply_request(buf, request_id, op, args)
                self.served += 1
            self._flush_locked()

    def _apply_request(
        self, buf: RuntimeBuffer, request_id: str, op: str, args: dict[str, Any]
    ) -> None:
        """Apply one forwarded request and queue its result, holding the
        buffer's flush lock throughout: a flush by another thread (the
        flusher, a removal's intent) waits, so it commits the request's
        records only together with its result (``_before_commit``). Only the
        request's own inline flush (a prune or edit publishing a due removal)
        can commit them first; they carry the request's id, so a successor
        derives the result instead of applying the request again."""
        with buf._flush_lock:
            self._serving = (threading.get_ident(), request_id)
            try:
                try:
                    if op in ("append", "mark_stale"):
                        # the fast paths append compact records, stamped here
                        with buf._write_lock:
                            start = len(buf._records)
                            try:
                                value = self._apply_locally(op, args)
                            finally:
                                self._stamp_tail(buf, start, request_id)
                    else:
                        value = self._apply_locally(op, args)
                finally:
                    self._serving = None
                text = json.dumps(_result_to_dict(op, value))
            except QuiesceError as exc:
                if isinstance(exc, LogWriteError):
                    raise
                text = json.dumps(_error_to_dict(exc))
            except Exception as exc:  # a malformed request, or the core failing on it
                text = json.dumps(
                    {
                        "error": "InvalidArgument",
                        "message": f"{op} request refused by the sequencer: "
                        f"{type(exc).__name__}: {str(exc)[:200]}",
                    }
                )
            with self._results_lock:
                self._results.append((request_id, text, len(buf._records)))

    def _version_before(self, seq: int) -> int:
        """The newest version published by a record before ``seq`` (the head
        a request that published none reported). Reads back at most 1,000
        records; past them, or where they were dropped, the current head."""
        log = self.local.log
        for s in range(seq - 1, max(-1, seq - 1_001), -1):
            try:
                version = log[s].version
            except QuiesceError:
                return self.local.version
            if version is not None:
                return version
        return self.local.version if seq > 1_000 else 0

    def _before_commit(self, cur: Any, batch: Any) -> Callable[[], None] | None:
        """The sink's ``before_commit``, inside each batch's transaction:
        (1) a removal intent in the batch re-checks the live members'
        horizons against its groups' grace versions (the authoritative
        cross-process grace test): a group held back is taken out of the
        buffer's ``_applying``, so its removal is requeued, not published;
        (2) store the results of forwarded requests whose records are all in
        this batch."""
        buf = self._local
        if buf is not None:
            groups = [
                g
                for rec in batch
                if rec.op == "tombstone"
                for gid in rec.detail.get("gids", ())
                if (g := buf._applying.get(gid)) is not None
            ]
            if groups:
                cur.execute(_HORIZON_CHECK, {"b": self._buffer_id, "m": self.member_id})
                row = cur.fetchone()
                floor = None if row is None or row[0] is None else int(row[0])
                held = [g for g in groups if floor is not None and floor < g.grace]
                if held:
                    # The intent itself is harmless (recovery ignores it);
                    # taking the groups out of _applying makes the buffer
                    # requeue them instead of publishing the removal.
                    with buf._write_lock:
                        for g in held:
                            buf._applying.pop(g.gid, None)
                        buf._grace_floor = floor
                    self._floor = floor
        last_seq = batch[-1].seq
        with self._results_lock:
            done = [r for r in self._results if r[2] <= last_seq + 1]
        if not done:
            return None
        for request_id, text, seq_after in done:
            cur.execute(
                _STORE_RESULT,
                {"res": text, "a": seq_after, "b": self._buffer_id, "r": request_id},
            )

        def committed() -> None:
            with self._results_lock:
                for r in done:
                    self._results.remove(r)

        return committed

    def _flush(self, checkpoint: bool = False) -> None:
        with self._commit_lock:
            self._flush_locked(checkpoint)

    def _flush_locked(self, checkpoint: bool = False) -> None:
        buf = self.local
        try:
            buf.flush(checkpoint=checkpoint)
        except LogWriteError as exc:
            if isinstance(exc.__cause__, WriterFenced):
                raise exc.__cause__ from None
            raise
        # Results of requests whose records an earlier flush already made
        # durable (or that made none): stored now, fenced by epoch.
        with self._results_lock:
            left = [r for r in self._results if r[2] <= buf._synced]
        for request_id, text, seq_after in left:
            self._ctl.run(
                _STORE_RESULT_FENCED,
                {
                    "res": text,
                    "a": seq_after,
                    "b": self._buffer_id,
                    "r": request_id,
                    "e": self._epoch,
                    "ch": self.request_channel,
                },
            )
            with self._results_lock:
                self._results.remove((request_id, text, seq_after))

    async def _flusher(self) -> None:
        while True:
            # a replica has nothing to flush: it only looks for a promotion
            idle = self._role != _SEQUENCER
            await anyio.sleep(self._poll if idle else self._flush_interval)
            if self._role == _SEQUENCER and (self.local.pending_records or self._results):
                try:
                    await anyio.to_thread.run_sync(self._flush)
                except WriterFenced:
                    await self._demote("fenced")
                except LogWriteError:
                    pass  # stats().local.log_failing; retried next interval


@asynccontextmanager
async def open_shared_buffer(
    dsn: str,
    buffer_id: str,
    *,
    policy: Policy | None = None,
    lease: float = 5.0,
    timeout: float = 10.0,
    poll: float = 1.0,
    member_id: str | None = None,
    max_pin_age: float | None = 30.0,
    flush_interval: float = 0.01,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
) -> AsyncIterator[SharedBuffer]:
    """Join the buffer ``buffer_id`` shared through the PostgreSQL database at
    ``dsn``, as its sequencer if the writer lease is free, else as a replica.

    ``lease`` (seconds): how long the writer and member leases last without
    renewal (renewed every ``lease/4`` or more often); failover takes about
    one lease. ``timeout`` bounds every database call and every forwarded
    write. ``poll`` is the fallback catch-up period when no ``NOTIFY``
    arrives. ``policy`` should be the same in every member (the sequencer's
    decides). ``checkpoint_every``: while this member is the sequencer, it
    writes a checkpoint row after that many records (0: only on
    ``flush(checkpoint=True)``); members start from the newest one. On exit
    the sequencer flushes and releases its lease (another member takes over
    at once) and the member leaves.

    Raises :class:`LogWriteError` if the database cannot be reached and
    :class:`LogFormatError` for tables written by a newer quiesce.
    """
    shared = SharedBuffer(
        dsn,
        buffer_id,
        policy=policy,
        lease=lease,
        timeout=timeout,
        poll=poll,
        member_id=member_id,
        max_pin_age=max_pin_age,
        flush_interval=flush_interval,
        checkpoint_every=checkpoint_every,
    )
    failure: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            await shared._start(tg)
            try:
                yield shared
            except BaseException as exc:  # re-raised as itself, not in a group
                failure = exc
            finally:
                await shared._close()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise _single(group) from None
    if failure is not None:
        raise failure


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception inside (nested) single-member groups, else the group."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
