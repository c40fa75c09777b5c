"""The demo's conductor: lockstep turns over real coroutines.

What it keeps true: exactly one agent runs at a time, agents due in the
same turn run in their fixed ``order``, and the conductor only moves on once
the running agent has parked again (or ended). So the same seed gives the
same interleaving on asyncio and on trio; the only waiting that depends on
the clock is one ``anyio.sleep(tick)`` between turns.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc

__all__ = ["Conductor"]


class Conductor:
    """Runs agents one step at a time, in (turn, order) order.

    An agent *parks* with :meth:`until`; the conductor wakes the next due
    agent and waits until it parks again (or ends), then lets the buffer
    settle and the checker look. Between turns it sleeps one ``tick``.
    """

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.turn = 0
        self._queue: list[tuple[int, int, int, str, anyio.Event]] = []
        self._seq = itertools.count()
        self._parked: anyio.Event | None = None

    def _register(self, turn: int, order: int, name: str) -> anyio.Event:
        ev = anyio.Event()
        heapq.heappush(self._queue, (max(turn, self.turn), order, next(self._seq), name, ev))
        return ev

    def _park(self) -> None:
        if self._parked is not None:
            self._parked.set()

    async def until(self, turn: int, order: int, name: str) -> int:
        """Park until ``turn``; returns the current turn when woken."""
        ev = self._register(turn, order, name)
        self._park()
        await ev.wait()
        return self.turn

    async def spawn(
        self,
        name: str,
        order: int,
        first: int,
        body: Callable[[], Awaitable[None]],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        ev = self._register(first, order, name)
        task_status.started()
        try:
            await ev.wait()
            await body()
        finally:
            self._park()

    async def run(
        self,
        turns: int,
        after_step: Callable[[str], Awaitable[None]],
        after_turn: Callable[[int], None],
    ) -> None:
        for t in range(1, turns + 1):
            self.turn = t
            while self._queue and self._queue[0][0] <= t:
                _t, _o, _s, name, ev = heapq.heappop(self._queue)
                self._parked = anyio.Event()
                ev.set()
                await self._parked.wait()
                self._parked = None
                await after_step(name)
            after_turn(t)
            await anyio.sleep(self.tick)
