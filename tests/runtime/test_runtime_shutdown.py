"""Leaving ``open_buffer`` is bounded: a hung log sink cannot hold exit.

The final flush on exit is shielded from cancellation but bounded by
``close_timeout``; past it, exit raises :class:`LogWriteError` naming the
records still pending (they stay pending and become durable if the sink
wakes up). The sink here is a real :class:`SQLiteLog` whose ``write`` waits
at a gate first: a disk that stopped answering.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from quiesce import (
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    LogRecord,
    LogWriteError,
    SQLiteLog,
    open_buffer,
)
from quiesce._runtime import DEFAULT_CLOSE_TIMEOUT

pytestmark = pytest.mark.anyio

#: A generous upper bound on wall time for a bounded exit (the bound is the
#: behaviour under test; this only catches "waits for the sink for ever").
GENEROUS = 20.0


class HungSQLiteLog(SQLiteLog):
    """A real SQLite log whose writes wait at ``gate`` once it is closed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def write(self, records: Sequence[LogRecord]) -> None:
        if not self.gate.is_set():
            self.entered.set()
            self.gate.wait()
        super().write(records)


def step(entry_id: str, *refs: str) -> Entry:
    return Entry(entry_id, Kind.REASONING, f"step {entry_id}", refs)


def _recovered_ids(path: Path) -> set[str]:
    sink = SQLiteLog(path)
    try:
        return {i for r in sink.load() if r.op == "append" for i in r.ids}
    finally:
        sink.close()


class TestBoundedExit:
    async def test_a_hung_sink_under_move_on_after_raises_log_write_error(
        self, tmp_path: Path
    ) -> None:
        """Under ``move_on_after(1)`` with the sink hung, exit raises
        LogWriteError with the pending count within the close bound (not the
        6 s+ of an unbounded shielded flush); the records stay pending and
        are durable once the sink answers again."""
        path = tmp_path / "log.db"
        sink = HungSQLiteLog(path)
        started = time.monotonic()
        with pytest.raises(LogWriteError) as info:
            with anyio.move_on_after(1):
                async with open_buffer(sink, close_timeout=0.5, flush_interval=0.01) as buf:
                    sink.gate.clear()
                    for i in range(5):
                        buf.append(step(f"e{i}"))
                    await anyio.sleep(30)  # cancelled by move_on_after
        elapsed = time.monotonic() - started
        assert elapsed < GENEROUS
        exc = info.value
        assert exc.pending == 5 == buf.pending_records
        assert str(exc) == (
            "the log sink did not finish the final flush within close_timeout=0.5s: "
            "5 record(s) still pending (seq 0..4), not durable"
        )
        # the sink wakes up: the abandoned flush lands, nothing is lost
        sink.gate.set()
        buf.flush()
        assert buf.pending_records == 0
        sink.close()
        assert _recovered_ids(path) == {f"e{i}" for i in range(5)}

    async def test_a_hung_sink_with_a_removal_due_at_exit(self, tmp_path: Path) -> None:
        """A removal due at exit whose tombstone cannot be written (the
        batch's worker thread waits on the sink) does not hold exit either:
        the removal stays unpublished, the error names what is pending."""
        path = tmp_path / "log.db"
        sink = HungSQLiteLog(path)
        with pytest.raises(LogWriteError, match=r"record\(s\) still pending") as info:
            with anyio.move_on_after(1):
                async with open_buffer(sink, close_timeout=0.5) as buf:
                    buf.append(step("a"))
                    buf.append(step("b"))
                    await buf.aflush()
                    with buf.snapshot():
                        report = buf.prune(["a"], reason="stale")
                        assert report["a"].status.name == "DEFERRED"
                        sink.gate.clear()
                    await anyio.sleep(30)
        assert info.value.pending >= 1
        with buf.snapshot() as snap:
            assert "a" not in snap.tombstones  # never published without its tombstone
        sink.gate.set()
        buf.flush()
        buf._check(expect_no_pins=True)
        sink.close()

    async def test_a_normal_exit_with_a_hung_sink_raises_after_the_bound(
        self, tmp_path: Path
    ) -> None:
        """No cancellation: leaving the block still waits at most
        ``close_timeout`` for the hung sink, then raises."""
        sink = HungSQLiteLog(tmp_path / "log.db")
        with pytest.raises(LogWriteError, match=r"within close_timeout=0.2s: 1 record\(s\)"):
            async with open_buffer(sink, close_timeout=0.2) as buf:
                sink.gate.clear()
                buf.append(step("a"))
        assert sink.entered.is_set() and buf.pending_records == 1
        sink.gate.set()
        buf.flush()
        sink.close()

    async def test_the_body_exception_wins_and_carries_a_note(self, tmp_path: Path) -> None:
        """If the body raised, exit raises the body's exception (with a note
        about the timed-out flush), not the LogWriteError."""
        sink = HungSQLiteLog(tmp_path / "log.db")
        with pytest.raises(KeyError, match="boom") as info:
            async with open_buffer(sink, close_timeout=0.2) as buf:
                sink.gate.clear()
                buf.append(step("a"))
                raise KeyError("boom")
        assert any("close_timeout=0.2s" in n for n in info.value.__notes__)
        sink.gate.set()
        buf.flush()
        sink.close()

    async def test_a_healthy_sink_exits_quietly_and_durably(self, tmp_path: Path) -> None:
        """With a sink that answers, exit flushes everything and raises nothing."""
        path = tmp_path / "log.db"
        sink = HungSQLiteLog(path)
        async with open_buffer(sink, close_timeout=0.2) as buf:
            buf.append(step("a"))
        assert buf.pending_records == 0
        sink.close()
        assert _recovered_ids(path) == {"a"}


class TestCloseTimeoutArgument:
    async def test_the_default_is_documented(self) -> None:
        assert DEFAULT_CLOSE_TIMEOUT == 5.0

    @pytest.mark.parametrize(
        ("value", "error", "message"),
        [
            (0, InvalidArgument, r"^close_timeout must be > 0, got 0$"),
            (-1, InvalidArgument, r"^close_timeout must be > 0, got -1$"),
            (float("nan"), InvalidArgument, r"^close_timeout must be > 0, got nan$"),
            (float("inf"), InvalidArgument, r"^close_timeout must be a finite number"),
            (True, InvalidType, r"^close_timeout must be a number of seconds, not bool$"),
            ("1", InvalidType, r"^close_timeout must be a number of seconds, not str$"),
        ],
    )
    async def test_bad_values_are_refused_before_anything_starts(
        self, value: object, error: type[Exception], message: str
    ) -> None:
        with pytest.raises(error, match=message):
            async with open_buffer(close_timeout=value):  # type: ignore[arg-type]
                pass  # pragma: no cover
