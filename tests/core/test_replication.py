"""The core's replication and observation interfaces (``_core/replication.py``,
``_core/observe.py``): what a follower, a sequencer, a benchmark and a test
tool use instead of the buffer's private fields. Sync core, no event loop
(sans-IO); the sink is a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce import Buffer, Entry, Kind, LogFormatError, SQLiteLog, Status
from quiesce._core.errors import InvalidArgument, InvalidType, QuiesceError
from quiesce._core.observe import Observer
from quiesce._core.pins import reader_of
from quiesce._core.records import LogRecord
from quiesce._core.replication import GuardedSnapshot, ReadGate, Replication


def reasoning(i: str, *refs: str) -> Entry:
    return Entry(i, Kind.REASONING, f"step {i}", refs)


def tag(record: LogRecord) -> LogRecord:
    if "request_id" in record.detail:
        return record
    return record._replace(detail={**record.detail, "request_id": "r1"})


class TestAttachDetach:
    def test_attach_makes_the_buffer_write_its_records_to_the_sink(self, tmp_path: Path) -> None:
        """Records present at attach count as durable; later ones go to the
        sink on flush, under the attached epoch."""
        buf = Buffer()
        repl = Replication(buf)
        buf.append(reasoning("a"))
        sink = SQLiteLog(str(tmp_path / "log.db"))
        sink.write(list(buf.log))  # the shared log holds what the buffer applied
        try:
            repl.attach(sink, epoch=3, checkpoint_every=0)
            assert (buf.sink, repl.epoch, repl.durable, buf.pending_records) == (sink, 3, 1, 0)
            buf.append(reasoning("b"))
            assert buf.pending_records == 1
            buf.flush()
            assert repl.durable == 2 == repl.applied
            assert [r.seq for r in sink.read_range(1, 2)] == [1]
        finally:
            sink.close()

    def test_detach_reports_what_was_not_durable_and_holds_removals_back(
        self, tmp_path: Path
    ) -> None:
        """A stale detach (another epoch) changes nothing; the right one
        drops the sink, returns the pending records and holds every removal
        back (grace floor -1)."""
        buf = Buffer()
        repl = Replication(buf)
        sink = SQLiteLog(str(tmp_path / "log.db"))
        try:
            repl.attach(sink, epoch=5, checkpoint_every=0)
            buf.append(reasoning("a"))
            buf.append(reasoning("b"))
            assert repl.detach(epoch=4) == 0
            assert buf.sink is sink
            assert repl.detach(epoch=5) == 2
            assert (buf.sink, repl.epoch, repl.grace_floor) == (None, None, -1)
            report = buf.prune(["a"], reason="stale")
            assert report["a"].status is Status.DEFERRED  # no reader, yet held back
            assert not buf.has_due() and buf.staged() == {"a": report.version}
            repl.set_grace_floor(None)  # other processes' readers gone: due, applied inline
            assert "a" in buf.tombstones
        finally:
            sink.close()

    def test_bad_arguments_change_nothing(self) -> None:
        buf = Buffer()
        repl = Replication(buf)
        with pytest.raises(InvalidType, match=r"^sink must be a LogSink, not str$"):
            repl.attach("x", epoch=1, checkpoint_every=0)  # type: ignore[arg-type]
        with pytest.raises(InvalidType, match=r"^floor must be an int or None, not str$"):
            repl.set_grace_floor("0")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match=r"^this buffer has a replication handle"):
            Replication(buf)
        assert (buf.sink, repl.grace_floor, buf.version) == (None, None, 0)


class TestStamps:
    def test_exclusive_serving_stamps_the_fast_paths_records(self) -> None:
        """append and mark_stale write compact records: built and stamped at
        the block's end; records outside the block stay as they were."""
        buf = Buffer()
        repl = Replication(buf)
        buf.append(reasoning("before"))
        with repl.serving(tag, exclusive=True):
            buf.append(reasoning("a"))
            buf.mark_stale("a", "superseded")
        buf.append(reasoning("after"))
        stamps = [r.detail.get("request_id") for r in buf.log]
        assert stamps == [None, "r1", "r1", None]
        buf.check_invariants()

    def test_serving_stamps_the_record_path_and_survives_an_error(self) -> None:
        """A prune's record (the record path) is stamped as it is appended;
        an exception leaving the block still stamps and releases the locks."""
        buf = Buffer()
        repl = Replication(buf)
        buf.append(reasoning("a"))
        with pytest.raises(RuntimeError, match=r"^boom$"), repl.serving(tag):
            buf.prune(["a"], reason="stale")
            raise RuntimeError("boom")
        assert [r.op for r in buf.log if r.detail.get("request_id")] == ["prune", "remove"]
        buf.append(reasoning("b"))  # the write lock was released
        assert "request_id" not in buf.log[len(buf.log) - 1].detail


