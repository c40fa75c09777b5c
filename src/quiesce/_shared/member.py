"""One member's state, its local buffer and its reads.

What it keeps true: a member's reads are local and never touch the
network; every read of a snapshot checks the member's own lease deadline
(monotonic clock) and raises :class:`LeaseLost` past it or when the
snapshot was pinned before a loss (:meth:`_Member._check_read`); the
local buffer is driven only through its :class:`Replication` handle and
public names. The layers of a member build on this one in one direction
(member <- follow <- lease <- serve <- buffer): no layer calls a method of
a layer above it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from .._core import errors as _errors
from .._core.buffer import Snapshot
from .._core.checkpoint import DEFAULT_CHECKPOINT_EVERY, check_checkpoint_every
from .._core.errors import InvalidArgument, InvalidType, LogWriteError, QuiesceError
from .._core.log import EditLog
from .._core.plan import EditPlan
from .._core.policy import Policy
from .._core.records import Escalation, LogRecord, Stats, Tombstone
from .._core.replication import ReadGate, Replication
from .._log.postgres import PostgresLog
from .._runtime import RuntimeBuffer, check_seconds, open_buffer
from .codec import _DERIVED_FROM, REQUEST_KEY, _stamped
from .sql import _OPEN_REQUESTS, _Control
from .stream import SharedStreamWriter

_logger = logging.getLogger("quiesce.shared")
_monotonic = time.monotonic


class LeaseLost(QuiesceError):
    """This member's lease expired (it paused or lost the database longer
    than the lease): other members no longer wait for its readers, so its
    snapshots are void until it has re-joined."""


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


#: Requests whose stamped records a member remembers (oldest forgotten first):
#: only a request whose result was lost in a crash needs its records again,
#: and that is one of the last few the old sequencer applied.
_STAMPED_KEPT = 4_096


#: Records before a member's starting checkpoint it reads once for stamps.
_STAMP_LOOKBACK = 10_000


class _Member:
    """A shared member's state and reads (the base layer of :class:`SharedBuffer`)."""

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
        self._lease = check_seconds(lease, "lease")
        self._timeout = check_seconds(timeout, "timeout")
        self._poll = check_seconds(poll, "poll")
        self._flush_interval = check_seconds(flush_interval, "flush_interval")
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
        self._repl: Replication | None = None  # the local buffer's handle
        #: the lease state snapshot() checks before each pin (the core's
        #: snapshot maker reads it): ``_member_valid_until`` and
        #: ``_lease_lost`` are its two fields
        self._gate = ReadGate()
        #: makes a guarded snapshot of the local buffer, the lease checked
        #: (the core's maker, made in _host_local; also installed as this
        #: instance's ``snapshot``)
        self._pin: Callable[[], Snapshot] = self._pin_closed
        self._local_stop: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._applied = anyio.Event()  # replaced after every local apply
        self._role_lock = anyio.Lock()
        self._commit_lock = threading.Lock()  # request batches vs the flusher
        self._results: list[tuple[str, str, int]] = []  # (request_id, json, seq_after)
        self._results_lock = threading.Lock()
        #: request_id -> the records its application appended (stamped with
        #: it), for the requests this member's local log holds, newest last
        self._stamped: dict[str, list[LogRecord]] = {}
        #: stream id -> [owner member, writer, characters applied]: the
        #: streams this member serves as sequencer (serve.py, stream.py)
        self._streams_served: dict[str, list[Any]] = {}
        #: this member's own open streams, by id (buffer.py: open_stream)
        self._writers: dict[str, SharedStreamWriter] = {}
        self._waiting: dict[str, tuple[str, EditPlan | None]] = {}
        self._answers: dict[str, tuple[str, int]] = {}
        self._answered = anyio.Event()
        self._member_valid_until = 0.0
        self._writer_valid_until = 0.0
        self._lease_lost = None
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

    @property
    def _member_valid_until(self) -> float:
        """This member's lease deadline (monotonic clock): reads and pins
        after it are refused. Stored in :attr:`_gate` (``deadline``)."""
        return self._gate.deadline

    @_member_valid_until.setter
    def _member_valid_until(self, deadline: float) -> None:
        self._gate.deadline = deadline

    @property
    def _lease_lost(self) -> LeaseLost | None:
        """The counted loss of this member's lease (None: not lost), raised
        by every read and pin until it re-joins. Stored in :attr:`_gate`
        (``lost``)."""
        lost = self._gate.lost
        assert lost is None or isinstance(lost, LeaseLost)
        return lost

    @_lease_lost.setter
    def _lease_lost(self, lost: LeaseLost | None) -> None:
        self._gate.lost = lost

    def snapshot(self) -> Snapshot:
        """A local snapshot (pinning never touches the network). Raises
        :class:`LeaseLost` while this member's lease is expired: the other
        members no longer wait for its readers.

        The fast path is one monotonic clock read compared to the lease
        deadline (a float) and a check that no loss is counted; that reading
        is the snapshot's pin time for :meth:`_check_read` (never later than
        the pin). O(1), no lock, any thread. Once the local buffer is hosted
        the core's snapshot maker (``Replication.snapshot_maker``, reading
        :attr:`_gate`) does all of it in one frame: it is installed as this
        instance's ``snapshot``, shadowing this method, which then serves
        only calls through the class."""
        return self._pin()

    def _snapshot_refused(self) -> QuiesceError:
        """Why :meth:`snapshot` refuses (its slow path): the loss counted,
        the buffer not open, or the deadline passed (counted now)."""
        lost = self._lease_lost
        if lost is not None:
            return lost
        if self._local is None:
            return _errors.BufferClosed("the shared buffer is not open")
        self._note_lease_lost(self._member_valid_until)
        return self._lease_lost or LeaseLost("this member's lease expired")

    def _pin_closed(self) -> Snapshot:
        """:attr:`_pin` until the local buffer is hosted."""
        raise self._snapshot_refused()

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
        gate = self._gate
        # One comparison on the valid path: ``limit`` is the deadline, or
        # -inf once the loss is counted (ReadGate).
        if _monotonic() > gate.limit:
            if gate.lost is None:  # the deadline passed: count the loss
                self._note_lease_lost(gate.deadline)
            lost = gate.lost is not None
        else:
            lost = False
        if lost or since <= self._void_before:
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
        applied = len(self.local.log)
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

    def check_invariants(self) -> None:
        """The local buffer's invariants (docs/design.md), as
        :meth:`Buffer.check_invariants`."""
        self.local.check_invariants()

    def _check(self) -> None:
        """:meth:`check_invariants` (the name the test tools call)."""
        self.check_invariants()

    async def wait_applied(self, version: int, *, timeout: float | None = None) -> None:
        """Return once the local head is at ``version`` or newer
        (read-your-writes after another member's write). Raises
        ``TimeoutError`` after ``timeout`` seconds (default: the buffer's)."""
        with anyio.fail_after(self._timeout if timeout is None else timeout):
            while self.local.version < version:
                await self._applied.wait()

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        """The tombstones of the local head."""
        return self.local.tombstones

    def escalations(self) -> AsyncIterator[Escalation]:
        """The escalations of this member's local buffer (see
        :meth:`RuntimeBuffer.escalations`): on the sequencer every refusal and
        every escalation it logs, forwarded ones included; on a replica its
        own reader-age alarms (a forwarded edit's refusal comes back in its
        report). Ends when the local buffer is closed or rebuilt."""
        return self.local.escalations()

    async def _host_local(self) -> None:
        """(Re)create the local buffer from the log, in its own host task (its
        ``open_buffer`` scheduler and alarm), as a replica."""
        old_stop = self._local_stop
        if old_stop is not None:
            if self._repl is not None:
                self._repl.detach()  # the old buffer never writes again
            old_stop.set()
        assert self._tg is not None and self._sink is not None
        stop = anyio.Event()
        self._local_stop = stop
        self._local, self._repl = await self._tg.start(self._run_local, stop)
        # snapshot()'s maker (the lease checked in the core's frame), bound
        # once and installed as this instance's snapshot (one call frame)
        self._pin = self._repl.snapshot_maker(self._gate, self._check_read, self._snapshot_refused)
        self.__dict__["snapshot"] = self._pin
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
            repl = Replication(buf)
            repl.set_grace_floor(-1)  # a replica never applies a removal itself
            self._stamped = {}
            self._streams_served = {}
            await self._db(self._load_local, repl)
            task_status.started((buf, repl))
            await stop.wait()

    def _load_local(self, repl: Replication) -> None:
        """Fill the fresh local buffer (no one else sees it yet; in a worker
        thread): from the newest valid checkpoint and the records after it
        (a damaged one is skipped with a warning, checkpoint.py), else the
        whole log. The records before the checkpoint stay in the database
        only, counted as dropped from memory, as the retention drops them."""
        sink = self._sink
        assert sink is not None
        log = repl.buffer.log
        if repl.load(sink):
            first = log.first
            self._index_stamped(log[first:])  # the tail, in memory
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
            repl.apply_records(records)
            self._index_stamped(records)

    async def _rebuild(self) -> None:
        if self._needs_rebuild:
            await self._host_local()
            self._needs_rebuild = False

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

    def _stamp_for(self, request_id: str) -> Callable[[LogRecord], LogRecord]:
        """The stamp of a forwarded request (:meth:`Replication.serving`):
        ``request_id`` goes into the record's detail (once: idempotent) and
        the stamped record is remembered for :func:`_derive_result`."""

        def stamp(record: LogRecord) -> LogRecord:
            if REQUEST_KEY in record.detail:
                return record
            record = _stamped(record, request_id)
            self._index_stamped((record,))
            return record

        return stamp

    def _abort_streams(self, why: str, owners: set[str] | None = None) -> None:
        """Abort the open streams of the local buffer (``owners``: only the
        forwarded ones of those members), with ``why``; the text applied
        stays, marked stale. O(open streams)."""
        for stream_id, w in self.local.streams().items():
            served = self._streams_served.get(stream_id)
            if owners is not None and (served is None or served[0] not in owners):
                continue
            try:
                w.abort(why)
            except QuiesceError:
                pass  # finished meanwhile
            self._streams_served.pop(stream_id, None)

    def _signal_applied(self) -> None:
        event, self._applied = self._applied, anyio.Event()
        event.set()
