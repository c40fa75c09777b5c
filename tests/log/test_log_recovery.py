"""Recovery: reopening a durable log rebuilds the head exactly, for both sinks;
faults injected into the sink raise LogWriteError from the call that needed
durability, publish no removal without its tombstone, and resume."""

from __future__ import annotations

import errno
import os
import random
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _workload import OP_NAMES, Workload, escalate, random_op, state
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    InvalidArgument,
    JsonlLog,
    Kind,
    LogRecord,
    LogWriteError,
    Move,
    Override,
    Prune,
    QuiesceError,
    ReadmissionRefused,
    SQLiteLog,
    Status,
)

SINKS: dict[str, Callable[[Path], SQLiteLog | JsonlLog]] = {
    "sqlite": lambda p: SQLiteLog(p.with_suffix(".db")),
    "jsonl": lambda p: JsonlLog(p.with_suffix(".jsonl")),
}

ops_strategy = st.lists(
    st.tuples(
        st.integers(0, len(OP_NAMES) - 1),
        st.integers(0, 15),
        st.integers(0, 15),
        st.integers(0, 15),
        st.integers(0, 15),
    ),
    max_size=60,
)


@pytest.fixture(params=sorted(SINKS))
def sink_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "log"


def _reopen(kind: str, base: Path, buf: Buffer) -> Buffer:
    sink = buf.sink
    assert sink is not None
    sink.close()
    return Buffer(log=SINKS[kind](base))


class TestReopenEqualsBefore:
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(ops=ops_strategy, cut=st.integers(0, 60))
    def test_random_operations(self, sink_kind: str, ops: list[tuple[int, ...]], cut: int) -> None:
        """For any operation sequence (appends, marks, prunes, edits, pins that
        defer removals, flushes): flush, reopen, and the recovered buffer has
        the same ordered entries, marks, tombstones and re-admission indexes,
        staged removals, version and log; it passes _check() and keeps working."""
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp) / "log"
            buf = Buffer(log=SINKS[sink_kind](base))
            work = Workload(buf)
            for i, op in enumerate(ops):
                work.run(op)
                if i == cut:
                    escalate(buf)
            buf.flush()
            before = state(buf)
            again = _reopen(sink_kind, base, buf)
            assert state(again) == before
            again._check(expect_no_pins=True)
            # The recovered buffer carries on: due removals apply, the log grows.
            again.apply_due()
            Workload(again, prefix="r").run((0, 0, 0, 0, 1))
            again.flush()
            after = state(again)
            third = _reopen(sink_kind, base, again)
            assert state(third) == after
            third._check()
            third.sink.close()  # type: ignore[union-attr]

    def test_seeded_long_run(self, sink_kind: str, base: Path) -> None:
        """A longer seeded run with a reopen every 100 operations."""
        rng = random.Random(2026)
        buf = Buffer(log=SINKS[sink_kind](base))
        for session in range(5):
            work = Workload(buf, prefix=f"s{session}-")
            for _ in range(100):
                work.run(random_op(rng))
            buf.flush()
            before = state(buf)
            buf = _reopen(sink_kind, base, buf)
            assert state(buf) == before
            buf._check()

    def test_only_flushed_changes_are_recovered(self, sink_kind: str, base: Path) -> None:
        """Appends and marks after the last flush are pending, not durable:
        recovery yields the state at the flush."""
        buf = Buffer(log=SINKS[sink_kind](base))
        buf.append(Entry("a", Kind.REASONING, "one"))
        buf.flush()
        before = state(buf)
        buf.append(Entry("b", Kind.REASONING, "two"))
        buf.mark_stale("a", "old")
        assert state(_reopen(sink_kind, base, buf)) == before

    def test_staged_removals_come_back_staged(self, sink_kind: str, base: Path) -> None:
        """A removal deferred by a pinned reader is recovered staged (marked,
        same grace version) and is applied after recovery; tombstones keep
        refusing re-admission; versions keep increasing."""
        buf = Buffer(log=SINKS[sink_kind](base))
        buf.append(Entry("call", Kind.TOOL_CALL, "kubectl describe pod", key="kubectl"))
        buf.append(Entry("out", Kind.TOOL_OUTPUT, "dump", refs=("call",)))
        buf.append(Entry("old", Kind.REASONING, "a stale step"))
        buf.prune(["old"], reason="low relevance", turn=3)
        snap = buf.snapshot()
        snap.__enter__()
        report = buf.prune(["call", "out"], reason="noise", actor="pruner", turn=4)
        assert report["call"].status is Status.DEFERRED
        buf.flush()
        before = state(buf)
        again = _reopen(sink_kind, base, buf)
        snap.__exit__(None, None, None)
        assert state(again) == before
        assert again.staged() == buf.staged() != {}
        assert again.head().marks["call"].reason == "noise"
        assert sorted(again.apply_due()) == ["call", "out"]
        assert again.tombstones["call"].actor == "pruner"
        with pytest.raises(ReadmissionRefused):
            again.append(Entry("call2", Kind.TOOL_CALL, "other", key="kubectl"))
        again.append(Entry("old2", Kind.REASONING, "a stale step"), override=Override("again", 5))
        assert again.version > before["version"]
        again._check()

    def test_renumbered_order_keys_recover(self, sink_kind: str, base: Path) -> None:
        """Moves that exhaust the float gap between two entries force the
        order keys to be renumbered; recovery rebuilds the same keys, order
        and last-change versions."""
        buf = Buffer(log=SINKS[sink_kind](base))
        for i in range(4):
            buf.append(Entry(f"e{i}", Kind.REASONING, f"step {i}"))
        for k in range(60):
            assert buf.edit(
                EditPlan([Move(f"e{2 + k % 2}", before="e1")], reason="re-rank")
            ).applied
        buf.flush()
        before = state(buf)
        assert state(_reopen(sink_kind, base, buf)) == before

    def test_refused_edit_is_recovered_in_the_log(self, sink_kind: str, base: Path) -> None:
        """Refusals and escalations change no state but are part of the log
        and of the counters after recovery."""
        buf = Buffer(log=SINKS[sink_kind](base))
        buf.append(Entry("c", Kind.CONSTRAINT, "do not modify /etc"))
        report = buf.edit(EditPlan([Prune("c")], reason="tidy"))
        assert not report.applied
        buf.flush()
        before = state(buf)
        again = _reopen(sink_kind, base, buf)
        assert state(again) == before
        assert again.stats().escalations == 1


