"""Escalations under the runtime: refused edits, readers pinned past the alarm
age, a backlog over its bound — delivered on ``buf.escalations()``, always in
the log, and counted when they cannot be delivered.

The reader-age alarm is timed: on trio it runs with the autojump clock
(virtual time, the default clock of ``open_buffer`` follows it); on both
backends the same behaviour is driven by an injected fake clock and
``buf.check_reader_ages()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing

import anyio
import pytest
import trio
import trio.testing

from _settle import all_blocked
from quiesce import (
    BufferClosed,
    EditPlan,
    Entry,
    Escalation,
    EscalationKind,
    Kind,
    LogRecord,
    Policy,
    Prune,
    Refusal,
    RuntimeBuffer,
    Status,
    open_buffer,
)


class FlakySink:
    """An in-memory ``LogSink`` that fails while ``fail`` is set."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.fail = False

    def load(self) -> Sequence[LogRecord]:
        return list(self.records)

    def write(self, records: Sequence[LogRecord]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.records.extend(records)

    def close(self) -> None:
        pass


def step(entry_id: str, *refs: str) -> Entry:
    return Entry(entry_id, Kind.REASONING, f"step {entry_id}", refs)


def constraint(entry_id: str) -> Entry:
    return Entry(entry_id, Kind.CONSTRAINT, f"do not modify files under /etc ({entry_id})")


def refused_plan(target: str) -> EditPlan:
    """A plan the policy refuses: it prunes an immutable constraint."""
    return EditPlan([Prune(target)], reason="low relevance", actor="pruner")


def escalation_records(buf: RuntimeBuffer) -> list[str]:
    """The escalation kind of every log record that escalated, in order."""
    out = []
    for r in buf.log:
        if r.op == "escalate":
            out.append(r.outcome)
        elif r.op == "edit" and r.outcome == "refused":
            out.append(r.detail["escalation"])
    return out


async def collect(buf: RuntimeBuffer, n: int, out: list[Escalation]) -> None:
    """Receive ``n`` escalations into ``out``."""
    stream: AsyncIterator[Escalation]
    async with aclosing(buf.escalations()) as stream:  # type: ignore[type-var]
        async for esc in stream:
            out.append(esc)
            if len(out) == n:
                return


@pytest.mark.anyio
class TestRefusedEdit:
    async def test_a_refused_edit_is_escalated_and_logged(self) -> None:
        async with open_buffer() as buf:
            buf.append(constraint("c1"))
            got: list[Escalation] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, buf, 1, got)
                await all_blocked()
                plan = refused_plan("c1")
                report = buf.edit(plan)
                assert not report.applied
                assert report.refusals == (Refusal.IMMUTABLE,)
            assert len(got) == 1
            esc = got[0]
            assert esc is report.escalation
            assert esc.kind is EscalationKind.REFUSED_EDIT
            assert esc.plan is plan
            assert esc.refusals == (Refusal.IMMUTABLE,)
            assert escalation_records(buf) == ["refused_edit"]
            assert buf.stats().escalations == 1
            assert buf.stats().escalations_dropped == 0
            assert [e.id for e in buf.head()] == ["c1"]  # window unchanged
            buf._check(expect_no_pins=True)

    async def test_escalations_from_a_worker_thread_are_delivered(self) -> None:
        async with open_buffer() as buf:
            buf.append(constraint("c1"))
            got: list[Escalation] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, buf, 3, got)
                await all_blocked()
                for _ in range(3):
                    await anyio.to_thread.run_sync(buf.edit, refused_plan("c1"))
            assert [e.kind for e in got] == [EscalationKind.REFUSED_EDIT] * 3
            assert buf.stats().escalations_dropped == 0

    async def test_escalations_raised_before_a_consumer_are_kept(self) -> None:
        """The stream buffers ``escalation_buffer`` escalations for a consumer
        that comes later."""
        async with open_buffer(escalation_buffer=10) as buf:
            buf.append(constraint("c1"))
            buf.edit(refused_plan("c1"))
            buf.edit(refused_plan("c1"))
            got: list[Escalation] = []
            await collect(buf, 2, got)
            assert len(got) == 2


