"""The barrier scheduler: an anyio runtime around the sans-IO core.

``open_buffer()`` starts, in one task group, on asyncio or trio unchanged:

* the **barrier scheduler**, which sleeps on an event and is woken — never by
  polling — when an unpin makes a staged removal due, when a removal is
  staged, or by :meth:`RuntimeBuffer.quiesce`. Each wake-up applies *every*
  due removal as one batch (one new version with all its tombstones),
  re-validated against the head at that moment. Due-ness is the core's grace
  rule: only readers pinned below an entry's mark version hold it back, so a
  steady stream of overlapping readers never starves a removal (an RCU grace
  period, not a "zero readers" moment). If the log cannot take the batch's
  tombstones, nothing is published, the removals stay staged, and the
  scheduler retries every ``flush_interval`` until the log recovers (no
  unpin may come to wake it again);
* the **reader-age alarm**: readers pinned longer than ``max_pin_age`` are
  escalated once each (``READER_PINNED``: task, version, age, and how many
  staged removals they hold back — like RCU stall warnings or PostgreSQL's
  ``backend_xmin``). Ages are measured on the running loop's clock by
  default, the clock the alarm sleeps on (so trio's ``MockClock`` drives
  both). A pass is incremental (it resumes where the last one stopped:
  O(1) plus the readers it escalates, whatever the number pinned; see
  ``_check_reader_ages``);
* **group commit** of a durable log: pending records are flushed every
  ``flush_interval`` seconds in a worker thread, so no coroutine waits for a
  disk on the mark or append path.

Wake-ups may come from worker threads (``anyio.to_thread``): they are handed
to the loop with the backend's non-blocking thread-safe call
(``loop.call_soon_threadsafe`` / ``TrioToken.run_sync_soon``), so a thread
that holds the buffer's write lock never waits for the loop.

Code on the event loop writes with ``aprune()``/``aedit()``/``aflush()``:
with a durable log the disk work runs in a worker thread, never on the loop;
the thread is not abandoned on cancellation, so a request is applied (or
refused) whole and its cancellation is delivered at the next checkpoint.

Cancellation: applying a batch is one synchronous call, in a worker thread
with a durable log (the wait for it is abandoned on cancel, the batch is
not: it lands or fails whole), so cancelling the scheduler or leaving
``open_buffer`` by an exception never half-applies a batch. On a normal exit
``open_buffer`` applies what is due, flushes the log, and leaves removals
that are not yet due *staged* (they are in the log, and recovery brings them
back staged); afterwards the buffer keeps working in sync mode (a due removal
is applied when its last blocking pin is released). On an exceptional exit it
only flushes (shielded, best effort) and re-raises the body's exception as
itself (not wrapped in an exception group). The final flush, and the wait
for removal batches still in their worker threads before it, are bounded
together by ``close_timeout``: a hung sink makes exit raise
:class:`LogWriteError` with the records still pending, never wait for ever.

The bridge between the loop and threads (the thread-safe wake, the loop's
clock, the bounded final flush) is :mod:`._runtime_loop`.

``quiesce()`` waits for a batch the scheduler is still making durable: its
groups have left the staged queue but are not published yet, so ``has_due()``
alone would let ``quiesce()`` return too early. It waits on the batch's own
completion event (set from the worker thread through the loop's thread-safe
call), never on a clock, so it is as fast under a virtual clock as under
real time; a batch is claimed by its thread or dropped by the loop under one
lock, so every batch waited for is certain to settle.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar, Unpack

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._core.buffer import Buffer, Snapshot
from ._core.entry import Entry, check_int
from ._core.errors import BufferClosed, InvalidArgument, InvalidType, LogWriteError
from ._core.log import LogSink
from ._core.pins import reader_of
from ._core.plan import EditPlan
from ._core.policy import Policy
from ._core.records import (
    EditReport,
    Escalation,
    EscalationKind,
    Mark,
    Outcome,
    Override,
    PruneReport,
    Status,
)
from ._core.scheduling import Scheduling
from ._core.stream import PruneOptions
from ._core.tasks import task_name
from ._runtime_loop import bounded_flush, loop_clock, threadsafe_caller

__all__ = ["DEFAULT_CLOSE_TIMEOUT", "RuntimeBuffer", "open_buffer"]

_T = TypeVar("_T")


#: Seconds leaving :func:`open_buffer` waits for the final flush of a durable
#: log before it gives up and raises :class:`LogWriteError` (a healthy local
#: sink commits in milliseconds; this is for one that hangs).
DEFAULT_CLOSE_TIMEOUT = 5.0


def check_seconds(value: object, what: str, *, or_none: bool = False) -> float:
    """``value`` as a float number of seconds: a finite int or float > 0
    (not a bool), else :class:`InvalidType`/:class:`InvalidArgument` naming
    ``what`` (``or_none``: the message says ``None`` is allowed too). The
    one check of every duration the runtime and the shared buffer take."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidType(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not value > 0:
        raise InvalidArgument(f"{what} must be > 0{' or None' if or_none else ''}, got {value!r}")
    if value == float("inf"):
        raise InvalidArgument(f"{what} must be a finite number of seconds, got inf")
    return float(value)


