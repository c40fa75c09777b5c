"""``open_shared_buffer`` and checkpoints (issue 14): a member joining a long
log (a replica, or the next sequencer) starts from the newest valid
checkpoint and reads only it and the tail; the sequencer writes checkpoints
for the others; a damaged checkpoint is skipped. Real PostgreSQL (the
session's private cluster), two or three members in one process, on asyncio
and trio."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import psycopg
import pytest

from quiesce import (
    Buffer,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    PostgresLog,
    open_shared_buffer,
)
from quiesce._core.replay import replay

FAST = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}


def _long_log(dsn: str, n: int = 2000) -> Buffer:
    """n appends, a checkpoint, 10 marks: n + 11 records."""
    log = PostgresLog(dsn, "b")
    buf = Buffer(log=log, checkpoint_every=0)
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
    buf.flush(checkpoint=True)
    for i in range(10):
        buf.mark_stale(f"e{i}", "old")
    buf.flush()
    log.close()
    return buf


def _view(buf: Any) -> tuple[Any, ...]:
    head = buf.head()
    return (
        buf.version,
        [(e.id, head.live[e.id].key) for e in head.entries()],
        sorted(head.marks),
        sorted(head.tombs.by_id),
    )


def _checkpoints(dsn: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT seq, writer_epoch FROM quiesce_log WHERE buffer_id = 'b' "
            "AND op = 'checkpoint' ORDER BY seq"
        ).fetchall()


@pytest.mark.anyio
async def test_members_start_from_the_newest_checkpoint(pg_dsn: str, anyio_backend: str) -> None:
    """Sequencer and replica joining a 2,012-record log each read the
    checkpoint's anchor, the checkpoint and the 10 records after it (not
    2,012 rows); the sequencer
    then writes checkpoints itself, which the replica replays as no-ops; the
    next sequencer starts from the newest of them."""
    want = _view(_long_log(pg_dsn))
    async with (
        open_shared_buffer(pg_dsn, "b", checkpoint_every=5, **FAST) as a,  # a short cadence
        open_shared_buffer(pg_dsn, "b", **FAST) as b,
    ):
        assert (a.role, b.role) == ("sequencer", "replica")
        for m in (a, b):
            assert m.local._st.records.first == 2001  # after the checkpoint's anchor
            assert m._sink is not None and m._sink.rows_read <= 11 + 5
            assert _view(m) == want
            m._check()
        for i in range(12):
            await a.append(Entry(f"n{i}", Kind.REASONING, f"new {i}"))
        await a.flush()
        written = _checkpoints(pg_dsn)
        assert written[0][0] == 2001 and len(written) >= 2
        assert {e for s, e in written if s > 2001} == {a.epoch}
        await b.wait_applied(a.version)
        assert _view(b) == _view(a)
        b._check()
        want = _view(a)
    newest = written[-1][0]
    async with open_shared_buffer(pg_dsn, "b", **FAST) as c:
        # a's release (or c's first take) may time out on a loaded machine:
        # then c joins as a replica and its heartbeat takes the free lease
        with anyio.fail_after(4 * FAST["lease"]):
            while c.role != "sequencer":
                await anyio.sleep(0.05)
        assert c.epoch == 2
        assert c.local._st.records.first == newest
        assert _view(c) == want
        c._check()


@pytest.mark.anyio
async def test_a_damaged_checkpoint_is_skipped_by_a_joining_member(
    pg_dsn: str, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The newest checkpoint's checksum fails: a joining member logs a
    warning, falls back to a full replay and reaches the same state."""
    want = _view(_long_log(pg_dsn, 50))
    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
        (text,) = conn.execute(  # type: ignore[misc]
            "SELECT record FROM quiesce_log WHERE buffer_id = 'b' AND seq = 51"
        ).fetchone()
        obj = json.loads(text)
        obj["detail"]["sha256"] = "0" * 64
        conn.execute("ALTER TABLE quiesce_log DISABLE TRIGGER quiesce_log_no_change")
        conn.execute(
            "UPDATE quiesce_log SET record = %s WHERE buffer_id = 'b' AND seq = 51",
            (json.dumps(obj),),
        )
        conn.execute("ALTER TABLE quiesce_log ENABLE TRIGGER quiesce_log_no_change")
    with caplog.at_level(logging.WARNING, logger="quiesce.checkpoint"):
        async with open_shared_buffer(pg_dsn, "b", **FAST) as a:
            assert a.local._st.records.first == 0
            assert _view(a) == want
            a._check()
            with anyio.fail_after(5):
                await a.flush()
    messages = [r.getMessage() for r in caplog.records if r.name == "quiesce.checkpoint"]
    assert messages and "checkpoint 51 fails its checksum" in messages[0]
    assert messages[0].endswith("falling back to a full replay")
    with PostgresLog(pg_dsn, "b") as log:
        full = Buffer()
        replay(full, log.load())
    assert _view(full) == want


@pytest.mark.anyio
async def test_flush_checkpoint_and_the_cadence_setting(pg_dsn: str, anyio_backend: str) -> None:
    """``checkpoint_every=0`` writes none by itself; the sequencer's
    ``flush(checkpoint=True)`` writes one in the same commit, a replica's
    writes none; a bad setting is refused before connecting."""
    async with (
        open_shared_buffer(pg_dsn, "b", checkpoint_every=0, **FAST) as a,
        open_shared_buffer(pg_dsn, "b", **FAST) as b,
    ):
        assert (a.role, b.role) == ("sequencer", "replica")
        for i in range(30):
            await a.append(Entry(f"n{i}", Kind.REASONING, f"new {i}"))
        await a.flush()
        assert _checkpoints(pg_dsn) == []
        await b.flush(checkpoint=True)
        await a.flush()
        assert _checkpoints(pg_dsn) == []
        await a.flush(checkpoint=True)
        assert _checkpoints(pg_dsn) == [(31, a.epoch)]  # after its anchor, 30
    for bad, error in (("5", InvalidType), (-1, InvalidArgument), (2.5, InvalidType)):
        with pytest.raises(error, match="checkpoint_every"):
            async with open_shared_buffer(pg_dsn, "b", checkpoint_every=bad, **FAST):
                pass
