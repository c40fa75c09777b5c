"""A shared buffer's member streams (issue 24, item 5): real members on the
private PostgreSQL server (tests/_pg.py), in one process, on asyncio and
trio. A replica's stream is forwarded coalesced (at most one request per
20 ms), every member sees whole, growing prefixes of it, and a stream cut
by a sequencer failover or by its member leaving stays as an aborted entry
with the text the sequencer applied."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from quiesce import (
    DuplicateEntry,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    StreamClosed,
    open_shared_buffer,
)
from quiesce._shared import SharedBuffer
from quiesce._shared.stream import FORWARD_INTERVAL, SharedStreamWriter

FAST = {"lease": 2.0, "poll": 0.2, "timeout": 10.0}


async def until(predicate: Any, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def body(member: SharedBuffer, entry_id: str) -> str | None:
    with member.snapshot() as snap:
        entry = snap.get(entry_id)
        return None if entry is None else entry.body


async def watch(member: SharedBuffer, entry_id: str, seen: list[str], stop: anyio.Event) -> None:
    """Pin the member's head over and over; record each body of the entry."""
    while not stop.is_set():
        with member.snapshot() as snap:
            entry = snap.get(entry_id)
            if entry is not None:
                first = entry.body
                await anyio.sleep(0)  # the pin outlives a scheduler pass
                assert snap[entry_id].body == first  # the same prefix for the whole pin
                seen.append(first)
        await anyio.sleep(0.003)


@pytest.mark.anyio
async def test_a_replica_streams_coalesced_and_every_member_sees_prefixes(
    pg_dsn: str, anyio_backend: str
) -> None:
    """A replica writes 120 chunks over about 0.6 s: the sequencer and the
    replica itself only ever see whole, growing prefixes of the text; the
    closed entry holds all of it; the stream took at most one forwarded
    request per 20 ms (plus the open and the close)."""
    chunks = [f"token {i} " for i in range(120)]
    async with (
        open_shared_buffer(pg_dsn, "s", **FAST) as a,
        open_shared_buffer(pg_dsn, "s", **FAST) as b,
    ):
        assert (a.role, b.role) == ("sequencer", "replica")
        await b.append(Entry("q", Kind.REASONING, "the question"))
        seen_a: list[str] = []
        seen_b: list[str] = []
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, a, "ans", seen_a, stop)
            tg.start_soon(watch, b, "ans", seen_b, stop)
            started = anyio.current_time()
            w = b.open_stream("ans", Kind.REASONING, refs=["q"])
            assert isinstance(w, SharedStreamWriter)
            for chunk in chunks:
                w.write(chunk)
                await anyio.sleep(0.005)
            w.close()
            version = await w.wait_closed()
            elapsed = anyio.current_time() - started
            await b.wait_applied(version)
            stop.set()
        text = "".join(chunks)
        assert w.text == text and w.closed and not w.aborted
        for member in (a, b):
            with member.snapshot() as snap:
                entry = snap["ans"]
                assert (entry.body, entry.streaming, snap.is_stale("ans")) == (text, False, False)
        for seen in (seen_a, seen_b):
            assert seen, "the watcher saw the entry"
            assert all(text.startswith(s) for s in seen)
            assert [len(s) for s in seen] == sorted(len(s) for s in seen)
        assert any(0 < len(s) < len(text) for s in seen_a), "a partial prefix was seen"
        # coalesced: the writes between the open and the close
        assert 3 <= w.requests <= math.floor(elapsed / FORWARD_INTERVAL) + 2
        a.check_invariants()
        b.check_invariants()


@pytest.mark.anyio
async def test_bad_input_raises_at_once_and_forwards_nothing(
    pg_dsn: str, anyio_backend: str
) -> None:
    """A non-str chunk, a lone surrogate, a write after close and an open
    with a used id raise at once; nothing is forwarded for them and the
    head is unchanged."""
    async with (
        open_shared_buffer(pg_dsn, "s", **FAST) as a,
        open_shared_buffer(pg_dsn, "s", **FAST) as b,
    ):
        v = await b.append(Entry("used", Kind.REASONING, "taken"))
        await b.wait_applied(v)
        forwarded = b.forwarded
        with pytest.raises(DuplicateEntry, match=r"^entry 'used' is already in the buffer$"):
            b.open_stream("used", Kind.REASONING)
        with pytest.raises(InvalidArgument, match=r"is never streamed"):
            b.open_stream("c", Kind.CONSTRAINT)
        w = b.open_stream("s1", Kind.REASONING)
        with pytest.raises(InvalidType, match=r"^stream 's1': a chunk must be a str, not int$"):
            w.write(3)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=r"surrogate"):
            w.write("bad \ud800")
        w.write("fine")
        w.close()
        with pytest.raises(StreamClosed, match=r"^stream 's1' is closing: it takes no more text$"):
            w.write("more")
        await w.wait_closed()
        assert body(a, "s1") == "fine"
        assert b.forwarded - forwarded == 2  # the open and the close (with "fine")
        await until(lambda: a.version == b.version)


@pytest.mark.anyio
async def test_a_failover_mid_stream_leaves_an_aborted_entry(
    pg_dsn: str, anyio_backend: str
) -> None:
    """The sequencer leaves while a replica streams: the new sequencer (the
    replica) aborts the stream, which stays with the text the old one
    applied and made durable, marked stale; the writer then refuses more
    text, naming the refusal."""
    ready, leave = anyio.Event(), anyio.Event()
    box: list[SharedBuffer] = []

    async def sequencer() -> None:
        async with open_shared_buffer(pg_dsn, "s", **FAST) as a:
            box.append(a)
            ready.set()
            await leave.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sequencer)
        await ready.wait()
        a = box[0]
        async with open_shared_buffer(pg_dsn, "s", **FAST) as b:
            assert (a.role, b.role) == ("sequencer", "replica")
            w = b.open_stream("ans", Kind.REASONING)
            w.write("before the failover")
            await until(lambda: body(a, "ans") == "before the failover")
            leave.set()  # a flushes, releases its lease and leaves: b takes over
            await until(lambda: b.role == "sequencer")
            with b.snapshot() as snap:
                entry = snap["ans"]
                mark = snap.mark("ans")
            assert (entry.body, entry.streaming) == ("before the failover", False)
            assert mark is not None and "failed over" in mark.reason
            w.write("after")  # queued: the forwarder learns of the abort when it sends it
            with pytest.raises(StreamClosed, match=r"not open on the sequencer"):
                await w.wait_closed(timeout=10)
            with pytest.raises(StreamClosed, match=r"the sequencer refused it"):
                w.write("more")
            assert w.aborted
            b.check_invariants()


@pytest.mark.anyio
async def test_a_member_that_leaves_mid_stream_leaves_an_aborted_entry(
    pg_dsn: str, anyio_backend: str
) -> None:
    """A replica leaves (its member lease ends) while its stream is open: the
    sequencer aborts the stream with the text it applied."""
    async with open_shared_buffer(pg_dsn, "s", **FAST) as a:
        async with open_shared_buffer(pg_dsn, "s", **FAST) as b:
            w = b.open_stream("ans", Kind.REASONING)
            w.write("half an ans")
            await until(lambda: body(a, "ans") == "half an ans")
        await until(lambda: "ans" not in a.local.streams(), timeout=10)
        with a.snapshot() as snap:
            entry = snap["ans"]
            mark = snap.mark("ans")
        assert (entry.body, entry.streaming) == ("half an ans", False)
        assert mark is not None and "left" in mark.reason
        a.check_invariants()
