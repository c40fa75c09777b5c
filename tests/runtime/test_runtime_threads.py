"""Worker threads under the runtime: marks, appends and prunes from
``anyio.to_thread.run_sync`` lose nothing, and an unpin or a stage in a thread
wakes the barrier scheduler (through the backend's thread-safe call) so the
removal is applied without anyone calling ``quiesce()``.

Threads are ordered with ``threading.Event``s; the loop side with anyio events
and ``all_blocked()`` (tests/_settle.py, ``anyio.wait_all_tasks_blocked()``'s
guarantee). A thread-safe wake is queued before the
worker thread's own completion is reported to the loop, so once the
``to_thread`` call has returned and every task is blocked, the scheduler has
seen the wake.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from _settle import all_blocked
from quiesce import Entry, Kind, Status, open_buffer

pytestmark = pytest.mark.anyio

THREADS = 4


def step(entry_id: str, *refs: str) -> Entry:
    return Entry(entry_id, Kind.REASONING, f"step {entry_id}", refs)


class TestWorkerThreads:
    async def test_marks_and_prunes_from_four_threads_lose_nothing(self) -> None:
        """Four threads append, mark and prune their own entries while a
        coroutine holds a pin; nothing is lost, every prune is deferred, and
        the scheduler applies them all once the reader leaves."""
        per_thread = 60
        async with open_buffer() as buf:
            buf.append(step("root"))
            pinned, leave = anyio.Event(), anyio.Event()

            async def reader() -> None:
                with buf.snapshot() as snap:
                    pinned.set()
                    await leave.wait()
                    assert [e.id for e in snap] == ["root"]

            outcomes: dict[str, Status] = {}

            def worker(t: int) -> None:
                for i in range(per_thread):
                    eid = f"t{t}-{i}"
                    buf.append(step(eid))
                    if i % 3 == 0:
                        buf.mark_stale(eid, "superseded")
                    elif i % 3 == 1:
                        outcomes.update(
                            (k, o.status) for k, o in buf.prune([eid], reason="stale").items()
                        )

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await pinned.wait()
                async with anyio.create_task_group() as workers:
                    for t in range(THREADS):
                        workers.start_soon(anyio.to_thread.run_sync, worker, t)
                pruned = {f"t{t}-{i}" for t in range(THREADS) for i in range(1, per_thread, 3)}
                marked = {f"t{t}-{i}" for t in range(THREADS) for i in range(0, per_thread, 3)}
                assert set(outcomes) == pruned
                assert set(outcomes.values()) == {Status.DEFERRED}
                await all_blocked()
                assert set(buf.staged()) == pruned  # the reader holds them back
                buf._check()
                leave.set()
            await all_blocked()
            head = buf.head()
            assert set(buf.tombstones) == pruned
            assert buf.staged() == {}
            assert set(head.marks) == marked
            assert len(head) == 1 + THREADS * per_thread - len(pruned)
            assert sum(1 for r in buf.log if r.op == "mark") == len(marked)
            assert sum(1 for r in buf.log if r.op == "append") == 1 + THREADS * per_thread
            buf._check(expect_no_pins=True)

    async def test_an_unpin_in_a_thread_wakes_the_scheduler(self) -> None:
        """The last blocking reader is a worker thread: its unpin hands the
        wake-up to the loop, and the scheduler applies the removal."""
        async with open_buffer() as buf:
            buf.append(step("a"))
            pinned, leave = threading.Event(), threading.Event()

            def thread_reader() -> None:
                with buf.snapshot() as snap:
                    pinned.set()
                    leave.wait()
                    assert "a" in snap

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, thread_reader)
                await anyio.to_thread.run_sync(pinned.wait)
                assert buf.prune(["a"], reason="stale")["a"].status is Status.DEFERRED
                await all_blocked()
                assert "a" in buf.head().live
                wakeups = buf.wakeups
                leave.set()
            await all_blocked()
            assert "a" in buf.tombstones
            assert buf.wakeups > wakeups
            buf._check(expect_no_pins=True)

    async def test_a_stage_in_a_thread_wakes_the_scheduler(self) -> None:
        """A thread stages a removal behind its own pin and leaves: both the
        stage and the unpin come from the thread; the scheduler applies it."""
        async with open_buffer() as buf:
            for t in range(THREADS):
                buf.append(step(f"e{t}"))

            def worker(t: int) -> Status:
                with buf.snapshot():
                    return buf.prune([f"e{t}"], reason="stale")[f"e{t}"].status

            statuses: list[Status] = []

            async def run(t: int) -> None:
                statuses.append(await anyio.to_thread.run_sync(worker, t))

            async with anyio.create_task_group() as tg:
                for t in range(THREADS):
                    tg.start_soon(run, t)
            await all_blocked()
            # each prune was deferred by the thread's own pin (or, when another
            # thread's older pin was still there, by that one)
            assert statuses == [Status.DEFERRED] * THREADS
            assert set(buf.tombstones) == {f"e{t}" for t in range(THREADS)}
            assert buf.staged() == {}
            buf._check(expect_no_pins=True)

    async def test_threads_and_coroutine_readers_interleaved(self) -> None:
        """Four threads mark and prune while coroutines keep pinning and
        unpinning overlapping snapshots; in the end every prune is applied
        by the scheduler alone and every mark survives."""
        n = 40
        async with open_buffer() as buf:
            for t in range(THREADS):
                for i in range(n):
                    buf.append(step(f"t{t}-{i}"))
            done = threading.Event()

            def worker(t: int) -> None:
                for i in range(n):
                    eid = f"t{t}-{i}"
                    if i % 2:
                        buf.prune([eid], reason="stale")
                    else:
                        buf.mark_stale(eid, "superseded")

            async def readers() -> None:
                # each reader pins before the previous one leaves
                previous = buf.snapshot().__enter__()
                while not done.is_set():
                    current = buf.snapshot().__enter__()
                    previous.__exit__(None, None, None)
                    previous = current
                    await anyio.lowlevel.checkpoint()
                previous.__exit__(None, None, None)

            async with anyio.create_task_group() as tg:
                tg.start_soon(readers)

                async def workers() -> None:
                    async with anyio.create_task_group() as inner:
                        for t in range(THREADS):
                            inner.start_soon(anyio.to_thread.run_sync, worker, t)
                    done.set()

                tg.start_soon(workers)
            await all_blocked()
            pruned = {f"t{t}-{i}" for t in range(THREADS) for i in range(1, n, 2)}
            marked = {f"t{t}-{i}" for t in range(THREADS) for i in range(0, n, 2)}
            assert set(buf.tombstones) == pruned
            assert buf.staged() == {}
            assert set(buf.head().marks) == marked
            buf._check(expect_no_pins=True)

    async def test_readers_in_threads_see_one_version(self) -> None:
        """A snapshot taken in a thread is as stable as one in a coroutine,
        while the loop marks and prunes."""
        async with open_buffer() as buf:
            for i in range(20):
                buf.append(step(f"e{i}"))
            pinned, leave = threading.Event(), threading.Event()
            seen: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

            def thread_reader() -> None:
                with buf.snapshot() as snap:
                    before = tuple(e.id for e in snap)
                    pinned.set()
                    leave.wait()
                    after = tuple(e.id for e in snap)
                    assert not any(snap.is_stale(i) for i in after)
                    seen.append((before, after))

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, thread_reader)
                await anyio.to_thread.run_sync(pinned.wait)
                for i in range(0, 20, 2):
                    buf.mark_stale(f"e{i}", "superseded")
                buf.prune([f"e{i}" for i in range(1, 20, 2)], reason="stale")
                leave.set()
            assert seen[0][0] == seen[0][1] == tuple(f"e{i}" for i in range(20))
            await all_blocked()
            assert len(buf.tombstones) == 10
            buf._check(expect_no_pins=True)
