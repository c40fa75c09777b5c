"""The pin fast path's task probe (``quiesce._core.tasks.current_task``)
answers exactly what ``asyncio.current_task()`` / ``trio.lowlevel.current_task()``
/ ``threading.current_thread()`` would, whatever loop ran before in the thread.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from quiesce._core.tasks import current_task


async def _probe_in_asyncio() -> list[bool]:
    """Inside a task, across awaits, and from a plain loop callback (no task)."""
    out = []
    for _ in range(3):
        out.append(current_task() is asyncio.current_task())
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[object] = loop.create_future()
    loop.call_soon(lambda: fut.set_result(current_task()))
    out.append(await fut is threading.current_thread())
    child = asyncio.create_task(asyncio.sleep(0, result=None))
    await child
    out.append(current_task() is asyncio.current_task())
    return out


class TestAsyncio:
    def test_the_running_task_across_awaits_and_loops(self) -> None:
        """Each of several successive loops in one thread gets its own task."""
        for _ in range(3):
            assert asyncio.run(_probe_in_asyncio()) == [True] * 5

    def test_the_thread_once_the_loop_has_stopped(self) -> None:
        """After a loop ends, the thread itself holds the pin."""
        asyncio.run(_probe_in_asyncio())
        assert current_task() is threading.current_thread()

    def test_each_thread_sees_its_own_loop(self) -> None:
        """Loops running at the same time in two threads do not mix up tasks."""
        results: list[list[bool]] = []
        barrier = threading.Barrier(2)

        async def both() -> list[bool]:
            await asyncio.to_thread(barrier.wait)
            return await _probe_in_asyncio()

        def worker() -> None:
            results.append(asyncio.run(both()))

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [[True] * 5, [True] * 5]

    def test_a_loop_moved_to_another_thread(self) -> None:
        """A loop run first here, then in another thread while this thread
        probes, is not taken for this thread's loop."""
        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(_probe_in_asyncio()) == [True] * 5
            started, release = threading.Event(), threading.Event()

            async def hold() -> None:
                started.set()
                await asyncio.to_thread(release.wait)

            t = threading.Thread(target=loop.run_until_complete, args=(hold(),))
            t.start()
            started.wait()
            try:
                assert current_task() is threading.current_thread()
            finally:
                release.set()
                t.join()
        finally:
            loop.close()

    def test_one_loop_run_again_in_this_thread(self) -> None:
        """A loop run, stopped and run again here: each run's tasks are found,
        and the probe's cache follows the new run (it is tested by the
        identity of the ident object each run stores), so pins in the second
        run take the cached path again; the same holds for a pin itself."""
        from quiesce import Buffer
        from quiesce._core import tasks

        buf = Buffer()
        loop = asyncio.new_event_loop()
        try:
            for _ in range(3):

                async def run() -> list[bool]:
                    out = await _probe_in_asyncio()
                    cached = tasks._loop_cache.loop
                    out.append(cached is not None and cached[0] is asyncio.get_running_loop())
                    out.append(cached is not None and cached[1] is loop._thread_id)  # type: ignore[attr-defined]
                    with buf.snapshot():
                        out.append(buf.stats().readers[0].task == asyncio.current_task().get_name())  # type: ignore[union-attr]
                    return out

                assert loop.run_until_complete(run()) == [True] * 8
            assert current_task() is threading.current_thread()  # stopped: the thread
        finally:
            loop.close()


def test_trio_task() -> None:
    """In trio (with asyncio imported and having run here), the trio task."""
    trio = pytest.importorskip("trio")
    asyncio.run(_probe_in_asyncio())

    async def probe() -> bool:
        first = current_task() is trio.lowlevel.current_task()
        await trio.sleep(0)
        return first and current_task() is trio.lowlevel.current_task()

    assert trio.run(probe)


def test_plain_thread() -> None:
    """Outside any event loop, the calling thread."""
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(current_task()))
    t.start()
    t.join()
    assert seen == [t]


def test_trio_tasks_and_its_worker_threads() -> None:
    """Each trio task gets itself (children too, across checkpoints); a trio
    worker thread gets the thread, not the task that started it; after the
    run, the thread again (trio's per-thread run context is read directly)."""
    trio = pytest.importorskip("trio")
    seen: list[bool] = []

    async def child() -> None:
        for _ in range(2):
            seen.append(current_task() is trio.lowlevel.current_task())
            await trio.sleep(0)

    def in_worker() -> object:
        return current_task()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            nursery.start_soon(child)
        worker_saw = await trio.to_thread.run_sync(in_worker)
        seen.append(isinstance(worker_saw, threading.Thread))
        seen.append(worker_saw is not threading.current_thread())
        seen.append(current_task() is trio.lowlevel.current_task())

    trio.run(main)
    assert seen == [True] * 7
    assert current_task() is threading.current_thread()