@pytest.mark.anyio
class TestUndeliverable:
    async def test_a_full_stream_drops_and_counts_but_the_log_keeps_it(self) -> None:
        """No consumer, a stream of one: the second escalation cannot be
        delivered. It is counted in ``escalations_dropped`` and is still in
        ``buf.log``; nothing blocks."""
        async with open_buffer(escalation_buffer=1) as buf:
            buf.append(constraint("c1"))
            first = buf.edit(refused_plan("c1"))
            second = buf.edit(refused_plan("c1"))
            assert not first.applied
            assert not second.applied
            stats = buf.stats()
            assert stats.escalations == 2
            assert stats.escalations_dropped == 1
            assert escalation_records(buf) == ["refused_edit", "refused_edit"]
            got: list[Escalation] = []
            await collect(buf, 1, got)
            assert got == [first.escalation]  # the one that fit

    async def test_dropped_from_a_worker_thread_is_counted(self) -> None:
        async with open_buffer(escalation_buffer=1) as buf:
            buf.append(constraint("c1"))
            for _ in range(3):
                await anyio.to_thread.run_sync(buf.edit, refused_plan("c1"))
            await all_blocked()
            assert buf.stats().escalations == 3
            assert buf.stats().escalations_dropped == 2
            assert escalation_records(buf) == ["refused_edit"] * 3

    async def test_a_zero_buffer_without_consumer_drops_everything(self) -> None:
        async with open_buffer(escalation_buffer=0) as buf:
            buf.append(constraint("c1"))
            buf.edit(refused_plan("c1"))
            assert buf.stats().escalations_dropped == 1
            assert len(escalation_records(buf)) == 1


@pytest.mark.anyio
class TestStream:
    async def test_the_stream_ends_when_open_buffer_exits(self) -> None:
        ended = anyio.Event()
        got: list[Escalation] = []

        async def consumer(buf: RuntimeBuffer) -> None:
            async for esc in buf.escalations():
                got.append(esc)
            ended.set()

        async with anyio.create_task_group() as tg:
            async with open_buffer() as buf:
                buf.append(constraint("c1"))
                tg.start_soon(consumer, buf)
                await all_blocked()
                buf.edit(refused_plan("c1"))
                await all_blocked()
                assert len(got) == 1
                assert not ended.is_set()
            await ended.wait()

    async def test_escalations_needs_a_running_buffer(self) -> None:
        async with open_buffer() as buf:
            pass
        with pytest.raises(
            BufferClosed, match=r"^escalations\(\) needs a running buffer \(inside open_buffer\)$"
        ):
            async for _ in buf.escalations():
                pass  # pragma: no cover


@pytest.mark.anyio
class TestBacklog:
    async def test_backlog_over_its_bound_is_escalated_once(self) -> None:
        """Seed 000's residual failure made visible: marked entries pile up
        behind a reader faster than grace periods drain them."""
        async with open_buffer(policy=Policy(max_backlog=3)) as buf:
            for i in range(6):
                buf.append(step(f"e{i}"))
            got: list[Escalation] = []
            pinned, leave = anyio.Event(), anyio.Event()

            async def reader() -> None:
                with buf.snapshot():
                    pinned.set()
                    await leave.wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, buf, 1, got)
                tg.start_soon(reader)
                await pinned.wait()
                for i in range(3):
                    assert buf.prune([f"e{i}"], reason="stale")[f"e{i}"].status is Status.DEFERRED
                await all_blocked()
                assert got == []  # at the bound, not over it
                buf.prune(["e3"], reason="stale")
                buf.prune(["e4"], reason="stale")  # still over: no second alarm
                await all_blocked()
                assert len(got) == 1
                leave.set()
            esc = got[0]
            assert esc.kind is EscalationKind.BACKLOG
            assert esc.data["deferred"] == 4
            assert esc.data["bound"] == 3
            assert escalation_records(buf) == ["backlog"]
            # the reader left: the scheduler drains the backlog
            await all_blocked()
            assert len(buf.tombstones) == 5
            assert buf.stats().deferred == 0
            buf._check(expect_no_pins=True)


