"""``aprune`` / ``aedit`` / ``aflush``: the sync write paths, awaited without
blocking the event loop on a disk. Every test runs on asyncio and on trio."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    InvalidType,
    Kind,
    LogRecord,
    Prune,
    Refusal,
    SQLiteLog,
    Status,
    open_buffer,
)

pytestmark = pytest.mark.anyio


def fill(buf: Buffer) -> None:
    buf.append(Entry("c1", Kind.TOOL_CALL, "lookup a", key="lookup a"))
    buf.append(Entry("r1", Kind.TOOL_OUTPUT, "result a", refs=("c1",)))
    buf.append(Entry("i1", Kind.INSTRUCTION, "be terse"))


class GatedLog(SQLiteLog):
    """A SQLite log whose writes wait for the test's go-ahead (in the worker thread)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.go = threading.Event()
        self.gated = False

    def write(self, records: Sequence[LogRecord]) -> None:
        if self.gated:
            self.entered.set()
            self.go.wait(10)
        super().write(records)


async def test_aprune_decides_like_prune_and_is_durable(tmp_path: Path) -> None:
    """Same outcomes as ``prune``; the tombstones survive a reopen."""
    path = tmp_path / "a.sqlite"
    async with open_buffer(log=SQLiteLog(path)) as buf:
        fill(buf)
        report = await buf.aprune(["c1", "r1", "i1"], reason="old", actor="t")
        assert report["c1"].status is Status.PRUNED
        assert report["r1"].status is Status.PRUNED
        assert report["i1"].status is Status.UNCHANGED
    buf.sink.close()  # one writer per log file (LogLocked): close before reopening
    reopened = Buffer(log=SQLiteLog(path))
    assert set(reopened.tombstones) == {"c1", "r1"}


async def test_aprune_defers_behind_a_pinned_reader() -> None:
    """A reader pinned before the request holds the removal until it leaves."""
    async with open_buffer() as buf:
        fill(buf)
        with buf.snapshot() as snap:
            report = await buf.aprune(["c1", "r1"], reason="old")
            assert report["c1"].status is Status.DEFERRED
            assert snap["c1"].body == "lookup a"
        await buf.quiesce()
        assert set(buf.tombstones) == {"c1", "r1"}


async def test_aprune_refuses_a_bare_str() -> None:
    """A bare ``str`` is refused before any thread starts; nothing changes."""
    async with open_buffer() as buf:
        fill(buf)
        version = buf.version
        with pytest.raises(InvalidType, match=r"^prune takes a collection of ids, not a bare str$"):
            await buf.aprune("c1", reason="old")  # type: ignore[arg-type]
        assert buf.version == version


async def test_aedit_applies_or_refuses_whole(tmp_path: Path) -> None:
    """An allowed plan is applied; a plan touching an instruction is refused as a whole."""
    async with open_buffer(log=SQLiteLog(tmp_path / "e.sqlite")) as buf:
        fill(buf)
        refused = await buf.aedit(EditPlan([Prune("r1"), Prune("i1")], reason="x"))
        assert not refused.applied and Refusal.IMMUTABLE in refused.refusals
        assert "r1" not in buf.tombstones
        applied = await buf.aedit(EditPlan([Prune("c1"), Prune("r1")], reason="x"))
        assert applied.applied
        await buf.quiesce()
        assert set(buf.tombstones) == {"c1", "r1"}
        await buf.aflush()
        assert buf.pending_records == 0


async def test_cancelled_aprune_still_completes_whole(tmp_path: Path) -> None:
    """Cancelling the caller while the durable part runs in its worker thread
    does not split the request: both removals land, then the cancellation
    is delivered."""
    log = GatedLog(tmp_path / "c.sqlite")
    async with open_buffer(log=log, flush_interval=60) as buf:
        fill(buf)
        await buf.aflush()
        log.gated = True
        reached_end = returned = False
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def cancel_when_inside() -> None:
                    await anyio.to_thread.run_sync(log.entered.wait)
                    scope.cancel()
                    log.go.set()

                tg.start_soon(cancel_when_inside)
                report = await buf.aprune(["c1", "r1"], reason="old")
                returned = report["c1"].status is Status.PRUNED
                await anyio.lowlevel.checkpoint()
                reached_end = True
        assert scope.cancelled_caught and returned and not reached_end
        log.gated = False
        assert set(buf.tombstones) == {"c1", "r1"}
