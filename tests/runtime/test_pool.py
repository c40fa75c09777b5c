"""``BufferPool``: one buffer per conversation, opened on first use, closed
with the pool — also when the pool's body is cancelled. (asyncio and trio.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from _settle import all_blocked
from quiesce import (
    Buffer,
    BufferClosed,
    BufferPool,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    PoolStats,
    RuntimeBuffer,
    SQLiteLog,
    open_buffer,
)

pytestmark = pytest.mark.anyio


class Factory:
    """A factory over ``open_buffer`` that records what it opened and closed;
    ``gate`` (if set) holds every opening until it is set."""

    def __init__(self, tmp: Path | None = None) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.gate: anyio.Event | None = None
        self.fail: set[str] = set()
        self.tmp = tmp

    @asynccontextmanager
    async def __call__(self, cid: str) -> AsyncIterator[RuntimeBuffer]:
        self.opened.append(cid)
        if self.gate is not None:
            await self.gate.wait()
        if cid in self.fail:
            raise OSError(f"cannot open {cid}")
        log = SQLiteLog(self.tmp / f"{cid}.db") if self.tmp is not None else None
        try:
            async with open_buffer(log=log) as buf:
                yield buf
        finally:
            if log is not None:
                log.close()  # one writer per file: the test reopens it
            self.closed.append(cid)


def note(text: str) -> Entry:
    return Entry(text, Kind.REASONING, f"note {text}")


class TestOneBufferPerConversation:
    async def test_first_use_opens_later_uses_reuse(self) -> None:
        """``get`` opens a conversation's buffer once and returns that same
        object ever after; different ids get different buffers."""
        factory = Factory()
        async with BufferPool(factory) as pool:
            a = await pool.get("alice")
            b = await pool.get("bob")
            assert await pool.get("alice") is a
            assert a is not b
            assert pool.get_open("alice") is a and pool.get_open("carol") is None
            assert pool.conversations() == ("alice", "bob")
            assert ("alice" in pool, "carol" in pool, len(pool)) == (True, False, 2)
            assert pool.statistics() == PoolStats(open=2, opening=0, closed=False)
        assert factory.opened == ["alice", "bob"]

    async def test_concurrent_first_use_opens_one_buffer(self) -> None:
        """Ten tasks asking for one new id while it opens get one buffer, and
        the factory is entered once."""
        factory = Factory()
        factory.gate = anyio.Event()
        got: list[Buffer] = []
        async with BufferPool(factory) as pool, anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(lambda: _append(got, pool.get("alice")))
            await all_blocked()
            assert pool.statistics() == PoolStats(open=0, opening=1, closed=False)
            factory.gate.set()
        assert factory.opened == ["alice"]
        assert len(got) == 10 and all(b is got[0] for b in got)

    async def test_default_factory_is_an_in_memory_open_buffer(self) -> None:
        """Without a factory each conversation gets a running in-memory buffer."""
        async with BufferPool() as pool:
            buf = await pool.get("alice")
            assert isinstance(buf, RuntimeBuffer) and buf.running and buf.log is not None
            buf.append(note("n1"))
            assert (await pool.get("alice")).version == 1
        assert not buf.running


class TestClosing:
    async def test_exit_closes_every_buffer(self, tmp_path: Path) -> None:
        """Leaving the pool closes each buffer through its own context manager
        (a SQLite log is flushed); ``get`` afterwards raises ``BufferClosed``."""
        factory = Factory(tmp_path)
        async with BufferPool(factory) as pool:
            for cid in ("alice", "bob"):
                (await pool.get(cid)).append(note(cid))
        assert sorted(factory.closed) == ["alice", "bob"]
        assert pool.statistics() == PoolStats(open=0, opening=0, closed=True)
        with pytest.raises(BufferClosed, match=r"^BufferPool: the pool is closed$"):
            await pool.get("alice")
        for cid in ("alice", "bob"):
            reopened = Buffer(log=SQLiteLog(tmp_path / f"{cid}.db"))
            with reopened.snapshot() as snap:
                assert [e.id for e in snap] == [cid]
            reopened.sink.close()

    async def test_cancelled_body_still_closes_every_buffer(self, tmp_path: Path) -> None:
        """Cancelling the pool's body cancels the buffers' tasks, and each
        buffer's context manager still exits (its log flushed under a shield):
        no buffer is left open, every change made before is durable."""
        factory = Factory(tmp_path)
        with anyio.CancelScope() as scope:
            async with BufferPool(factory) as pool:
                for cid in ("alice", "bob"):
                    (await pool.get(cid)).append(note(cid))
                scope.cancel()
                await anyio.sleep_forever()
        assert scope.cancelled_caught
        assert sorted(factory.closed) == ["alice", "bob"]
        for cid in ("alice", "bob"):
            reopened = Buffer(log=SQLiteLog(tmp_path / f"{cid}.db"))
            assert reopened.version == 1
            reopened.sink.close()

    async def test_cancelled_while_opening_leaves_nothing_open(self) -> None:
        """An opening cut short by the pool's cancellation leaves no buffer
        and no entry for its id."""
        factory = Factory()
        factory.gate = anyio.Event()
        with anyio.CancelScope() as scope:
            async with BufferPool(factory) as pool:
                pool_ref = pool
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pool.get, "alice")
                    await all_blocked()
                    scope.cancel()
        assert factory.opened == ["alice"] and factory.closed == []
        assert len(pool_ref) == 0

    async def test_body_error_propagates_as_itself(self) -> None:
        """An exception in the body is raised as itself (not in a group), after
        every buffer is closed."""
        factory = Factory()
        with pytest.raises(KeyError, match="boom"):
            async with BufferPool(factory) as pool:
                await pool.get("alice")
                raise KeyError("boom")
        assert factory.closed == ["alice"]


class TestErrors:
    async def test_failing_factory_raises_from_get_and_is_retried(self) -> None:
        """A factory's error is raised by ``get`` in every caller waiting for
        that opening; nothing is kept, so a later ``get`` tries again."""
        factory = Factory()
        factory.fail = {"alice"}
        async with BufferPool(factory) as pool:
            with pytest.raises(OSError, match=r"^cannot open alice$"):
                await pool.get("alice")
            assert "alice" not in pool
            factory.fail = set()
            assert isinstance(await pool.get("alice"), RuntimeBuffer)
        assert factory.opened == ["alice", "alice"]

    async def test_bad_ids(self) -> None:
        """A conversation id is a non-empty str."""
        async with BufferPool() as pool:
            with pytest.raises(
                InvalidType, match=r"^BufferPool: a conversation id must be a str, not int$"
            ):
                await pool.get(3)  # type: ignore[arg-type]
            with pytest.raises(
                InvalidArgument, match=r"^BufferPool: a conversation id must be a non-empty str$"
            ):
                await pool.get("")
            assert len(pool) == 0

    async def test_use_outside_the_pool(self) -> None:
        """Before ``async with`` a pool opens nothing; a pool is entered once;
        a factory must be callable."""
        pool = BufferPool()
        with pytest.raises(BufferClosed, match=r"^BufferPool: the pool is not open \(use async"):
            await pool.get("alice")
        async with pool:
            pass
        with pytest.raises(InvalidArgument, match=r"^BufferPool: a pool is entered once$"):
            async with pool:
                pass
        with pytest.raises(InvalidType, match=r"^BufferPool: factory must be callable, not str$"):
            BufferPool("open_buffer")  # type: ignore[call-overload]


class TestFromThread:
    async def test_worker_thread_opens_through_the_loop(self) -> None:
        """A framework's sync API running in a worker thread gets (and opens)
        a conversation's buffer through the pool's event loop; on the loop's
        own thread a buffer not open yet is refused, not waited for."""
        factory = Factory()
        async with BufferPool(factory) as pool:
            with pytest.raises(
                InvalidArgument,
                match=r"^BufferPool: conversation 'alice' is not open and a sync call on the "
                r"event loop cannot open it; await pool.get\(\.\.\.\) first or use the async API$",
            ):
                pool.get_from_thread("alice")
            from_thread = await anyio.to_thread.run_sync(pool.get_from_thread, "alice")
            assert from_thread is await pool.get("alice")
            assert pool.get_from_thread("alice") is from_thread
        assert factory.opened == ["alice"]


async def _append(out: list[Buffer], pending: object) -> None:
    out.append(await pending)  # type: ignore[misc]