@pytest.mark.anyio
class TestReaderAgeWithFakeClock:
    async def test_a_long_reader_is_escalated_once(self) -> None:
        now = [0.0]
        async with open_buffer(max_pin_age=10.0, clock=lambda: now[0]) as buf:
            buf.append(step("a"))
            got: list[Escalation] = []
            pinned, leave = anyio.Event(), anyio.Event()

            async def verifier() -> None:
                with buf.snapshot():
                    pinned.set()
                    await leave.wait()

            async with anyio.create_task_group() as tg:
                tg.start_soon(collect, buf, 1, got)
                tg.start_soon(verifier, name="verifier")
                await pinned.wait()
                # a pass stamps the readers pinned since the last one (here
                # at 0.0: the alarm task's own passes sleep on real time)
                assert buf.check_reader_ages() == []
                buf.prune(["a"], reason="stale")
                now[0] = 10.0
                assert buf.check_reader_ages() == []  # at the alarm age, not past it
                assert buf.stats().oldest_pin_age == 10.0
                now[0] = 12.5
                (esc,) = buf.check_reader_ages()
                now[0] = 60.0
                assert buf.check_reader_ages() == []  # once per reader
                await all_blocked()
                assert got == [esc]
                leave.set()
            assert esc.kind is EscalationKind.READER_PINNED
            assert esc.data["task"] == "verifier"
            assert esc.data["age"] == 12.5
            assert esc.data["holding_back"] == 1
            assert esc.detail == (
                "reader 'verifier' has pinned version 1 for 12.5s (alarm at 10s), "
                "holding back 1 removal(s)"
            )
            assert escalation_records(buf) == ["reader_pinned"]
            await all_blocked()
            assert "a" in buf.tombstones
            buf._check(expect_no_pins=True)

    async def test_every_long_reader_is_escalated(self) -> None:
        now = [0.0]
        async with open_buffer(max_pin_age=1.0, clock=lambda: now[0]) as buf:
            pinned = 0
            all_pinned, leave = anyio.Event(), anyio.Event()

            async def reader() -> None:
                nonlocal pinned
                with buf.snapshot():
                    pinned += 1
                    if pinned == 3:
                        all_pinned.set()
                    await leave.wait()

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(reader)
                await all_pinned.wait()
                assert buf.check_reader_ages() == []  # stamps their pin time
                now[0] = 5.0
                assert len(buf.check_reader_ages()) == 3
                leave.set()
            # a new reader is a new pin: measured from its own start
            with buf.snapshot():
                assert buf.check_reader_ages() == []
                now[0] = 6.5
                assert len(buf.check_reader_ages()) == 1

    async def test_a_new_reader_is_escalated_after_an_old_one_is_freed(self) -> None:
        """Once per reader means once per snapshot, not per ``id()``: a new
        snapshot that reuses a freed one's address is still escalated."""
        now = [0.0]
        async with open_buffer(max_pin_age=1.0, clock=lambda: now[0]) as buf:
            for i in range(50):
                with buf.snapshot():
                    assert buf.check_reader_ages() == []  # stamps its pin time
                    now[0] += 2.0
                    assert len(buf.check_reader_ages()) == 1, f"reader {i} not escalated"
            assert buf.stats().escalations == 50

    async def test_no_alarm_when_disabled(self) -> None:
        now = [0.0]
        async with open_buffer(max_pin_age=None, clock=lambda: now[0]) as buf:
            with buf.snapshot():
                now[0] = 1e6
                assert buf.check_reader_ages() == []


class TestReaderAgeWithAutojumpClock:
    @pytest.mark.trio
    async def test_the_alarm_task_escalates_a_long_reader(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """In virtual time: the alarm task (which sleeps max_pin_age/2 on the
        loop's clock) escalates a reader that holds its pin across a long
        model call, by default clock — pin ages are measured on the same
        (virtual) clock the alarm sleeps on."""
        async with open_buffer(max_pin_age=10.0) as buf:
            buf.append(step("a"))
            got: list[Escalation] = []
            start = trio.current_time()

            async def planner() -> None:
                with buf.snapshot():
                    await trio.sleep(100)  # a very slow model call

            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect, buf, 1, got)
                nursery.start_soon(planner, name="planner")
                await trio.testing.wait_all_tasks_blocked()
                buf.prune(["a"], reason="stale")
            assert trio.current_time() - start >= 100
            (esc,) = got
            assert esc.kind is EscalationKind.READER_PINNED
            assert esc.data["task"] == "planner"
            assert 10.0 < esc.data["age"] <= 15.0 + 1e-6  # alarm ticks every 5 s
            assert esc.data["holding_back"] == 1
            await trio.testing.wait_all_tasks_blocked()
            assert "a" in buf.tombstones
            buf._check(expect_no_pins=True)

    @pytest.mark.trio
    async def test_a_short_reader_is_never_escalated(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        async with open_buffer(max_pin_age=10.0) as buf:
            for _ in range(20):
                with buf.snapshot():
                    await trio.sleep(9)
            await trio.sleep(50)
            assert buf.stats().escalations == 0

    @pytest.mark.trio
    async def test_a_failed_log_is_retried_by_the_scheduler(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """The scheduler's batch fails to write; the readers are gone, so no
        unpin will wake it again: it retries after ``flush_interval``."""
        sink = FlakySink()
        async with open_buffer(log=sink, flush_interval=1.0, max_pin_age=None) as buf:
            buf.append(step("a"))
            with buf.snapshot():
                buf.prune(["a"], reason="stale")
                sink.fail = True
            while not buf.stats().log_failing:
                await trio.sleep(0.1)
            sink.fail = False
            # Virtual time jumps while worker threads run, so bound the wait
            # by polls (each a tenth of a retry interval), not by a deadline.
            for _ in range(10_000):
                if "a" in buf.tombstones:
                    break
                await trio.sleep(0.1)
            assert "a" in buf.tombstones, "the scheduler never retried"
            assert not buf.stats().log_failing
            buf._check(expect_no_pins=True)
