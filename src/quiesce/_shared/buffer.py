"""The façade: :class:`SharedBuffer` and :func:`open_shared_buffer`.

What it keeps true: every write works in every member (on the sequencer
it runs on the local buffer, on a replica it is forwarded and returns the
sequencer's report once durable and applied locally: read-your-writes);
every wait is bounded (``timeout``; :class:`SharedWriteTimeout` says the
request may still be applied); leaving the context flushes, releases the
lease and leaves the members, shielded from cancellation, and re-raises
the body's exception as itself.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

import anyio
import anyio.abc

from .._core import errors as _errors
from .._core.checkpoint import DEFAULT_CHECKPOINT_EVERY
from .._core.entry import Entry, Kind
from .._core.errors import DuplicateEntry, InvalidArgument, InvalidType, LogWriteError
from .._core.plan import EditPlan
from .._core.policy import Policy
from .._core.records import EditReport, Escalation, EscalationKind, Mark, Override, PruneReport
from .._core.stream import PruneOptions, StreamWriter
from .._log.postgres import WriterFenced
from .._protocol import StreamOptions
from .._runtime import check_seconds
from .codec import _error_from_dict, _result_from_dict
from .member import _REPLICA, _SEQUENCER, LeaseLost, SharedWriteTimeout, _logger
from .serve import _Serving
from .sql import _ENQUEUE, _LEAVE, _RELEASE_LEASE
from .stream import SharedStreamWriter, check_header

__all__ = ["SharedBuffer", "open_shared_buffer"]

if TYPE_CHECKING:
    from .._protocol import AsyncBuffer


class SharedBuffer(_Serving):
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

    def open_stream(self, id: str, kind: Kind, **options: Unpack[StreamOptions]) -> StreamWriter:
        """:meth:`Buffer.open_stream` for a shared member (sync): returns a
        :class:`~quiesce._shared.stream.SharedStreamWriter` whose text the
        member forwards to the sequencer, coalesced (at most one request per
        stream per 20 ms), in every member alike (the sequencer's own
        streams too, so a failover treats them all the same). The entry
        appears at the sequencer once the open is applied and in the other
        members within the replica lag; every member sees whole prefixes.

        Checked at once against this member's head: the entry's fields and
        kind (as ``Buffer.open_stream``), a used id (:class:`DuplicateEntry`,
        also for a stream of this member still open), unknown refs
        (:class:`DanglingReference`); a race another member won is refused
        by the sequencer (:meth:`SharedStreamWriter.wait_closed` raises it).
        O(refs)."""
        header = check_header(self.local.head(), id, kind, **options)
        mine = self._writers.get(header.id)
        if mine is not None and not mine.closed:
            raise DuplicateEntry(f"entry {header.id!r} is already open as a stream")
        if self._tg is None or self._closing:
            raise _errors.BufferClosed("the shared buffer is not open")
        w = SharedStreamWriter(header, self._send_stream, lambda: self.local.version)
        self._writers = {i: x for i, x in self._writers.items() if not x.closed}
        self._writers[header.id] = w
        self._tg.start_soon(w.run)
        return w

    async def _send_stream(self, op: str, args: dict[str, Any]) -> Any:
        """A stream request of this member's (stream.py), as any write."""
        if op == "stream_open":
            args = {**args, "member": self.member_id}
        return await self._write(op, args, None)

    async def quiesce(self) -> None:
        """Apply every due removal now (sequencer); a checkpoint on a replica."""
        if self._role == _SEQUENCER:
            await self.local.quiesce()
        else:
            await anyio.lowlevel.checkpoint()

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
        self, ids: Iterable[str], *, timeout: float | None = None, **options: Unpack[PruneOptions]
    ) -> PruneReport:
        """:meth:`prune` (the :class:`~quiesce.AsyncBuffer` name)."""
        return await self.prune(ids, timeout=timeout, **options)

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

    async def _write(
        self, op: str, args: dict[str, Any], timeout: float | None, plan: EditPlan | None = None
    ) -> Any:
        limit = self._timeout if timeout is None else check_seconds(timeout, "timeout")
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
                # the answer comes with a NOTIFY (the sequencer's commit, or
                # a late result's), else with the pump's poll
                while request_id not in self._answers:
                    await self._answered.wait()
                text, applied_seq = self._answers.pop(request_id)
                while len(self.local.log) < applied_seq:
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
            if self._repl is not None:
                self._repl.detach()
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

    async def _pump(self) -> None:
        """Wake on NOTIFY, a local request, or the slow poll; then catch up
        (replica) or serve requests (sequencer)."""
        listening = False

        async def listen() -> None:
            nonlocal listening
            while True:
                listening = True
                if await anyio.to_thread.run_sync(self._listen_once, abandon_on_cancel=True):
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
                    if self._waiting:  # forwarded before a promotion
                        await self._collect_answers()
                else:  # and the answers to its waiting requests, in one call
                    await self._catch_up(answers=True)
            except LogWriteError:
                await anyio.sleep(min(self._poll, 0.05))
            except Exception:  # never let one bad row or batch stop the member
                _logger.exception("member %s: serving or catching up failed", self.member_id)
                await anyio.sleep(min(self._poll, 0.05))


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


if TYPE_CHECKING:

    def _conforms(shared: SharedBuffer) -> AsyncBuffer:
        """A static check (``mypy --strict src``): a SharedBuffer is an AsyncBuffer."""
        return shared
