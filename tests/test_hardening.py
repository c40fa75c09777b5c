"""Issue 11's core defects, one regression test (or a few) each.

* 11: a failing disk no longer floods the log: one removal-intent record per
  staged group, however many times the scheduler retries during the outage.
* 10: a mark made after a plan's ``base`` on an entry the plan touches is a
  ``CONFLICT``; a rewrite keeps the entry's mark, shown as a judgment of the
  earlier content (the mark's version predates the rewrite; the edit's log
  record lists it under ``marks_kept``).
* 9: a plan may not mint entries of protected or immutable kinds (a
  ``Summarize`` into a system instruction), unless the host asks with an
  explicit override.
* 13: the small ones, each a precise ``QuiesceError`` at the call (or, for
  the CLI, one line on stderr and exit status 2).

Sync tests need no event loop; the runtime one runs on asyncio and trio.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from quiesce import (
    Buffer,
    Entry,
    Kind,
    LogRecord,
    LogWriteError,
    Status,
    open_buffer,
)


class OutageSink:
    """An in-memory ``LogSink`` whose disk is down while ``down`` is set (a
    write then stores nothing and raises, as the ``LogSink`` contract asks)."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.down = False
        self.failed = 0

    def load(self) -> Sequence[LogRecord]:
        return list(self.records)

    def write(self, records: Sequence[LogRecord]) -> None:
        if self.down:
            self.failed += 1
            raise OSError("no space left on device")
        self.records.extend(records)

    def close(self) -> None:
        pass


def step(entry_id: str, *refs: str) -> Entry:
    return Entry(entry_id, Kind.REASONING, f"looked at {entry_id}", refs)


def intents(records: Sequence[LogRecord]) -> list[LogRecord]:
    return [r for r in records if r.op == "tombstone"]


class TestOneIntentPerGroup:
    def test_retries_during_an_outage_log_one_intent(self) -> None:
        sink = OutageSink()
        buf = Buffer(log=sink)
        for i in ("a", "b", "c"):
            buf.append(step(i))
        assert buf.prune(["a"], reason="stale")["a"].status is Status.PRUNED
        assert buf.prune(["b"], reason="stale")["b"].status is Status.PRUNED
        with buf.snapshot():
            assert buf.prune(["c"], reason="stale")["c"].status is Status.DEFERRED
            sink.down = True
        # the unpin tried once (sync mode); now the scheduler's retries
        for _ in range(30):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        assert sink.failed == 31
        assert [r.ids for r in intents(buf.log)] == [("a",), ("b",), ("c",)]
        assert list(buf.staged()) == ["c"]
        sink.down = False
        assert buf.apply_due() == ("c",)
        buf.flush()
        assert [r.ids for r in intents(sink.records)] == [("a",), ("b",), ("c",)]
        buf._check(expect_no_pins=True)
        recovered = OutageSink()
        recovered.records = list(sink.records)
        again = Buffer(log=recovered)
        assert [e.id for e in again.head()] == [] and set(again.tombstones) == {"a", "b", "c"}
        again._check(expect_no_pins=True)

    def test_a_group_staged_during_the_outage_gets_its_own_intent_once(self) -> None:
        sink = OutageSink()
        buf = Buffer(log=sink)
        for i in ("a", "b"):
            buf.append(step(i))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
            sink.down = True
        for _ in range(5):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        sink.down = False  # prune flushes first: let it, then fail again
        with buf.snapshot():
            buf.prune(["b"], reason="stale")
            sink.down = True
        for _ in range(5):
            with pytest.raises(LogWriteError):
                buf.apply_due()
        assert [r.ids for r in intents(buf.log)] == [("a",), ("b",)]
        sink.down = False
        buf.apply_due()
        assert not buf.head().live and not buf.staged()
        buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_the_scheduler_retrying_through_an_outage_logs_one_intent() -> None:
    sink = OutageSink()
    async with open_buffer(log=sink) as buf:
        buf.append(step("a"))
        buf.append(step("b"))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
            sink.down = True
        while sink.failed < 5:  # the scheduler retries on its own
            await anyio.sleep(0.01)
        assert len(intents(buf.log)) == 1
        sink.down = False
        await buf.quiesce()
        assert "a" not in buf.head().live
    assert len(intents(sink.records)) == 1
