"""``all_blocked()``: :func:`anyio.wait_all_tasks_blocked` without its sleeps.

The guarantee is anyio's: when it returns, every other task of the event loop
is blocked (waits on something not yet done). On trio it *is* anyio's
(``trio.testing.wait_all_tasks_blocked``, which never sleeps). On asyncio
anyio checks every task and, while one is runnable, sleeps 0.1 s before it
looks again; here the wait is ``asyncio.sleep(0)``, one pass of the loop,
which runs the runnable tasks just as well. The check is the same
(``Task._fut_waiter`` is None or done: the task can run), so it returns in
the same states, only without the idle tenths of a second (14 of them in the
runtime and simulation tests).

Cost: O(tasks) per pass; it passes as often as some task stays runnable (a
task that never blocks keeps it waiting forever, as anyio's does). After
cancellation: it raises the cancellation at its next ``sleep(0)`` and
changes nothing.
"""

from __future__ import annotations

import asyncio

import anyio


async def all_blocked() -> None:
    """Return once every other task of the running loop is blocked."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio (no asyncio loop runs in this thread)
        await anyio.wait_all_tasks_blocked()
        return
    await asyncio.sleep(0)
    this_task = asyncio.current_task()
    while True:
        for task in asyncio.all_tasks():
            if task is this_task:
                continue
            waiter = task._fut_waiter  # type: ignore[attr-defined]
            if waiter is None or waiter.done():
                await asyncio.sleep(0)
                break
        else:
            return
