"""Event-loop stalls: the longest gap between a heartbeat task's wake-ups.

What it keeps true: the heartbeat is an ordinary task on the running loop
(asyncio or trio, through anyio) that sleeps ``interval`` seconds again and
again and records, on each wake-up, the time since the previous one. Nothing
else can make a gap longer than ``interval`` plus the loop's own scheduling
noise except code that holds the loop thread (a synchronous disk flush, a
long CPU-bound step): ``longest - interval`` is the worst stall a coroutine
on that loop suffered while the heartbeat ran. It measures; it never asserts
(speed is a benchmark's business, ``quiesce bench``).

Use it around the work to measure::

    async with heartbeat() as beat:
        await agent.ainvoke(...)
    print(beat.stall_ms)

or ``result, beat = await measure_stall(lambda: agent.ainvoke(...))``.
Cost: one wake-up per ``interval`` on the loop (default 0.5 ms).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.abc

__all__ = ["Heartbeat", "heartbeat", "measure_stall"]

_T = TypeVar("_T")


@dataclass
class Heartbeat:
    """What a heartbeat saw: its ``interval``, the number of wake-ups, the
    longest gap between two of them (seconds, from the start of the
    measurement to the first wake-up included) and when it stopped."""

    interval: float
    beats: int = 0
    longest: float = 0.0
    started: float = 0.0
    stopped: float | None = None
    last: float = 0.0  #: the latest wake-up (or the start)

    @property
    def stall(self) -> float:
        """The worst stall in seconds: the longest gap beyond ``interval``."""
        return max(0.0, self.longest - self.interval)

    @property
    def stall_ms(self) -> float:
        """:attr:`stall` in milliseconds."""
        return self.stall * 1000.0


async def _beat(beat: Heartbeat, task_status: anyio.abc.TaskStatus[None]) -> None:
    clock = time.perf_counter
    beat.last = beat.started = clock()
    task_status.started()
    while True:
        await anyio.sleep(beat.interval)
        now = clock()
        gap = now - beat.last
        if gap > beat.longest:
            beat.longest = gap
        beat.beats += 1
        beat.last = now


@asynccontextmanager
async def heartbeat(interval: float = 0.0005) -> AsyncIterator[Heartbeat]:
    """Run a heartbeat task for the body; yields its :class:`Heartbeat`,
    complete once the body has left. The gap still open when the body ends
    counts too (a stall at the very end is not lost). An exception of the
    body propagates as itself (not in an exception group); cancellation
    stops the heartbeat with the body."""
    if not interval > 0:
        raise ValueError(f"interval must be > 0, got {interval!r}")
    beat = Heartbeat(interval)
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        await tg.start(_beat, beat)
        try:
            yield beat
        except Exception as exc:  # re-raised below, outside the task group
            failure = exc
        finally:
            tg.cancel_scope.cancel()
            beat.stopped = now = time.perf_counter()
            beat.longest = max(beat.longest, now - beat.last)  # the gap still open
    if failure is not None:
        raise failure


async def measure_stall(
    call: Callable[[], Awaitable[_T]], *, interval: float = 0.0005
) -> tuple[_T, Heartbeat]:
    """Await ``call()`` under a :func:`heartbeat`; its result and the heartbeat."""
    async with heartbeat(interval) as beat:
        result = await call()
    return result, beat