class TestOddValues:
    def test_non_finite_floats_and_odd_objects_never_jam_the_log(
        self, sink_kind: str, base: Path
    ) -> None:
        """JSON has no NaN (SQLite's JSON functions refuse it): an entry whose
        meta holds a NaN or an infinity is refused at construction (issue 12),
        so it never reaches the log, and the log keeps working; the entries
        around it are recovered exactly."""
        buf = Buffer(log=SINKS[sink_kind](base))
        buf.append(Entry("odd", Kind.REASONING, "odd values", meta={"tags": ["a", 1.5]}))
        for bad in (float("nan"), float("-inf")):
            with pytest.raises(InvalidArgument, match=r"^meta must be finite JSON numbers"):
                Entry("bad", Kind.REASONING, "x", meta={"score": bad})
        buf.append(Entry("next", Kind.REASONING, "after it"))
        buf.flush()
        again = _reopen(sink_kind, base, buf)
        entry = again.head().live["odd"].entry
        assert entry.to_dict()["meta"] == {"tags": ["a", 1.5]}
        assert entry.content_hash == buf.head().live["odd"].entry.content_hash
        assert [e.id for e in again.head().entries()] == ["odd", "next"]
        again._check()


class FaultySink:
    """Wraps a real sink; while ``error`` is set, ``write`` raises it (and
    writes nothing). Counts write calls."""

    def __init__(self, inner: SQLiteLog | JsonlLog) -> None:
        self.inner = inner
        self.error: BaseException | None = None
        self.writes = 0

    def load(self) -> Sequence[LogRecord]:
        return self.inner.load()

    def write(self, records: Sequence[LogRecord]) -> None:
        self.writes += 1
        if self.error is not None:
            raise self.error
        self.inner.write(records)

    def close(self) -> None:
        self.inner.close()


FAULTS = {
    "disk full": OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    "I/O error": OSError(errno.EIO, os.strerror(errno.EIO)),
    "read-only": OSError(errno.EROFS, os.strerror(errno.EROFS)),
}


@pytest.fixture(params=sorted(FAULTS))
def fault(request: pytest.FixtureRequest) -> OSError:
    return FAULTS[request.param]


@pytest.fixture
def faulty(sink_kind: str, base: Path) -> Iterator[tuple[Buffer, FaultySink]]:
    sink = FaultySink(SINKS[sink_kind](base))
    buf = Buffer(log=sink)
    buf.append(Entry("call", Kind.TOOL_CALL, "run the tool"))
    buf.append(Entry("out", Kind.TOOL_OUTPUT, "tool output", refs=("call",)))
    buf.append(Entry("step", Kind.REASONING, "a step"))
    buf.flush()
    yield buf, sink
    sink.close()


