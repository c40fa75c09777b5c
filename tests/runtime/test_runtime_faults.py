"""Fault injection: cancellation at every point, and a log sink that fails.

* Readers, the barrier scheduler (the whole ``open_buffer`` scope), flushes
  and ``quiesce()`` are cancelled at each of their checkpoints in turn; pins
  never leak, a batch is applied whole or not at all, and the buffer stays
  consistent (and keeps working in sync mode after its runtime is gone).
* A :class:`FlakySink` fails at each write in turn, and at seeded random
  writes: the core raises :class:`LogWriteError` (never a bare ``OSError``),
  changes nothing when a prune or edit is refused for it, never publishes a
  removal whose tombstone is not durable, and recovers — a later flush
  succeeds and a buffer rebuilt from the sink has the same head.

Every scenario is recorded and checked with :func:`quiesce.testing.check_history`.
(SIGKILL crash tests of the SQLite log live elsewhere.)
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    Kind,
    LogRecord,
    LogWriteError,
    Prune,
    Rewrite,
    Status,
    open_buffer,
)
from quiesce.testing import Recorder, check_history
from test_simulation import FlakySink, run_schedule

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def e(i: str, *refs: str, kind: Kind = Kind.REASONING) -> Entry:
    return Entry(i, kind, f"body of {i}", refs)


class ScriptedSink(FlakySink):
    """Fails exactly at the write calls listed in ``fail_at`` (0-based)."""

    def __init__(self, fail_at: set[int], records: Sequence[LogRecord] = ()) -> None:
        super().__init__(random.Random(0), 0.0, records)
        self.fail_at = fail_at

    def write(self, records: Sequence[LogRecord]) -> None:
        call = self.writes
        if call in self.fail_at:
            self.writes += 1
            self.failures += 1
            raise OSError(f"injected failure at write {call}")
        super().write(records)


class SlowSink(FlakySink):
    """Each write takes ``delay`` seconds (in the worker thread that makes it)."""

    def __init__(self, delay: float) -> None:
        super().__init__(random.Random(0), 0.0)
        self.delay = delay
        self.started = threading.Event()

    def write(self, records: Sequence[LogRecord]) -> None:
        self.started.set()
        time.sleep(self.delay)
        super().write(records)


def assert_recovers(buf: Buffer, sink: FlakySink) -> None:
    """Faults over: the log flushes, and a buffer rebuilt from the sink has
    the same head."""
    sink.fail_rate = 0.0
    if isinstance(sink, ScriptedSink):
        sink.fail_at = set()
    buf.flush()
    assert [r.seq for r in sink.records] == list(range(len(buf.log)))
    again = Buffer(log=FlakySink(random.Random(0), 0.0, sink.records))
    a, b = buf.head(), again.head()
    assert (a.number, a.entries(), dict(a.marks), dict(a.tombs.by_id)) == (
        b.number,
        b.entries(),
        dict(b.marks),
        dict(b.tombs.by_id),
    )
    assert dict(again.staged()) == dict(buf.staged())
    again._check(expect_no_pins=True)


# ---------------------------------------------------------------------------
# The sync core against a failing sink, at every write


def _script(rec: Recorder, errors: list[str]) -> None:
    """A fixed sequence of calls touching every path that writes the sink."""

    def attempt(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        before = rec.buffer.version
        try:
            return fn(*args, **kwargs)
        except LogWriteError:
            if what in ("prune", "edit", "apply_due") and rec.buffer.version != before:
                errors.append(f"{what} raised LogWriteError after changing the version")
            return None
        except OSError as exc:  # pragma: no cover - the bug this test hunts
            errors.append(f"{what} leaked a bare {exc!r}")
            return None

    for i in "abcdef":
        rec.append(e(i))
    rec.append(e("g", "f"))
    attempt("prune", rec.prune, ["a"], reason="no readers: removed now")
    with rec.snapshot():
        attempt("prune", rec.prune, ["b", "c"], reason="deferred")
        attempt("flush", rec.flush)
    attempt("apply_due", rec.apply_due)
    rec.mark_stale("d", "old")
    attempt("edit", rec.edit, EditPlan([Prune("d"), Rewrite("e", "shorter")], reason="tidy"))
    attempt("prune", rec.prune, ["f", "g"], reason="together")
    with rec.snapshot():
        attempt("edit", rec.edit, EditPlan([Prune("e")], reason="later"))
    attempt("apply_due", rec.apply_due)
    attempt("flush", rec.flush)


def _total_writes() -> int:
    sink = ScriptedSink(set())
    _script(Recorder(Buffer(log=sink), durable=sink.durable), [])
    return sink.writes


@pytest.mark.parametrize("burst", [1, 2, 5])
def test_sink_fails_at_every_write(burst: int) -> None:
    """For each write k (and a burst of ``burst`` failures from k): only
    LogWriteError surfaces, a refused prune or edit changes nothing, no
    removal is published before its tombstone is durable, the history is
    clean, and the log and head recover once the sink does."""
    n = _total_writes()
    assert n >= 4
    for k in range(n + 1):
        sink = ScriptedSink(set(range(k, k + burst)))
        buf = Buffer(log=sink)
        rec = Recorder(buf, durable=sink.durable)
        errors: list[str] = []
        _script(rec, errors)
        assert errors == [], (k, errors)
        assert check_history(rec.history()) == [], k
        buf._check(expect_no_pins=True)
        assert_recovers(buf, sink)


def test_failed_removal_stays_staged_and_logged_once() -> None:
    """A removal whose tombstone cannot be made durable stays staged (its
    entry live and marked); the next successful apply writes exactly one
    tombstone and one removal record."""
    sink = ScriptedSink(set())
    buf = Buffer(log=sink)
    rec = Recorder(buf, durable=sink.durable)
    rec.append(e("a"))
    with rec.snapshot():
        assert rec.prune(["a"], reason="stale")["a"].status is Status.DEFERRED
        sink.fail_at = set(range(sink.writes, sink.writes + 3))
    # The unpin tried (sync mode) and failed: still staged, still live.
    assert "a" in buf.staged() and "a" in buf.head().live and buf.stats().log_failing
    with pytest.raises(LogWriteError, match=r"^edit log write failed: injected failure"):
        rec.apply_due()
    sink.fail_at = set()
    assert rec.apply_due() == ("a",)
    assert not buf.stats().log_failing
    assert sum(1 for r in buf.log if r.op == "remove") == 1
    assert check_history(rec.history()) == []
    assert_recovers(buf, sink)


# ---------------------------------------------------------------------------
# Seeded schedules with a flaky sink, on both backends


#: the flaky-sink seeds: the first half by default, the second under -m slow
FLAKY_SEEDS = [
    pytest.param(range(75), id="seeds0-74"),
    pytest.param(range(75, 150), id="seeds75-149", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("fail_rate", [0.2, 0.6])
@pytest.mark.parametrize("seeds", FLAKY_SEEDS)
def test_flaky_sink_schedules(backend: str, fail_rate: float, seeds: range) -> None:
    """Seeded schedules with a sink failing at random writes (seeds 0-74 by
    default, 75-149 under ``-m slow``): no anomaly, no bare OSError, and
    every one recovers from its sink."""
    bad = []
    failures = 0
    for seed in seeds:
        out = run_schedule(seed, backend, sink=True, fail_rate=fail_rate)
        failures += out.sink_failures
        if not out.ok:
            bad.append(out.describe())
    assert not bad, "\n".join(bad[:5])
    assert failures > 0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_cancelled_scheduler_schedules(backend: str) -> None:
    """150 seeded schedules whose open_buffer scope (the barrier scheduler
    with it) is cancelled at a random point, readers cancelled too."""
    bad = []
    for seed in range(150):
        out = run_schedule(seed, backend, cancel_scheduler=True, cancel_readers=0.3)
        if not out.ok:
            bad.append(out.describe())
    assert not bad, "\n".join(bad[:5])


# ---------------------------------------------------------------------------
# Cancellation at every checkpoint

HOLD = 12


@pytest.mark.anyio
async def test_reader_cancelled_at_every_checkpoint() -> None:
    """A reader cancelled at its k-th checkpoint (for every k) unpins; the
    removal it held back is applied once it is gone; no pin leaks."""
    for k in range(HOLD + 1):
        async with open_buffer(max_pin_age=None) as buf:
            rec = Recorder(buf)
            rec.append(e("a"))
            rec.append(e("b"))
            pinned = anyio.Event()

            async def reader(
                scope: anyio.CancelScope, rec: Recorder = rec, pinned: anyio.Event = pinned
            ) -> None:
                with scope, rec.snapshot() as snap:
                    pinned.set()
                    for _ in range(HOLD):
                        await anyio.lowlevel.checkpoint()
                        snap.read()

            scope = anyio.CancelScope()
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader, scope)
                await pinned.wait()
                assert rec.prune(["a"], reason="stale")["a"].status is Status.DEFERRED
                for _ in range(k):
                    await anyio.lowlevel.checkpoint()
                scope.cancel()
            await rec.quiesce()
            assert "a" in buf.tombstones
            assert buf.stats().pinned == 0
        assert check_history(rec.history()) == [], k
        buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_scheduler_cancelled_at_every_checkpoint() -> None:
    """The open_buffer scope cancelled at its k-th checkpoint (for every k):
    readers unpin, no batch is half applied, the history is clean, and the
    buffer keeps working in sync mode (a staged removal is applied when its
    last blocking reader leaves)."""
    for k in range(30):
        box: list[Recorder] = []
        with anyio.CancelScope() as outer:
            async with open_buffer(max_pin_age=None) as buf:
                rec = Recorder(buf)
                box.append(rec)
                for i in "abcd":
                    rec.append(e(i))

                async def reader(i: int, rec: Recorder = rec) -> None:
                    with rec.snapshot() as snap:
                        for _ in range(3 + i):
                            await anyio.lowlevel.checkpoint()
                            snap.read()

                async def pruner(rec: Recorder = rec) -> None:
                    for group in (["a"], ["b", "c"]):
                        rec.prune(group, reason="stale")
                        await anyio.lowlevel.checkpoint()
                    await rec.quiesce()

                async with anyio.create_task_group() as tg:
                    for i in range(3):
                        tg.start_soon(reader, i)
                    tg.start_soon(pruner)
                    for _ in range(k):
                        await anyio.lowlevel.checkpoint()
                    outer.cancel()
        rec = box[0]
        assert buf.stats().pinned == 0
        assert not buf.running
        # Sync mode: stage under a reader; its exit applies the removal.
        with rec.snapshot():
            rec.prune(["d"], reason="after the runtime")
        assert "d" in buf.tombstones, k
        rec.apply_due()
        assert not buf.staged(), k
        assert check_history(rec.history()) == [], k
        buf._check(expect_no_pins=True)


@pytest.mark.anyio
async def test_cancelled_flush_leaves_the_log_consistent() -> None:
    """aflush() and quiesce() cancelled while their worker thread writes: the
    write completes or never starts (never half), the sink holds a prefix of
    the log, a removal is published whole, and nothing is left in flight."""
    for cancel_after in (0.0, 0.002, 0.01, 0.03):
        sink = SlowSink(0.01)
        async with open_buffer(log=sink, max_pin_age=None, flush_interval=10.0) as buf:
            rec = Recorder(buf, durable=sink.durable)
            for i in "abc":
                rec.append(e(i))
            with anyio.move_on_after(cancel_after):
                await rec.aflush()
            assert [r.seq for r in sink.records] == list(range(len(sink.records)))
            with rec.snapshot():
                rec.prune(["a", "b"], reason="stale")
            with anyio.move_on_after(cancel_after):
                await rec.quiesce()
            assert [r.seq for r in sink.records] == list(range(len(sink.records)))
            head = buf.head()
            assert ("a" in head.tombs.by_id) == ("b" in head.tombs.by_id)  # one batch
        assert not buf.staged()
        assert check_history(rec.history()) == [], cancel_after
        assert_recovers(buf, sink)


@pytest.mark.anyio
async def test_sink_failing_at_exit_raises_log_write_error() -> None:
    """If the tombstones cannot be made durable when open_buffer exits, the
    caller gets a bare LogWriteError (an OSError, not wrapped in an exception
    group) and the removal stays staged, logged and recoverable."""
    sink = ScriptedSink(set())
    with pytest.raises(LogWriteError, match=r"^edit log write failed: injected failure"):
        async with open_buffer(log=sink, max_pin_age=None, flush_interval=10.0) as buf:
            rec = Recorder(buf, durable=sink.durable)
            rec.append(e("a"))
            with rec.snapshot():
                rec.prune(["a"], reason="stale")
                sink.fail_at = set(range(sink.writes, sink.writes + 1000))
    assert "a" in buf.staged()
    assert check_history(rec.history()) == []
    buf._check(expect_no_pins=True)
    assert_recovers(buf, sink)
    assert buf.apply_due() == ("a",)