def test_a_thread_threading_does_not_know() -> None:
    """A thread started below ``threading`` (``_thread.start_new_thread``)
    gets what ``threading.current_thread()`` gives it (a dummy thread)."""
    import _thread

    seen: list[object] = []
    done = threading.Event()

    def run() -> None:
        seen.append(current_task())
        seen.append(threading.current_thread())
        done.set()

    _thread.start_new_thread(run, ())
    assert done.wait(10)
    assert seen[0] is seen[1]


def test_task_name_by_type() -> None:
    """``task_name`` gives what the general probe gives, for every kind of
    holder (found once per type): asyncio's ``get_name()``, a trio task's or a
    thread's ``name``, else ``repr``; a renamed task is named afresh."""
    from quiesce._core.tasks import task_name

    trio = pytest.importorskip("trio")

    async def aio() -> list[str]:
        task = asyncio.current_task()
        assert task is not None
        task.set_name("first")
        out = [task_name(task)]
        task.set_name("second")
        return [*out, task_name(task)]

    assert asyncio.run(aio()) == ["first", "second"]

    async def in_trio() -> str:
        return task_name(trio.lowlevel.current_task())

    assert trio.run(in_trio).endswith("in_trio")
    t = threading.Thread(name="worker-7")
    assert task_name(t) == "worker-7"

    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    class Slotted:
        __slots__ = ("name",)

    assert task_name(Odd()) == "<odd>"
    s = Slotted()
    assert task_name(s).startswith("<")  # an unset slot: the repr
    s.name = "named"
    assert task_name(s) == "named"


def _pin_holder(buf: object) -> object:
    """What a pin of ``buf`` taken here records as its holder (the pin fast
    path's inlined probe, not :func:`current_task`)."""
    from quiesce import Buffer
    from quiesce._core.pins import reader_of

    assert isinstance(buf, Buffer)
    with buf.snapshot() as snap:
        return reader_of(snap)[0]


def test_pins_on_trio_cache_the_trio_entry() -> None:
    """On trio (asyncio having run here first, as in a process that uses
    both), every pin names the trio task holding it, once the thread's trio
    entry is cached too (the second pin on); two tasks of one nursery across
    checkpoints each get themselves, a worker thread gets the thread; after
    the run the entry answers nothing and is forgotten: a pin names the
    thread, and an asyncio loop run next is found again."""
    trio = pytest.importorskip("trio")
    from quiesce import Buffer
    from quiesce._core import tasks

    buf = Buffer()
    asyncio.run(_probe_in_asyncio())
    seen: list[bool] = []
    cached: list[bool] = []

    async def child() -> None:
        for _ in range(3):
            seen.append(_pin_holder(buf) is trio.lowlevel.current_task())
            entry = tasks._loop_cache.loop
            cached.append(entry is not None and type(entry[0]) is tasks._TrioRun)
            await trio.sleep(0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
            nursery.start_soon(child)
        worker = await trio.to_thread.run_sync(lambda: _pin_holder(buf))
        seen.append(isinstance(worker, threading.Thread))
        seen.append(worker is not threading.current_thread())
        seen.append(_pin_holder(buf) is trio.lowlevel.current_task())

    trio.run(main)
    assert seen == [True] * 9
    assert cached[1:] == [True] * 5  # the first pin found a stopped loop cached
    assert _pin_holder(buf) is threading.current_thread()
    assert tasks._loop_cache.loop is None
    assert asyncio.run(_probe_in_asyncio()) == [True] * 5

    async def in_asyncio() -> bool:
        return _pin_holder(buf) is asyncio.current_task()

    assert asyncio.run(in_asyncio())


def test_trio_guest_run_inside_asyncio() -> None:
    """trio in guest mode (its steps run in asyncio callbacks): pins from
    trio tasks name the trio task and pins from asyncio tasks the asyncio
    task, interleaved in one thread, whichever entry the cache holds."""
    trio = pytest.importorskip("trio")
    from quiesce import Buffer

    buf = Buffer()
    seen: list[bool] = []

    async def trio_main() -> None:
        for _ in range(4):
            seen.append(_pin_holder(buf) is trio.lowlevel.current_task())
            await trio.sleep(0)

    async def asyncio_main() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[object] = loop.create_future()

        def run_sync_soon_threadsafe(fn: Any) -> None:
            loop.call_soon_threadsafe(fn)

        trio.lowlevel.start_guest_run(
            trio_main,
            run_sync_soon_threadsafe=run_sync_soon_threadsafe,
            done_callback=lambda outcome: done.set_result(outcome),
        )
        while not done.done():
            seen.append(_pin_holder(buf) is asyncio.current_task())
            await asyncio.sleep(0)
        (await done).unwrap()

    asyncio.run(asyncio_main())
    assert len(seen) > 4 and all(seen)
