"""tests/_settle.py's ``all_blocked()``, on asyncio and trio: it returns only
once every other task waits on something (not while one can still run), and
a task waiting for a worker thread counts as waiting."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
import pytest

from _settle import all_blocked

pytestmark = pytest.mark.anyio


async def test_it_waits_for_a_task_that_stays_runnable(anyio_backend: str) -> None:
    """A task that yields 200 times before it blocks has blocked (and done
    everything before that) when ``all_blocked()`` returns."""
    steps: list[int] = []
    release = anyio.Event()

    async def busy() -> None:
        for i in range(200):
            steps.append(i)
            await anyio.sleep(0)
        await release.wait()
        steps.append(-1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(busy)
        await all_blocked()
        assert steps == list(range(200))
        release.set()
        await all_blocked()
        assert steps[-1] == -1


async def test_a_task_waiting_for_a_thread_is_blocked(anyio_backend: str) -> None:
    """A task in ``to_thread.run_sync`` whose thread waits is blocked: the call
    returns while the thread still waits (no hang), and again after the
    thread's result reached the task."""
    go = threading.Event()
    done: list[str] = []

    async def in_thread() -> None:
        done.append(await anyio.to_thread.run_sync(lambda: go.wait(30) and "thread"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_thread)
        await all_blocked()
        assert done == []
        go.set()
        with anyio.fail_after(30):
            while not done:
                await anyio.sleep(0.01)
        await all_blocked()
        assert done == ["thread"]
