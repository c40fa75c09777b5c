"""The cross-process checks of ``quiesce.testing.check_shared_history`` must
be able to fail: real members on a real PostgreSQL (in one process, on
asyncio and trio), a real history that passes, then one violation each —
a real engine break (a member whose published horizon ignores its readers:
a removal while its reader is pinned below the grace version) and forged
ones on the real log (a record of an old epoch after a newer one, a gap in
``seq``, an acknowledged flush whose records are missing) — each caught
with its own anomaly kind.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import psycopg
import pytest

from quiesce import Entry, Kind, open_shared_buffer
from quiesce._core.records import LogRecord
from quiesce._shared import SharedBuffer
from quiesce.testing import AnomalyKind, MemberPin, MemberReport, check_shared_history

FAST = {"lease": 3.0, "poll": 0.2, "timeout": 5.0}


def rows(dsn: str) -> list[tuple[int, LogRecord]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            (epoch, LogRecord.from_dict(json.loads(text)))
            for epoch, text in conn.execute(
                "SELECT writer_epoch, record FROM quiesce_log WHERE buffer_id = 'c' ORDER BY seq"
            )
        ]


def kinds(found: list[Any]) -> set[str]:
    return {str(a.kind) for a in found}


async def removal_while_pinned(dsn: str) -> tuple[list[tuple[int, LogRecord]], MemberReport]:
    """b pins a version where x is unmarked; a (the sequencer) prunes x;
    wait (bounded) for the removal, then unpin. Returns the log and b's
    report."""
    async with (
        open_shared_buffer(dsn, "c", **FAST) as a,
        open_shared_buffer(dsn, "c", **FAST) as b,
    ):
        v = await a.append(Entry("x", Kind.REASONING, "x"))
        await a.append(Entry("y", Kind.REASONING, "y"))
        await a.flush()
        await b.wait_applied(v + 1)
        with b.snapshot() as snap:
            pin = MemberPin(b.member_id, snap.version, time.time(), None, tuple(e.id for e in snap))
            await a.prune(["x"], reason="stale")
            with anyio.move_on_after(2.0):  # > several heartbeats and horizon reads
                while "x" not in a.head().tombs.by_id:
                    await anyio.sleep(0.02)
            exited = time.time()
        with anyio.fail_after(10):
            while "x" not in a.head().tombs.by_id:
                await anyio.sleep(0.02)
        await a.flush()
        flushes = ((len(a.log), a.log[len(a.log) - 1]),)
    report = MemberReport(
        b.member_id,
        (MemberPin(pin.member, pin.version, pin.entered, exited, pin.seen),),
        flushes,
    )
    return rows(dsn), report


@pytest.mark.anyio
async def test_a_real_history_passes_and_forged_violations_are_caught(
    pg_dsn: str, anyio_backend: str
) -> None:
    log, report = await removal_while_pinned(pg_dsn)
    assert [r.op for _, r in log][-1] == "remove"
    assert check_shared_history(log, [report]) == []
    assert check_shared_history(log[::-1] + log, [report]) == []  # merged by seq

    # a record of the old epoch after the newer epoch's first
    newer = [(2, r) if r.seq == 1 else (e, r) for e, r in log]
    assert kinds(check_shared_history(newer, [report])) == {AnomalyKind.EPOCH_REGRESSION}

    # a gap in seq
    gap = [(e, r) for e, r in log if r.seq != 2]
    found = check_shared_history(gap, [report])
    assert AnomalyKind.SEQ_GAP in kinds(found)
    assert "seq 2 is missing (next is 3)" in {a.detail for a in found}

    # a flush that returned although its last records are not in the log
    lost = log[:-1]
    found = check_shared_history(lost, [report])
    assert kinds(found) == {AnomalyKind.LOST_FLUSH}
    n = report.flushes[0][0]
    assert str(found[0]) == (
        f"lost-flush: member {report.member}'s flush() returned with {n} records, "
        f"but the log has only {n - 1}"
    )

    # the reader had not left when the removal was published
    held = MemberReport(
        report.member,
        tuple(MemberPin(p.member, p.version, p.entered, None, p.seen) for p in report.pins),
    )
    assert kinds(check_shared_history(log, [held])) == {AnomalyKind.EARLY_REMOVAL}
    # ... unless its member had lost its lease meanwhile (its readers are void)
    void = MemberReport(held.member, held.pins, lease_lost=(held.pins[0].entered,))
    assert check_shared_history(log, [void]) == []


@pytest.mark.anyio
async def test_a_member_that_ignores_its_readers_is_caught(
    pg_dsn: str, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real break: members publish their head as horizon whatever their
    readers pin, so the sequencer removes x while b's reader (pinned where x
    is unmarked) is still there: the merged check reports early-removal,
    naming the member."""
    monkeypatch.setattr(SharedBuffer, "_horizon", lambda self: self.local.version)
    log, report = await removal_while_pinned(pg_dsn)
    found = check_shared_history(log, [report])
    assert kinds(found) == {AnomalyKind.EARLY_REMOVAL}
    assert f"while a reader of member {report.member}, which pinned it unmarked" in (
        found[0].detail
    )


def test_a_read_after_the_removal_is_caught_whatever_the_lease_loss_says() -> None:
    """A reader pinned at a version where x is live and unmarked, in a member
    that recorded a lease loss before x's removal: the loss excuses the pin
    (void), but not a read of it that began after the removal (a member
    whose recorded loss time is earlier than when it really stopped
    serving). Reads that began before the removal pass."""
    from quiesce import Buffer

    buf = Buffer()
    buf.append(Entry("x", Kind.REASONING, "x"))
    pinned_at = time.time()
    time.sleep(0.01)
    buf.append(Entry("y", Kind.REASONING, "y"))
    assert buf.prune(["x"], reason="stale")["x"].status.name == "PRUNED"
    log = [(0, rec) for rec in buf.log]
    removed_at = next(r.time for r in buf.log if r.op == "remove")
    lost = (pinned_at + removed_at) / 2

    def report(*reads: float) -> MemberReport:
        pin = MemberPin("m", 1, pinned_at, None, ("x",), tuple(reads))
        return MemberReport("m", (pin,), (), (lost,))

    assert check_shared_history(log, [report(pinned_at, lost - 0.001)]) == []
    found = check_shared_history(log, [report(pinned_at, removed_at + 0.5)])
    assert kinds(found) == {"early-removal"}
    assert "read it 0.500s after the removal" in found[0].detail
    without_loss = MemberReport("m", (MemberPin("m", 1, pinned_at, None, ("x",)),), (), ())
    assert kinds(check_shared_history(log, [without_loss])) == {"early-removal"}
