"""The async runtime: ``open_buffer``'s barrier scheduler, ``quiesce()``,
cancellation and exit, on asyncio and on trio.

Every test orders its tasks with events and ``all_blocked()`` (never with
sleeps; tests/_settle.py: ``anyio.wait_all_tasks_blocked()``'s guarantee
without its 0.1 s sleeps on asyncio): "the scheduler applied it" means
"once every task is blocked, it is applied", without anyone calling ``quiesce()``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import anyio
import pytest

from _settle import all_blocked
from quiesce import (
    Entry,
    EntryPruned,
    Kind,
    LogRecord,
    LogWriteError,
    Outcome,
    QuiesceError,
    RuntimeBuffer,
    Status,
    open_buffer,
)
from quiesce._runtime import _Batch

pytestmark = pytest.mark.anyio


def step(entry_id: str, *refs: str) -> Entry:
    """A plain, prunable reasoning entry with a body unique to its id."""
    return Entry(entry_id, Kind.REASONING, f"step {entry_id}", refs)


async def cancel_when_blocked(scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` once every task is blocked."""
    await all_blocked()
    scope.cancel()


def removal_records(buf: RuntimeBuffer) -> list[LogRecord]:
    return [r for r in buf.log if r.op == "remove"]


class GatedSink:
    """An in-memory ``LogSink`` whose writes can be held at a gate (a
    ``threading.Event``) or made to fail: a disk that is slow or broken."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.fail = False
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def load(self) -> Sequence[LogRecord]:
        return list(self.records)

    def write(self, records: Sequence[LogRecord]) -> None:
        gate = self.gate
        if gate is not None:
            self.entered.set()
            gate.wait()
        if self.fail:
            raise OSError("disk full")
        self.records.extend(records)

    def close(self) -> None:
        pass


class TestDeferredRemoval:
    async def test_applied_by_the_scheduler_after_the_reader_leaves(self) -> None:
        """A removal requested while a reader is in flight is deferred (marked
        now), and the scheduler applies it once the reader leaves: nobody
        calls quiesce()."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            buf.append(step("b"))
            pinned, leave = anyio.Event(), anyio.Event()
            seen: list[Entry] = []

            async def reader() -> None:
                with buf.snapshot() as snap:
                    pinned.set()
                    await leave.wait()
                    seen.append(snap["a"])  # still there for this reader

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await pinned.wait()
                report = buf.prune(["a"], reason="stale")
                assert report["a"] == Outcome(Status.DEFERRED)
                await all_blocked()
                assert "a" in buf.head().live, "removed while its reader was in flight"
                assert buf.staged() == {"a": buf.head().marks["a"].version}
                assert buf.stats().deferred == 1
                leave.set()
                await all_blocked()
                # applied by the scheduler, before the task group even exits
                assert "a" in buf.tombstones
                assert "a" not in buf.head().live
            assert [e.id for e in seen] == ["a"]
            assert buf.staged() == {}
            assert buf.batches == 1
            assert [r.ids for r in removal_records(buf)] == [("a",)]
            with buf.snapshot() as snap, pytest.raises(EntryPruned):
                snap["a"]
            buf._check(expect_no_pins=True)

    async def test_without_readers_a_prune_is_applied_at_once(self) -> None:
        """No reader pinned it unmarked: the removal is applied inside prune()."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            assert buf.prune(["a"], reason="stale")["a"] == Outcome(Status.PRUNED)
            assert "a" in buf.tombstones
            buf._check(expect_no_pins=True)

    async def test_a_reader_pinned_before_a_mark_sees_the_entry_unmarked(self) -> None:
        """Invariant 1: the reader sees its version for its whole life, across
        awaits, however the head changes meanwhile."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned, marked = anyio.Event(), anyio.Event()
            observed: list[tuple[bool, object, int]] = []

            async def reader() -> None:
                with buf.snapshot() as snap:
                    pinned.set()
                    await marked.wait()
                    await all_blocked()
                    observed.append((snap.is_stale("a"), snap.mark("a"), len(snap)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await pinned.wait()
                mark = buf.mark_stale("a", "superseded")
                buf.prune(["a"], reason="superseded")
                marked.set()
            assert observed == [(False, None, 1)]
            await all_blocked()
            with buf.snapshot() as snap:
                assert snap.mark("a") is None  # removed: no live mark
                assert "a" in snap.tombstones
            assert mark.version == 2

    async def test_continuous_overlapping_readers_do_not_starve_a_removal(self) -> None:
        """A grace period, not global quiescence: every new reader pins before
        the previous one leaves, so readers are never zero; the removal is
        applied as soon as the last reader that saw the entry unmarked leaves."""
        n = 6
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned = [anyio.Event() for _ in range(n)]
            leave = [anyio.Event() for _ in range(n)]
            saw_a: list[bool] = [False] * n

            async def reader(i: int) -> None:
                with buf.snapshot() as snap:
                    saw_a[i] = "a" in snap
                    pinned[i].set()
                    await leave[i].wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader, 0)
                await pinned[0].wait()
                assert buf.prune(["a"], reason="stale")["a"].status is Status.DEFERRED
                for i in range(1, n):
                    tg.start_soon(reader, i)
                    await pinned[i].wait()  # reader i pins before reader i-1 leaves
                    leave[i - 1].set()
                    await all_blocked()
                    assert buf.stats().pinned == 1
                    # reader 0 was the only one to pin "a" unmarked
                    assert "a" in buf.tombstones, f"removal starved after {i} readers"
                leave[n - 1].set()
            # reader 1 pinned "a" marked (it does not block); later ones pinned
            # versions after the removal
            assert saw_a == [True, True] + [False] * (n - 2)
            assert buf.batches == 1
            buf._check(expect_no_pins=True)

    async def test_a_removal_waits_for_every_reader_that_saw_it_unmarked(self) -> None:
        """Invariant 5: with two readers pinned before the mark, the removal
        waits for both; a reader pinned after the mark holds nothing back."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned = [anyio.Event() for _ in range(3)]
            leave = [anyio.Event() for _ in range(3)]

            async def reader(i: int) -> None:
                with buf.snapshot():
                    pinned[i].set()
                    await leave[i].wait()

            async with anyio.create_task_group() as tg:
                for i in range(2):
                    tg.start_soon(reader, i)
                    await pinned[i].wait()
                buf.prune(["a"], reason="stale")
                tg.start_soon(reader, 2)
                await pinned[2].wait()
                for i in (1, 2):
                    leave[i].set()
                    await all_blocked()
                    assert "a" in buf.head().live
                    buf._check()
                leave[0].set()
                await all_blocked()
                assert "a" in buf.tombstones
            buf._check(expect_no_pins=True)

    async def test_reclamation_latency_is_in_stats(self) -> None:
        """Seconds from the last blocking unpin to the application, measured on
        the buffer's clock (a fake one here: exactly the time it advanced)."""
        now = [100.0]
        async with open_buffer(clock=lambda: now[0]) as buf:
            assert buf.stats().reclamation_latency_last is None
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                now[0] = 105.0
            # unpinned at t=105; the scheduler has not run yet (no checkpoint)
            now[0] = 107.5
            await all_blocked()
            assert "a" in buf.tombstones
            stats = buf.stats()
            assert stats.reclamation_latency_last == 2.5
            assert stats.reclamation_latency_max == 2.5

    async def test_reclamation_latency_on_the_default_clock(self) -> None:
        async with open_buffer() as buf:
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
            await all_blocked()
            latency = buf.stats().reclamation_latency_last
            assert latency is not None
            assert latency >= 0.0


def _due_behind_gate() -> tuple[GatedSink, RuntimeBuffer]:
    """A started runtime buffer (hooks attached, no scheduler task) on a
    :class:`GatedSink` whose removal of ``a`` is staged and due: the
    cancellation tests' common start."""
    sink = GatedSink()
    buf = RuntimeBuffer(log=sink)
    buf._start()
    buf.append(step("a"))
    buf.flush()
    with buf.snapshot():
        buf.prune(["a"], reason="stale")
    return sink, buf


class TestCancellation:
    async def test_a_cancelled_reader_releases_its_pin(self) -> None:
        """Invariant 7: a reader cancelled while blocked inside its snapshot
        unpins (``__exit__`` is sync), and the removal it held back is applied."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned = anyio.Event()
            reached_end = False

            async def reader(scope: anyio.CancelScope) -> None:
                nonlocal reached_end
                with scope, buf.snapshot():
                    pinned.set()
                    await anyio.sleep_forever()
                    reached_end = True  # pragma: no cover

            scope = anyio.CancelScope()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader, scope)
                await pinned.wait()
                buf.prune(["a"], reason="stale")
                await all_blocked()
                assert buf.stats().pinned == 1
                assert "a" in buf.head().live
                scope.cancel()
                await all_blocked()
                assert buf.stats().pinned == 0
                assert "a" in buf.tombstones
            assert scope.cancelled_caught
            assert not reached_end
            buf._check(expect_no_pins=True)

    async def test_a_reader_cancelled_from_outside_the_task_group(self) -> None:
        """Cancelling a whole task group of readers leaks no pin."""
        async with open_buffer() as buf:
            for i in range(5):
                buf.append(step(f"e{i}"))
            blocked = 0
            all_pinned = anyio.Event()

            async def reader() -> None:
                nonlocal blocked
                with buf.snapshot():
                    blocked += 1
                    if blocked == 10:
                        all_pinned.set()
                    await anyio.sleep_forever()

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(reader)
                await all_pinned.wait()
                report = buf.prune([f"e{i}" for i in range(5)], reason="stale")
                assert set(report.ids(Status.DEFERRED)) == {f"e{i}" for i in range(5)}
                tg.cancel_scope.cancel()
            await all_blocked()
            assert len(buf.tombstones) == 5
            buf._check(expect_no_pins=True)

    async def test_exit_by_exception_leaves_staged_removals_staged_and_logged(self) -> None:
        """Leaving ``open_buffer`` by an exception: the exception propagates as
        itself, the scheduler is cancelled, nothing is half-applied, the
        staged removal stays staged and logged; afterwards the buffer runs in
        sync mode and applies it when its reader leaves."""
        pinned, leave = anyio.Event(), anyio.Event()
        holder: list[RuntimeBuffer] = []

        async def reader() -> None:
            buf = holder[0]
            with buf.snapshot():
                pinned.set()
                await leave.wait()

        async with anyio.create_task_group() as tg:
            with pytest.raises(ValueError, match=r"^planner crashed$"):
                async with open_buffer() as buf:
                    holder.append(buf)
                    buf.append(step("a"))
                    buf.append(step("b", "a"))
                    tg.start_soon(reader)
                    await pinned.wait()
                    report = buf.prune(["a", "b"], reason="stale")
                    assert set(report.ids(Status.DEFERRED)) == {"a", "b"}
                    raise ValueError("planner crashed")
            assert not buf.running
            assert set(buf.staged()) == {"a", "b"}
            assert {"a", "b"} <= set(buf.head().live)
            prunes = [r for r in buf.log if r.op == "prune"]
            assert len(prunes) == 1
            assert prunes[0].outcome == "staged"
            assert removal_records(buf) == []
            buf._check()
            version = buf.version
            leave.set()
        # sync mode: the last blocking unpin applied the group, as one version
        assert set(buf.tombstones) == {"a", "b"}
        assert buf.version == version + 1
        assert len(removal_records(buf)) == 1
        buf._check(expect_no_pins=True)

    async def test_the_scheduler_cancelled_mid_batch_applies_it_whole(self) -> None:
        """Cancellation arrives while a batch's tombstones are being written:
        the batch's worker thread is not abandoned, so the batch is published
        whole (every due group, one version, one record) or not at all."""
        sink = GatedSink()
        with anyio.CancelScope() as outer:
            async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
                buf.append(step("a"))
                buf.append(step("b", "a"))
                buf.append(step("c"))
                with buf.snapshot():
                    buf.prune(["a", "b"], reason="stale")
                    buf.prune(["c"], reason="stale")
                    await buf.aflush()
                    sink.gate = threading.Event()
                    version = buf.version
                # the scheduler is woken; wait until its batch is mid-write
                await anyio.to_thread.run_sync(sink.entered.wait)
                outer.cancel()
                sink.gate.set()
                await anyio.sleep_forever()
        assert outer.cancelled_caught
        assert set(buf.tombstones) == {"a", "b", "c"}
        assert buf.version == version + 1
        assert buf.staged() == {}
        assert [set(r.ids) for r in removal_records(buf)] == [{"a", "b", "c"}]
        assert [r.seq for r in sink.records] == list(range(len(buf.log)))
        buf._check(expect_no_pins=True)

    async def test_quiesce_waits_for_a_batch_whose_caller_was_cancelled(self) -> None:
        """A ``quiesce()`` cancelled while its batch is being written abandons
        the wait, not the batch (its worker thread goes on). The next
        ``quiesce()`` waits, on the batch's own event, until that batch is
        published, so it never returns with the removal neither staged-and-due
        nor applied (before, it returned at once and leaving ``open_buffer``
        could leave the removal staged behind it). The runtime's hooks are
        attached (``_start``) but no scheduler task runs, so the cancelled
        call certainly owns the batch."""
        sink, buf = _due_behind_gate()
        assert buf.has_due()
        sink.gate = threading.Event()
        version = buf.version
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                with anyio.CancelScope() as inner:
                    tg.start_soon(cancel_when_entered, inner)
                    await buf.quiesce()

            async def cancel_when_entered(inner: anyio.CancelScope) -> None:
                await anyio.to_thread.run_sync(sink.entered.wait)
                inner.cancel()

            tg.start_soon(first)
        assert buf.version == version  # the batch is still held at the gate
        assert not buf.has_due()  # ...off the staged queue, not published
        second_done = anyio.Event()

        async def second() -> None:
            await buf.quiesce()
            second_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await all_blocked()
            assert not second_done.is_set(), "quiesce() returned before the batch landed"
            sink.gate.set()
        assert buf.version == version + 1
        assert set(buf.tombstones) == {"a"}
        assert buf.staged() == {}
        buf._stop()
        buf._check(expect_no_pins=True)

    async def test_a_batch_cancelled_before_its_thread_started_is_dropped(self) -> None:
        """A ``quiesce()`` cancelled while its batch still waits for a worker
        thread (here: the thread limiter is full) drops the batch: no thread
        ever applies it, nothing waits for it, and its removal stays staged
        and due, so the next ``quiesce()`` applies it at once. (The reverted
        fix waited for such a batch to land, which it never does: leaving
        ``open_buffer`` sat out ``close_timeout`` of real time each time.)"""
        sink, buf = _due_behind_gate()
        limiter = anyio.to_thread.current_default_thread_limiter()
        tokens = limiter.total_tokens
        hold = threading.Event()

        try:
            limiter.total_tokens = 1
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, hold.wait)
                try:
                    await all_blocked()  # (it holds the one token)
                    with anyio.CancelScope() as scope:
                        tg.start_soon(cancel_when_blocked, scope)
                        await buf.quiesce()  # waits for the limiter, then is cancelled
                    assert scope.cancelled_caught
                    assert buf._batches(abandoned=True) == []  # dropped, not waited for
                    assert buf.has_due() and set(buf.staged()) == {"a"}
                    assert sink.entered.is_set() is False
                finally:
                    hold.set()
        finally:
            hold.set()
            limiter.total_tokens = tokens
        await buf.quiesce()
        assert set(buf.tombstones) == {"a"} and buf.staged() == {}
        buf._stop()
        buf._check(expect_no_pins=True)

    async def test_a_batch_claimed_or_dropped_never_both(self) -> None:
        """``_Batch``: a drop after the thread claimed the batch leaves it to
        the thread (it settles when applied); a drop first makes the thread
        apply nothing. Either way it is settled exactly once."""
        applied: list[int] = []

        def apply() -> tuple[str, ...]:
            applied.append(1)
            return ("x",)

        ran = _Batch(lambda fn: fn())
        assert ran.run(apply) == ("x",) and ran.settled and ran.landed.is_set()
        assert ran.drop() is False and applied == [1]
        dropped = _Batch(lambda fn: fn())
        assert dropped.drop() is True and dropped.settled and dropped.landed.is_set()
        assert dropped.run(apply) == () and applied == [1]

    async def test_a_hung_abandoned_batch_bounds_exit_and_lands_later(self) -> None:
        """Leaving ``open_buffer`` by a cancellation while the scheduler's
        batch is held by a hung sink waits for it at most ``close_timeout``
        (with the final flush), then raises :class:`LogWriteError` naming the
        batch and the records pending; the batch's thread goes on and
        publishes it whole once the sink answers."""
        sink = GatedSink()
        with anyio.CancelScope() as outer:
            with pytest.raises(LogWriteError, match=r"1 removal batch\(es\) still in their"):
                async with open_buffer(
                    log=sink, flush_interval=3600, max_pin_age=None, close_timeout=0.2
                ) as buf:
                    buf.append(step("a"))
                    await buf.aflush()
                    with buf.snapshot():
                        buf.prune(["a"], reason="stale")
                        sink.gate = threading.Event()
                    await anyio.to_thread.run_sync(sink.entered.wait)
                    outer.cancel()
                    await anyio.sleep_forever()
        assert "a" not in buf.tombstones  # never published without its tombstone
        (batch,) = buf._batches(abandoned=True)
        sink.gate.set()
        await anyio.to_thread.run_sync(batch.done.wait)
        assert set(buf.tombstones) == {"a"} and buf.staged() == {}
        buf._check(expect_no_pins=True)

    async def test_a_failing_log_publishes_nothing_and_keeps_removals_staged(self) -> None:
        """The scheduler's batch cannot be made durable: nothing is published,
        the removals stay staged (and logged as staged); exit by an exception
        leaves them so; ``_check()`` passes."""
        sink = GatedSink()
        with pytest.raises(KeyError):
            async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
                buf.append(step("a"))
                buf.append(step("b", "a"))
                with buf.snapshot():
                    buf.prune(["a", "b"], reason="stale")
                    version = buf.version
                    sink.fail = True
                # the scheduler's batch (or, if it has not started yet, this
                # call's own) fails to write: nothing is published
                with pytest.raises(LogWriteError, match=r"^edit log write failed: disk full$"):
                    await buf.quiesce()
                assert buf.stats().log_failing
                assert buf.version == version
                raise KeyError("supervisor gave up")
        assert buf.version == version
        assert set(buf.staged()) == {"a", "b"}
        assert {"a", "b"} <= set(buf.head().live)
        assert removal_records(buf) == []
        assert [r.outcome for r in buf.log if r.op == "prune"] == ["staged"]
        buf._check(expect_no_pins=True)
        # the disk recovers: the removal goes through, exactly once
        sink.fail = False
        assert set(buf.apply_due()) == {"a", "b"}
        assert len(removal_records(buf)) == 1
        buf._check(expect_no_pins=True)

    async def test_the_scheduler_retries_a_batch_the_log_refused(self) -> None:
        """The readers have left, so no unpin will wake the scheduler again:
        after a failed write it retries every ``flush_interval`` on its own,
        and the removal goes through once the log recovers."""
        sink = GatedSink()
        async with open_buffer(log=sink, flush_interval=0.01, max_pin_age=None) as buf:
            failed, applied = anyio.Event(), anyio.Event()
            apply_due = buf.apply_due

            def observed_apply_due() -> tuple[str, ...]:
                # runs in the scheduler's worker thread
                try:
                    removed = apply_due()
                except LogWriteError:
                    anyio.from_thread.run_sync(failed.set)
                    raise
                if removed:
                    anyio.from_thread.run_sync(applied.set)
                return removed

            buf.apply_due = observed_apply_due  # type: ignore[method-assign]
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                sink.fail = True
            with anyio.fail_after(10):
                await failed.wait()
            assert set(buf.staged()) == {"a"}
            sink.fail = False
            with anyio.fail_after(10):
                await applied.wait()
            assert "a" in buf.tombstones
            assert not buf.stats().log_failing
            buf._check(expect_no_pins=True)

    async def test_a_log_failure_at_exit_is_raised_unwrapped(self) -> None:
        """A normal exit applies what is due; if its tombstones cannot be made
        durable, ``LogWriteError`` propagates as itself and the removal stays
        staged."""
        sink = GatedSink()
        with pytest.raises(LogWriteError, match=r"^edit log write failed: disk full$"):
            async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
                buf.append(step("a"))
                with buf.snapshot():
                    buf.prune(["a"], reason="stale")
                    await buf.aflush()
                    sink.fail = True
                # the scheduler has not run yet: exit meets the due removal
        assert set(buf.staged()) == {"a"}
        assert "a" in buf.head().live
        buf._check(expect_no_pins=True)

    async def test_normal_exit_applies_what_is_due_and_keeps_the_rest_staged(self) -> None:
        pinned, leave = anyio.Event(), anyio.Event()
        holder: list[RuntimeBuffer] = []

        async def reader() -> None:
            with holder[0].snapshot():
                pinned.set()
                await leave.wait()

        async with anyio.create_task_group() as tg:
            async with open_buffer() as buf:
                holder.append(buf)
                buf.append(step("a"))
                buf.append(step("b"))
                tg.start_soon(reader)
                await pinned.wait()
                buf.prune(["a"], reason="held by the outside reader")
            assert not buf.running
            assert set(buf.staged()) == {"a"}
            buf._check()
            leave.set()
        assert "a" in buf.tombstones
        buf._check(expect_no_pins=True)


class TestQuiesce:
    async def test_quiesce_is_a_checkpoint_when_nothing_is_due(self) -> None:
        async with open_buffer() as buf:
            assert not buf.has_due()
            with anyio.CancelScope() as scope:
                scope.cancel()
                await buf.quiesce()
                pytest.fail("quiesce() did not checkpoint")  # pragma: no cover
            assert scope.cancelled_caught

    async def test_quiesce_lets_other_tasks_run(self) -> None:
        """A checkpoint also schedules: a task started before it gets to run."""
        async with open_buffer() as buf:
            ran = False

            async def other() -> None:
                nonlocal ran
                ran = True

            async with anyio.create_task_group() as tg:
                tg.start_soon(other)
                for _ in range(5):  # a few scheduling rounds, no sleeps
                    await buf.quiesce()
                assert ran

    async def test_quiesce_returns_once_due_removals_are_applied(self) -> None:
        async with open_buffer() as buf:
            for i in "abc":
                buf.append(step(i))
            with buf.snapshot():
                buf.prune(["a", "b"], reason="stale")
            # the last blocking unpin happened; the scheduler has not run
            assert buf.has_due()
            await buf.quiesce()
            assert {"a", "b"} <= set(buf.tombstones)
            assert not buf.has_due()
            buf._check(expect_no_pins=True)

    async def test_quiesce_does_not_wait_for_readers_in_flight(self) -> None:
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned, leave = anyio.Event(), anyio.Event()

            async def reader() -> None:
                with buf.snapshot():
                    pinned.set()
                    await leave.wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await pinned.wait()
                buf.prune(["a"], reason="stale")
                with anyio.fail_after(5):
                    await buf.quiesce()
                assert "a" in buf.head().live
                assert set(buf.staged()) == {"a"}
                leave.set()
            await buf.quiesce()
            assert "a" in buf.tombstones

    async def test_quiesce_waits_for_a_batch_the_scheduler_is_writing(self) -> None:
        """The scheduler's batch has left the staged queue but its tombstones
        are still being written: ``quiesce()`` must not return before the
        removal is published (``has_due()`` alone would say "nothing due")."""
        sink = GatedSink()
        async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                await buf.aflush()
                sink.gate = threading.Event()
            await anyio.to_thread.run_sync(sink.entered.wait)
            assert not buf.has_due()  # popped by the scheduler's batch
            returned = anyio.Event()

            async def quiescer() -> None:
                await buf.quiesce()
                assert "a" in buf.tombstones
                returned.set()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(quiescer)
                    await all_blocked()
                    assert not returned.is_set(), "quiesce() returned mid-batch"
                    sink.gate.set()
            finally:
                sink.gate.set()  # never leave the worker thread stuck
            assert returned.is_set()
            buf._check(expect_no_pins=True)

    async def test_quiesce_raises_log_write_error_and_keeps_it_staged(self) -> None:
        sink = GatedSink()
        async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                sink.fail = True
            with pytest.raises(LogWriteError):
                await buf.quiesce()
            assert set(buf.staged()) == {"a"}
            sink.fail = False
            await buf.quiesce()
            assert "a" in buf.tombstones
            buf._check(expect_no_pins=True)


class TestLifecycle:
    async def test_running_only_inside_open_buffer(self) -> None:
        async with open_buffer() as buf:
            assert buf.running
        assert not buf.running

    async def test_exit_by_cancellation_is_not_swallowed(self) -> None:
        with anyio.CancelScope() as scope:
            async with open_buffer() as buf:
                buf.append(step("a"))
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert not buf.running

    async def test_invalid_settings_are_refused(self) -> None:
        with pytest.raises(ValueError, match=r"^max_pin_age must be > 0 or None, got 0$"):
            async with open_buffer(max_pin_age=0):
                pass  # pragma: no cover
        with pytest.raises(ValueError, match=r"^flush_interval must be > 0, got -1$"):
            async with open_buffer(flush_interval=-1):
                pass  # pragma: no cover
        with pytest.raises(TypeError, match=r"^max_pin_age must be a number of seconds, not str$"):
            async with open_buffer(max_pin_age="30"):  # type: ignore[arg-type]
                pass  # pragma: no cover
        with pytest.raises(QuiesceError, match=r"^escalation_buffer must be >= 0, got -1$"):
            async with open_buffer(escalation_buffer=-1):
                pass  # pragma: no cover

    async def test_scheduler_wakes_on_unpin_without_polling(self) -> None:
        """The scheduler sleeps on an event: no wake-ups while nothing happens,
        and the removal is applied within two wake-ups of its last blocking
        unpin (the stage wake-up may be pending when the unpin comes)."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            await all_blocked()
            idle = buf.wakeups
            for _ in range(3):
                await all_blocked()
            assert buf.wakeups == idle
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                await all_blocked()
                before = buf.wakeups
            await all_blocked()
            assert "a" in buf.tombstones
            assert buf.wakeups - before <= 2


class TestFastPathUnderADurableLog:
    async def test_a_mark_does_not_wait_for_a_batch_being_written(self) -> None:
        """DESIGN: the mark fast path never waits for a disk. The scheduler's
        batch is held at the disk (the gate); a mark made meanwhile should
        complete at once. The mark runs in a worker thread so that, while
        the bug stands, it blocks that thread and not the test's loop."""
        sink = GatedSink()
        async with open_buffer(log=sink, flush_interval=3600, max_pin_age=None) as buf:
            buf.append(step("a"))
            buf.append(step("b"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                await buf.aflush()
                sink.gate = threading.Event()
            await anyio.to_thread.run_sync(sink.entered.wait)
            marked = threading.Event()

            def mark() -> None:
                buf.mark_stale("b", "superseded")
                marked.set()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(anyio.to_thread.run_sync, mark)
                    in_time = await anyio.to_thread.run_sync(marked.wait, 1.0)
                    sink.gate.set()
            finally:
                sink.gate.set()
            assert in_time, "mark_stale waited for the scheduler's disk write"