class _Batch:
    """One removal batch handed to a worker thread (``apply_due``).

    Its life: *queued* (handed to the thread pool), then either *running*
    (the thread claimed it: :meth:`run`) and *settled* once the thread is
    done with it (published, refused or failed, whole: the core applies a
    batch under its write lock whether or not anyone waits), or *dropped*
    (its waiter was cancelled before any thread claimed it: :meth:`drop`;
    then no thread ever applies it and its groups, never popped, stay staged
    and due). Claim and drop take one lock, so exactly one of them wins:
    a batch that is not dropped is certain to settle. This matters because
    a worker-thread job cancelled before it starts is skipped by the thread
    pool (anyio's asyncio backend, a cancel at the limiter or checkpoint):
    waiting for such a batch to land waited for ever, or for its whole
    bound of real time (the reverted fix of a10c73f/c16aa1a).

    Settling sets :attr:`done` (a ``threading.Event``, for the bounded
    real-time wait on leaving ``open_buffer``) in the thread, then
    :attr:`landed` (an ``anyio.Event``) on the loop through the backend's
    non-blocking thread-safe call: loop code waits on :attr:`landed`, an
    event, never by polling and never on a clock. A drop sets both at once.
    :attr:`waited` is true while the task that started the batch waits for
    it. Every method is O(1); none blocks but for the claim/drop lock.
    """

    __slots__ = ("_call_soon", "_claim", "_dropped", "_started", "done", "landed", "waited")

    def __init__(self, call_soon: Callable[[Callable[[], None]], None]) -> None:
        self._claim = threading.Lock()
        self._call_soon = call_soon
        self._started = False
        self._dropped = False
        self.done = threading.Event()
        self.landed = anyio.Event()
        self.waited = True

    @property
    def settled(self) -> bool:
        """Whether the batch is done with: landed or dropped."""
        return self.done.is_set()

    def run(self, apply: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
        """In the worker thread: claim the batch and ``apply`` it, unless it
        was dropped first (then nothing, ``()``); settle it either way."""
        with self._claim:
            if self._dropped:
                return ()
            self._started = True
        try:
            return apply()
        finally:
            self.done.set()
            try:
                self._call_soon(self.landed.set)
            except RuntimeError:  # the loop is closing: nobody waits on it any more
                pass

    def drop(self) -> bool:
        """On the loop, once the waiter stops waiting: drop the batch if no
        thread claimed it yet (``True``: it never runs, and is settled now);
        ``False`` if a thread runs it (it settles when that thread is done)."""
        self.waited = False
        with self._claim:
            if self._started:
                return False
            self._dropped = True
        self.done.set()
        self.landed.set()
        return True


class RuntimeBuffer(Buffer):
    """A :class:`Buffer` whose removals are applied by a barrier scheduler.

    Made by :func:`open_buffer`; every sync method of :class:`Buffer` works
    unchanged (and stays sync: ``mark_stale`` and ``snapshot()`` never await).
    It is a :class:`~quiesce.AsyncBuffer`: code on the event loop writes with
    ``aappend``/``amark_stale``/``aprune``/``aedit``/``aescalate``/``aflush``,
    as it does on a :class:`~quiesce.SharedBuffer`.
    """

    def __init__(
        self,
        log: LogSink | None = None,
        policy: Policy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_pin_age: float | None = None,
        escalation_buffer: int = 1000,
        flush_interval: float = 0.05,
    ) -> None:
        super().__init__(log, policy, clock=clock)
        if max_pin_age is not None:
            check_seconds(max_pin_age, "max_pin_age", or_none=True)
        check_seconds(flush_interval, "flush_interval")
        check_int(escalation_buffer, "escalation_buffer")
        self.max_pin_age = max_pin_age
        self.flush_interval = flush_interval
        self._escalation_buffer = escalation_buffer
        #: the core's hooks and counters for this runtime (scheduling.py)
        self._scheduling = Scheduling(self)
        self._running = False
        self._wake: anyio.Event | None = None
        self._loop_thread = 0
        self._call_soon: Callable[[Callable[[], None]], None] | None = None
        self._esc_send: MemoryObjectSendStream[Escalation] | None = None
        self._esc_receive: MemoryObjectReceiveStream[Escalation] | None = None
        # Readers already escalated, held weakly: id -> weak reference, and a
        # hit counts only if the reference still gives that snapshot (a new
        # snapshot may reuse the id once an old one is freed; the reference's
        # callback forgets the entry then). A lookup is one dict get, cheaper
        # than a WeakSet's (which builds a weak reference per lookup).
        self._alarmed: dict[int, weakref.ref[Snapshot]] = {}
        # the alarm's cursor in the pin order: ``pin_popped + i`` of the
        # first entry it has not passed for good (PinRegistry.stuck_readers)
        self._alarm_pos = 0
        self._in_flight: list[_Batch] = []  #: batches not known settled, oldest first
        self.wakeups = 0  #: scheduler wake-ups so far (for latency benchmarks)
        self.batches = 0  #: batches applied by the scheduler

    # -- waking ------------------------------------------------------------

    def _set_wake(self) -> None:
        wake = self._wake
        if wake is not None:
            wake.set()

    def _wake_scheduler(self) -> None:
        """Installed as the core's due hook: wake the scheduler, from any thread."""
        if threading.get_ident() == self._loop_thread:
            self._set_wake()
            return
        call_soon = self._call_soon  # read once: _stop() may clear it meanwhile
        if call_soon is not None:
            try:
                call_soon(self._set_wake)
            except RuntimeError:  # the loop is closing; exit applies what is due
                pass

    def _deliver(self, esc: Escalation) -> bool:
        """Installed as the core's escalation hook: never blocks."""
        if threading.get_ident() == self._loop_thread:
            return self._send(esc)
        call_soon = self._call_soon  # read once: _stop() may clear it meanwhile
        if call_soon is None:
            return False
        try:
            call_soon(lambda: None if self._send(esc) else self._scheduling.count_dropped())
        except RuntimeError:
            return False
        return True

    def _send(self, esc: Escalation) -> bool:
        send = self._esc_send
        if send is None:
            return False
        try:
            send.send_nowait(esc)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True

    # -- the scheduler ---------------------------------------------------------

    async def _apply_due_async(self) -> tuple[str, ...]:
        if self.sink is None:
            return self.apply_due()
        # Disk I/O in a worker thread. A batch is applied whole or not at all
        # by the core (its write lock) whether or not anyone waits for it, so
        # a cancelled caller abandons the *wait*, never half a batch: a hung
        # sink cannot hold back leaving open_buffer. While it runs its groups
        # are off the staged queue but not yet published: ``quiesce()`` waits
        # for the in-flight batches instead of trusting ``has_due()``, those
        # a cancelled caller abandoned too (their thread goes on: _Batch). If
        # no thread claimed it before the cancellation, it is dropped: its
        # groups are still staged and due.
        batch = _Batch(threadsafe_caller())
        self._in_flight.append(batch)
        try:
            return await anyio.to_thread.run_sync(batch.run, self.apply_due, abandon_on_cancel=True)
        finally:
            batch.drop()

    def _batches(self, *, abandoned: bool) -> list[_Batch]:
        """The removal batches in flight, oldest first: every one not settled
        (``abandoned``) or only those whose starter still waits for them.
        Forgets the settled ones. O(batches in flight)."""
        self._in_flight[:] = [b for b in self._in_flight if not b.settled]
        if abandoned:
            return self._in_flight
        return [b for b in self._in_flight if b.waited]

    async def _scheduler(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        self._wake = anyio.Event()
        task_status.started()
        retry = False
        while True:
            wake = self._wake
            if wake is None:
                return  # stopped while a batch ran in its worker thread
            if retry:
                # The log failed: nothing may wake us again (the readers have
                # left), so retry after a group-commit interval.
                with anyio.move_on_after(self.flush_interval):
                    await wake.wait()
            else:
                await wake.wait()
            if self._wake is None:
                return
            self._wake = anyio.Event()
            self.wakeups += 1
            retry = False
            if self.has_due():
                try:
                    removed = await self._apply_due_async()
                except LogWriteError:
                    # Stays staged and logged; stats() shows log_failing.
                    retry = True
                    continue
                if removed:
                    self.batches += 1

    async def _alarm(self, max_age: float) -> None:
        interval = max_age / 2
        while True:
            await anyio.sleep(interval)
            self._check_reader_ages(max_age)

    def _check_reader_ages(self, max_age: float) -> list[Escalation]:
        """Escalate (once each) readers pinned longer than ``max_age``.

        Incremental. The pass walks the pinned versions oldest first, each
        version's readers in pin order, and stops at the first reader that is
        not old yet or is still pinning or unpinning (so a reader is escalated
        only after every reader before it in that order was). Hence, in each
        version, the escalated readers still pinned form a prefix of its
        readers (readers only leave, or join at the end): the pass finds the
        first one not escalated by bisection, and passes for good
        (``_alarm_pos``) the versions that are no longer the head and whose
        readers are all escalated. A pass costs O(log readers) plus a C-level
        copy of the head version's reader set plus O(1) per reader it
        escalates — not a walk of every pinned reader. A reader whose pin
        registered behind a younger one is escalated once that one is old.
        Readers are marked escalated under the pin lock, so two passes at
        once (the alarm task and a ``check_reader_ages()`` call) never
        escalate a reader twice. The walk is the pin registry's
        (:meth:`.Scheduling.stuck_readers`, reached through the scheduling
        handle, not the buffer's fields); this keeps only the escalated set
        and the cursor. Two passes at once may store the cursor in either
        order: an older cursor only makes the next pass re-walk versions
        whose readers it then skips by bisection, never one too far.
        """
        sched = self._scheduling
        now = sched.now()
        alarmed = self._alarmed
        forget = self._forget_alarmed

        def escalated(snap: Snapshot) -> bool:
            ref = alarmed.get(id(snap))
            return ref is not None and ref() is snap

        def mark(snap: Snapshot) -> None:
            key = id(snap)
            alarmed[key] = weakref.ref(snap, functools.partial(forget, key))

        found, self._alarm_pos = sched.stuck_readers(now, max_age, self._alarm_pos, escalated, mark)
        if not found:
            return []
        # removals held back by a pin of version v: those whose grace point
        # is above v (suffix sums over the distinct grace points: a bisection
        # per escalated reader, not a walk of the staged queue)
        held_back = self._scheduling.held_back()
        out = []
        for snap in found:
            task, v, since = reader_of(snap)
            if v is None or since is None:
                continue  # left meanwhile
            held = held_back(v.number)
            age = now - since
            name = task_name(task)
            detail = (
                f"reader {name!r} has pinned version {v.number} for {age:.1f}s "
                f"(alarm at {max_age:g}s), holding back {held} removal(s)"
            )
            out.append(
                self.escalate(
                    EscalationKind.READER_PINNED,
                    detail,
                    data={"task": name, "version": v.number, "age": age, "holding_back": held},
                )
            )
        return out

    def _forget_alarmed(self, key: int, ref: weakref.ref[Snapshot]) -> None:
        """An escalated snapshot was freed: forget it (only if the entry is
        still its own: a new snapshot may reuse the id once this one is gone)."""
        if self._alarmed.get(key) is ref:
            self._alarmed.pop(key, None)

    async def _flusher(self) -> None:
        while True:
            await anyio.sleep(self.flush_interval)
            if self.pending_records:
                try:
                    # abandoned on cancel: a hung sink must not hold back
                    # leaving open_buffer (the flush itself is atomic)
                    await anyio.to_thread.run_sync(self.flush, abandon_on_cancel=True)
                except LogWriteError:
                    pass  # stats().log_failing; retried next interval

    # -- public async API --------------------------------------------------

    async def quiesce(self) -> None:
        """Return once every removal whose blocking readers have left is
        applied. Always a checkpoint, even when nothing is due; does not wait
        for readers still in flight, but does wait for a removal batch still
        being written for a caller that was cancelled (its thread goes on;
        the wait is on the batch's own event, and this call's cancellation
        abandons it, not the batch). Raises :class:`LogWriteError` if the
        tombstones cannot be made durable (the removals stay staged)."""
        await self._settle(abandoned=True)

    async def _settle(self, *, abandoned: bool) -> None:
        """:meth:`quiesce`'s loop: wait for the batches in flight (all of
        them, or with ``abandoned`` false only those whose starter still
        waits: leaving ``open_buffer`` waits for the others bounded, and a
        shielded ``aprune`` never waits on a thread nobody waits for), then
        apply what is due; until neither is left. Waits on each batch's
        ``landed`` event: no polling, no timeout, no clock."""
        await anyio.lowlevel.checkpoint()
        while True:
            batches = self._batches(abandoned=abandoned)
            if batches:
                # A batch popped off the queue is still being made durable;
                # it counts as due until it is published.
                await batches[0].landed.wait()
            elif self.has_due():
                await self._apply_due_async()
            else:
                return

    async def _off_loop(self, call: Callable[[], _T]) -> _T:
        """Run a sync write without blocking the loop on a disk.

        Without a durable sink nothing can touch a disk: the call runs inline
        after a checkpoint. With one, it runs in a worker thread that is *not*
        abandoned on cancellation (the core's write lock makes it atomic with
        the loop's own writes), so a cancelled caller never leaves an edit
        half-applied: the edit completes or is refused as a whole, its result
        is returned, and the cancellation is delivered at the caller's next
        checkpoint.
        """
        if self.sink is None:
            await anyio.lowlevel.checkpoint()
            return call()
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=False)

    async def aappend(self, entry: Entry, *, override: Override | None = None) -> int:
        """:meth:`append` as a checkpoint (the :class:`~quiesce.AsyncBuffer`
        face). Appending never touches a disk (the record is group-committed
        later), so the append itself runs inline: a cancelled caller either
        appended nothing (cancelled at the checkpoint) or got the version."""
        await anyio.lowlevel.checkpoint()
        return self.append(entry, override=override)

    async def amark_stale(self, entry_id: str, reason: str, *, turn: int | None = None) -> Mark:
        """:meth:`mark_stale` as a checkpoint (the sync fast path after it,
        inline: marking never touches a disk)."""
        await anyio.lowlevel.checkpoint()
        return self.mark_stale(entry_id, reason, turn=turn)

    async def aescalate(
        self, kind: EscalationKind, detail: str, *, data: Mapping[str, Any] | None = None
    ) -> Escalation:
        """:meth:`escalate` as a checkpoint (inline: the record is
        group-committed later)."""
        await anyio.lowlevel.checkpoint()
        return self.escalate(kind, detail, data=data)

    async def aprune(self, ids: Iterable[str], **options: Unpack[PruneOptions]) -> PruneReport:
        """:meth:`prune` (its options: :class:`~quiesce._core.stream.PruneOptions`)
        for code on the event loop: the same decision per id
        and the same report, but the flush that makes tombstones durable runs
        in a worker thread. Always a checkpoint. Cancellation never splits a
        request (see :meth:`_off_loop`): the ids are decided and applied or
        staged together, and the report is returned; the cancellation follows
        at the next checkpoint. A removal no reader holds is reported
        ``PRUNED``, as by the sync call, even when the scheduler (woken from
        the worker thread) applied it. Arguments are checked by :meth:`prune` itself
        (a bare ``str`` is an :class:`InvalidType`, nothing changes)."""
        report = await self._off_loop(functools.partial(self.prune, ids, **options))
        deferred = report.ids(Status.DEFERRED)
        if not deferred or not (self._batches(abandoned=False) or self.has_due()):
            return report
        # From a worker thread the staging woke the scheduler, which may take
        # the batch (no reader holds it) before the prune can apply it itself:
        # let that batch land, then report what the sync call would.
        with anyio.CancelScope(shield=True), contextlib.suppress(LogWriteError):
            await self._settle(abandoned=False)
        tombs = self.tombstones
        outcomes = {
            i: Outcome(Status.PRUNED) if i in deferred and i in tombs else o
            for i, o in report.items()
        }
        return PruneReport(outcomes, self.version)

    async def aedit(self, plan: EditPlan) -> EditReport:
        """:meth:`edit` for code on the event loop: all or nothing, as the
        sync call, with the durable part in a worker thread. Always a
        checkpoint; a cancelled caller leaves the plan applied or refused as a
        whole (never half), and its report is returned before the cancellation
        is delivered at the next checkpoint."""
        return await self._off_loop(functools.partial(self.edit, plan))

    async def aflush(self) -> None:
        """:meth:`flush` in a worker thread (a checkpoint; shielded so a
        cancelled caller still leaves the log consistent)."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.flush)

    async def escalations(self) -> AsyncIterator[Escalation]:
        """Refused edits, readers pinned past ``max_pin_age``, backlog over its
        bound — as they happen. Several consumers share one stream (each
        escalation goes to one of them). Ends when ``open_buffer`` exits.
        Escalations that arrive while the stream is full are counted in
        ``stats().escalations_dropped``; all of them are in the log."""
        receive = self._esc_receive
        if receive is None:
            raise BufferClosed("escalations() needs a running buffer (inside open_buffer)")
        async with receive.clone() as stream:
            async for esc in stream:
                yield esc

    def check_reader_ages(self) -> list[Escalation]:
        """Run the reader-age alarm now (what the alarm task does each tick)."""
        if self.max_pin_age is None:
            return []
        return self._check_reader_ages(self.max_pin_age)

    # -- lifecycle -----------------------------------------------------------

    def _start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._call_soon = threadsafe_caller()
        self._esc_send, self._esc_receive = anyio.create_memory_object_stream[Escalation](
            self._escalation_buffer
        )
        # Escalations queued before the runtime started are delivered first
        # (a later one is delivered by the hook after them: this runs on the loop).
        for esc in self._scheduling.attach(self._wake_scheduler, self._deliver):
            if not self._send(esc):
                self._scheduling.count_dropped()
        self._running = True

    def _stop(self) -> None:
        self._running = False
        self._scheduling.detach()
        self._call_soon = None
        self._wake = None
        if self._esc_send is not None:
            self._esc_send.close()
        if self._esc_receive is not None:
            self._esc_receive.close()
        self._esc_send = self._esc_receive = None

    @asynccontextmanager
    async def serving(
        self, *, max_pin_age: float | None, durable: bool, close_timeout: float
    ) -> AsyncIterator[None]:
        """The buffer's life inside :func:`open_buffer`: its barrier
        scheduler, reader-age alarm (``max_pin_age``, ``None``: none) and,
        for a ``durable`` log, its flusher run in a task group around the
        body; removals due at entry and at exit are applied; leaving stops
        the buffer and waits at most ``close_timeout`` for the final flush
        (:class:`LogWriteError` naming what is pending). The body's exception
        propagates as itself, not wrapped in an exception group. Entered once
        per buffer (``open_buffer`` owns it)."""
        host_error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                self._start()
                try:
                    await tg.start(self._scheduler)
                    if max_pin_age is not None:
                        tg.start_soon(self._alarm, max_pin_age)
                    if durable:
                        tg.start_soon(self._flusher)
                    if self.has_due():
                        await self.quiesce()
                    yield
                    # (batches a cancelled caller abandoned: waited for below, bounded)
                    await self._settle(abandoned=False)
                except Exception as exc:
                    # The body's exception (or a LogWriteError of the final quiesce)
                    # is raised again below, outside the task group, so that it is
                    # not wrapped in an exception group. Cancellation (a
                    # BaseException) goes through the task group as it must.
                    host_error = exc
                finally:
                    tg.cancel_scope.cancel()
                    self._stop()
        finally:
            # Outside the task group, so that a timeout is raised as itself; runs
            # also while a cancellation propagates (and then replaces it). The
            # batches still in their worker threads (a cancelled caller's, or
            # the scheduler's when the cancellation took its wait) land first,
            # within the same bound, so the block ends with them published.
            timed_out = None
            if durable:
                landing = [b.done for b in self._batches(abandoned=True)]
                timed_out = await bounded_flush(self, close_timeout, landing)
            if timed_out is not None:
                if host_error is None:
                    raise timed_out
                host_error.add_note(f"and on leaving open_buffer: {timed_out}")
        if host_error is not None:
            raise host_error

    @property
    def running(self) -> bool:
        """Whether the scheduler is running (inside ``open_buffer``)."""
        return self._running


@asynccontextmanager
async def open_buffer(
    log: LogSink | None = None,
    policy: Policy | None = None,
    *,
    max_pin_age: float | None = 30.0,
    escalation_buffer: int = 1000,
    flush_interval: float = 0.05,
    clock: Callable[[], float] | None = None,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
    verify: bool = False,
) -> AsyncIterator[RuntimeBuffer]:
    """A :class:`RuntimeBuffer` with its barrier scheduler running.

    ``verify=True`` proves the recovered log before the body runs
    (:meth:`Buffer.verify`, in a worker thread: the loop never reads the
    disk for it): a checkpoint that disagrees with the full replay of its
    records raises :class:`LogFormatError` naming it, and nothing runs.

    ``max_pin_age`` (seconds, ``None`` to disable) arms the reader-age alarm;
    ``escalation_buffer`` bounds the escalation stream; ``flush_interval`` is
    the group-commit period of a durable ``log``; ``clock`` measures pin ages
    and reclamation latency (default: the running event loop's clock, so pin
    ages agree with the alarm's sleeps — also under trio's ``MockClock``;
    inject a fake one in tests). See the module docstring for what exit does.

    ``close_timeout`` (real seconds, default :data:`DEFAULT_CLOSE_TIMEOUT`) bounds
    how long leaving waits for the final flush of a durable ``log``. The
    flush is shielded from cancellation (a cancelled caller still gets its
    records made durable when the sink answers) but not unbounded: a sink
    that hangs past it leaves the records pending and exit raises
    :class:`LogWriteError` naming them (``exc.pending`` is their count) —
    also when the exit was a cancellation, which that error then replaces.
    The same bound covers the removal batches still in flight (one whose
    caller was cancelled mid-write runs on in its worker thread and lands or
    fails whole): leaving waits for each on its own completion event, then
    flushes, the whole at most ``close_timeout``; past it the
    :class:`LogWriteError` names the records pending and the batches not
    landed. A batch cancelled before a worker thread claimed it is dropped
    (its groups stay staged and due), never waited for.

    An exception raised by the body (or a :class:`LogWriteError` when the
    removals due at exit cannot be made durable) propagates as itself, not
    wrapped in an exception group: the task group inside is an
    implementation detail. If the final flush also timed out, the body's
    exception carries a note saying so.
    """
    check_seconds(close_timeout, "close_timeout")
    if clock is None:
        clock = loop_clock()
    if type(verify) is not bool:
        raise InvalidType(f"verify must be a bool, not {type(verify).__name__}")
    buf = RuntimeBuffer(
        log,
        policy,
        clock=clock,
        max_pin_age=max_pin_age,
        escalation_buffer=escalation_buffer,
        flush_interval=flush_interval,
    )
    if verify:
        await anyio.to_thread.run_sync(buf.verify)
    async with buf.serving(
        max_pin_age=max_pin_age, durable=log is not None, close_timeout=close_timeout
    ):
        yield buf