class TestApplyRecords:
    def test_a_follower_applies_batches_as_one_version_each(self) -> None:
        """Batches of a leader's log, applied in order (one overlapping),
        give the leader's head; a batch after a gap applies nothing."""
        leader = Buffer()
        for i in range(6):
            leader.append(reasoning(f"e{i}"))
        leader.mark_stale("e1", "superseded")
        records = list(leader.log)
        follower = Buffer()
        repl = Replication(follower)
        assert repl.apply_records(records[:3]) == 3
        assert repl.apply_records(records[5:]) == 0  # a gap: nothing
        assert repl.apply_records(records[1:5]) == 2  # 1, 2 applied already
        assert repl.apply_records(records[5:]) == 2
        assert follower.version == leader.version
        assert list(follower.head().entries()) == list(leader.head().entries())
        assert dict(follower.head().marks) == dict(leader.head().marks)
        follower.check_invariants()

    def test_strict_refuses_a_gap(self) -> None:
        leader = Buffer()
        for i in range(3):
            leader.append(reasoning(f"e{i}"))
        records = list(leader.log)
        repl = Replication(Buffer())
        with pytest.raises(LogFormatError, match=r"^log record 0 has seq 1: the log has a gap"):
            repl.apply_records(records[1:], strict=True)

    def test_forget_held_records_bounds_a_scratch_buffers_log(self) -> None:
        """A scratch replay keeps its state, not its log."""
        leader = Buffer()
        for i in range(40):
            leader.append(reasoning(f"e{i}"))
        buf = Buffer()
        repl = Replication(buf)
        repl.apply_records(list(leader.log), strict=True)
        assert repl.forget_held_records() == 40
        assert (buf.log.in_memory, buf.log.dropped, len(buf)) == (0, 40, 40)


class TestGuardedSnapshot:
    def test_every_read_asks_the_guard(self) -> None:
        buf = Buffer()
        repl = Replication(buf)
        buf.append(reasoning("a"))
        calls: list[tuple[float, int]] = []
        refuse = False

        def guard(pinned_at: float, version: int) -> None:
            calls.append((pinned_at, version))
            if refuse:
                raise QuiesceError("lease lost")

        with repl.snapshot(guard) as snap:
            assert isinstance(snap, GuardedSnapshot)
            assert snap["a"].body == "step a"
            refuse = True
            with pytest.raises(QuiesceError, match=r"^lease lost$"):
                len(snap)
        assert [v for _t, v in calls] == [1, 1]
        assert buf.oldest_pin() is None  # unpinned on exit


class TestSnapshotMaker:
    def test_the_gate_refuses_past_the_deadline_and_while_lost(self) -> None:
        """The maker's one comparison with ``gate.limit`` refuses exactly
        what the two fields say: a reading past ``deadline``, or any pin
        while ``lost`` is set, whichever field was written last; a refused
        call pins nothing. The clock reading is the snapshot's pin time."""
        now = [10.0]
        buf = Buffer(clock=lambda: now[0])
        repl = Replication(buf)
        buf.append(reasoning("a"))
        gate = ReadGate()
        refusals: list[str] = []

        def refuse() -> BaseException:
            refusals.append("refused")
            return QuiesceError("refused")

        reads: list[tuple[float, int]] = []
        pin = repl.snapshot_maker(gate, lambda t, v: reads.append((t, v)), refuse)

        def pinned() -> bool:
            try:
                with pin() as snap:
                    assert snap["a"].body == "step a"
            except QuiesceError:
                assert buf.oldest_pin() is None  # nothing was pinned
                return False
            return True

        assert gate.limit == float("-inf") and not pinned()  # made closed
        gate.deadline = 10.0
        assert gate.limit == 10.0 and pinned()  # at the deadline: still served
        now[0] = 10.5
        assert not pinned()
        gate.deadline = 11.0
        assert pinned()
        lost = QuiesceError("lost")
        gate.lost = lost
        assert gate.lost is lost and gate.limit == float("-inf") and not pinned()
        gate.deadline = 12.0  # a renewal while lost: still refused
        assert gate.deadline == 12.0 and gate.limit == float("-inf") and not pinned()
        gate.lost = None
        assert gate.limit == 12.0 and pinned()
        assert refusals == ["refused"] * 4
        assert reads[-1] == (10.5, 1)  # the guard is given the reading as the pin time


class _Recorder(Observer):
    def __init__(self) -> None:
        self.events: list[object] = []

    def due(self) -> None:
        self.events.append("due")

    def applied(self, removed: tuple[str, ...]) -> None:
        self.events.append(removed)


class _Broken(Observer):
    def due(self) -> None:
        raise RuntimeError("observer bug")


class TestObserve:
    def test_the_observer_sees_due_and_applied(self) -> None:
        """A removal held by a reader: due when the reader leaves, then
        applied; nothing else reported."""
        buf = Buffer()
        seen = _Recorder()
        buf.observe(seen)
        buf.append(reasoning("a"))
        buf.append(reasoning("b"))
        with buf.snapshot():
            assert buf.prune(["a"], reason="stale")["a"].status is Status.DEFERRED
            assert seen.events == []
        assert seen.events == ["due", ("a",)]
        buf.observe(None)
        buf.prune(["b"], reason="stale")
        assert seen.events == ["due", ("a",)]

    def test_a_failing_observer_never_breaks_a_write(self) -> None:
        buf = Buffer()
        buf.observe(_Broken())
        buf.append(reasoning("a"))
        with buf.snapshot():
            buf.prune(["a"], reason="stale")
        assert "a" in buf.tombstones
        assert buf.stats().callback_errors == 1
        with pytest.raises(InvalidType, match=r"^observer must be an Observer, not int$"):
            buf.observe(3)  # type: ignore[arg-type]


class TestChecksAndReaders:
    def test_check_invariants_and_reader_of(self) -> None:
        buf = Buffer()
        buf.append(reasoning("a"))
        buf.settle()
        buf.check_invariants(expect_no_pins=True)
        snap = buf.snapshot()
        assert reader_of(snap) == (None, None, None)
        with snap:
            _task, version, since = reader_of(snap)
            # the pin time is stamped lazily, by the next pass (stats() here)
            assert version is not None and version.number == 1 and since is None
            buf.stats()
            _task, version, since = reader_of(snap)
            assert version is not None and version.number == 1 and since is not None
            with pytest.raises(AssertionError):
                buf.check_invariants(expect_no_pins=True)
        assert reader_of(snap)[1] is None