class TestFaults:
    def test_fast_paths_never_touch_a_failing_sink(
        self, faulty: tuple[Buffer, FaultySink], fault: OSError
    ) -> None:
        """append and mark_stale never write, so a failing disk cannot fail them."""
        buf, sink = faulty
        sink.error = fault
        writes = sink.writes
        buf.append(Entry("new", Kind.REASONING, "more"))
        buf.mark_stale("step", "old")
        assert sink.writes == writes
        assert not buf.stats().log_failing

    def test_flush_raises_and_resumes(
        self, faulty: tuple[Buffer, FaultySink], fault: OSError, sink_kind: str, base: Path
    ) -> None:
        """flush raises LogWriteError (a QuiesceError, with the cause); records
        stay pending, stats().log_failing says so; a later flush resumes."""
        buf, sink = faulty
        buf.append(Entry("new", Kind.REASONING, "more"))
        sink.error = fault
        with pytest.raises(
            LogWriteError, match=rf"^edit log write failed: .*{fault.strerror}"
        ) as e:
            buf.flush()
        assert isinstance(e.value, QuiesceError)
        assert e.value.__cause__ is fault
        assert buf.stats().log_failing
        assert buf.pending_records == 1
        buf._check()
        sink.error = None
        buf.flush()
        assert not buf.stats().log_failing
        assert buf.pending_records == 0
        before = state(buf)
        sink.close()
        assert state(Buffer(log=SINKS[sink_kind](base))) == before

    def test_no_removal_without_its_tombstone(
        self, faulty: tuple[Buffer, FaultySink], fault: OSError, sink_kind: str, base: Path
    ) -> None:
        """A prune whose tombstone cannot be made durable publishes no removal:
        the entry stays live, marked and staged (DEFERRED); the buffer passes
        _check(); once the disk recovers the removal is applied and durable."""
        buf, sink = faulty
        sink.error = fault
        report = buf.prune(["step"], reason="low relevance")
        assert report["step"].status is Status.DEFERRED
        assert "step" in buf.head().live and "step" not in buf.tombstones
        assert buf.staged().keys() == {"step"}
        assert buf.stats().log_failing
        buf._check()
        with pytest.raises(LogWriteError):
            buf.apply_due()
        assert "step" in buf.head().live
        sink.error = None
        buf.flush()
        assert buf.apply_due() == ("step",)
        assert "step" in buf.tombstones
        before = state(buf)
        sink.close()
        again = Buffer(log=SINKS[sink_kind](base))
        assert state(again) == before
        assert "step" in again.tombstones

    def test_prune_with_pending_records_refuses_before_changing(
        self, faulty: tuple[Buffer, FaultySink], fault: OSError
    ) -> None:
        """With records pending and a failing disk, prune raises LogWriteError
        from the call and leaves the version unchanged."""
        buf, sink = faulty
        buf.mark_stale("call", "old")
        version = buf.version
        sink.error = fault
        with pytest.raises(LogWriteError):
            buf.prune(["step"], reason="x")
        with pytest.raises(LogWriteError):
            buf.edit(EditPlan([Prune("step")], reason="x"))
        assert buf.version == version
        buf._check()

    def test_unpin_with_failing_disk_keeps_removal_staged(
        self, faulty: tuple[Buffer, FaultySink], fault: OSError
    ) -> None:
        """A removal that becomes due when a reader leaves, while the disk
        fails, stays staged (not published); it is applied once writes succeed."""
        buf, sink = faulty
        with buf.snapshot():
            assert buf.prune(["call", "out"], reason="noise")["call"].status is Status.DEFERRED
            sink.error = fault
        assert "call" in buf.head().live
        assert buf.stats().log_failing
        buf._check()
        sink.error = None
        buf.flush()
        assert sorted(buf.apply_due()) == ["call", "out"]
        buf._check()

    def test_non_oserror_failure_is_wrapped(self, faulty: tuple[Buffer, FaultySink]) -> None:
        """Any exception from a sink (not only OSError) becomes LogWriteError."""
        buf, sink = faulty
        buf.append(Entry("new", Kind.REASONING, "more"))
        sink.error = RuntimeError("database is locked")
        with pytest.raises(LogWriteError, match="database is locked"):
            buf.flush()


class TestRuntime:
    @pytest.mark.anyio
    async def test_open_buffer_on_a_durable_log(self, sink_kind: str, base: Path) -> None:
        """The async runtime's group commit (worker-thread flushes) and
        barrier scheduler on a durable sink, on asyncio and trio: after the
        block, the log recovers to the same state; a second session carries on."""
        from quiesce import open_buffer

        sink = SINKS[sink_kind](base)
        async with open_buffer(log=sink, flush_interval=0.001) as buf:
            work = Workload(buf)
            rng = random.Random(3)
            for _ in range(200):
                work.run(random_op(rng))
            work.release_all()
            await buf.quiesce()
            await buf.aflush()
            before = state(buf)
        sink.close()
        sink = SINKS[sink_kind](base)
        async with open_buffer(log=sink) as again:
            assert state(again) == before
            again.append(Entry("next", Kind.REASONING, "second session"))
        sink.close()
        third = Buffer(log=SINKS[sink_kind](base))
        assert "next" in third.head().live
        third._check()
        third.sink.close()  # type: ignore[union-attr]
