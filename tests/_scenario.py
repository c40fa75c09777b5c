"""The choreography every framework's end-to-end test shares.

One conversation: the model calls ``lookup("a")`` (``c1``) and ``lookup("b")``
(``c2``) in parallel; in the second run a pruner removes ``c1`` and its result
while a reader pinned before the run holds them (so the removal is deferred);
the model then re-runs ``lookup("a")`` as ``c3``, whose tool body lets the
reader go and waits until the deferred removal is applied — so the next
request shows it gone. Events order the tasks: no sleeps, no timing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from quiesce import EditPlan, Entry, Prune, Snapshot


def integration_c1(e: Entry) -> bool:
    """Call ``c1`` or its result, as the integrations' store names them."""
    return "c1" in (e.meta.get("call_id"), e.meta.get("result_of"))


class PruneCall:
    """A model-driven pruner stand-in: once armed, proposes removing the
    entries ``match`` picks (call ``c1`` and its result)."""

    def __init__(self, match: Callable[[Entry], bool] = integration_c1) -> None:
        self.armed = False
        self.match = match

    async def __call__(self, snap: Snapshot, /) -> EditPlan | None:
        if not self.armed:
            return None
        ids = [e.id for e in snap if self.match(e)]
        if not ids or any(snap.is_stale(i) for i in ids):
            return None
        return EditPlan([Prune(i) for i in ids], reason="lookup a is superseded", actor="test")


class Scenario:
    """The tool body and the pinned reader of the shared conversation."""

    def __init__(self, match: Callable[[Entry], bool] = integration_c1) -> None:
        self.buf: Any = None
        self.lookups = 0
        self.release = anyio.Event()
        self.unpinned = anyio.Event()
        self.seen_in_pin: list[bool] = []
        self.pruner = PruneCall(match)

    async def lookup(self, q: str) -> str:
        """The tool: the third lookup (the re-run of ``a``) lets the pinned
        reader go and waits for the deferred removal to be applied."""
        self.lookups += 1
        if q == "a" and self.lookups == 3:
            self.release.set()
            await self.unpinned.wait()
            await self.buf.quiesce()
        return f"result for {q}"

    async def run_while_pinned(self, run: Callable[[], Awaitable[Any]]) -> Any:
        """Pin a snapshot, arm the pruner, await ``run()`` and return its
        result; the reader checks that its pinned version still holds ``c1``
        after the removal was requested."""
        pinned = anyio.Event()
        result: list[Any] = []

        async def pinned_reader() -> None:
            with self.buf.snapshot() as snap:
                pinned.set()
                await self.release.wait()
                self.seen_in_pin.append(any(self.pruner.match(e) for e in snap))
            self.unpinned.set()

        self.pruner.armed = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(pinned_reader)
            await pinned.wait()
            result.append(await run())
        assert self.seen_in_pin == [True]
        return result[0]
